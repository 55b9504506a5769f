//! Lock-delay (`LockOptions::lock_delay`) on real servers: a lock whose lease ran out without a
//! release (its holder stopped renewing, or was cut off from the store) is granted to nobody
//! for the delay, while a clean release still hands it over at once, and the holder's own
//! lost-lease signal still fires at the end of its ttl.
//!
//! Every test prints its figures (`--nocapture`): the time from the end of the holder's lease
//! (by its own clock) to the next grant, and from a release to the next grant.

use std::time::Duration;

use tokio::time::Instant;

use lock_runtime::store::LockState;
use lock_runtime::testing::{Event, TestLocks};
use lock_runtime::{LostReason, Mode, current, distributed_lock};
use lock_tests::prelude::*;
use lock_tests::{Deployment, FaultProxy, PostgresServer, on_backends};

/// The lease of the holder that stops renewing.
const TTL: Duration = Duration::from_secs(1);
/// Its lock-delay: long enough that a grant at the end of the lease alone would be seen.
const DELAY: Duration = Duration::from_secs(3);
/// How long a waiter may take past when the lock can be granted, on a loaded machine.
const SLACK: Duration = Duration::from_secs(5);

/// The options of a holder whose lease runs out `TTL` after it is granted: it never renews, as
/// a holder that stalled right after the grant.
fn stalled(options: LockOptions) -> LockOptions {
    options.ttl(TTL).lock_delay(DELAY).watchdog(false)
}

/// A waiter that waits long enough for any end of the lease and its delay.
fn waiting(options: LockOptions) -> LockOptions {
    options.wait(TTL + DELAY + SLACK + SLACK)
}

/// Takes `key` on `holder` under a lease that runs out without a release, then waits for it on
/// `other`: the grant comes no sooner than the lease and its delay after the holder's acquire
/// began (the store counts both from when the acquire reached it), and soon after; the holder's
/// lost-lease signal fires before it, at the end of the ttl.
async fn held_past_the_lease_for_the_delay(
    holder: &LockManager,
    other: &LockManager,
    key: &str,
    shape: LockOptions,
) {
    let asked = Instant::now();
    let guard = holder
        .lock(key, stalled(shape))
        .await
        .expect("the lock is free");
    let lost = tokio::time::timeout(TTL + SLACK, guard.lost())
        .await
        .expect("the holder's lease ends at its ttl");
    let lost_at = asked.elapsed();
    let granted = other
        .lock(key, waiting(shape))
        .await
        .expect("granted once the delay is over");
    let granted_at = asked.elapsed();
    eprintln!(
        "{key}: lease lost ({lost:?}) {lost_at:?} after the acquire began; granted to another \
         {granted_at:?} after it ({:?} after the lost-lease signal)",
        granted_at.saturating_sub(lost_at)
    );
    assert!(
        lost_at < TTL + DELAY,
        "the holder learns of the loss at its ttl, not after the delay: {lost_at:?}"
    );
    assert!(
        granted_at >= TTL + DELAY,
        "granted {granted_at:?} after the holder's acquire began, before its ttl and delay"
    );
    assert!(
        granted_at < TTL + DELAY + SLACK,
        "granted only {granted_at:?} after the holder's acquire began"
    );
    drop(granted);
    // The stale holder's release finds the lock gone or another's.
    let _ = guard.release().await;
}

async fn a_lease_lost_without_a_release_is_granted_to_nobody_for_the_delay(d: Deployment) {
    let other = d.connect().await;
    held_past_the_lease_for_the_delay(&d.locks, &other, "delay:lock", LockOptions::new()).await;
}

async fn a_semaphore_permit_lost_without_a_release_is_granted_to_nobody_for_the_delay(
    d: Deployment,
) {
    if d.is_redlock() {
        return; // Redlock keeps no semaphores.
    }
    let other = d.connect().await;
    let one_permit = LockOptions::new().permits(1);
    held_past_the_lease_for_the_delay(&d.locks, &other, "delay:permit", one_permit).await;
}

async fn a_write_hold_lost_without_a_release_is_granted_to_nobody_for_the_delay(d: Deployment) {
    if d.is_redlock() {
        return; // Redlock keeps no read-write locks.
    }
    let other = d.connect().await;
    let write = LockOptions::new().mode(Mode::Write);
    held_past_the_lease_for_the_delay(&d.locks, &other, "delay:write", write).await;
}

