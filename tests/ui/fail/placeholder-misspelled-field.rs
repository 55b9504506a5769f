use lock_runtime::{LockError, distributed_lock};

struct User {
    id: u64,
    email: String,
}

#[distributed_lock(key = "user:<user.idd>")]
async fn rename(user: &User) -> Result<usize, LockError> {
    Ok(user.email.len() + usize::from(user.id == 0))
}

fn main() {}
