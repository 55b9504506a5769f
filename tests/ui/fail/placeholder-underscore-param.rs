use lock_runtime::{LockError, distributed_lock};

#[distributed_lock(key = "job:<_>")]
async fn run_job(_: u64) -> Result<(), LockError> {
    Ok(())
}

fn main() {}
