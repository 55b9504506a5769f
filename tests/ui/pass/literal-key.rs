use lock_runtime::{LockError, LockManager, distributed_lock};

// A key without placeholders: one lock for every call, e.g. a job that must run on one
// instance at a time.
#[distributed_lock(key = "jobs:noon-lottery", ttl = "5m", hold_at_least = "1m", max_hold = "10m")]
async fn draw_lottery() -> Result<u32, LockError> {
    if let Some(lock) = lock_runtime::current() {
        assert_eq!(lock.key(), "jobs:noon-lottery");
    }
    Ok(42)
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    lock_runtime::set_global_default(LockManager::memory()).expect("first default");
    assert_eq!(draw_lottery().await.expect("locked call"), 42);
}
