//! The `testing` feature's kit: every scripted fault, the observation and the assertions, the
//! scoped default manager, tokio's paused clock, and one script run over memory and over a real
//! redis-server alike.

use std::sync::Arc;
use std::time::Duration;

use lock_runtime::testing::{Event, Fault, Holder, TestLocks, with_default};
use lock_runtime::{LockError, LockOptions, LostReason, distributed_lock};
use lock_tests::RedisServer;
use tokio::sync::Notify;
use tokio::time::Instant;

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

/// A paused test's wall time: the whole of it is scripted, so it is short even on a loaded
/// machine.
const WALL: Duration = Duration::from_secs(2);

#[tokio::test(start_paused = true)]
async fn busy_answers_outlast_the_wait_and_give_the_scripted_retry_after() {
    let wall = std::time::Instant::now();
    let kit = TestLocks::new();
    kit.on("order:*").busy(u32::MAX, secs(30));
    let start = Instant::now();
    let options = LockOptions::new().wait(secs(5));
    let err = kit
        .manager()
        .lock("order:7", options)
        .await
        .expect_err("busy throughout the wait");
    match &err {
        LockError::Busy {
            key, retry_after, ..
        } => {
            assert_eq!(key, "order:7");
            assert_eq!(*retry_after, Some(secs(30)));
        }
        other => panic!("expected Busy, got {other:?}"),
    }
    assert!(
        start.elapsed() >= secs(5),
        "gave up after {:?}",
        start.elapsed()
    );
    kit.assert_never_acquired("order:7");
    // Other keys are untouched by the script.
    let other = kit.manager().lock("stock:1", LockOptions::new()).await;
    assert!(other.is_ok(), "{other:?}");
    assert!(
        wall.elapsed() < WALL,
        "took {:?} of wall time",
        wall.elapsed()
    );
}

#[tokio::test(start_paused = true)]
async fn a_few_busy_answers_are_waited_out_and_recorded() {
    let kit = TestLocks::new();
    kit.on("order:7").busy(3, secs(1));
    let start = Instant::now();
    let guard = kit
        .manager()
        .lock("order:7", LockOptions::new().wait(secs(5)))
        .await
        .expect("taken after three busy answers");
    assert!(start.elapsed() >= secs(1), "waited {:?}", start.elapsed());
    let busy = kit
        .history()
        .iter()
        .filter(|event| matches!(event, Event::Busy { scripted: true, .. }))
        .count();
    assert_eq!(busy, 3, "{}", kit.shown_history());
    kit.assert_held("order:7");
    assert_eq!(kit.fencing_tokens("order:7"), vec![guard.fencing_token()]);
    guard.release().await.expect("released");
    kit.assert_not_held("order:7");
}

#[tokio::test(start_paused = true)]
async fn transient_failures_are_retried_within_the_wait_and_reported_without_one() {
    let kit = TestLocks::new();
    kit.on("order:<user_id>").fail_acquires(1, Fault::Transient);
    let err = kit
        .manager()
        .lock("order:7", LockOptions::new())
        .await
        .expect_err("no wait, no retry");
    assert!(
        matches!(
            err,
            LockError::Backend {
                transient: true,
                ..
            }
        ) && err.is_retryable(),
        "{err:?}"
    );
    kit.on("order:<user_id>").fail_acquires(2, Fault::Transient);
    let guard = kit
        .manager()
        .lock("order:7", LockOptions::new().wait(secs(5)))
        .await
        .expect("the third attempt takes it");
    let failed = kit
        .history()
        .iter()
        .filter(|event| {
            matches!(
                event,
                Event::Failed {
                    retryable: true,
                    ..
                }
            )
        })
        .count();
    assert_eq!(failed, 3, "{}", kit.shown_history());
    guard.release().await.expect("released");
}

#[tokio::test(start_paused = true)]
async fn permanent_failures_are_not_retried() {
    let kit = TestLocks::new();
    kit.on("order:7").fail_acquires(1, Fault::Permanent);
    let start = Instant::now();
    let err = kit
        .manager()
        .lock("order:7", LockOptions::new().wait(secs(5)))
        .await
        .expect_err("permanent");
    assert!(
        matches!(
            err,
            LockError::Backend {
                transient: false,
                ..
            }
        ) && !err.is_retryable(),
        "{err:?}"
    );
    assert_eq!(
        start.elapsed(),
        Duration::ZERO,
        "a permanent failure is not waited out"
    );
    kit.assert_never_acquired("order:7");
    // The script is spent: the next call takes the lock.
    let guard = kit.manager().lock("order:7", LockOptions::new()).await;
    assert!(guard.is_ok(), "{guard:?}");
}

