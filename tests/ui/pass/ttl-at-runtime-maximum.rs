use lock_runtime::{LockError, LockManager, distributed_lock};

// The longest lease the runtime accepts (`lock_runtime::MAX_TTL`, one year) is accepted here too,
// and so is a `hold_at_least` of that length.
#[distributed_lock(key = "archive:<year>", ttl = "8760h", allow_long_ttl = true, manager = locks)]
async fn archive(locks: &LockManager, year: u32) -> Result<u32, LockError> {
    Ok(year)
}

#[distributed_lock(key = "yearly:<year>", hold_at_least = "8760h", max_hold = "8760h", manager = locks)]
async fn yearly(locks: &LockManager, year: u32) -> Result<u32, LockError> {
    Ok(year)
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    assert_eq!(lock_runtime::MAX_TTL.as_secs(), 8760 * 3600);
    let locks = LockManager::memory();
    assert_eq!(archive(&locks, 2025).await.expect("locked call"), 2025);
    assert_eq!(yearly(&locks, 2026).await.expect("locked call"), 2026);
}
