//! Deadlocks users' code makes: tasks that each hold one lock and wait for the next one's.

use std::sync::Arc;
use std::time::Duration;

use lock_runtime::{LockError, LockManager, LockOptions};
use tokio::sync::Barrier;
use tokio::time::Instant;

/// Each `(manager, first, second)` takes `first`, and once every one holds its first, waits for
/// `second` under `options`: what each wait came to, and how long after all of them began
/// waiting.
pub async fn ring(
    members: Vec<(LockManager, String, String)>,
    options: LockOptions,
) -> Vec<(Result<(), LockError>, Duration)> {
    let all_hold = Arc::new(Barrier::new(members.len()));
    let tasks: Vec<_> = members
        .into_iter()
        .map(|(locks, first, second)| {
            let all_hold = all_hold.clone();
            tokio::spawn(async move {
                let held = locks
                    .lock(first.as_str(), options)
                    .await
                    .unwrap_or_else(|err| panic!("take {first}: {err}"));
                all_hold.wait().await;
                let began = Instant::now();
                let second = locks.lock(second.as_str(), options).await;
                let took = began.elapsed();
                let outcome = match second {
                    Ok(guard) => guard.release().await,
                    Err(err) => Err(err),
                };
                held.release().await.expect("release the first lock");
                (outcome, took)
            })
        })
        .collect();
    let mut outcomes = Vec::new();
    for task in tasks {
        outcomes.push(task.await.expect("the member's task"));
    }
    outcomes
}

/// Two tasks, one on each manager of `managers`, take `a` and `b` in opposite orders under
/// `options` (which should choose `Deadlock::Fail`; see [`ring`]): how many gave up in a
/// deadlock; the others got their second lock.
///
/// # Panics
///
/// If a first lock cannot be taken, or a second ends in anything but the lock or a deadlock.
pub async fn opposite_orders(
    managers: [LockManager; 2],
    a: &str,
    b: &str,
    options: LockOptions,
) -> usize {
    let [one, other] = managers;
    let members = vec![
        (one, a.to_owned(), b.to_owned()),
        (other, b.to_owned(), a.to_owned()),
    ];
    let mut told = 0;
    for (outcome, _) in ring(members, options).await {
        match outcome {
            Ok(()) => {}
            Err(LockError::Deadlock { .. }) => told += 1,
            Err(err) => panic!("neither the lock nor a deadlock: {err}"),
        }
    }
    told
}
