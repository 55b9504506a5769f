use lock_runtime::{LockError, distributed_lock};

struct Service {
    name: String,
}

impl Service {
    #[distributed_lock(key = "svc:<self.name>", manager = self.name)]
    async fn restart(&self) -> Result<usize, LockError> {
        Ok(self.name.len())
    }
}

fn main() {}
