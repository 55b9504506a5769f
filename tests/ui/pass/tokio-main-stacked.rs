use std::sync::LazyLock;

use lock_runtime::{LockError, LockManager, distributed_lock};

static LOCKS: LazyLock<LockManager> = LazyLock::new(LockManager::memory);

// `#[tokio::main]` above `#[distributed_lock]` expands first and turns `async fn main` into a
// plain fn that blocks on `let body = async { .. };`; the lock is taken inside that future.
#[tokio::main(flavor = "current_thread")]
#[distributed_lock(key = "jobs:nightly", manager = &*LOCKS)]
async fn main() -> Result<(), LockError> {
    let current = lock_runtime::current().expect("main runs under the lock");
    assert_eq!(current.key(), "jobs:nightly");
    Ok(())
}
