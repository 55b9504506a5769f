use lock_runtime::{LockError, distributed_lock};

struct User {
    id: u64,
}

#[distributed_lock(key = "user:<user.id()>")]
async fn rename(user: &User) -> Result<u64, LockError> {
    Ok(user.id)
}

fn main() {}
