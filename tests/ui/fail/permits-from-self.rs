use lock_runtime::{LockError, distributed_lock};

struct Exporter {
    max_exports: u32,
}

impl Exporter {
    #[distributed_lock(key = "export:<id>", permits = self.max_exports)]
    async fn export(&self, id: u64) -> Result<u64, LockError> {
        Ok(id + u64::from(self.max_exports))
    }
}

fn main() {}
