use lock_runtime::{LockError, distributed_lock};

const TO: &str = "account:<to>";

#[distributed_lock(keys = ["account:<from>", TO])]
async fn transfer(from: u64, to: u64) -> Result<u64, LockError> {
    Ok(from + to)
}

fn main() {}
