//! The behaviour every backend must have, run on memory://, on a real redis-server, on
//! a master behind Sentinel, on a three-master Redis Cluster, and on Redlock over three
//! independent redis-servers.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::{Duration, Instant};

use lock_runtime::{LockError, LockOptions, LostReason, OnLeaseLost};
use lock_tests::Deployment;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

lock_tests::on_backends!(
    [memory, redis, sentinel, cluster, redlock]
    [
    a_held_lock_is_busy_for_others_and_free_after_release,
    mutual_exclusion_holds_between_tasks,
    release_on_cancel_frees_lock_immediately,
    release_on_panic_frees_lock_immediately,
    waiter_is_woken_by_release_not_by_ttl,
    waiter_enters_when_an_abandoned_lease_expires,
    watchdog_keeps_a_short_lease_across_a_long_body,
    without_watchdog_the_lease_expires_and_the_holder_is_told,
    late_release_after_expiry_does_not_touch_the_next_owner,
    fencing_tokens_strictly_increase_across_expirations,
    nested_same_key_reenters_and_spawned_task_is_another_owner,
    a_nested_section_does_not_run_on_a_lost_lease,
    current_reports_the_held_lock_inside_run_locked,
    hold_at_least_keeps_a_fast_job_locked,
    max_hold_stops_renewal_and_reports_the_loss,
    abort_on_lease_lost_stops_the_body_with_lease_lost,
    continue_on_lease_lost_lets_the_body_finish,
    different_keys_do_not_block_each_other,
    busy_error_names_key_and_wait,
    a_hold_at_least_release_wakes_waiters_when_the_hold_ends,
    out_of_range_durations_are_config_errors_and_wait_max_means_forever,
    ]
);

async fn a_held_lock_is_busy_for_others_and_free_after_release(f: Deployment) {
    let guard = f.locks.lock("k", LockOptions::new()).await.expect("free");
    let err = f
        .locks
        .lock("k", LockOptions::new())
        .await
        .expect_err("held by the guard");
    assert!(err.is_busy(), "{err}\n{}", f.log());
    guard.release().await.expect("release");
    let again = f
        .locks
        .lock("k", LockOptions::new())
        .await
        .expect("free again");
    again.release().await.expect("release");
}

async fn mutual_exclusion_holds_between_tasks(f: Deployment) {
    let inside = Arc::new(AtomicU32::new(0));
    let overlaps = Arc::new(AtomicU32::new(0));
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let locks = f.locks.clone();
        let inside = inside.clone();
        let overlaps = overlaps.clone();
        tasks.push(tokio::spawn(async move {
            let mut tokens = Vec::new();
            for _ in 0..25 {
                let options = LockOptions::new().wait(Duration::from_secs(20));
                let guard = locks.lock("shared", options).await.expect("acquire");
                if inside.fetch_add(1, Ordering::SeqCst) != 0 {
                    overlaps.fetch_add(1, Ordering::SeqCst);
                }
                tokens.push(guard.fencing_token());
                tokio::task::yield_now().await;
                inside.fetch_sub(1, Ordering::SeqCst);
                guard.release().await.expect("release");
            }
            tokens
        }));
    }
    let mut all = Vec::new();
    for task in tasks {
        let tokens = task.await.expect("task");
        assert!(tokens.windows(2).all(|w| w[0] < w[1]), "{tokens:?}");
        all.extend(tokens);
    }
    assert_eq!(overlaps.load(Ordering::SeqCst), 0, "{}", f.log());
    all.sort_unstable();
    all.dedup();
    assert_eq!(all.len(), 200, "every acquisition has its own token");
}

async fn release_on_cancel_frees_lock_immediately(f: Deployment) {
    f.cancel_a_section("cancel", LockOptions::new()).await;
    // ttl is 30 s: only the cancellation can free the lock this fast.
    let started = Instant::now();
    let guard = f
        .locks
        .lock("cancel", LockOptions::new().wait(Duration::from_secs(5)))
        .await
        .unwrap_or_else(|err| panic!("{err}\n{}", f.log()));
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
    guard.release().await.expect("release");
}

async fn release_on_panic_frees_lock_immediately(f: Deployment) {
    f.panic_in_a_section("panic", LockOptions::new()).await;
    // Released before the panic went on: no waiting needed.
    let guard = f
        .locks
        .lock("panic", LockOptions::new())
        .await
        .unwrap_or_else(|err| panic!("{err}\n{}", f.log()));
    guard.release().await.expect("release");
}

