use lock_runtime::{LockError, LockManager, distributed_lock};

struct Migration {
    locks: LockManager,
    version: u32,
    steps: Vec<String>,
}

impl Migration {
    // The body consumes `self`; the key is rendered before that.
    #[distributed_lock(key = "migration:<self.version>", manager = self.locks, ttl = "2m")]
    async fn run(self) -> Result<Vec<String>, LockError> {
        let Migration { steps, .. } = self;
        Ok(steps)
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let migration = Migration {
        locks: LockManager::memory(),
        version: 3,
        steps: vec!["add column".into()],
    };
    assert_eq!(migration.run().await.expect("locked call"), ["add column"]);
}
