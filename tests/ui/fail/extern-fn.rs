use lock_runtime::{LockError, distributed_lock};

#[distributed_lock(key = "order:<user_id>")]
extern "C" fn place_order(user_id: u64) -> u64 {
    user_id
}

fn main() {
    let _ = LockError::Config(String::new());
}
