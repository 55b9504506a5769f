//! The behaviour every backend must have, run on memory://, on a real redis-server, on
//! a master behind Sentinel, on a three-master Redis Cluster, and on Redlock over three
//! independent redis-servers.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

use lock_runtime::{Blocker, LostReason, OnLeaseLost, SLOW_ACQUIRE};
use lock_tests::StoredLock;
use lock_tests::logs::{Event, Events, Level};
use lock_tests::prelude::*;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// Starts another owner, a task of its own, that asks for `key` once and is told it is busy,
/// then waits for it up to [`PATIENCE`]; returns once the first answer came. The task yields its
/// guard and the instant it got it.
///
/// The busy answer is what shows the lock was held when the waiter came; a release right after
/// it either wakes the waiter or is found by its next request, both well within a bound that
/// the lease's expiry could not meet.
/// Options for a lease of `ttl` on a free key, with a wait to retry a transient failure: Redlock
/// gives each master a tenth of a short lease to answer, which a loaded machine can miss.
fn short_lease(ttl: Duration) -> LockOptions {
    LockOptions::new().ttl(ttl).wait(PATIENCE)
}

async fn waiter(
    f: &Deployment,
    key: &'static str,
) -> JoinHandle<Result<(LockGuard, Instant), LockError>> {
    let locks = f.locks.clone();
    let (told, told_busy) = tokio::sync::oneshot::channel();
    let task = tokio::spawn(async move {
        let first = locks.lock(key, LockOptions::new()).await;
        let _ = told.send(first.as_ref().err().is_some_and(LockError::is_busy));
        drop(first);
        let guard = locks.lock(key, LockOptions::new().wait(PATIENCE)).await?;
        Ok((guard, Instant::now()))
    });
    let busy = told_busy.await.expect("the waiter asks");
    assert!(
        busy,
        "`{key}` was not held when the waiter came\n{}",
        f.log()
    );
    task
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
                let options = LockOptions::new().wait(PATIENCE);
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
    // ttl is 30 s: only the cancellation can free the lock within the wait.
    let guard = f
        .locks
        .lock("cancel", LockOptions::new().wait(Duration::from_secs(10)))
        .await
        .unwrap_or_else(|err| panic!("{err}\n{}", f.log()));
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
    let waiter = waiter(&f, "wake").await;
    let released = Instant::now();
    guard.release().await.expect("release");
    let (next, entered) = waiter.await.expect("task").expect("waiter acquires");
    next.release().await.expect("release");
    // The lease had 30 s left: entering within a few seconds means the release woke the waiter.
    let handover = entered.duration_since(released);
    assert!(
        handover < Duration::from_secs(10),
        "{handover:?}\n{}",
        f.log()
    );
}

async fn waiter_enters_when_an_abandoned_lease_expires(f: Deployment) {
    let guard = f
        .locks
        .lock("abandoned", short_lease(ms(500)).watchdog(false))
        .await
        .expect("free");
    // Forget the guard: no release, no renewal, as if its holder froze.
    std::mem::forget(guard);
    let started = Instant::now();
    let options = LockOptions::new().wait(PATIENCE);
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
    // Told when the lease ends, the waiter asks again then, not at the end of its wait.
    assert!(
        waited < Duration::from_secs(5),
        "entered long after expiry: {waited:?}"
    );
    next.release().await.expect("release");
}

async fn watchdog_keeps_a_short_lease_across_a_long_body(f: Deployment) {
    let ttl = Duration::from_secs(1);
    let options = short_lease(ttl);
    let guard = f.locks.lock("long-body", options).await.expect("free");
    let started = Instant::now();
    // Renewal after renewal, until the body has run two leases long.
    while started.elapsed() < 2 * ttl {
        assert!(renewed(|| guard.remaining()).await, "{}", f.log());
        assert!(guard.is_held(), "{}", f.log());
        let other = f.locks.lock("long-body", LockOptions::new()).await;
        assert!(other.expect_err("still held").is_busy());
    }
    guard.release().await.expect("still ours after two leases");
}

async fn without_watchdog_the_lease_expires_and_the_holder_is_told(f: Deployment) {
    let options = short_lease(ms(500)).watchdog(false);
    let guard = f.locks.lock("fixed", options).await.expect("free");
    let reason = tokio::time::timeout(PATIENCE, guard.lost())
        .await
        .expect("told when the lease ends");
    assert_eq!(reason, LostReason::Expired);
    assert!(!guard.is_held());
    // The holder is told a little before the server lets the lease go.
    let other = f
        .locks
        .lock("fixed", LockOptions::new().wait(PATIENCE))
        .await
        .expect("expired");
    other.release().await.expect("release");
}

