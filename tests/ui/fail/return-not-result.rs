use lock_runtime::distributed_lock;

#[distributed_lock(key = "order:<user_id>")]
async fn place_order(user_id: u64) -> u64 {
    user_id
}

fn main() {}
