use lock_runtime::{LockError, distributed_lock};

struct Event {
    r#type: u8,
}

#[distributed_lock(key = "event:<event.type>")]
async fn handle(event: Event) -> Result<u8, LockError> {
    Ok(event.r#type)
}

fn main() {}
