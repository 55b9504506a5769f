use lock_runtime::{LockError, distributed_lock};

struct Svc {
    id: u64,
}

impl Svc {
    #[distributed_lock(key = "svc:<self>")]
    async fn run(&self) -> Result<u64, LockError> {
        Ok(self.id)
    }
}

fn main() {}
