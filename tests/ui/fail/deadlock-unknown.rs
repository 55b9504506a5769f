use lock_runtime::{LockError, distributed_lock};

#[distributed_lock(key = "account:<from>", wait = "5s", deadlock = "sometimes")]
async fn transfer(from: u64, to: u64) -> Result<u64, LockError> {
    Ok(from + to)
}

fn main() {}
