use lock_runtime::{LockError, distributed_lock};

// A type error in the body is reported in the body, against the declared return type.
#[distributed_lock(key = "order:<user_id>")]
async fn place_order(user_id: u64) -> Result<u64, LockError> {
    if user_id == 0 {
        return Ok("none");
    }
    Ok(user_id)
}

fn main() {}
