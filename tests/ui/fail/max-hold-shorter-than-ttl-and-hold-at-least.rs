use lock_runtime::{LockError, distributed_lock};

#[distributed_lock(key = "order:<user_id>", ttl = "1m", max_hold = "30s", hold_at_least = "2m")]
async fn place_order(user_id: u64) -> Result<u64, LockError> {
    Ok(user_id)
}

fn main() {}
