use lock_runtime::{LockError, distributed_lock};

#[distributed_lock(name = "order:<user_id>")]
async fn place_order(user_id: u64) -> Result<u64, LockError> {
    Ok(user_id)
}

fn main() {}
