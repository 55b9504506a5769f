use lock_runtime::{LockError, LockManager, distributed_lock};

// `<<` and `>>` are literal angle brackets; braces need no escaping.
#[distributed_lock(key = "<<raw>>:{<id>}:<<<name>>>", manager = locks)]
async fn tagged(locks: &LockManager, id: u32, name: &str) -> Result<String, LockError> {
    let expected = format!("<raw>:{{{id}}}:<{name}>");
    if let Some(lock) = lock_runtime::current() {
        assert_eq!(lock.key(), expected);
    }
    Ok(expected)
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let locks = LockManager::memory();
    let key = tagged(&locks, 5, "x").await.expect("locked call");
    assert_eq!(key, "<raw>:{5}:<x>");
}
