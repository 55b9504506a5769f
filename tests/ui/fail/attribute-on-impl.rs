use async_trait::async_trait;
use lock_runtime::{LockError, distributed_lock};

#[async_trait]
trait Jobs {
    async fn run(&self, id: u64) -> Result<u64, LockError>;
}

struct Worker;

// The attribute goes on each method, below #[async_trait]'s impl, not on the impl itself.
#[distributed_lock(key = "job:<id>")]
#[async_trait]
impl Jobs for Worker {
    async fn run(&self, id: u64) -> Result<u64, LockError> {
        Ok(id)
    }
}

fn main() {}
