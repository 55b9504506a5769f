use std::future::{Future, ready};

use lock_runtime::{LockError, distributed_lock};

#[distributed_lock(key = "order:<id>")]
fn place_order(id: u64) -> impl Future<Output = Result<u64, LockError>> {
    ready(Ok(id))
}

fn main() {}
