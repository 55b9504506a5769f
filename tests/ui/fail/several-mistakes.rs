use lock_runtime::{LockError, distributed_lock};

// Three independent mistakes give three errors, and nothing else: the fn is kept as written, so
// its callers still compile.
#[distributed_lock(key = "order:<user_id>", ttl = "30", wait = "1x", hold_at_least = 5)]
async fn place_order(user_id: u64) -> Result<u64, LockError> {
    Ok(user_id)
}

async fn caller() -> Result<u64, LockError> {
    place_order(7).await
}

fn main() {
    drop(caller());
}
