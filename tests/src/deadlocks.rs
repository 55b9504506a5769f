//! The smallest deadlock users' code makes: two tasks taking two locks in opposite orders.

use std::sync::Arc;

use lock_runtime::{LockError, LockManager, LockOptions};

/// Two tasks, one on each manager of `managers`, take `a` and `b` in opposite orders under
/// `options` (which should choose `Deadlock::Fail`): the first lock of each is taken before
/// either waits for its second. How many gave up in a deadlock; the others got their second
/// lock.
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
    let both_hold = Arc::new(tokio::sync::Barrier::new(2));
    let orders = [(a.to_owned(), b.to_owned()), (b.to_owned(), a.to_owned())];
    let tasks: Vec<_> = managers
        .into_iter()
        .zip(orders)
        .map(|(locks, (first, second))| {
            let both_hold = both_hold.clone();
            tokio::spawn(async move {
                let held = locks
                    .lock(first.as_str(), options)
                    .await
                    .unwrap_or_else(|err| panic!("first lock `{first}`: {err}"));
                both_hold.wait().await;
                let outcome = match locks.lock(second.as_str(), options).await {
                    Ok(guard) => guard.release().await,
                    Err(err) => Err(err),
                };
                held.release().await.expect("release the first lock");
                outcome
            })
        })
        .collect();
    let mut told = 0;
    for task in tasks {
        match task.await.expect("task") {
            Ok(()) => {}
            Err(LockError::Deadlock { .. }) => told += 1,
            Err(err) => panic!("neither the lock nor a deadlock: {err}"),
        }
    }
    told
}
