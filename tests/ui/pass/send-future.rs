use std::sync::Arc;

use lock_runtime::{LockError, LockManager, distributed_lock};

// The locked future is `Send` whenever the body's is, so it can be spawned on a multi-threaded
// runtime.

struct Counter {
    locks: LockManager,
    name: String,
    count: u64,
}

impl Counter {
    #[distributed_lock(key = "counter:<self.name>", manager = self.locks)]
    async fn bump(&mut self) -> Result<u64, LockError> {
        self.count += 1;
        tokio::task::yield_now().await;
        Ok(self.count)
    }
}

#[distributed_lock(key = "shared:<counter.name>", manager = counter.locks)]
async fn read(counter: Arc<Counter>) -> Result<u64, LockError> {
    tokio::task::yield_now().await;
    Ok(counter.count)
}

#[distributed_lock(key = "global:<id>")]
async fn global(id: u64) -> Result<u64, LockError> {
    tokio::task::yield_now().await;
    Ok(id)
}

fn assert_send<T: Send>(value: T) -> T {
    value
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let locks = LockManager::memory();
        lock_runtime::set_global_default(locks.clone()).expect("first default");
        let mut counter = Counter {
            locks,
            name: "hits".into(),
            count: 0,
        };
        assert_eq!(assert_send(counter.bump()).await.expect("locked call"), 1);
        let counter = Arc::new(counter);
        let spawned = tokio::spawn(read(counter.clone()));
        assert_eq!(spawned.await.expect("task").expect("locked call"), 1);
        let spawned = tokio::spawn(global(5));
        assert_eq!(spawned.await.expect("task").expect("locked call"), 5);
    });
}