async fn waiter_is_woken_by_release_not_by_ttl(f: Deployment) {
    let guard = f
        .locks
        .lock("wake", LockOptions::new())
        .await
        .expect("free");
    let locks = f.locks.clone();
    let waiter = tokio::spawn(async move {
        let options = LockOptions::new().wait(Duration::from_secs(20));
        let guard = locks.lock("wake", options).await?;
        let entered = Instant::now();
        guard.release().await?;
        Ok::<_, LockError>(entered)
    });
    tokio::time::sleep(ms(300)).await;
    let released = Instant::now();
    guard.release().await.expect("release");
    let entered = waiter.await.expect("task").expect("waiter acquires");
    // The lease had 30 s left: entering within a second means the release woke the waiter.
    let handover = entered.duration_since(released);
    assert!(
        handover < Duration::from_secs(1),
        "{handover:?}\n{}",
        f.log()
    );
}

async fn waiter_enters_when_an_abandoned_lease_expires(f: Deployment) {
    let guard = f
        .locks
        .lock("abandoned", LockOptions::new().ttl(ms(500)).watchdog(false))
        .await
        .expect("free");
    // Forget the guard: no release, no renewal, as if its holder froze.
    std::mem::forget(guard);
    let started = Instant::now();
    let options = LockOptions::new().wait(Duration::from_secs(10));
    let next = f
        .locks
        .lock("abandoned", options)
        .await
        .expect("acquired after expiry");
    let waited = started.elapsed();
    assert!(
        waited >= ms(400),
        "entered before the lease ran out: {waited:?}"
    );
    assert!(waited < ms(1500), "entered long after expiry: {waited:?}");
    next.release().await.expect("release");
}

async fn watchdog_keeps_a_short_lease_across_a_long_body(f: Deployment) {
    let options = LockOptions::new().ttl(Duration::from_secs(1));
    let guard = f.locks.lock("long-body", options).await.expect("free");
    for _ in 0..8 {
        tokio::time::sleep(ms(500)).await;
        assert!(guard.is_held(), "{}", f.log());
        let other = f.locks.lock("long-body", LockOptions::new()).await;
        assert!(other.expect_err("still held").is_busy());
    }
    guard.release().await.expect("still ours after 4 s");
}

async fn without_watchdog_the_lease_expires_and_the_holder_is_told(f: Deployment) {
    let options = LockOptions::new().ttl(ms(500)).watchdog(false);
    let guard = f.locks.lock("fixed", options).await.expect("free");
    let reason = tokio::time::timeout(Duration::from_secs(2), guard.lost())
        .await
        .expect("told within the lease");
    assert_eq!(reason, LostReason::Expired);
    assert!(!guard.is_held());
    tokio::time::sleep(ms(100)).await;
    let other = f
        .locks
        .lock("fixed", LockOptions::new())
        .await
        .expect("expired");
    other.release().await.expect("release");
}

async fn late_release_after_expiry_does_not_touch_the_next_owner(f: Deployment) {
    let options = LockOptions::new().ttl(ms(200)).watchdog(false);
    let first = f.locks.lock("late", options).await.expect("free");
    tokio::time::sleep(ms(400)).await;
    let second = f
        .locks
        .lock("late", LockOptions::new())
        .await
        .expect("expired");
    let err = first.release().await.expect_err("no longer ours");
    assert!(err.is_lease_lost(), "{err}");
    // The second owner's lock is intact.
    assert!(second.is_held());
    let third = f.locks.lock("late", LockOptions::new()).await;
    assert!(third.expect_err("still held by second").is_busy());
    second.release().await.expect("second still owns it");
}

async fn fencing_tokens_strictly_increase_across_expirations(f: Deployment) {
    let mut last = 0;
    for i in 0..1000u32 {
        let expire = i % 100 == 99;
        let options = if expire {
            LockOptions::new().ttl(ms(20)).watchdog(false)
        } else {
            LockOptions::new()
        };
        let guard = f.locks.lock("fenced", options).await.expect("free");
        let token = guard.fencing_token();
        assert!(
            token > last,
            "token {token} after {last} at {i}\n{}",
            f.log()
        );
        last = token;
        if expire {
            std::mem::forget(guard);
            tokio::time::sleep(ms(30)).await;
        } else {
            guard.release().await.expect("release");
        }
    }
}

