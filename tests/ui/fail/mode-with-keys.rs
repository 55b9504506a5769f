use lock_runtime::{LockError, distributed_lock};

#[distributed_lock(keys = ["doc:<from>", "doc:<to>"], mode = "write")]
async fn copy(from: u64, to: u64) -> Result<u64, LockError> {
    Ok(from + to)
}

fn main() {}
