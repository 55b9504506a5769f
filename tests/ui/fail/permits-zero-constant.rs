use lock_runtime::{LockError, distributed_lock};

const SLOTS: u32 = 0;

#[distributed_lock(key = "export:<id>", permits = SLOTS)]
async fn export(id: u64) -> Result<u64, LockError> {
    Ok(id)
}

fn main() {}