#[tokio::test(start_paused = true)]
async fn a_lease_lost_now_fires_the_guards_signal_at_once_and_frees_the_lock() {
    let kit = TestLocks::new();
    let guard = kit
        .manager()
        .lock("order:7", LockOptions::new().ttl(secs(30)))
        .await
        .expect("taken");
    let lost = kit.on("order:7").lose_lease_now(LostReason::NotOwner).await;
    assert_eq!(lost, 1);
    // No time passes: the signal was given, not found by a renewal.
    let reason = tokio::time::timeout(Duration::from_millis(1), guard.lost())
        .await
        .expect("the lost signal fired at once");
    assert_eq!(reason, LostReason::NotOwner);
    assert!(!guard.is_held());
    kit.assert_lost("order:7");
    kit.assert_not_held("order:7");
    // Really gone: another instance takes it at once.
    let other = kit
        .instance()
        .lock("order:7", LockOptions::new())
        .await
        .expect("free for another instance");
    assert!(other.fencing_token() > guard.fencing_token());
}

#[tokio::test(start_paused = true)]
async fn a_loss_scripted_before_the_lock_is_taken_comes_at_its_first_renewal() {
    let kit = TestLocks::new();
    assert_eq!(
        kit.on("order:*").lose_lease_now(LostReason::Expired).await,
        0
    );
    let options = LockOptions::new().ttl(secs(30));
    let guard = kit.manager().lock("order:7", options).await.expect("taken");
    let spared = kit.manager().lock("stock:1", options).await.expect("taken");
    // Renewals come every 10 s; the first one of order:7 loses it.
    let taken = Instant::now();
    let reason = guard.lost().await;
    assert_eq!(reason, LostReason::Expired);
    let after = taken.elapsed();
    assert!(
        after >= secs(9) && after <= secs(11),
        "lost after {after:?}"
    );
    kit.assert_lost("order:7");
    // The loss is spent on order:7; other keys go on being renewed.
    tokio::time::sleep(secs(60)).await;
    assert!(spared.is_held());
    kit.assert_held("stock:1");
}

#[tokio::test(start_paused = true)]
async fn a_held_lease_is_lost_at_its_next_renewal() {
    let kit = TestLocks::new();
    let guard = kit
        .manager()
        .lock("order:7", LockOptions::new().ttl(secs(30)))
        .await
        .expect("taken");
    tokio::time::sleep(secs(15)).await;
    assert!(guard.is_held(), "renewed meanwhile");
    kit.on("order:7")
        .lose_lease_at_next_renewal(LostReason::NotOwner);
    assert_eq!(guard.lost().await, LostReason::NotOwner);
    kit.assert_lost("order:7");
    assert!(
        guard.release().await.is_err(),
        "a lost guard's release reports the loss"
    );
}

#[tokio::test(start_paused = true)]
async fn a_lease_held_for_minutes_is_renewed_in_no_wall_time() {
    let wall = std::time::Instant::now();
    let kit = TestLocks::new();
    let options = LockOptions::new().ttl(secs(30)).wait(secs(5));
    let guard = kit.manager().lock("report", options).await.expect("taken");
    // A second caller waits its 5 s and gives up; the holder's watchdog renews throughout.
    let err = kit
        .instance()
        .lock("report", options)
        .await
        .expect_err("busy");
    assert!(err.is_busy(), "{err:?}");
    tokio::time::sleep(secs(300)).await;
    assert!(guard.is_held(), "renewed for five minutes");
    kit.assert_held("report");
    guard.release().await.expect("released");
    assert!(
        wall.elapsed() < WALL,
        "took {:?} of wall time",
        wall.elapsed()
    );
}

/// Waits in a locked section until told to finish.
#[distributed_lock(key = "order:<user_id>", ttl = "30s")]
async fn order_section(user_id: u64, finish: Arc<Notify>) -> Result<u64, LockError> {
    finish.notified().await;
    Ok(user_id)
}

