use lock_runtime::{LockError, LockManager, distributed_lock};

#[distributed_lock(
    key = "report:<id>",
    ttl = "1m30s",
    wait = "0s",
    watchdog = true,
    on_lease_lost = "continue",
    hold_at_least = "500ms",
    max_hold = "2h",
    manager = locks,
    crate = "::lock_runtime"
)]
async fn everything(locks: &LockManager, id: u64) -> Result<u64, LockError> {
    Ok(id)
}

#[distributed_lock(key = "fixed:<id>", ttl = "10s", watchdog = false, on_lease_lost = "abort")]
async fn fixed_lease(id: u64) -> Result<u64, LockError> {
    Ok(id)
}

// A lease longer than a day must be asked for explicitly.
#[distributed_lock(key = "archive:<id>", ttl = "48h", allow_long_ttl = true, wait = "1h")]
async fn long_lease(id: u64) -> Result<u64, LockError> {
    Ok(id)
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let locks = LockManager::memory();
    lock_runtime::set_global_default(locks.clone()).expect("first default");
    assert_eq!(everything(&locks, 1).await.expect("locked call"), 1);
    assert_eq!(fixed_lease(2).await.expect("locked call"), 2);
    assert_eq!(long_lease(3).await.expect("locked call"), 3);
}
