use async_trait::async_trait;
use lock_runtime::{LockError, LockManager, distributed_lock};

#[async_trait]
trait Grid {
    async fn rebalance(&self, shard: (u32, u32)) -> Result<u32, LockError>;
}

struct Cluster {
    locks: LockManager,
}

// Under #[async_trait] a placeholder naming a pattern binding gets the same message as on a
// plain async fn.
#[async_trait]
impl Grid for Cluster {
    #[distributed_lock(key = "shard:<replica>", manager = self.locks)]
    async fn rebalance(&self, (shard, replica): (u32, u32)) -> Result<u32, LockError> {
        Ok(shard + replica)
    }
}

fn main() {}
