use lock_runtime::{LockError, LockManager, distributed_lock};

#[distributed_lock(
    key = "report:<id>",
    ttl = "1m30s",
    wait = "0s",
    watchdog = true,
    on_lease_lost = "continue",
    hold_at_least = "500ms",
    max_hold = "2h",
    lock_delay = "15s",
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

// The fixes the messages for `fair` without a wait ask for.
#[distributed_lock(key = "ticket:<event_id>", fair = true, wait = "5s")]
async fn next_ticket(event_id: u64) -> Result<u64, LockError> {
    Ok(event_id)
}

#[distributed_lock(key = "ticket:<event_id>", wait = "5s", fair = false)]
async fn any_ticket(event_id: u64) -> Result<u64, LockError> {
    Ok(event_id)
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
    assert_eq!(next_ticket(4).await.expect("locked call"), 4);
    assert_eq!(any_ticket(5).await.expect("locked call"), 5);
}
