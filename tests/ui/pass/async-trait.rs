use std::sync::Arc;

use async_trait::async_trait;
use lock_runtime::{LockError, LockManager, distributed_lock};

// #[async_trait] on the impl runs first and rewrites each `async fn` into
// `fn .. -> Pin<Box<dyn Future + Send>> { Box::pin(async move { .. }) }`; #[distributed_lock]
// then wraps the block inside `Box::pin`.
#[async_trait]
trait Jobs {
    fn locks(&self) -> &LockManager;

    #[distributed_lock(key = "job:<name>", manager = self.locks())]
    async fn run(&self, name: &str) -> Result<String, LockError> {
        Ok(format!("ran {name}"))
    }

    async fn retry(&mut self, name: String) -> Result<u32, LockError>;

    async fn shared(self: Arc<Self>, id: u64) -> Result<u64, LockError>;

    async fn split(&self, pair: (u64, u64)) -> Result<u64, LockError>;
}

struct Worker {
    locks: LockManager,
    attempts: u32,
}

#[async_trait]
impl Jobs for Worker {
    fn locks(&self) -> &LockManager {
        &self.locks
    }

    #[distributed_lock(key = "job:<name>", manager = self.locks, ttl = "10s")]
    async fn retry(&mut self, name: String) -> Result<u32, LockError> {
        self.attempts += 1;
        tokio::task::yield_now().await;
        Ok(self.attempts + u32::try_from(name.len()).unwrap_or(0))
    }

    #[distributed_lock(key = "job:<id>", manager = self.locks)]
    async fn shared(self: Arc<Self>, id: u64) -> Result<u64, LockError> {
        Ok(id + u64::from(self.attempts))
    }

    // A pattern parameter elsewhere in the signature does not get in the way.
    #[distributed_lock(key = "job:split", manager = self.locks)]
    async fn split(&self, (a, b): (u64, u64)) -> Result<u64, LockError> {
        Ok(a + b)
    }
}

// `?Send` futures are wrapped the same way.
#[async_trait(?Send)]
trait LocalJobs {
    async fn local(&self, id: u64) -> Result<u64, LockError>;
}

#[async_trait(?Send)]
impl LocalJobs for Worker {
    #[distributed_lock(key = "local:<id>", manager = self.locks)]
    async fn local(&self, id: u64) -> Result<u64, LockError> {
        let not_send = std::rc::Rc::new(id);
        tokio::task::yield_now().await;
        Ok(*not_send)
    }
}

fn assert_send<T: Send>(value: T) -> T {
    value
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let mut worker = Worker {
        locks: LockManager::memory(),
        attempts: 0,
    };
    assert_eq!(worker.run("a").await.expect("locked call"), "ran a");
    assert_eq!(assert_send(worker.retry("ab".into())).await.expect("locked call"), 3);
    assert_eq!(worker.split((2, 3)).await.expect("locked call"), 5);
    assert_eq!(worker.local(6).await.expect("locked call"), 6);
    let worker = Arc::new(worker);
    assert_eq!(worker.shared(1).await.expect("locked call"), 2);
}
