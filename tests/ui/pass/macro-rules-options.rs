use lock_runtime::{LockError, LockManager, distributed_lock};

// Option values that reach the attribute through `macro_rules!` fragments arrive in invisible
// groups; they are read as if written in place.
macro_rules! locked_literal {
    ($name:ident, $key:literal, $ttl:literal) => {
        #[distributed_lock(key = $key, ttl = $ttl, manager = locks)]
        async fn $name(locks: &LockManager, id: u64) -> Result<String, LockError> {
            Ok(lock_runtime::current().expect("inside").key().to_owned())
        }
    };
}

macro_rules! locked_expr {
    ($name:ident, $key:expr, $wait:expr, $watchdog:expr) => {
        #[distributed_lock(key = $key, wait = $wait, watchdog = $watchdog, manager = locks)]
        async fn $name(locks: &LockManager, id: u64) -> Result<String, LockError> {
            Ok(lock_runtime::current().expect("inside").key().to_owned())
        }
    };
}

locked_literal!(by_literal, "literal:<id>", "10s");
locked_expr!(by_expr, "expr:<id>", "1s", false);

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let locks = LockManager::memory();
    assert_eq!(by_literal(&locks, 1).await.expect("locked call"), "literal:1");
    assert_eq!(by_expr(&locks, 2).await.expect("locked call"), "expr:2");
}