async fn a_fair_lock_lost_without_a_release_is_granted_to_nobody_for_the_delay(d: Deployment) {
    if d.is_redlock() {
        return; // Redlock keeps no line of fair waiters.
    }
    let other = d.connect().await;
    let fair = LockOptions::new().fair(true).wait(ms(1));
    held_past_the_lease_for_the_delay(&d.locks, &other, "delay:fair", fair).await;
}

/// After the holder's lease is lost, the lock is still busy, and the busy answer says when it
/// can be granted: the delay included.
async fn a_busy_answer_counts_the_delay(d: Deployment) {
    let other = d.connect().await;
    let key = "delay:busy";
    let guard = d
        .locks
        .lock(key, stalled(LockOptions::new()))
        .await
        .expect("the lock is free");
    tokio::time::timeout(TTL + SLACK, guard.lost())
        .await
        .expect("the holder's lease ends at its ttl");
    match other.lock(key, LockOptions::new()).await {
        Err(LockError::Busy { retry_after, .. }) => {
            eprintln!("{key}: busy after the lease was lost, retry after {retry_after:?}");
            let retry_after = retry_after.expect("the store knows when the lock ends");
            assert!(
                !retry_after.is_zero() && retry_after <= TTL + DELAY,
                "what is left of the delay: {retry_after:?}"
            );
        }
        Ok(_) => panic!("granted while the delay ran"),
        Err(other) => panic!("not a busy answer: {other}"),
    }
}

/// A release hands the lock over at once, however long the delay: a waiter on another manager
/// gets it within seconds, where the holder's lease and delay had more than a minute to run.
async fn a_clean_release_hands_over_at_once(d: Deployment) {
    let other = d.connect().await;
    let key = "delay:release";
    let long = LockOptions::new()
        .ttl(Duration::from_secs(30))
        .lock_delay(Duration::from_secs(60));
    let guard = d.locks.lock(key, long).await.expect("the lock is free");
    match other.lock(key, LockOptions::new()).await {
        Err(LockError::Busy { retry_after, .. }) => {
            // The store keeps the lock for its lease and its delay.
            let retry_after = retry_after.expect("the store knows when the lock ends");
            assert!(
                retry_after > Duration::from_secs(30),
                "the busy answer counts the delay: {retry_after:?}"
            );
        }
        other => panic!("not busy while held: {other:?}"),
    }
    let waiter = tokio::spawn(async move {
        let granted = other.lock(key, LockOptions::new().wait(ms(20_000))).await;
        (Instant::now(), granted.map(drop))
    });
    let released = Instant::now();
    guard.release().await.expect("a clean release");
    let (granted_at, granted) = waiter.await.expect("the waiter's task");
    granted.expect("granted after the release");
    let handed = granted_at.saturating_duration_since(released);
    eprintln!("{key}: granted to another {handed:?} after a clean release (delay 60s)");
    assert!(handed < SLACK, "the release handed over in {handed:?}");
}

/// A waiter in the same process as the holder, offered the lock on its release, gets it at
/// once too (where the store hands locks over, a lock with a delay is released instead).
async fn a_clean_release_hands_over_at_once_in_the_same_process(d: Deployment) {
    let key = "delay:release-here";
    let long = LockOptions::new()
        .ttl(Duration::from_secs(30))
        .lock_delay(Duration::from_secs(60));
    let guard = d.locks.lock(key, long).await.expect("the lock is free");
    let locks = d.locks.clone();
    let waiter = tokio::spawn(async move {
        let granted = locks.lock(key, long.wait(ms(20_000))).await;
        (Instant::now(), granted.map(drop))
    });
    let released = Instant::now();
    guard.release().await.expect("a clean release");
    let (granted_at, granted) = waiter.await.expect("the waiter's task");
    granted.expect("granted after the release");
    let handed = granted_at.saturating_duration_since(released);
    eprintln!("{key}: granted in-process {handed:?} after a clean release (delay 60s)");
    assert!(handed < SLACK, "the release handed over in {handed:?}");
}

