//! Deadlocks nobody gives up in are logged: between two managers that wait (`deadlock.rs` has
//! the rest), and under `#[distributed_lock(deadlock = "wait")]` over a manager whose default
//! is to fail. In a test binary of their own: the log is captured on the test's thread, and a
//! test of the same process that logged the same event on another thread first could leave the
//! capture without it (seen under load: tracing caches whether a call site is wanted).

use std::time::Duration;

use lock_runtime::{Deadlock, LockError, LockManager, LockOptions};
use lock_tests::Deployment;
use lock_tests::deadlocks::ring;
use lock_tests::logs::{Level, Logged};

mod transfers;
use transfers::{Second, abba};

/// `deadlock = "wait"` is set on the call, over a manager that would fail it: nobody gives up,
/// the deadlock is logged, and the waits run out.
#[tokio::test(flavor = "current_thread")]
async fn deadlock_wait_overrides_a_failing_manager_default() {
    let logged = Logged::default();
    let _capture = logged.capture(Level::WARN);
    let locks = LockManager::builder()
        .url("memory://wait-overrides")
        .deadlock(Deadlock::Fail)
        .build()
        .await
        .expect("memory manager");
    let outcomes = abba(&locks, Second::Wait).await;
    assert!(
        outcomes
            .iter()
            .all(|outcome| !matches!(outcome, Err(LockError::Deadlock { .. }))),
        "{outcomes:?}"
    );
    assert!(
        outcomes
            .iter()
            .any(|outcome| matches!(outcome, Err(LockError::Busy { .. }))),
        "{outcomes:?}"
    );
    let text = logged.text();
    assert!(text.contains("deadlock among lock waiters"), "{text}");
}

/// Without `Deadlock::Fail` nobody gives up: both wait out their budget, and the deadlock is
/// logged once by each manager (each process) with a member in it.
#[tokio::test(flavor = "current_thread")]
async fn waiting_is_unchanged_without_fail_and_the_deadlock_is_logged() {
    let logged = Logged::default();
    let _capture = logged.capture(Level::WARN);
    let deployment = Deployment::redis().await;
    let other = deployment.connect().await;
    let options = LockOptions::new()
        .ttl(Duration::from_secs(10))
        .wait(Duration::from_secs(2));
    let outcomes = ring(
        vec![
            (deployment.locks.clone(), "p".into(), "q".into()),
            (other, "q".into(), "p".into()),
        ],
        options,
    )
    .await;
    for (outcome, _) in &outcomes {
        assert!(
            matches!(outcome, Err(LockError::Busy { .. })),
            "{outcomes:?}"
        );
    }
    let text = logged.text();
    assert_eq!(
        text.matches("deadlock among lock waiters").count(),
        2,
        "{text}"
    );
    assert!(
        text.contains("waits for `p`") && text.contains("waits for `q`"),
        "{text}"
    );
}
