use lock_runtime::{LockError, distributed_lock};

#[distributed_lock(key = "doc:<id>", read = true)]
async fn read_doc(id: u64) -> Result<u64, LockError> {
    Ok(id)
}

fn main() {}