async fn late_release_after_expiry_does_not_touch_the_next_owner(f: Deployment) {
    let options = short_lease(ms(200)).watchdog(false);
    let first = f.locks.lock("late", options).await.expect("free");
    let second = f
        .locks
        .lock("late", LockOptions::new().wait(PATIENCE))
        .await
        .expect("expired");
    assert!(
        !first.is_held(),
        "the second owner entered a lease still held"
    );
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
        // After an expiring lock, the next acquire waits for it to run out.
        let options = if expire {
            LockOptions::new().ttl(ms(100)).watchdog(false)
        } else {
            LockOptions::new()
        }
        .wait(PATIENCE);
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
            LockOptions::new().ttl(Duration::from_secs(60)),
            async {
                let held = lock_runtime::current().expect("inside");
                assert_eq!(held.key(), "cur");
                assert!(held.is_held());
                assert!(held.remaining() > Duration::from_secs(40));
                assert!(held.remaining() <= Duration::from_secs(60));
                Ok::<_, LockError>(held.fencing_token())
            },
        )
        .await
        .expect("section");
    assert!(token > 0);
    assert!(lock_runtime::current().is_none());
}

async fn hold_at_least_keeps_a_fast_job_locked(f: Deployment) {
    let options = LockOptions::new().hold_at_least(Duration::from_secs(1));
    let guard = f.locks.lock("job", options).await.expect("free");
    guard.release().await.expect("release");
    let rerun = f.locks.lock("job", LockOptions::new()).await;
    assert!(rerun.expect_err("kept for hold_at_least").is_busy());
    // Free at the end of hold_at_least, long before the 30 s lease would have run out.
    let later = f
        .locks
        .lock("job", LockOptions::new().wait(Duration::from_secs(15)))
        .await
        .expect("free after hold_at_least");
    later.release().await.expect("release");
}

async fn max_hold_stops_renewal_and_reports_the_loss(f: Deployment) {
    // Renewed every 333 ms while a renewal may take up to a second: the lease runs into
    // max_hold, not out for want of a renewal, even on a loaded machine.
    let options = short_lease(Duration::from_secs(1)).max_hold(Duration::from_secs(2));
    let started = Instant::now();
    let guard = f.locks.lock("capped", options).await.expect("free");
    let reason = tokio::time::timeout(PATIENCE, guard.lost())
        .await
        .expect("lease runs out after max_hold");
    assert_eq!(reason, LostReason::MaxHoldExceeded, "{}", f.log());
    let held_for = started.elapsed();
    assert!(held_for >= ms(1900), "{held_for:?}");
    let next = f
        .locks
        .lock("capped", LockOptions::new().wait(PATIENCE))
        .await
        .expect("expired");
    next.release().await.expect("release");
}

async fn abort_on_lease_lost_stops_the_body_with_lease_lost(f: Deployment) {
    let finished = Arc::new(AtomicBool::new(false));
    let flag = finished.clone();
    let options = short_lease(ms(300)).watchdog(false);
    let result = f
        .locks
        .run_locked("abort".into(), options, async move {
            // Longer than any loaded machine delays the 300 ms lease's end.
            tokio::time::sleep(PATIENCE).await;
            flag.store(true, Ordering::SeqCst);
            Ok::<_, LockError>(())
        })
        .await;
    let err = result.expect_err("lease ran out mid-body");
    assert!(err.is_lease_lost(), "{err}");
    assert!(!finished.load(Ordering::SeqCst), "the body was dropped");
}

