//! Two attributed calls that take two locks in opposite orders, for the attribute's deadlock
//! tests (`attribute_deadlock.rs`, and `deadlock_logged.rs`, whose log capture needs a
//! process of its own).

#![allow(dead_code)]

use std::sync::Arc;

use lock_runtime::{LockError, LockManager, distributed_lock};
use tokio::sync::Barrier;

#[distributed_lock(key = "acct:<second>", manager = locks, wait = "30s", deadlock = "fail")]
async fn take_second_or_give_up(locks: &LockManager, second: &str) -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "acct:<second>", manager = locks, wait = "3s", deadlock = "wait")]
async fn take_second_waiting(locks: &LockManager, second: &str) -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "acct:<second>", manager = locks, wait = "30s")]
async fn take_second_as_the_manager_says(
    locks: &LockManager,
    second: &str,
) -> Result<(), LockError> {
    Ok(())
}

#[derive(Clone, Copy, Debug)]
pub(crate) enum Second {
    GiveUp,
    Wait,
    ManagerDefault,
}

/// Holds `acct:<first>` and, once every caller holds its first, takes `acct:<second>` as
/// `how` says.
#[distributed_lock(key = "acct:<first>", manager = locks, ttl = "10s")]
async fn transfer(
    locks: &LockManager,
    first: &str,
    second: &str,
    all_hold: &Barrier,
    how: Second,
) -> Result<(), LockError> {
    all_hold.wait().await;
    match how {
        Second::GiveUp => take_second_or_give_up(locks, second).await,
        Second::Wait => take_second_waiting(locks, second).await,
        Second::ManagerDefault => take_second_as_the_manager_says(locks, second).await,
    }
}

/// `transfer(a, b)` and `transfer(b, a)` at once, each on a task of its own.
pub(crate) async fn abba(locks: &LockManager, how: Second) -> Vec<Result<(), LockError>> {
    let all_hold = Arc::new(Barrier::new(2));
    let tasks: Vec<_> = [("a", "b"), ("b", "a")]
        .into_iter()
        .map(|(first, second)| {
            let (locks, all_hold) = (locks.clone(), all_hold.clone());
            tokio::spawn(async move { transfer(&locks, first, second, &all_hold, how).await })
        })
        .collect();
    let mut outcomes = Vec::new();
    for task in tasks {
        outcomes.push(task.await.expect("the caller's task"));
    }
    outcomes
}
