//! What fair mode promises on every deployment that supports it, as a check each topology's suite
//! runs on its own managers.

use std::future::Future;
use std::pin::pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lock_runtime::{LockManager, LockOptions};

use crate::prelude::PATIENCE;
use crate::wait_until_async;

/// Waiters arrive one after another, alternating between the managers `a` and `b` (two
/// processes, as far as the lock can tell), while `key` is held: they get it in the order they
/// came. `line` says how many wait in the line of `key` now
/// (`ZCARD` of its [`queue_key`](lock_runtime::inspect::queue_key) on the server that stores
/// it), or `None` where the line cannot be read from outside (memory: a waiter is in line once
/// its call went to sleep). The next waiter asks once the one before it is in line.
///
/// # Panics
///
/// If a waiter fails or never gets in line, or the order differs.
pub async fn served_in_the_order_they_came_in_line(
    a: &LockManager,
    b: &LockManager,
    key: &str,
    line: impl Fn() -> Option<usize>,
) {
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
        let asked = Arc::new(AtomicBool::new(false));
        let waiter = async move {
            let guard = locks
                .lock(key, fair(PATIENCE))
                .await
                .unwrap_or_else(|err| panic!("waiter {i}: {err}"));
            order.lock().expect("order").push(i);
            guard.release().await.expect("release");
        };
        tasks.push(tokio::spawn(noting_first_wait(waiter, asked.clone())));
        let in_line = wait_until_async(PATIENCE, || {
            asked.load(Ordering::SeqCst) && line().is_none_or(|now| now > i)
        });
        assert!(in_line.await, "waiter {i} never got in line");
    }
    holder.release().await.expect("release");
    for task in tasks {
        task.await.expect("waiter task");
    }
    assert_eq!(*order.lock().expect("order"), [0, 1, 2, 3, 4, 5]);
}

/// `call`, noting in `asked` when it first goes to sleep.
async fn noting_first_wait<T>(call: impl Future<Output = T>, asked: Arc<AtomicBool>) -> T {
    let mut call = pin!(call);
    std::future::poll_fn(|cx| {
        let polled = call.as_mut().poll(cx);
        if polled.is_pending() {
            asked.store(true, Ordering::SeqCst);
        }
        polled
    })
    .await
}