#[tokio::test(start_paused = true)]
async fn a_locked_section_is_aborted_by_a_lease_lost_mid_body() {
    let kit = TestLocks::new();
    let finish = Arc::new(Notify::new());
    let section = tokio::spawn(kit.scope(order_section(7, finish.clone())));
    kit.until(|kit| kit.is_held("order:7")).await;
    kit.on("order:<user_id>")
        .lose_lease_now(LostReason::Expired)
        .await;
    let answer = section.await.expect("section task");
    assert!(
        matches!(
            answer,
            Err(LockError::LeaseLost {
                reason: LostReason::Expired,
                ..
            })
        ),
        "{answer:?}"
    );
    kit.assert_lost("order:7");
    kit.assert_not_held("order:7");
}

#[tokio::test(start_paused = true)]
async fn a_slow_release_takes_its_time_and_one_beyond_the_request_timeout_fails() {
    let kit = TestLocks::new();
    kit.on("job").slow_releases(Duration::from_millis(500));
    let guard = kit
        .manager()
        .lock("job", LockOptions::new())
        .await
        .expect("taken");
    let start = Instant::now();
    guard.release().await.expect("released, slowly");
    assert!(start.elapsed() >= Duration::from_millis(500));
    kit.on("job").clear();
    kit.on("job").slow_releases(secs(10));
    let guard = kit
        .manager()
        .lock("job", LockOptions::new())
        .await
        .expect("taken");
    let err = guard
        .release()
        .await
        .expect_err("past the 3 s request timeout");
    assert!(err.is_retryable(), "{err:?}");
}

#[tokio::test(start_paused = true)]
async fn a_failed_release_leaves_the_lock_until_its_lease_ends() {
    let kit = TestLocks::new();
    // Every release: the guard retries a transient failure in the background.
    kit.on("job").fail_releases(u32::MAX, Fault::Transient);
    let options = LockOptions::new().ttl(secs(10));
    let guard = kit.manager().lock("job", options).await.expect("taken");
    let err = guard.release().await.expect_err("scripted");
    assert!(
        matches!(
            err,
            LockError::Backend {
                operation: "release",
                transient: true,
                ..
            }
        ),
        "{err:?}"
    );
    kit.assert_held("job");
    let other = kit.instance().lock("job", options).await;
    assert!(other.as_ref().is_err_and(LockError::is_busy), "{other:?}");
    // The lease runs out on the deployment: the other instance waits for it.
    let other = kit
        .instance()
        .lock("job", options.wait(secs(15)))
        .await
        .expect("taken once the lease ran out");
    drop(other);
}

#[tokio::test(start_paused = true)]
async fn a_phantom_holder_keeps_the_lock_busy_past_the_wait() {
    let kit = TestLocks::new();
    let holder = Holder::new("web-2", 4242, "orders");
    let phantom = kit
        .phantom_holder("order:7", holder.clone(), secs(60))
        .await
        .expect("free");
    let held = kit.held();
    assert_eq!(held.len(), 1);
    assert_eq!(held[0].key, "order:7");
    assert_eq!(held[0].phantom.as_ref(), Some(&holder));
    assert_eq!(held[0].fencing_token, phantom.fencing_token());

    let err = kit
        .manager()
        .lock("order:7", LockOptions::new().wait(secs(5)))
        .await
        .expect_err("held by the phantom");
    let LockError::Busy { retry_after, .. } = err else {
        panic!("expected Busy, got {err:?}");
    };
    let left = retry_after.expect("the phantom's lease has an end");
    assert!(left > secs(50) && left <= secs(55), "{left:?}");
    kit.assert_never_acquired("order:7");

    // A waiter wakes when the phantom lets go, and its token is above the phantom's.
    let manager = kit.manager();
    let waiter = tokio::spawn(async move {
        manager
            .lock("order:7", LockOptions::new().wait(secs(30)))
            .await
    });
    kit.until(|kit| kit.waiters("order:7") == 1).await;
    let phantom_token = phantom.fencing_token();
    phantom.release().await.expect("released");
    let guard = waiter.await.expect("waiter task").expect("taken");
    assert!(guard.fencing_token() > phantom_token);
    kit.assert_acquired_in_order(&["order:7"]);
    assert_eq!(
        kit.fencing_tokens("order:7"),
        vec![phantom_token, guard.fencing_token()]
    );
}

