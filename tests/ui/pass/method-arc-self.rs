use std::sync::Arc;

use lock_runtime::{LockError, LockManager, distributed_lock};

struct Cache {
    locks: Arc<LockManager>,
    region: &'static str,
}

impl Cache {
    // `self: Arc<Self>` moves into the body; the manager (an `Arc<LockManager>`) is cloned
    // first and coerces to `&LockManager`.
    #[distributed_lock(key = "cache:<self.region>:<key>", manager = self.locks, wait = "2s")]
    async fn rebuild(self: Arc<Self>, key: String) -> Result<String, LockError> {
        tokio::task::yield_now().await;
        Ok(format!("{}/{key}", self.region))
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let cache = Arc::new(Cache {
        locks: Arc::new(LockManager::memory()),
        region: "eu",
    });
    let value = cache.clone().rebuild("home".into()).await;
    assert_eq!(value.expect("locked call"), "eu/home");
}
