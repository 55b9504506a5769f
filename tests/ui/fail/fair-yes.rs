use lock_runtime::{LockError, distributed_lock};

#[distributed_lock(key = "ticket:<event_id>", wait = "5s", fair = "yes")]
async fn next_ticket(event_id: u64) -> Result<u64, LockError> {
    Ok(event_id)
}

fn main() {}