#[tokio::test(start_paused = true)]
async fn the_kit_counts_waiters_and_records_the_order_of_acquisitions() {
    let kit = TestLocks::new();
    let options = LockOptions::new().wait(secs(60));
    let first = kit.manager().lock("stock:1", options).await.expect("taken");
    let waiters: Vec<_> = (0..2)
        .map(|_| {
            let manager = kit.instance();
            tokio::spawn(async move { manager.lock("stock:1", options).await })
        })
        .collect();
    kit.until(|kit| kit.waiters("stock:1") == 2).await;
    assert_eq!(kit.waiters("order:7"), 0);
    let order = kit.manager().lock("order:7", options).await.expect("taken");
    first.release().await.expect("released");
    for waiter in waiters {
        waiter
            .await
            .expect("task")
            .expect("taken")
            .release()
            .await
            .expect("released");
    }
    kit.assert_acquired_in_order(&["stock:1", "order:7", "stock:1", "stock:1"]);
    let tokens = kit.fencing_tokens("stock:1");
    assert!(
        tokens.windows(2).all(|pair| pair[0] < pair[1]),
        "{tokens:?}"
    );
    assert_eq!(kit.held().len(), 1);
    drop(order);
}

#[tokio::test(start_paused = true)]
#[should_panic(
    expected = "expected the keys [\"order:7\", \"stock:1\"] to be acquired in this order"
)]
async fn a_failed_assertion_shows_the_history() {
    let kit = TestLocks::new();
    let a = kit.manager().lock("stock:1", LockOptions::new()).await;
    let b = kit.manager().lock("order:7", LockOptions::new()).await;
    drop((a, b));
    kit.assert_acquired_in_order(&["order:7", "stock:1"]);
}

#[tokio::test(start_paused = true)]
async fn a_gate_stops_an_acquire_until_the_test_opens_it() {
    let kit = TestLocks::new();
    let gate = kit.on("stock:*").pause_next_acquire();
    let manager = kit.manager();
    let taking = tokio::spawn(async move { manager.lock("stock:1", LockOptions::new()).await });
    gate.reached().await;
    kit.assert_never_acquired("stock:1");
    gate.open();
    let guard = taking.await.expect("task").expect("taken");
    kit.assert_held(guard.key());
}

#[tokio::test]
async fn a_task_spawned_outside_the_scope_is_told_how_to_carry_it() {
    let kit = TestLocks::new();
    let spawned = kit
        .scope(async { tokio::spawn(scoped(5)).await.expect("task") })
        .await;
    let Err(LockError::Config(message)) = spawned else {
        panic!("not a config error: {spawned:?}");
    };
    assert!(message.contains("TestLocks::scope"), "{message}");
    assert!(message.contains("spawn `kit.scope(future)`"), "{message}");
    assert!(message.contains("set_global_default"), "{message}");
}

#[distributed_lock(key = "scoped:<n>")]
async fn scoped(n: u32) -> Result<u64, LockError> {
    Ok(lock_runtime::current().map_or(0, |lock| lock.fencing_token()) + u64::from(n))
}

#[tokio::test(start_paused = true)]
async fn the_scoped_default_serves_the_attribute_and_is_not_inherited_by_spawned_tasks() {
    let kit = TestLocks::new();
    let other = TestLocks::new();
    kit.scope(scoped(1)).await.expect("the kit's manager");
    with_default(&other.manager(), scoped(2))
        .await
        .expect("the other kit's manager");
    kit.assert_acquired_in_order(&["scoped:1"]);
    other.assert_acquired_in_order(&["scoped:2"]);
    // Outside any scope (and with no global default in this test binary): a config error.
    let err = scoped(3).await.expect_err("no default");
    assert!(matches!(err, LockError::Config(_)), "{err:?}");
    let spawned = kit
        .scope(async { tokio::spawn(scoped(4)).await.expect("task") })
        .await;
    assert!(matches!(spawned, Err(LockError::Config(_))), "{spawned:?}");
}

