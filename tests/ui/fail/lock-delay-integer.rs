use lock_runtime::{LockError, distributed_lock};

#[distributed_lock(key = "printer:<job_id>", ttl = "10s", lock_delay = 15)]
async fn print(job_id: u64) -> Result<u64, LockError> {
    Ok(job_id)
}

fn main() {}
