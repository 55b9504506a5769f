use lock_runtime::{LockError, distributed_lock};

#[distributed_lock(key = "order:<tenant>:<user_id>")]
async fn place_order(
    #[cfg(unix)] tenant: u64,
    user_id: u64,
) -> Result<u64, LockError> {
    #[cfg(unix)]
    let _ = tenant;
    Ok(user_id)
}

fn main() {}
