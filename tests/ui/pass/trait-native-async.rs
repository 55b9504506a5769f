use std::future::Future;

use lock_runtime::{LockError, LockManager, distributed_lock};

trait Repository {
    fn locks(&self) -> &LockManager;

    // A default method.
    #[distributed_lock(key = "repo:<id>", manager = self.locks())]
    async fn load(&self, id: u64) -> Result<u64, LockError> {
        Ok(id * 2)
    }

    async fn save(&self, id: u64) -> Result<u64, LockError>;

    // A method that promises a `Send` future.
    fn purge(&self, id: u64) -> impl Future<Output = Result<u64, LockError>> + Send;
}

struct Postgres {
    locks: LockManager,
}

impl Repository for Postgres {
    fn locks(&self) -> &LockManager {
        &self.locks
    }

    #[distributed_lock(key = "repo:<id>", manager = self.locks)]
    async fn save(&self, id: u64) -> Result<u64, LockError> {
        Ok(id + 1)
    }

    #[distributed_lock(key = "repo:<id>", manager = self.locks)]
    async fn purge(&self, id: u64) -> Result<u64, LockError> {
        tokio::task::yield_now().await;
        Ok(id)
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let repo = Postgres {
        locks: LockManager::memory(),
    };
    assert_eq!(repo.load(4).await.expect("locked call"), 8);
    assert_eq!(repo.save(4).await.expect("locked call"), 5);
    assert_eq!(repo.purge(4).await.expect("locked call"), 4);
}