async fn continue_on_lease_lost_lets_the_body_finish(f: Deployment) {
    let options = short_lease(ms(200))
        .watchdog(false)
        .on_lease_lost(OnLeaseLost::Continue);
    let held_at_end = f
        .locks
        .run_locked("continue".into(), options, async {
            let held = lock_runtime::current().expect("inside");
            let lost = tokio::time::timeout(PATIENCE, held.lost()).await;
            assert_eq!(lost, Ok(LostReason::Expired), "told, and not stopped");
            Ok::<_, LockError>(held.is_held())
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
    let options = short_lease(ms(200))
        .watchdog(false)
        .on_lease_lost(OnLeaseLost::Continue);
    let ran = AtomicBool::new(false);
    let nested = f
        .locks
        .run_locked("relost".into(), options, async {
            let held = lock_runtime::current().expect("inside");
            let lost = tokio::time::timeout(PATIENCE, held.lost()).await;
            assert_eq!(lost, Ok(LostReason::Expired));
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
    let started = Instant::now();
    let guard = f.locks.lock("held-min", options).await.expect("free");
    let waiter = waiter(&f, "held-min").await;
    guard.release().await.expect("release");
    let (next, entered) = waiter.await.expect("task").expect("waiter");
    next.release().await.expect("release");
    // The lease had 30 s left; the release told the waiter the hold ends at 500 ms.
    let took = entered.duration_since(started);
    assert!(took >= ms(450), "entered during hold_at_least: {took:?}");
    assert!(took < Duration::from_secs(10), "{took:?}\n{}", f.log());
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

lock_tests::on_backends! {
    mod blockers;
    [redis, sentinel, cluster, redlock]
    [busy_names_the_holder_as_it_recorded_itself]
}

lock_tests::on_backends! {
    mod no_blocker;
    [memory, redis, sentinel, cluster, redlock]
    [busy_names_nobody_where_nothing_is_recorded]
}

lock_tests::on_backends! {
    mod slow_acquires;
    [redis, redlock]
    [a_slow_acquire_is_logged_with_its_blocker]
}

/// The `Busy` of `waiter` asking for `key` under `options`, from a task of its own (the
/// holding task would be told it waits for itself).
async fn busy(waiter: &LockManager, key: &'static str, options: LockOptions) -> LockError {
    let waiter = waiter.clone();
    let err = tokio::spawn(async move { waiter.lock(key, options).await })
        .await
        .expect("task")
        .expect_err("held by another");
    assert!(err.is_busy(), "{err}");
    err
}

fn blocker_of(err: &LockError) -> Option<&Blocker> {
    match err {
        LockError::Busy { blocker, .. } => blocker.as_deref(),
        other => panic!("expected Busy, got {other}"),
    }
}

async fn busy_names_the_holder_as_it_recorded_itself(f: Deployment) {
    let holder = f
        .connect_with(|builder| builder.app_name("billing").holder_metadata(true))
        .await;
    let waiter = f.connect().await;
    let before = std::time::SystemTime::now();
    let guard = holder
        .lock("invoice:7", LockOptions::new())
        .await
        .expect("free");
    let after = std::time::SystemTime::now();
    let stored = f.stored_lock("lock:{invoice:7}").expect("stored");
    let token = stored.token.clone().expect("held");
    // Told at once (wait 0: the acquire transaction where the server has one), and after a
    // short wait (the script marks the lock as awaited, and the answers after that).
    for options in [LockOptions::new(), LockOptions::new().wait(ms(300))] {
        let err = busy(&waiter, "invoice:7", options).await;
        let blocker = blocker_of(&err).unwrap_or_else(|| panic!("names its holder: {err:?}"));
        assert_eq!(
            Some(blocker.holder_id.clone()),
            stored.token_id(),
            "{err:?}"
        );
        assert_eq!(blocker.holder_id.len(), 12);
        assert_eq!(blocker.host.as_deref(), stored.holder_field("host"));
        assert!(blocker.host.as_ref().is_some_and(|host| !host.is_empty()));
        assert_eq!(blocker.pid, Some(std::process::id()));
        assert_eq!(blocker.app.as_deref(), Some("billing"));
        let since_ms: u64 = stored
            .holder_field("since")
            .and_then(|since| since.parse().ok())
            .expect("since recorded");
        let since = blocker.since.expect("since");
        assert_eq!(since, std::time::UNIX_EPOCH + ms(since_ms));
        // Recorded when the holder began its attempt, to the millisecond.
        assert!(since + ms(1) >= before && since <= after, "{since:?}");
        // This format keeps fencing tokens in the slot's counter, not in the value.
        assert_eq!(blocker.fencing_token, None);
        let shown = err.to_string();
        assert!(shown.contains("app \"billing\""), "{shown}");
        assert!(
            shown.contains(&format!("pid {}", std::process::id())),
            "{shown}"
        );
        assert!(shown.contains(&blocker.holder_id), "{shown}");
        let debug = format!("{err:?}");
        for text in [
            &shown,
            &debug,
            &blocker.to_string(),
            &format!("{blocker:?}"),
        ] {
            assert!(!text.contains(&token), "the owner token shown: {text}");
        }
    }
    guard.release().await.expect("release");
}

async fn busy_names_nobody_where_nothing_is_recorded(f: Deployment) {
    let memory = f.url().starts_with("memory://");
    // memory:// records nobody, whatever the setting.
    let holder = f
        .connect_with(|builder| builder.app_name("billing").holder_metadata(memory))
        .await;
    let waiter = f.connect().await;
    let guard = holder
        .lock("invoice:8", LockOptions::new())
        .await
        .expect("free");
    for options in [LockOptions::new(), LockOptions::new().wait(ms(300))] {
        let err = busy(&waiter, "invoice:8", options).await;
        assert!(blocker_of(&err).is_none(), "{err:?}");
        assert!(!err.to_string().contains("held by"), "{err}");
    }
    guard.release().await.expect("release");
    if f.is_redlock() {
        return;
    }
    // A semaphore has several holders: none of them is the one that blocks.
    let recording = f
        .connect_with(|builder| builder.app_name("billing").holder_metadata(true))
        .await;
    let permit = recording
        .semaphore("exports", 1, LockOptions::new())
        .await
        .expect("free");
    let err = {
        let waiter = waiter.clone();
        tokio::spawn(async move { waiter.semaphore("exports", 1, LockOptions::new()).await })
            .await
            .expect("task")
            .expect_err("every permit held")
    };
    assert!(blocker_of(&err).is_none(), "{err:?}");
    permit.release().await.expect("release");
}

/// The `slow lock acquire` events captured, with the owner token `token` in none of their
/// fields.
fn slow_events(events: &Events, token: &str) -> Vec<Event> {
    let slow = events.named("slow lock acquire");
    for event in &slow {
        assert_eq!(event.level, Level::INFO);
        for value in event.fields.values() {
            assert!(!value.contains(token), "the owner token logged: {event:?}");
        }
    }
    slow
}

async fn a_slow_acquire_is_logged_with_its_blocker(f: Deployment) {
    let holder = f
        .connect_with(|builder| builder.app_name("billing").holder_metadata(true))
        .await;
    let waiter = f.connect().await;
    // What an event must name of the holder of `key`, as the server stores it.
    let named = |event: &Event, key: &str, stored: &StoredLock| {
        assert_eq!(event.get("key"), Some(key), "{event:?}");
        assert_eq!(
            event.get("holder_id").map(str::to_owned),
            stored.token_id(),
            "{event:?}"
        );
        let pid = std::process::id().to_string();
        assert_eq!(event.get("pid"), Some(pid.as_str()), "{event:?}");
        assert_eq!(event.get("app"), Some("billing"), "{event:?}");
        assert_eq!(event.get("host"), stored.holder_field("host"), "{event:?}");
        assert!(
            event.get("since").is_some_and(|since| since.ends_with('Z')),
            "{event:?}"
        );
        assert_eq!(event.get("fencing_token"), None, "{event:?}");
        let waited: u64 = event
            .get("waited_ms")
            .and_then(|waited| waited.parse().ok())
            .expect("waited_ms");
        assert!(u128::from(waited) >= SLOW_ACQUIRE.as_millis(), "{event:?}");
    };
    let held = holder
        .lock("report:9", LockOptions::new())
        .await
        .expect("free");
    let stored = f.stored_lock("lock:{report:9}").expect("stored");
    let token = stored.token.clone().expect("held");

    // The events of the acquires this task polls (the capture is this thread's).
    let events = Events::default();
    let capture = events.capture();
    // Quick answers are no slow acquires.
    let quick = waiter.lock("report:9", LockOptions::new()).await;
    assert!(quick.as_ref().is_err_and(LockError::is_busy), "{quick:?}");
    drop(quick);
    let free = waiter
        .lock("other", LockOptions::new())
        .await
        .expect("free");
    free.release().await.expect("release");
    assert!(
        slow_events(&events, &token).is_empty(),
        "{:?}",
        events.named("slow lock acquire")
    );

    // Busy after waiting past the threshold.
    let err = waiter
        .lock("report:9", LockOptions::new().wait(SLOW_ACQUIRE + ms(200)))
        .await
        .expect_err("held");
    assert!(err.is_busy(), "{err}");
    let slow = slow_events(&events, &token);
    assert_eq!(slow.len(), 1, "{slow:?}");
    assert_eq!(slow[0].get("outcome"), Some("busy"), "{slow:?}");
    named(&slow[0], "report:9", &stored);
    held.release().await.expect("release");

    // Acquired once the holder lets go, after the waiter has waited past the threshold: the
    // lock is marked as awaited once the waiter asked, and released a threshold after that.
    let held = holder
        .lock("report:10", LockOptions::new())
        .await
        .expect("free");
    let stored = f.stored_lock("lock:{report:10}").expect("stored");
    assert!(!stored.waiting, "nobody asked yet");
    let token = stored.token.clone().expect("held");
    let waiting = waiter.lock("report:10", LockOptions::new().wait(PATIENCE));
    let release = async {
        assert!(
            eventually(|| async {
                f.stored_lock("lock:{report:10}")
                    .is_some_and(|lock| lock.waiting)
            })
            .await,
            "the waiter asks\n{}",
            f.log()
        );
        tokio::time::sleep(SLOW_ACQUIRE).await;
        held.release().await.expect("release");
    };
    let (taken, ()) = tokio::join!(waiting, release);
    let taken = taken.expect("released to the waiter");
    let slow = slow_events(&events, &token);
    assert_eq!(slow.len(), 2, "{slow:?}");
    assert_eq!(slow[1].get("outcome"), Some("acquired"), "{slow:?}");
    named(&slow[1], "report:10", &stored);
    drop(capture);
    taken.release().await.expect("release");
}
