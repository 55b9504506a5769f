use async_trait::async_trait;
use lock_runtime::{LockError, LockManager, distributed_lock};

#[async_trait]
trait Jobs {
    async fn run(&self, job_id: u64) -> Result<u64, LockError>;
}

struct Worker {
    locks: LockManager,
}

#[async_trait]
impl Jobs for Worker {
    #[distributed_lock(key = "job:<jobid>", manager = self.locks)]
    async fn run(&self, job_id: u64) -> Result<u64, LockError> {
        Ok(job_id)
    }
}

fn main() {}
