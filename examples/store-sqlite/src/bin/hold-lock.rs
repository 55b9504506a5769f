//! Holds or tries a lock in a SQLite file from a process of its own: the other process of the
//! package's cross-process tests.
//!
//! `hold-lock <file> <key> <ttl ms> hold`: takes the lock (waiting up to 30 s), prints
//! `held <fencing token>`, then releases it and prints `released` when a line `release` comes
//! on standard input; at the end of input it exits, leaving the lock to expire.
//! `hold-lock <file> <key> <ttl ms> try`: tries once and prints `busy`, or `held <fencing
//! token>` and releases it.

use std::io::BufRead;
use std::sync::Arc;
use std::time::Duration;

use lock_runtime::{LockManager, LockOptions};
use lock_store_sqlite::SqliteStore;

type Failed = Box<dyn std::error::Error + Send + Sync>;

#[tokio::main]
async fn main() -> Result<(), Failed> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [file, key, ttl_ms, mode] = args.as_slice() else {
        return Err("usage: hold-lock <file> <key> <ttl ms> hold|try".into());
    };
    let ttl = Duration::from_millis(ttl_ms.parse()?);
    let store = Arc::new(SqliteStore::open(file).await?);
    let manager = LockManager::builder().store(store).build().await?;
    let wait = if mode == "try" {
        Duration::ZERO
    } else {
        Duration::from_secs(30)
    };
    let guard = match manager
        .lock(key, LockOptions::new().ttl(ttl).wait(wait))
        .await
    {
        Err(err) if err.is_busy() && mode == "try" => {
            println!("busy");
            return Ok(());
        }
        taken => taken?,
    };
    println!("held {}", guard.fencing_token());
    if mode == "try" {
        guard.release().await?;
        return Ok(());
    }
    let asked = tokio::task::spawn_blocking(|| {
        std::io::stdin()
            .lock()
            .lines()
            .any(|line| line.is_ok_and(|line| line.trim() == "release"))
    })
    .await?;
    if !asked {
        // Left to expire: the process ends before the guard's release could run.
        std::process::exit(0);
    }
    guard.release().await?;
    println!("released");
    Ok(())
}
