use lock_runtime::{LockError, distributed_lock};

#[distributed_lock(key = "export:<id>", permits = 3, fair = true)]
async fn export(id: u64) -> Result<u64, LockError> {
    Ok(id)
}

fn main() {}
