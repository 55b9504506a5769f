use lock_runtime::{LockError, distributed_lock};

#[distributed_lock(key = "doc:<id>", mode = "write", fair = true)]
async fn write_doc(id: u64) -> Result<u64, LockError> {
    Ok(id)
}

fn main() {}
