use std::fmt::Display;

use lock_runtime::{LockError, LockManager, distributed_lock};

#[distributed_lock(key = "report:<tenant>", manager = locks)]
async fn build_report(
    locks: &LockManager,
    tenant: impl Display,
    rows: impl IntoIterator<Item = u32>,
) -> Result<u32, LockError> {
    Ok(rows.into_iter().sum())
}

// `impl Trait` in the return type, inside the `Result`.
#[distributed_lock(key = "label:<id>", manager = locks)]
async fn label(locks: &LockManager, id: u32) -> Result<impl Display, LockError> {
    Ok(format!("#{id}"))
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let locks = LockManager::memory();
    let total = build_report(&locks, "acme", vec![1, 2, 3]).await;
    assert_eq!(total.expect("locked call"), 6);
    assert_eq!(
        label(&locks, 9).await.expect("locked call").to_string(),
        "#9"
    );
}
