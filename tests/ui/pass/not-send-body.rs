use std::rc::Rc;

use lock_runtime::{LockError, LockManager, distributed_lock};

// A body that is not `Send` (an `Rc` held across an `.await`) still compiles: the attribute
// never adds a `Send` bound of its own. Such a future runs on a current-thread runtime or a
// `LocalSet`.
#[distributed_lock(key = "local:<id>", manager = locks)]
async fn local_only(locks: &LockManager, id: u64) -> Result<u64, LockError> {
    let shared = Rc::new(id);
    tokio::task::yield_now().await;
    Ok(*shared)
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let locks = LockManager::memory();
    assert_eq!(local_only(&locks, 3).await.expect("locked call"), 3);
}