async fn nested_same_key_reenters_and_spawned_task_is_another_owner(f: Deployment) {
    let locks = f.locks.clone();
    f.locks
        .run_locked("nest".into(), LockOptions::new(), async {
            let outer = lock_runtime::current().expect("held").fencing_token();
            let inner = locks.lock("nest", LockOptions::new()).await?;
            assert!(inner.is_reentered());
            assert_eq!(inner.fencing_token(), outer);
            inner.release().await?;
            // Still held: releasing the re-entered guard did nothing.
            assert!(lock_runtime::current().expect("held").is_held());
            let nested = locks
                .run_locked("nest".into(), LockOptions::new(), async {
                    Ok::<_, LockError>(lock_runtime::current().expect("held").fencing_token())
                })
                .await?;
            assert_eq!(nested, outer);
            let other = locks.clone();
            let spawned = tokio::spawn(async move { other.lock("nest", LockOptions::new()).await })
                .await
                .expect("task");
            assert!(
                spawned
                    .expect_err("a spawned task is another owner")
                    .is_busy()
            );
            Ok::<_, LockError>(())
        })
        .await
        .expect("section");
    let free = f
        .locks
        .lock("nest", LockOptions::new())
        .await
        .expect("released");
    free.release().await.expect("release");
}

async fn current_reports_the_held_lock_inside_run_locked(f: Deployment) {
    assert!(lock_runtime::current().is_none());
    let token = f
        .locks
        .run_locked(
            "cur".into(),
            LockOptions::new().ttl(Duration::from_secs(5)),
            async {
                let held = lock_runtime::current().expect("inside");
                assert_eq!(held.key(), "cur");
                assert!(held.is_held());
                assert!(held.remaining() > Duration::from_secs(4));
                assert!(held.remaining() <= Duration::from_secs(5));
                Ok::<_, LockError>(held.fencing_token())
            },
        )
        .await
        .expect("section");
    assert!(token > 0);
    assert!(lock_runtime::current().is_none());
}

async fn hold_at_least_keeps_a_fast_job_locked(f: Deployment) {
    let options = LockOptions::new().hold_at_least(ms(600));
    let guard = f.locks.lock("job", options).await.expect("free");
    guard.release().await.expect("release");
    let rerun = f.locks.lock("job", LockOptions::new()).await;
    assert!(rerun.expect_err("kept for hold_at_least").is_busy());
    let started = Instant::now();
    let later = f
        .locks
        .lock("job", LockOptions::new().wait(Duration::from_secs(5)))
        .await
        .expect("free after hold_at_least");
    assert!(started.elapsed() < Duration::from_secs(2));
    later.release().await.expect("release");
}

async fn max_hold_stops_renewal_and_reports_the_loss(f: Deployment) {
    let options = LockOptions::new().ttl(ms(300)).max_hold(ms(600));
    let guard = f.locks.lock("capped", options).await.expect("free");
    let started = Instant::now();
    let reason = tokio::time::timeout(Duration::from_secs(3), guard.lost())
        .await
        .expect("lease runs out after max_hold");
    assert_eq!(reason, LostReason::MaxHoldExceeded);
    let held_for = started.elapsed();
    assert!(held_for >= ms(400), "{held_for:?}");
    tokio::time::sleep(ms(50)).await;
    let next = f
        .locks
        .lock("capped", LockOptions::new())
        .await
        .expect("expired");
    next.release().await.expect("release");
}

async fn abort_on_lease_lost_stops_the_body_with_lease_lost(f: Deployment) {
    let finished = Arc::new(AtomicBool::new(false));
    let flag = finished.clone();
    let options = LockOptions::new().ttl(ms(300)).watchdog(false);
    let result = f
        .locks
        .run_locked("abort".into(), options, async move {
            tokio::time::sleep(Duration::from_secs(2)).await;
            flag.store(true, Ordering::SeqCst);
            Ok::<_, LockError>(())
        })
        .await;
    let err = result.expect_err("lease ran out mid-body");
    assert!(err.is_lease_lost(), "{err}");
    assert!(!finished.load(Ordering::SeqCst), "the body was dropped");
}

