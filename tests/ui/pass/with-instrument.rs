use lock_runtime::{LockError, LockManager, distributed_lock};
use tracing::instrument;

// With #[instrument] outside, the span also covers waiting for the lock.
#[instrument(skip(locks))]
#[distributed_lock(key = "order:<user_id>", manager = locks)]
async fn traced_around_lock(locks: &LockManager, user_id: u64) -> Result<u64, LockError> {
    Ok(user_id)
}

// With #[instrument] inside, the span covers the body only.
#[distributed_lock(key = "order:<user_id>", manager = locks)]
#[instrument(skip(locks))]
async fn traced_inside_lock(locks: &LockManager, user_id: u64) -> Result<u64, LockError> {
    Ok(user_id)
}

struct Service {
    locks: LockManager,
}

impl Service {
    #[instrument(skip(self))]
    #[distributed_lock(key = "svc:<id>", manager = self.locks)]
    async fn handle(&mut self, id: u64) -> Result<u64, LockError> {
        Ok(id)
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let locks = LockManager::memory();
    assert_eq!(traced_around_lock(&locks, 1).await.expect("locked call"), 1);
    assert_eq!(traced_inside_lock(&locks, 2).await.expect("locked call"), 2);
    let mut service = Service { locks };
    assert_eq!(service.handle(3).await.expect("locked call"), 3);
}
