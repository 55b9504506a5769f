use lock_runtime::{LockError, LockManager, distributed_lock};

// Braces that do not name a parameter are text; `{<user_id>}` is a Redis Cluster hash tag around
// the value; `{{user_id}}` and `##user_id` are the escapes for the text `{user_id}` and `#user_id`.
#[distributed_lock(key = "{tenant}:{<user_id>}:{{user_id}}:##user_id", manager = locks)]
async fn place_order(locks: &LockManager, user_id: u64) -> Result<String, LockError> {
    Ok(lock_runtime::current().expect("inside").key().to_owned())
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let locks = LockManager::memory();
    let key = place_order(&locks, 7).await.expect("locked call");
    assert_eq!(key, "{tenant}:{7}:{user_id}:#user_id");
}
