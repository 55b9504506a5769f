use lock_runtime::{LockError, distributed_lock};

#[distributed_lock(key = "order:<user_id>")]
async fn place_order(user_id: ) -> Result<u64, LockError> {
    Ok(1)
}

fn main() {}
