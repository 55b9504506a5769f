use std::sync::Arc;

use async_trait::async_trait;
use lock_runtime::{LockError, LockManager, distributed_lock};

// The same borrowed managers under #[async_trait], on every receiver.
#[async_trait]
trait Jobs {
    async fn by_ref(&self, id: u64) -> Result<u64, LockError>;
    async fn by_mut(&mut self, id: u64) -> Result<u64, LockError>;
    async fn by_arc(self: Arc<Self>, id: u64) -> Result<u64, LockError>;
    async fn by_value(self, id: u64) -> Result<u64, LockError>;
}

struct Worker {
    locks: LockManager,
    runs: u64,
}

impl Worker {
    fn locks(&self) -> &LockManager {
        &self.locks
    }
}

#[async_trait]
impl Jobs for Worker {
    #[distributed_lock(key = "job:<id>", manager = self.locks())]
    async fn by_ref(&self, id: u64) -> Result<u64, LockError> {
        Ok(id)
    }

    #[distributed_lock(key = "job:<id>", manager = &self.locks)]
    async fn by_mut(&mut self, id: u64) -> Result<u64, LockError> {
        self.runs += 1;
        Ok(id + self.runs)
    }

    #[distributed_lock(key = "job:<id>", manager = self.locks())]
    async fn by_arc(self: Arc<Self>, id: u64) -> Result<u64, LockError> {
        Ok(id + self.runs)
    }

    #[distributed_lock(key = "job:<id>", manager = &self.locks)]
    async fn by_value(self, id: u64) -> Result<u64, LockError> {
        Ok(id + self.runs)
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let mut worker = Worker {
        locks: LockManager::memory(),
        runs: 0,
    };
    assert_eq!(worker.by_ref(1).await.expect("locked"), 1);
    assert_eq!(worker.by_mut(1).await.expect("locked"), 2);
    let worker = Arc::new(worker);
    assert_eq!(worker.clone().by_arc(1).await.expect("locked"), 2);
    let worker = Arc::try_unwrap(worker).ok().expect("one owner");
    assert_eq!(worker.by_value(1).await.expect("locked"), 2);
}
