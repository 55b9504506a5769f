use std::fmt::Display;

use lock_runtime::{LockError, LockManager, distributed_lock};

// Generic parameters, a where clause and a generic error type with the `From<LockError>` bound.
#[distributed_lock(key = "entity:<kind>:<id>", manager = locks)]
async fn touch<K, I, E>(locks: &LockManager, kind: K, id: I) -> Result<String, E>
where
    K: Display + Send,
    I: Display + Clone + Send,
    E: From<LockError>,
{
    Ok(format!("{kind}/{id}"))
}

// A const generic and a generic slice.
#[distributed_lock(key = "batch:<name>", manager = locks)]
async fn first<T: Clone, const N: usize>(
    locks: &LockManager,
    name: &str,
    items: [T; N],
) -> Result<Option<T>, LockError> {
    Ok(items.first().cloned())
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let locks = LockManager::memory();
    let touched: Result<String, LockError> = touch(&locks, "user", 7u32).await;
    assert_eq!(touched.expect("locked call"), "user/7");
    assert_eq!(
        first(&locks, "b", [1, 2, 3]).await.expect("locked call"),
        Some(1)
    );
}
