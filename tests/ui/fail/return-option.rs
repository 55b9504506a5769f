use lock_runtime::distributed_lock;

#[distributed_lock(key = "order:<user_id>")]
async fn find_order(user_id: u64) -> Option<u64> {
    Some(user_id)
}

fn main() {}
