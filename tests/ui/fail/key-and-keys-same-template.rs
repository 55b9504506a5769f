use lock_runtime::{LockError, distributed_lock};

#[distributed_lock(keys = ["account:<from>", "account:<to>"], key = "account:<from>")]
async fn transfer(from: u64, to: u64) -> Result<u64, LockError> {
    Ok(from + to)
}

fn main() {}
