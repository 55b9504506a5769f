use lock_runtime::{LockError, distributed_lock};

#[distributed_lock(keys = ["export:<id>", "quota:<id>"], permits = 3)]
async fn export(id: u64) -> Result<u64, LockError> {
    Ok(id)
}

fn main() {}
