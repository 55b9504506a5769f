use lock_runtime::{LockError, distributed_lock};

struct Account {
    id: u64,
}

#[distributed_lock(keys = ["account:<from.id>", "account:<to>"])]
async fn transfer(from: Account, to: Account) -> Result<u64, LockError> {
    Ok(from.id + to.id)
}

fn main() {}
