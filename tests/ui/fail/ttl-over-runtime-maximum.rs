use lock_runtime::{LockError, distributed_lock};

#[distributed_lock(key = "order:<user_id>", ttl = "8761h", allow_long_ttl = true)]
async fn place_order(user_id: u64) -> Result<u64, LockError> {
    Ok(user_id)
}

fn main() {}
