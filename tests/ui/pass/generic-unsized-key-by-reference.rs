use std::fmt::Display;

use lock_runtime::{LockError, LockManager, distributed_lock};

// A key parameter of a generic type that may be unsized (`str`, `dyn Display`), taken by
// reference, with the bound in a where clause and a named lifetime: the key reads it through
// the reference without needing its size.
#[distributed_lock(key = "entity:<kind>:<id>", wait = "1s")]
async fn touch<'a, K, I>(kind: &'a K, id: &'a I) -> Result<String, LockError>
where
    K: Display + ?Sized + Sync,
    I: Display + ?Sized + Sync,
{
    Ok(lock_runtime::current().expect("held").key().to_owned())
}

// The same with the bound written inline, and an `impl Trait` one.
#[distributed_lock(key = "job:<name>:<tag>")]
async fn run<K: Display + ?Sized + Sync>(
    name: &K,
    tag: &(impl Display + ?Sized + Sync),
) -> Result<String, LockError> {
    Ok(lock_runtime::current().expect("held").key().to_owned())
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    lock_runtime::set_global_default(LockManager::memory()).expect("first default");
    // Spawned: the future is `Send + 'static` for `'static` arguments.
    let spawned = tokio::spawn(touch("user", "7")).await.expect("task");
    assert_eq!(spawned.expect("locked call"), "entity:user:7");
    let shown: &'static (dyn Display + Sync) = &42u32;
    let spawned = tokio::spawn(touch(shown, "x")).await.expect("task");
    assert_eq!(spawned.expect("locked call"), "entity:42:x");
    let spawned = tokio::spawn(run("report", "nightly")).await.expect("task");
    assert_eq!(spawned.expect("locked call"), "job:report:nightly");
}
