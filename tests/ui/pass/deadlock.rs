use std::sync::LazyLock;

use lock_runtime::{LockError, LockManager, distributed_lock};

// Each fn here is a `deadlock` mistake of ui/fail/ with the fix its message names applied, so
// that a message that suggests a fix which does not compile, or is refused again, fails here.
// Whether the choice reaches the runtime is checked by tests/attribute_deadlock.rs.

static LOCKS: LazyLock<LockManager> = LazyLock::new(LockManager::memory);

// deadlock-bool.rs, deadlock-not-a-string.rs, deadlock-abort.rs, deadlock-unknown.rs,
// deadlock-option-misspelled.rs: `deadlock = "fail"` ...
#[distributed_lock(key = "account:<from>", wait = "5s", deadlock = "fail", manager = LOCKS)]
async fn transfer(from: u64, to: u64) -> Result<u64, LockError> {
    Ok(from + to)
}

// ... or `deadlock = "wait"`, which needs no `wait`: it is what every call does by default.
#[distributed_lock(key = "account:<from>", deadlock = "wait", manager = LOCKS)]
async fn transfer_waiting(from: u64, to: u64) -> Result<u64, LockError> {
    Ok(from + to)
}

// deadlock-without-wait.rs, deadlock-with-zero-wait.rs: a `wait`.
#[distributed_lock(key = "account:<from>", deadlock = "fail", wait = "5s", manager = LOCKS)]
async fn transfer_with_wait(from: u64, to: u64) -> Result<u64, LockError> {
    Ok(from + to)
}

// deadlock-with-permits-without-wait.rs: remove `deadlock` ...
#[distributed_lock(key = "account:<from>", permits = 3, manager = LOCKS)]
async fn transfer_semaphore(from: u64, to: u64) -> Result<u64, LockError> {
    Ok(from + to)
}

// ... or remove `permits` and add a `wait`.
#[distributed_lock(key = "account:<from>", deadlock = "fail", wait = "5s", manager = LOCKS)]
async fn transfer_lock(from: u64, to: u64) -> Result<u64, LockError> {
    Ok(from + to)
}

// deadlock-with-mode.rs: remove `deadlock` ...
#[distributed_lock(key = "account:<from>", mode = "write", wait = "5s", manager = LOCKS)]
async fn transfer_write(from: u64, to: u64) -> Result<u64, LockError> {
    Ok(from + to)
}

// ... or remove `mode`.
#[distributed_lock(key = "account:<from>", wait = "5s", deadlock = "fail", manager = LOCKS)]
async fn transfer_plain(from: u64, to: u64) -> Result<u64, LockError> {
    Ok(from + to)
}

// The locks of `keys` are plain locks, each waited for with these options: one of them can be
// part of a deadlock with locks held around the call, or taken elsewhere in another order.
#[distributed_lock(
    keys = ["account:<from>", "account:<to>"],
    wait = "5s",
    deadlock = "fail",
    manager = LOCKS
)]
async fn transfer_both(from: u64, to: u64) -> Result<u64, LockError> {
    Ok(from + to)
}

// The choice through a `macro_rules!` fragment.
macro_rules! locked {
    ($name:ident, $deadlock:literal) => {
        #[distributed_lock(key = "macro:<id>", wait = "5s", deadlock = $deadlock, manager = LOCKS)]
        async fn $name(id: u64) -> Result<u64, LockError> {
            Ok(id)
        }
    };
}

locked!(by_macro, "fail");

#[tokio::main(flavor = "current_thread")]
async fn main() {
    assert_eq!(transfer(1, 2).await.expect("free"), 3);
    assert_eq!(transfer_waiting(1, 2).await.expect("free"), 3);
    assert_eq!(transfer_with_wait(1, 2).await.expect("free"), 3);
    assert_eq!(transfer_semaphore(1, 2).await.expect("free"), 3);
    assert_eq!(transfer_lock(1, 2).await.expect("free"), 3);
    assert_eq!(transfer_write(1, 2).await.expect("free"), 3);
    assert_eq!(transfer_plain(1, 2).await.expect("free"), 3);
    assert_eq!(transfer_both(1, 2).await.expect("free"), 3);
    assert_eq!(by_macro(4).await.expect("free"), 4);
}
