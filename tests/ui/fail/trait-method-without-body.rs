use lock_runtime::{LockError, distributed_lock};

trait Jobs {
    #[distributed_lock(key = "job:<id>")]
    async fn run(&self, id: u64) -> Result<u64, LockError>;
}

fn main() {}
