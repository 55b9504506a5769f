use lock_runtime::{LockError, distributed_lock};

struct User {
    id: u64,
}

impl User {
    fn name(&self) -> String {
        format!("user-{}", self.id)
    }
}

#[distributed_lock(key = "user:<user.name>")]
async fn rename(user: &User) -> Result<u64, LockError> {
    Ok(user.id)
}

fn main() {}
