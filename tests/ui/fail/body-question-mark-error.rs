use lock_runtime::{LockError, distributed_lock};

// `?` in the body converts into the fn's own error type, so a missing conversion is reported on
// the `?`, as without the attribute.
#[distributed_lock(key = "order:<text>")]
async fn parse_order(text: String) -> Result<u64, LockError> {
    let id: u64 = text.parse()?;
    Ok(id)
}

fn main() {}
