// `crate = "path"` names the runtime crate when it is not reachable as `::lock_runtime`, e.g.
// under a renamed dependency or through a facade crate's re-export.
extern crate lock_runtime as locks;

use locks::{LockError, LockManager, distributed_lock};

mod facade {
    pub(crate) use lock_runtime as runtime;
}

#[distributed_lock(key = "renamed:<id>", crate = "locks")]
async fn through_renamed(id: u64) -> Result<u64, LockError> {
    Ok(id)
}

#[distributed_lock(key = "facade:<id>", crate = "crate::facade::runtime", wait = "1s")]
async fn through_facade(id: u64) -> Result<u64, LockError> {
    Ok(id)
}

#[distributed_lock(key = "absolute:<id>", crate = "::locks", manager = locks)]
async fn absolute(locks: &LockManager, id: u64) -> Result<u64, LockError> {
    Ok(id)
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    locks::set_global_default(LockManager::memory()).expect("first default");
    assert_eq!(through_renamed(1).await.expect("locked call"), 1);
    assert_eq!(through_facade(2).await.expect("locked call"), 2);
    assert_eq!(absolute(&LockManager::memory(), 3).await.expect("locked call"), 3);
}
