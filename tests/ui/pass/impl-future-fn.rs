use std::future::Future;

use lock_runtime::{LockError, LockManager, distributed_lock};

// A fn that returns its future, as `#[instrument]` supports: the lock is taken when the returned
// future first runs, around the `async move` block.
#[distributed_lock(key = "order:<id>", manager = locks)]
fn place_order(locks: &LockManager, id: u64) -> impl Future<Output = Result<String, LockError>> + '_ {
    let doubled = id * 2;
    async move {
        let current = lock_runtime::current().expect("inside");
        Ok(format!("{}:{doubled}", current.key()))
    }
}

struct Svc {
    locks: LockManager,
}

impl Svc {
    #[distributed_lock(key = "svc:<id>", manager = self.locks)]
    fn handle(&self, id: u64) -> impl Future<Output = Result<u64, LockError>> + Send + '_ {
        async move { Ok(id) }
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let locks = LockManager::memory();
    assert_eq!(place_order(&locks, 4).await.expect("locked call"), "order:4:8");
    let svc = Svc { locks };
    assert_eq!(svc.handle(5).await.expect("locked call"), 5);
}
