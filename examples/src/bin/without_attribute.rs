//! The API without the attribute, as docs/API.md shows it (all but these lines): a lock taken
//! and released by hand, then a section run under a lock with `run_locked` (what
//! `#[distributed_lock]` expands to), in a `main` returning `Box<dyn Error>`.
//!
//! `cargo run -p lock-examples --bin without_attribute` runs on memory; set `REDIS_URL` to use
//! Redis.

use std::time::Duration;

use lock_runtime::{LockError, LockManager, LockOptions};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "memory://".to_owned());
    let locks = LockManager::connect(&url).await?; // redis://, rediss://, memory://, ...
    lock_runtime::set_global_default(locks.clone())?; // what the attribute uses

    let options = LockOptions::new()
        .ttl(Duration::from_secs(30))
        .wait(Duration::from_secs(5));
    let guard = locks.lock("order:42", options).await?; // LockError::Busy after 5 s
    let token = guard.fencing_token(); // pass it with every write to what the lock protects
    guard.release().await?; // or drop it: released in the background

    let inside = locks
        .run_locked("order:42".to_owned(), options, async {
            let lock = lock_runtime::current(); // the held lock, as in an annotated fn
            Ok::<_, LockError>(lock.map(|lock| lock.fencing_token()))
        })
        .await?; // the error type of the block is the call's: name it, as above
    println!("first token {token}, then {inside:?} inside run_locked");
    locks.shutdown().await?;
    Ok(())
}
