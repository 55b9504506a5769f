use lock_runtime::{LockError, distributed_lock};

#[distributed_lock(key = "entity:<id>")]
async fn touch<I: Clone>(id: I) -> Result<I, LockError> {
    Ok(id.clone())
}

fn main() {}