/// The figure to compare with: without a delay, the lock is granted at the end of the lease.
async fn without_a_delay_the_lock_is_granted_at_the_end_of_the_lease(d: Deployment) {
    let other = d.connect().await;
    let key = "delay:none";
    let asked = Instant::now();
    let guard = d
        .locks
        .lock(key, LockOptions::new().ttl(TTL).watchdog(false))
        .await
        .expect("the lock is free");
    let granted = other
        .lock(key, waiting(LockOptions::new()))
        .await
        .expect("granted at the end of the lease");
    let granted_at = asked.elapsed();
    eprintln!("{key}: no delay, granted to another {granted_at:?} after the acquire began");
    assert!(granted_at >= TTL, "granted before the lease ended");
    drop(granted);
    let _ = guard.release().await;
}

on_backends!(
    [memory, redis, sentinel, cluster, redlock]
    [
        a_lease_lost_without_a_release_is_granted_to_nobody_for_the_delay,
        a_semaphore_permit_lost_without_a_release_is_granted_to_nobody_for_the_delay,
        a_write_hold_lost_without_a_release_is_granted_to_nobody_for_the_delay,
        a_fair_lock_lost_without_a_release_is_granted_to_nobody_for_the_delay,
        a_busy_answer_counts_the_delay,
        a_clean_release_hands_over_at_once,
        a_clean_release_hands_over_at_once_in_the_same_process,
        without_a_delay_the_lock_is_granted_at_the_end_of_the_lease,
    ]
);

