use std::fmt::Debug;

use lock_runtime::{LockError, distributed_lock};

#[distributed_lock(key = "entity:<id>")]
async fn touch(id: impl Debug) -> Result<String, LockError> {
    Ok(format!("{id:?}"))
}

fn main() {}
