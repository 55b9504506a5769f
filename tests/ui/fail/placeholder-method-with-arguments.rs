use lock_runtime::{LockError, distributed_lock};

struct User {
    id: u64,
}

impl User {
    fn shard(&self, of: u64) -> u64 {
        self.id % of
    }
}

#[distributed_lock(key = "shard:<user.shard(16)>")]
async fn rebalance(user: &User) -> Result<u64, LockError> {
    Ok(user.shard(16))
}

fn main() {}
