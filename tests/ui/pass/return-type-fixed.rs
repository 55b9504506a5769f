use std::fmt::{Debug, Display};

use lock_runtime::{LockError, LockManager, distributed_lock};

// The fixed forms of `return-struct`, `return-non-result-alias` and the generic placeholder
// mistakes: what their errors advise, applied.

#[derive(Debug, PartialEq)]
struct Receipt {
    order: u64,
}

type Lookup = Result<Option<u64>, LockError>;

#[distributed_lock(key = "order:<id>", manager = locks)]
async fn place(locks: &LockManager, id: u64) -> Result<Receipt, LockError> {
    Ok(Receipt { order: id })
}

#[distributed_lock(key = "order:<id>", manager = locks)]
async fn find(locks: &LockManager, id: u64) -> Lookup {
    Ok(Some(id))
}

#[distributed_lock(key = "entity:<id>", manager = locks)]
async fn touch<I: Clone + std::fmt::Display>(locks: &LockManager, id: &I) -> Result<I, LockError> {
    Ok(id.clone())
}

#[distributed_lock(key = "entity:<id>", manager = locks)]
async fn show(locks: &LockManager, id: impl Debug + Display) -> Result<String, LockError> {
    Ok(format!("{id:?}"))
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let locks = LockManager::memory();
    assert_eq!(
        place(&locks, 1).await.expect("locked call"),
        Receipt { order: 1 }
    );
    assert_eq!(find(&locks, 2).await.expect("locked call"), Some(2));
    assert_eq!(touch(&locks, &3u8).await.expect("locked call"), 3);
    assert_eq!(show(&locks, 4).await.expect("locked call"), "4");
}
