use lock_runtime::{LockError, distributed_lock};

#[distributed_lock(key = "order:<user_id>", watchdog = false, max_hold = "10s", hold_at_least = "1m")]
async fn place_order(user_id: u64) -> Result<u64, LockError> {
    Ok(user_id)
}

fn main() {}
