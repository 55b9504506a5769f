use lock_runtime::{LockError, LockManager, distributed_lock};

struct User {
    id: u64,
}

impl User {
    fn name(&self) -> String {
        format!("user-{}", self.id)
    }
}

// Methods without arguments can be called in a placeholder.
#[distributed_lock(key = "user:<user.name()>:<user.id>", manager = locks)]
async fn rename(locks: &LockManager, user: &User) -> Result<String, LockError> {
    Ok(lock_runtime::current().expect("inside").key().to_owned())
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let locks = LockManager::memory();
    let key = rename(&locks, &User { id: 3 }).await.expect("locked call");
    assert_eq!(key, "user:user-3:3");
}