/// One script, run alike over memory and a real server: busy answers, a transient failure, a
/// lost lease taken over by another instance, a phantom holder, a failed release. Returns the
/// history without its tokens, for comparison.
async fn script(kit: &TestLocks, key: &str) -> Vec<String> {
    let patient = LockOptions::new().ttl(secs(10)).wait(secs(5));
    kit.on(key)
        .busy(2, Duration::from_millis(20))
        .fail_acquires(1, Fault::Transient);
    let guard = kit
        .manager()
        .lock(key, patient)
        .await
        .expect("taken in the end");
    assert_eq!(kit.on(key).lose_lease_now(LostReason::NotOwner).await, 1);
    assert_eq!(
        tokio::time::timeout(secs(1), guard.lost()).await,
        Ok(LostReason::NotOwner)
    );
    let other = kit
        .instance()
        .lock(key, LockOptions::new())
        .await
        .expect("the lost lock is free");
    assert!(other.fencing_token() > guard.fencing_token());
    drop(guard);
    other.release().await.expect("released");

    let phantom = kit
        .phantom_holder(key, Holder::new("web-2", 1, "orders"), secs(30))
        .await
        .expect("free");
    let err = kit
        .manager()
        .lock(key, LockOptions::new().wait(Duration::from_millis(50)))
        .await
        .expect_err("the phantom holds it");
    assert!(err.is_busy(), "{err:?}");
    phantom.release().await.expect("released");

    // Every release fails: the guard's own, and the one it sends again when it is dropped.
    kit.on(key).fail_releases(u32::MAX, Fault::Permanent);
    let guard = kit
        .manager()
        .lock(key, LockOptions::new())
        .await
        .expect("free");
    let err = guard.release().await.expect_err("scripted");
    assert!(!err.is_retryable(), "{err:?}");
    let failed_releases = |kit: &TestLocks| {
        kit.history()
            .iter()
            .filter(|event| {
                matches!(
                    event,
                    Event::Failed {
                        operation: "release",
                        ..
                    }
                )
            })
            .count()
    };
    kit.until(|kit| failed_releases(kit) == 2).await;
    kit.assert_held(key);
    let mut shown: Vec<String> = kit
        .history()
        .iter()
        .map(|event| match event {
            Event::Acquired { phantom, .. } => format!("acquired phantom={}", phantom.is_some()),
            Event::Busy { scripted, .. } => format!("busy scripted={scripted}"),
            Event::Failed {
                operation,
                retryable,
                ..
            } => format!("{operation} failed retryable={retryable}"),
            Event::Released { .. } => "released".to_owned(),
            Event::Lost { reason, .. } => format!("lost {reason:?}"),
            other => format!("{other}"),
        })
        .collect();
    // How often a waiter asks a busy lock again depends on its deployment's notifications.
    shown.dedup();
    shown
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_script_runs_the_same_over_memory_and_a_real_server() {
    let server = RedisServer::start();
    let memory = script(&TestLocks::new(), "same-script").await;
    let kit = TestLocks::over_url(&server.url()).await.expect("connects");
    let redis = script(&kit, "same-script").await;
    assert_eq!(memory, redis, "{}", kit.shown_history());
    // The phantom and the failed release left real state on the server.
    let stored = server.cmd(&["GET", "lock:{same-script}"]);
    assert!(
        stored.starts_with("held token="),
        "{stored}\n{}",
        server.log()
    );
    // Repeats collapsed: two scripted busy answers read as one line.
    let expected = [
        "busy scripted=true",
        "acquire failed retryable=true",
        "acquired phantom=false",
        "lost NotOwner",
        "acquired phantom=false",
        "released",
        "acquired phantom=true",
        "busy scripted=false",
        "released",
        "acquired phantom=false",
        "release failed retryable=false",
    ];
    assert_eq!(memory, expected, "{memory:#?}");
}

/// What a scripted `Expired` loss stands for, done for real: a server paused past the lease.
/// The holder sees the same thing either way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scripted_expiry_reads_as_a_server_paused_past_the_lease() {
    let options = LockOptions::new().ttl(secs(1));
    let scripted = TestLocks::new();
    scripted
        .on("paused")
        .lose_lease_at_next_renewal(LostReason::Expired);
    let guard = scripted
        .manager()
        .lock("paused", options)
        .await
        .expect("taken");
    let scripted_loss = tokio::time::timeout(secs(5), guard.lost()).await;

    let server = RedisServer::start();
    let real = TestLocks::over_url(&server.url()).await.expect("connects");
    let guard = real.manager().lock("paused", options).await.expect("taken");
    server.pause();
    let real_loss = tokio::time::timeout(secs(5), guard.lost()).await;
    server.resume();
    assert_eq!(scripted_loss, Ok(LostReason::Expired));
    assert_eq!(real_loss, Ok(LostReason::Expired), "{}", server.log());
    scripted.assert_lost("paused");
    // The real loss is the holder's own finding: the deployment saw renewals go unanswered.
    real.assert_acquired_in_order(&["paused"]);
}