/// A holder that renews, then is cut off from the store (its renewals are lost in a partition,
/// as for a paused process): its lost-lease signal fires at the end of its lease, and another
/// manager is granted the lock no sooner than the delay after that, and soon after.
async fn cut_off(holder_url: &str, other: &LockManager, proxy: &FaultProxy, delay: Duration) {
    let holder = LockManager::connect(holder_url)
        .await
        .expect("connect through the proxy");
    let key = "delay:cut-off";
    let options = LockOptions::new().ttl(TTL).lock_delay(delay);
    let guard = holder.lock(key, options).await.expect("the lock is free");
    assert!(renewed(|| guard.remaining()).await, "the holder renews");
    // Read before the cut: the store's lease ends no sooner than this, and a renewal that
    // lands after the read only moves that end later.
    let lease_end = Instant::now() + guard.remaining();
    proxy.blackhole(true);
    let waiter = other.clone();
    let waiting = tokio::spawn(async move {
        let granted = waiter.lock(key, LockOptions::new().wait(ms(30_000))).await;
        (Instant::now(), granted.map(drop))
    });
    tokio::time::timeout(TTL + SLACK, guard.lost())
        .await
        .expect("the holder's lease ends at its ttl");
    let lost_at = Instant::now();
    let (granted_at, granted) = waiting.await.expect("the waiter's task");
    granted.expect("granted once the lease and its delay are over");
    let lost = lost_at.saturating_duration_since(lease_end);
    let gap = granted_at.saturating_duration_since(lease_end);
    eprintln!(
        "cut off, delay {delay:?}: lost-lease signal {lost:?} after the lease's end, granted to \
         another {gap:?} after it"
    );
    assert!(
        lost < delay.max(TTL),
        "the lost-lease signal follows the ttl: {lost:?}"
    );
    assert!(
        granted_at >= lease_end + delay,
        "granted {gap:?} after the holder's lease ended, within its delay"
    );
    assert!(gap < delay + SLACK, "granted only {gap:?} after the lease");
    proxy.blackhole(false);
    drop(guard);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_holder_cut_off_keeps_the_lock_from_others_for_the_delay() {
    let server = tokio::task::spawn_blocking(RedisServer::start)
        .await
        .expect("server start");
    let proxy = FaultProxy::start(server.addr());
    let other = connect(&server).await;
    cut_off(&proxy.url(), &other, &proxy, DELAY).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_delay_a_redis_holder_cut_off_loses_the_lock_at_the_end_of_its_lease() {
    let server = tokio::task::spawn_blocking(RedisServer::start)
        .await
        .expect("server start");
    let proxy = FaultProxy::start(server.addr());
    let other = connect(&server).await;
    cut_off(&proxy.url(), &other, &proxy, Duration::ZERO).await;
}

async fn postgres() -> (PostgresServer, FaultProxy, LockManager) {
    let server = tokio::task::spawn_blocking(PostgresServer::start)
        .await
        .expect("server start");
    let proxy = FaultProxy::start(server.addr());
    let other = LockManager::connect(&server.url()).await.expect("connect");
    (server, proxy, other)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_holder_cut_off_keeps_the_lock_from_others_for_the_delay() {
    let (_server, proxy, other) = postgres().await;
    cut_off(&PostgresServer::url_at(proxy.addr()), &other, &proxy, DELAY).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_delay_a_postgres_holder_cut_off_loses_the_lock_at_the_end_of_its_lease() {
    let (_server, proxy, other) = postgres().await;
    let holder_url = PostgresServer::url_at(proxy.addr());
    cut_off(&holder_url, &other, &proxy, Duration::ZERO).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_postgres_a_lease_lost_without_a_release_is_granted_to_nobody_for_the_delay() {
    let (server, _proxy, other) = postgres().await;
    let holder = LockManager::connect(&server.url()).await.expect("connect");
    held_past_the_lease_for_the_delay(&holder, &other, "delay:lock", LockOptions::new()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_postgres_a_clean_release_hands_over_at_once() {
    let (server, _proxy, other) = postgres().await;
    let holder = LockManager::connect(&server.url()).await.expect("connect");
    let key = "delay:release";
    let long = LockOptions::new()
        .ttl(Duration::from_secs(30))
        .lock_delay(Duration::from_secs(60));
    let guard = holder.lock(key, long).await.expect("the lock is free");
    let waiter = tokio::spawn(async move {
        let granted = other.lock(key, LockOptions::new().wait(ms(20_000))).await;
        (Instant::now(), granted.map(drop))
    });
    let released = Instant::now();
    guard.release().await.expect("a clean release");
    let (granted_at, granted) = waiter.await.expect("the waiter's task");
    granted.expect("granted after the release");
    let handed = granted_at.saturating_duration_since(released);
    eprintln!("postgres {key}: granted {handed:?} after a clean release (delay 60s)");
    assert!(handed < SLACK, "the release handed over in {handed:?}");
}

/// A delay that with the ttl passes the longest lease is refused, naming both.
#[tokio::test]
async fn a_delay_past_the_longest_lease_is_refused() {
    let locks = LockManager::memory();
    let options = LockOptions::new().lock_delay(lock_runtime::MAX_TTL);
    match locks.lock("delay:too-long", options).await {
        Err(LockError::Config(message)) => {
            assert!(message.contains("lock_delay"), "{message}");
        }
        other => panic!("not refused: {other:?}"),
    }
}

/// The test kit's scripted expiry of a lease with a delay keeps the lock from everyone for the
/// delay, as a real expiry does; a scripted loss to another owner frees it at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_test_kit_keeps_a_lock_it_expires_for_its_delay() {
    let kit = TestLocks::new();
    let other = kit.instance();
    let options = LockOptions::new()
        .ttl(Duration::from_secs(30))
        .lock_delay(DELAY);
    let guard = kit
        .manager()
        .lock("kit:expired", options)
        .await
        .expect("free");
    let lost = Instant::now();
    assert_eq!(
        kit.on("kit:expired")
            .lose_lease_now(LostReason::Expired)
            .await,
        1
    );
    assert_eq!(guard.lost().await, LostReason::Expired);
    let granted = other
        .lock("kit:expired", waiting(LockOptions::new()))
        .await
        .expect("granted once the delay is over");
    let after = lost.elapsed();
    eprintln!("kit: granted {after:?} after a scripted expiry (delay {DELAY:?})");
    assert!(after >= DELAY, "granted {after:?} after the expiry");
    assert!(
        after < DELAY + SLACK,
        "granted only {after:?} after the expiry"
    );
    drop(granted);

    let guard = kit
        .manager()
        .lock("kit:stolen", options)
        .await
        .expect("free");
    kit.on("kit:stolen")
        .lose_lease_now(LostReason::NotOwner)
        .await;
    assert_eq!(guard.lost().await, LostReason::NotOwner);
    let taken = other
        .lock("kit:stolen", LockOptions::new())
        .await
        .expect("free at once after a loss to another owner");
    drop(taken);
}

/// A waiter in the holder's own process, told to watch the holder's lease, asks again when the
/// lease ends and then waits out the delay the busy answer gives: a few requests, no spinning.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_in_the_holders_process_waits_out_the_delay_without_spinning() {
    let kit = TestLocks::new();
    let key = "kit:same-process";
    let asked = Instant::now();
    let guard = kit
        .manager()
        .lock(key, stalled(LockOptions::new()))
        .await
        .expect("free");
    let locks = kit.manager();
    let granted = tokio::spawn(async move { locks.lock(key, waiting(LockOptions::new())).await })
        .await
        .expect("the waiter's task")
        .expect("granted once the delay is over");
    let after = asked.elapsed();
    let busy = kit
        .history()
        .iter()
        .filter(|event| matches!(event, Event::Busy { key: busy, .. } if busy == key))
        .count();
    eprintln!("{key}: granted {after:?} after the holder's acquire began, {busy} busy answers");
    assert!(
        after >= TTL + DELAY,
        "granted {after:?} after the acquire began"
    );
    assert!(busy <= 4, "{busy} busy answers:\n{}", kit.shown_history());
    drop(granted);
    drop(guard);
}

/// A printer cannot check a fencing token: after a lease lost without a release, nobody
/// prints for the delay.
#[distributed_lock(
    key = "printer:<id>",
    ttl = "1s",
    lock_delay = "3s",
    watchdog = false,
    on_lease_lost = "continue",
    manager = locks
)]
async fn print(locks: &LockManager, other: &LockManager, id: u64) -> Result<(), LockError> {
    let lock = current().expect("inside a locked section");
    lock.lost().await;
    // Stalled past its lease: the printer is still not anyone else's.
    match other
        .lock(format!("printer:{id}"), LockOptions::new())
        .await
    {
        Err(LockError::Busy { retry_after, .. }) => {
            assert!(retry_after.is_some_and(|left| !left.is_zero()));
            Ok(())
        }
        taken => panic!("the printer was granted within the delay: {taken:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_attributes_lock_delay_keeps_a_lost_lock_from_others() {
    let d = Deployment::memory().await;
    let other = d.connect().await;
    print(&d.locks, &other, 7).await.expect("printed");
}

/// The manager's default lock-delay applies to the calls that set none, and a call's own
/// (here none at all) wins over it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_managers_lock_delay_applies_to_calls_that_set_none() {
    let server = tokio::task::spawn_blocking(RedisServer::start)
        .await
        .expect("server start");
    let holder = LockManager::builder()
        .url(server.url())
        .lock_delay(DELAY)
        .build()
        .await
        .expect("connect");
    let other = connect(&server).await;
    let unset = LockOptions::new().ttl(TTL).watchdog(false);
    let guard = holder.lock("delay:default", unset).await.expect("free");
    guard.lost().await;
    assert!(
        other
            .lock("delay:default", LockOptions::new())
            .await
            .is_err(),
        "granted within the manager's delay"
    );
    drop(guard);
    let guard = holder
        .lock("delay:overridden", unset.lock_delay(Duration::ZERO))
        .await
        .expect("free");
    guard.lost().await;
    let lost = Instant::now();
    let taken = other
        .lock("delay:overridden", waiting(LockOptions::new()))
        .await
        .expect("granted at the end of the lease");
    assert!(
        lost.elapsed() < DELAY,
        "kept {:?} past the lease",
        lost.elapsed()
    );
    drop(taken);
}

/// What `lockctl show` reads: during the delay the lock is still shown held, its lease the
/// time left until it can be granted.
async fn inspection_shows_the_lock_held_for_its_delay(d: Deployment) {
    let key = "delay:shown";
    let guard = d
        .locks
        .lock(key, stalled(LockOptions::new()))
        .await
        .expect("free");
    guard.lost().await;
    let inspect = d.locks.inspect().expect("the store can be inspected");
    let shown = inspect.show("lock:", key).await.expect("show");
    eprintln!(
        "{key}: shown after the lease was lost: {:?}",
        shown[0].lease_ms
    );
    assert!(
        shown
            .iter()
            .any(|lock| lock.state == LockState::Held
                && lock.lease_ms.is_some_and(|left| left > 0)),
        "{shown:?}"
    );
    drop(guard);
}

on_backends!(mod shown; [memory, redis, cluster] [
    inspection_shows_the_lock_held_for_its_delay,
]);
