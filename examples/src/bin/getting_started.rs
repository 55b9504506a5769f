use std::time::Duration;

use lock_runtime::{LockError, LockManager, distributed_lock};
use tracing_subscriber::EnvFilter;

/// One order per user at a time, in every process that shares the lock server.
#[distributed_lock(key = "order:<user_id>", ttl = "30s", wait = "5s")]
async fn place_order(user_id: u64, click: u32) -> Result<String, LockError> {
    // Runs while this process holds the lock `order:<user_id>`.
    let token = lock_runtime::current().map_or(0, |lock| lock.fencing_token());
    tokio::time::sleep(Duration::from_millis(50)).await; // check stock, write the order
    Ok(format!("user {user_id}, click {click}: token {token}"))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The library reports through `tracing`: without a subscriber its warnings (a deadlock, a
    // server that can evict locks, a failed release) and `slow lock acquire` print nothing.
    tracing_subscriber::fmt()
        .with_env_filter(EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()))
        .with_writer(std::io::stderr) // logs on stderr, the program's output on stdout
        .init();
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "memory://".to_owned());
    let locks = LockManager::connect(&url).await?;
    // What #[distributed_lock] uses; without it, a locked call fails with LockError::Config.
    lock_runtime::set_global_default(locks.clone())?;
    println!("locks on {}", locks.backend());

    // Two clicks of one user at once: one waits for the other's lock (the higher token).
    let first = tokio::spawn(place_order(7, 1));
    let second = tokio::spawn(place_order(7, 2));
    println!("{}", first.await??);
    println!("{}", second.await??);

    locks.shutdown().await?; // on SIGTERM too: releases whatever is still held
    Ok(())
}
