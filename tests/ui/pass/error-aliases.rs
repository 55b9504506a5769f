use lock_runtime::{LockError, LockManager, distributed_lock};

#[derive(Debug)]
struct AppError;

impl From<LockError> for AppError {
    fn from(_: LockError) -> Self {
        AppError
    }
}

mod app {
    pub(crate) type Result<T, E = super::AppError> = std::result::Result<T, E>;
}

type AppResult<T> = Result<T, AppError>;

// Result aliases whose error type is not written out are checked through the return type.
#[distributed_lock(key = "a:<id>", manager = locks)]
async fn with_alias(locks: &LockManager, id: u64) -> AppResult<u64> {
    Ok(id)
}

#[distributed_lock(key = "b:<id>", manager = locks)]
async fn with_default_param(locks: &LockManager, id: u64) -> app::Result<u64> {
    Ok(id)
}

#[distributed_lock(key = "c:<id>", manager = locks)]
async fn fully_qualified(
    locks: &LockManager,
    id: u64,
) -> std::result::Result<u64, Box<dyn std::error::Error + Send + Sync>> {
    Ok(id)
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let locks = LockManager::memory();
    assert_eq!(with_alias(&locks, 1).await.expect("locked call"), 1);
    assert_eq!(with_default_param(&locks, 2).await.expect("locked call"), 2);
    assert_eq!(fully_qualified(&locks, 3).await.expect("locked call"), 3);
}
