use lock_runtime::{LockError, distributed_lock};

#[distributed_lock(key = "shard:<shard>")]
async fn rebalance((shard, replica): (u32, u32)) -> Result<u32, LockError> {
    Ok(shard + replica)
}

fn main() {}
