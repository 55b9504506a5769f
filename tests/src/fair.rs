//! What fair mode promises on every deployment that supports it, as a check each topology's suite
//! runs on its own managers.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use lock_runtime::{LockManager, LockOptions};

/// Waiters arrive one after another, alternating between the managers `a` and `b` (two
/// processes, as far as the lock can tell), while `key` is held: they get it in the order they
/// came.
///
/// # Panics
///
/// If a waiter fails, or the order differs.
pub async fn served_in_the_order_they_came(a: &LockManager, b: &LockManager, key: &str) {
    let fair = |wait| LockOptions::new().wait(wait).fair(true);
    let holder = a
        .lock(key, fair(Duration::ZERO))
        .await
        .expect("free at first");
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for i in 0..6 {
        let locks = if i % 2 == 0 { a.clone() } else { b.clone() };
        let order = order.clone();
        let key = key.to_owned();
        tasks.push(tokio::spawn(async move {
            let guard = locks
                .lock(key, fair(Duration::from_secs(20)))
                .await
                .unwrap_or_else(|err| panic!("waiter {i}: {err}"));
            order.lock().expect("order").push(i);
            tokio::time::sleep(Duration::from_millis(5)).await;
            guard.release().await.expect("release");
        }));
        // Each is in line before the next one asks.
        tokio::time::sleep(Duration::from_millis(40)).await;
    }
    holder.release().await.expect("release");
    for task in tasks {
        task.await.expect("waiter task");
    }
    assert_eq!(*order.lock().expect("order"), [0, 1, 2, 3, 4, 5]);
}
