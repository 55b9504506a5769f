//! `#[distributed_lock(deadlock = "..")]` reaches the runtime: two attributed calls that take
//! two locks in opposite orders give up one of them with `LockError::Deadlock` when they ask to,
//! a `keys` call is one of the waits that can give up, and a call that says nothing takes the
//! manager's default (`deadlock = "wait"` over a failing default is in
//! `deadlock_logged.rs`). All on memory:// (no Redis needed), each manager passed with
//! `manager = locks`.

use std::sync::Arc;
use std::time::Duration;

use lock_runtime::{Deadlock, LockError, LockManager, distributed_lock};
use lock_tests::busy_elsewhere;
use tokio::sync::Barrier;
use tokio::time::Instant;

/// Longer than any test takes: a call that is not told of a deadlock waits out its `wait`
/// (30 s), and the test fails on `Busy` rather than hanging.
const PATIENCE: Duration = Duration::from_secs(30);

mod transfers;
use transfers::{Second, abba};

/// Exactly one call gave up with `Deadlock`, naming both waits; the other got both locks.
fn one_gave_up(outcomes: &[Result<(), LockError>]) {
    let failed: Vec<&LockError> = outcomes.iter().filter_map(|o| o.as_ref().err()).collect();
    assert_eq!(failed.len(), 1, "{outcomes:?}");
    let LockError::Deadlock { key, cycle, .. } = failed[0] else {
        panic!("not a deadlock: {outcomes:?}");
    };
    assert_eq!(&cycle.members[0].waits_for, key, "{cycle:?}");
    let mut waited: Vec<&str> = cycle.members.iter().map(|m| m.waits_for.as_str()).collect();
    waited.sort_unstable();
    assert_eq!(waited, ["acct:a", "acct:b"], "{cycle:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opposite_orders_with_deadlock_fail_give_up_one_call() {
    let locks = LockManager::memory();
    let began = Instant::now();
    one_gave_up(&abba(&locks, Second::GiveUp).await);
    assert!(began.elapsed() < PATIENCE, "waited out instead");
}

/// Without `deadlock` in the attribute, the manager's default decides.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_without_deadlock_takes_the_managers_default() {
    let locks = LockManager::builder()
        .url("memory://manager-default")
        .deadlock(Deadlock::Fail)
        .build()
        .await
        .expect("memory manager");
    one_gave_up(&abba(&locks, Second::ManagerDefault).await);
}

#[distributed_lock(keys = ["k:<a>", "k:<b>"], manager = locks, wait = "30s", deadlock = "fail")]
async fn take_both(locks: &LockManager, a: u32, b: u32) -> Result<(), LockError> {
    Ok(())
}

/// The locks of `keys` are taken in one order, so two `keys` calls never deadlock each other,
/// but a task that takes the same locks one by one in another order can: the `keys` call's wait
/// is part of that deadlock, and `deadlock = "fail"` gives it up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keys_call_in_a_deadlock_with_locks_taken_one_by_one_gives_up() {
    let locks = LockManager::memory();
    let holds_second = Arc::new(Barrier::new(2));
    let go = Arc::new(Barrier::new(2));
    let other = {
        let (locks, holds_second, go) = (locks.clone(), holds_second.clone(), go.clone());
        tokio::spawn(async move {
            let options = lock_runtime::LockOptions::new()
                .ttl(Duration::from_secs(10))
                .wait(PATIENCE);
            let second = locks.lock("k:2", options).await.expect("free");
            holds_second.wait().await;
            go.wait().await;
            let first = locks.lock("k:1", options).await;
            let outcome = match first {
                Ok(guard) => guard.release().await,
                Err(err) => Err(err),
            };
            second.release().await.expect("release k:2");
            outcome
        })
    };
    holds_second.wait().await;
    let both = {
        let locks = locks.clone();
        tokio::spawn(async move { take_both(&locks, 1, 2).await })
    };
    // The `keys` call holds k:1 (and waits for k:2) before the other task asks for k:1.
    let give_up = Instant::now() + PATIENCE;
    while !busy_elsewhere(&locks, "k:1").await {
        assert!(Instant::now() < give_up, "k:1 was never taken");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    go.wait().await;
    let outcome = both.await.expect("the keys call's task");
    let Err(LockError::Deadlock { key, cycle, .. }) = &outcome else {
        panic!("not a deadlock: {outcome:?}");
    };
    assert_eq!(key, "k:2", "{cycle:?}");
    other
        .await
        .expect("the other task")
        .expect("k:1 once the keys call gave up");
}