/// Users' code that takes two locks in opposite orders in two tasks deadlocks on the kit as on
/// a server: with `Deadlock::Fail` one task gives up, under the paused clock too.
#[tokio::test(start_paused = true)]
async fn a_deadlock_in_users_code_is_found_on_the_kit() {
    let wall = std::time::Instant::now();
    let kit = TestLocks::new();
    let options = LockOptions::new()
        .wait(secs(30))
        .deadlock(lock_runtime::Deadlock::Fail);
    let managers = [kit.manager(), kit.manager()];
    let deadlocks =
        lock_tests::deadlocks::opposite_orders(managers, "from:1", "to:2", options).await;
    assert_eq!(deadlocks, 1);
    assert!(wall.elapsed() < WALL, "{:?}", wall.elapsed());
}

#[tokio::test(start_paused = true)]
async fn a_gate_holds_the_acquire_past_the_request_timeout_until_it_is_opened() {
    let kit = TestLocks::new();
    let gate = kit.on("stock:*").pause_next_acquire();
    let manager = kit.manager();
    let taking = tokio::spawn(async move { manager.lock("stock:1", LockOptions::new()).await });
    gate.reached().await;
    // Far beyond the 3 s request timeout (and every retry's): the clock advances while the
    // test sleeps, and the acquire must still wait at the closed gate.
    tokio::time::sleep(secs(60)).await;
    kit.assert_never_acquired("stock:1");
    assert!(!taking.is_finished(), "{}", kit.shown_history());
    gate.open();
    let guard = taking.await.expect("task").expect("taken once opened");
    kit.assert_held(guard.key());
    kit.assert_acquired_in_order(&["stock:1"]);
}

#[tokio::test(start_paused = true)]
async fn a_lock_kept_for_hold_at_least_is_held_until_the_keep_ends() {
    let kit = TestLocks::new();
    let options = LockOptions::new().hold_at_least(secs(60));
    let guard = kit.manager().lock("job", options).await.expect("free");
    guard.release().await.expect("released into its keep");
    // The section ended, but the lock is kept: held for the kit as for another instance.
    kit.assert_held("job");
    assert!(kit.is_held("job"));
    let other = kit.manager().lock("job", LockOptions::new()).await;
    assert!(
        matches!(&other, Err(err) if err.is_busy()),
        "{other:?}\n{}",
        kit.shown_history()
    );
    tokio::time::sleep(secs(61)).await;
    kit.assert_not_held("job");
    kit.manager()
        .lock("job", LockOptions::new())
        .await
        .expect("free once the keep ended")
        .release()
        .await
        .expect("released");
}

#[tokio::test(start_paused = true)]
async fn a_gate_holds_only_the_acquire_that_came_first_and_lets_other_tasks_through() {
    let kit = TestLocks::new();
    let gate = kit.on("stock:*").pause_next_acquire();
    let manager = kit.manager();
    let paused = tokio::spawn(async move { manager.lock("stock:1", LockOptions::new()).await });
    gate.reached().await;
    // Another task's acquire of a matching key is not held.
    let other = kit
        .manager()
        .lock("stock:2", LockOptions::new())
        .await
        .expect("not held at the gate");
    kit.assert_acquired_in_order(&["stock:2"]);
    gate.open();
    let taken = paused.await.expect("task").expect("taken once opened");
    kit.assert_acquired_in_order(&["stock:2", "stock:1"]);
    taken.release().await.expect("released");
    other.release().await.expect("released");
}