async fn continue_on_lease_lost_lets_the_body_finish(f: Deployment) {
    let options = LockOptions::new()
        .ttl(ms(200))
        .watchdog(false)
        .on_lease_lost(OnLeaseLost::Continue);
    let held_at_end = f
        .locks
        .run_locked("continue".into(), options, async {
            tokio::time::sleep(ms(500)).await;
            Ok::<_, LockError>(lock_runtime::current().expect("inside").is_held())
        })
        .await
        .expect("the body ran to the end");
    assert!(!held_at_end, "the loss is still reported");
}

async fn different_keys_do_not_block_each_other(f: Deployment) {
    let a = f.locks.lock("a", LockOptions::new()).await.expect("a");
    let b = f.locks.lock("b", LockOptions::new()).await.expect("b");
    a.release().await.expect("release a");
    b.release().await.expect("release b");
}

async fn busy_error_names_key_and_wait(f: Deployment) {
    let guard = f
        .locks
        .lock("order:7", LockOptions::new())
        .await
        .expect("free");
    // Another task: the holding task itself would be told it waits for itself.
    let contender = f.locks.clone();
    let err = tokio::spawn(async move {
        contender
            .lock("order:7", LockOptions::new().wait(ms(200)))
            .await
    })
    .await
    .expect("task")
    .expect_err("held");
    match &err {
        LockError::Busy {
            key,
            waited,
            retry_after,
            ..
        } => {
            assert_eq!(key, "order:7");
            assert!(*waited >= ms(200), "{waited:?}");
            // The holder's lease (30 s, renewed) still runs.
            assert!(
                retry_after.is_some_and(|left| left > Duration::from_secs(5)),
                "{retry_after:?}"
            );
        }
        other => panic!("expected Busy, got {other}"),
    }
    assert!(err.to_string().contains("order:7"), "{err}");
    guard.release().await.expect("release");
}

async fn a_nested_section_does_not_run_on_a_lost_lease(f: Deployment) {
    let locks = f.locks.clone();
    let options = LockOptions::new()
        .ttl(ms(200))
        .watchdog(false)
        .on_lease_lost(OnLeaseLost::Continue);
    let ran = AtomicBool::new(false);
    let nested = f
        .locks
        .run_locked("relost".into(), options, async {
            tokio::time::sleep(ms(400)).await;
            let nested = locks
                .run_locked("relost".into(), LockOptions::new(), async {
                    ran.store(true, Ordering::SeqCst);
                    Ok::<_, LockError>(())
                })
                .await;
            let guard = locks.lock("relost", LockOptions::new()).await;
            assert!(guard.expect_err("lease lost").is_lease_lost());
            Ok::<_, LockError>(nested)
        })
        .await
        .expect("outer section continues");
    assert!(nested.expect_err("no re-entry").is_lease_lost());
    assert!(
        !ran.load(Ordering::SeqCst),
        "nested body ran without the lock"
    );
}

async fn a_hold_at_least_release_wakes_waiters_when_the_hold_ends(f: Deployment) {
    let options = LockOptions::new().hold_at_least(ms(500));
    let guard = f.locks.lock("held-min", options).await.expect("free");
    let locks = f.locks.clone();
    let started = Instant::now();
    let waiter = tokio::spawn(async move {
        let options = LockOptions::new().wait(Duration::from_secs(10));
        let guard = locks.lock("held-min", options).await?;
        guard.release().await
    });
    tokio::time::sleep(ms(100)).await;
    guard.release().await.expect("release");
    waiter.await.expect("task").expect("waiter");
    // The lease had 30 s left; the release told the waiter the hold ends at 500 ms.
    let took = started.elapsed();
    assert!(took >= ms(450), "entered during hold_at_least: {took:?}");
    assert!(took < ms(2000), "{took:?}\n{}", f.log());
}

async fn out_of_range_durations_are_config_errors_and_wait_max_means_forever(f: Deployment) {
    for options in [
        LockOptions::new().ttl(Duration::MAX),
        LockOptions::new().ttl(ms(1)),
        LockOptions::new().hold_at_least(Duration::MAX),
    ] {
        let err = f
            .locks
            .lock("range", options)
            .await
            .expect_err("out of range");
        assert!(matches!(err, LockError::Config(_)), "{err}");
    }
    let options = LockOptions::new()
        .wait(Duration::MAX)
        .max_hold(Duration::MAX);
    let guard = f.locks.lock("range", options).await.expect("free");
    guard.release().await.expect("release");
}
