use lock_runtime::{LockError, LockManager, distributed_lock};

// Two locks on one fn: the attribute closest to the fn is expanded last and so wraps the
// other, taking its lock first: here `account:<from>` and then `account:<to>`.
#[distributed_lock(key = "account:<to>", manager = locks)]
#[distributed_lock(key = "account:<from>", manager = locks)]
async fn transfer(locks: &LockManager, from: u64, to: u64, amount: u64) -> Result<u64, LockError> {
    if let Some(lock) = lock_runtime::current() {
        // The innermost lock is the one the body runs under.
        assert_eq!(lock.key(), format!("account:{to}"));
    }
    Ok(from + to + amount)
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let locks = LockManager::memory();
    assert_eq!(transfer(&locks, 1, 2, 3).await.expect("locked call"), 6);
}
