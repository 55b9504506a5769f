use lock_runtime::{LockError, distributed_lock};

const WAIT: &str = "5s";

#[distributed_lock(key = "order:<user_id>", wait = WAIT)]
async fn place_order(user_id: u64) -> Result<u64, LockError> {
    Ok(user_id)
}

fn main() {}
