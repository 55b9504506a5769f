//! A manager outlives the runtime that made it: `#[tokio::test]` builds a runtime per test and
//! the global default is set once per process; other programs run several runtimes. Used from a
//! later runtime, it works on the first request, waiters are woken by releases, and on Sentinel
//! a failover is followed; pinned to a runtime of its own, it keeps renewing a lock held on one
//! runtime while another shuts down.
//!
//! The tests build their runtimes themselves (plain `#[test]`), to shut one down in the middle.

use std::time::Duration;

use lock_runtime::Deadlock;
use lock_tests::SentinelSetup;
use lock_tests::prelude::*;
use tokio::runtime::Runtime;
use tokio::time::Instant;

/// A runtime like the one `#[tokio::test]` builds.
fn test_runtime() -> Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

fn multi_thread_runtime() -> Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

/// Starts every background task a manager has on the current runtime: the connection's driver,
/// the renewal driver (a lease renewed once), the release subscriber (a waiter woken).
/// A manager connected to `url` and used (locks, renewals, waiting) on a runtime that has shut
/// down since.
fn made_on_a_runtime_that_shut_down(url: &str) -> LockManager {
    let first = test_runtime();
    let locks = first.block_on(async {
        let locks = LockManager::connect(url)
            .await
            .unwrap_or_else(|err| panic!("connect to {url}: {err}"));
        use_everything(&locks).await;
        locks
    });
    drop(first);
    locks
}

async fn use_everything(locks: &LockManager) {
    let guard = locks
        .lock("warm-up", LockOptions::new().ttl(Duration::from_secs(1)))
        .await
        .expect("lock");
    assert!(renewed(|| guard.remaining()).await, "never renewed");
    assert!(guard.is_held(), "renewed");
    guard.release().await.expect("release");
    let waited = handover(locks, "warm-up-handover").await;
    assert!(waited < Duration::from_secs(5), "{waited:?}");
}

/// Holds `key` with a 30 s lease, lets another task wait for it, releases it, and returns how
/// long the waiter took to get it after the release: well under the lease only if the release
/// notification reached it.
async fn handover(locks: &LockManager, key: &'static str) -> Duration {
    // A wait rides over a transient failure; what is measured is the waiter.
    let options = LockOptions::new()
        .ttl(Duration::from_secs(30))
        .wait(Duration::from_secs(5));
    let held = locks.lock(key, options).await.expect("holder");
    let waiter = locks.clone();
    let (told, told_busy) = tokio::sync::oneshot::channel();
    let waiting = tokio::spawn(async move {
        // Told the lock is busy first: it was held when the waiter came. A release right after
        // either wakes the waiter or is found by its next request, both long before the lease
        // would have let it in.
        let first = waiter.lock(key, LockOptions::new()).await;
        let _ = told.send(first.as_ref().err().is_some_and(LockError::is_busy));
        drop(first);
        let guard = waiter.lock(key, LockOptions::new().wait(PATIENCE)).await?;
        let entered = Instant::now();
        guard.release().await?;
        Ok::<_, LockError>(entered)
    });
    assert!(
        told_busy.await.expect("the waiter asks"),
        "`{key}` was free"
    );
    let released = Instant::now();
    held.release().await.expect("release");
    let entered = waiting.await.expect("waiter task").expect("waiter");
    entered.saturating_duration_since(released)
}

#[test]
fn a_manager_from_a_runtime_that_shut_down_locks_on_the_first_request_of_the_next() {
    let server = RedisServer::start();
    let locks = made_on_a_runtime_that_shut_down(&server.url());
    let second = test_runtime();
    second.block_on(async {
        // `wait` is zero: a single attempt, which must not meet the dead connection.
        let guard = locks
            .lock("first-try", LockOptions::new())
            .await
            .unwrap_or_else(|err| panic!("first request: {err}\n{}", server.log()));
        guard.release().await.expect("release on the first try too");
        let guard = locks
            .lock("renewed", LockOptions::new().ttl(Duration::from_secs(1)))
            .await
            .expect("lock");
        let again = renewed(|| guard.remaining()).await;
        assert!(again, "the renewal driver runs again\n{}", server.log());
        guard.release().await.expect("release");
    });
}

#[test]
fn a_waiter_on_a_later_runtime_is_woken_by_the_release_not_the_lease() {
    let server = RedisServer::start();
    let locks = made_on_a_runtime_that_shut_down(&server.url());
    for round in 0..2 {
        let next = test_runtime();
        let waited = next.block_on(handover(&locks, "handover"));
        assert!(
            waited < Duration::from_secs(5),
            "runtime {round} after the first: the waiter took {waited:?} after the release\n{}",
            server.log()
        );
    }
}

/// The `+switch-master` listeners die with the runtime that made the manager; the next use
/// from another runtime starts them again, so an idle client still follows an announced
/// failover before the old master is demoted (see `sentinel.rs` for the scenario).
#[test]
fn failover_listeners_come_back_on_a_later_runtime() {
    let setup = SentinelSetup::start(1, 3);
    let first = multi_thread_runtime();
    let locks = first.block_on(async {
        LockManager::builder()
            .url(setup.url())
            .request_timeout(ms(500))
            .build()
            .await
            .unwrap_or_else(|err| panic!("connect: {err}\n{}", setup.log()))
    });
    drop(first);
    let second = multi_thread_runtime();
    second.block_on(async {
        let before = locks
            .lock("before", LockOptions::new().wait(Duration::from_secs(5)))
            .await
            .unwrap_or_else(|err| panic!("lock: {err}\n{}", setup.log()));
        before.release().await.expect("release");
        let old_addr = setup.current_master_addr();
        let old = setup
            .nodes()
            .iter()
            .find(|node| node.addr() == old_addr)
            .expect("a data node of the setup");
        let new = tokio::task::block_in_place(|| setup.pause_master_and_wait_failover());
        assert_ne!(new.addr(), old.addr(), "{}", setup.log());
        // The announcement is published as the replica is promoted: the client connects to it.
        assert!(
            wait_until_async(PATIENCE, || followed_to(new)).await,
            "the client never followed the announcement\n{}",
            setup.log()
        );
        old.resume();
        let after = locks
            .lock("after", LockOptions::new())
            .await
            .unwrap_or_else(|err| panic!("lock: {err}\n{}", setup.log()));
        let exists = |node: &RedisServer| node.holds_lock("lock:{after}");
        assert!(
            exists(new),
            "the lock is on the new master\n{}",
            setup.log()
        );
        assert!(!exists(old), "nothing was granted by the old one");
        after.release().await.expect("release");
    });
}

/// Whether the manager has switched to `node`: it connected there and finished its checks of a
/// new server, whose last is a `PUBLISH` to the permission probe's channel (as in `sentinel.rs`).
fn followed_to(node: &RedisServer) -> bool {
    node.cmd(&["CLIENT", "LIST"]).lines().any(|client| {
        !client.contains(" name=sentinel-")
            && !client.contains(" flags=S ")
            && !client.contains(" flags=M ")
            && client.contains(" cmd=publish ")
    })
}

/// A program with a long-lived runtime and short-lived ones: the manager is made and first used
/// on a short-lived one, but pinned to the long-lived one. A lock taken on a third runtime is
/// still renewed, and its waiters still hear of releases, after the first runtime shut down,
/// without any other use of the manager in between.
#[test]
fn a_manager_pinned_to_a_runtime_keeps_renewing_when_the_runtime_that_used_it_shuts_down() {
    let server = RedisServer::start();
    let io = multi_thread_runtime();
    // Multi-threaded, so that it runs its tasks while idle: a current-thread runtime runs them
    // only inside `block_on`, and a manager unpinned would stall on it even before it is gone.
    let short_lived = multi_thread_runtime();
    let locks = short_lived.block_on(async {
        let locks = LockManager::builder()
            .url(server.url())
            .runtime(io.handle().clone())
            .build()
            .await
            .unwrap_or_else(|err| panic!("connect: {err}\n{}", server.log()));
        use_everything(&locks).await;
        locks
    });
    let (taken, take) = std::sync::mpsc::channel();
    let (dropped, drop_done) = std::sync::mpsc::channel::<()>();
    let holder = {
        let locks = locks.clone();
        std::thread::spawn(move || {
            test_runtime().block_on(async {
                let held = locks
                    .lock("held", LockOptions::new().ttl(Duration::from_secs(1)))
                    .await
                    .expect("lock");
                taken.send(()).expect("main thread");
                // No other use of the manager while the first runtime shuts down.
                tokio::task::spawn_blocking(move || drop_done.recv())
                    .await
                    .expect("join")
                    .expect("main thread");
                // Renewed after the first runtime is gone, and held through more than its ttl.
                let started = Instant::now();
                let mut held_on = true;
                while held_on && started.elapsed() < Duration::from_secs(2) {
                    held_on = renewed(|| held.remaining()).await && held.is_held();
                }
                let released = held.release().await;
                (held_on, released)
            })
        })
    };
    take.recv().expect("holder thread");
    drop(short_lived);
    dropped.send(()).expect("holder thread");
    let (held_on, released) = holder.join().expect("holder thread");
    assert!(
        held_on,
        "renewed on the pinned runtime past two ttls\n{}",
        server.log()
    );
    released.unwrap_or_else(|err| panic!("release: {err}\n{}", server.log()));
    let waited = test_runtime().block_on(handover(&locks, "pinned-handover"));
    assert!(waited < Duration::from_secs(5), "{waited:?}");
    drop(io);
}

#[test]
fn a_memory_manager_works_from_runtime_to_runtime() {
    let locks = made_on_a_runtime_that_shut_down("memory://runtimes");
    let second = test_runtime();
    second.block_on(async {
        let guard = locks.lock("k", LockOptions::new()).await.expect("lock");
        guard.release().await.expect("release");
        let waited = handover(&locks, "memory-handover").await;
        assert!(waited < Duration::from_secs(5), "{waited:?}");
    });
}

/// Two tasks of `locks` take `a` and `b` and then wait for each other's, choosing to give up in
/// a deadlock: how many were told of it (the other then got its second lock).
async fn deadlocks_told(locks: &LockManager, a: &'static str, b: &'static str) -> usize {
    let options = LockOptions::new()
        .ttl(Duration::from_secs(10))
        .wait(Duration::from_secs(30))
        .deadlock(Deadlock::Fail);
    let managers = [locks.clone(), locks.clone()];
    lock_tests::deadlocks::opposite_orders(managers, a, b, options).await
}

/// The deadlock detector runs on the runtime of the call that started it; when that runtime
/// shuts down while it runs, the next wait on a later runtime starts another.
#[test]
fn deadlocks_are_still_found_after_the_runtime_that_followed_them_shut_down() {
    let first = multi_thread_runtime();
    let locks = first.block_on(async {
        let locks = LockManager::connect("memory://runtimes-deadlocks")
            .await
            .expect("memory");
        assert_eq!(deadlocks_told(&locks, "a", "b").await, 1);
        locks
    });
    // The detector still runs for a moment after the last wait ended: it dies here.
    drop(first);
    let second = test_runtime();
    let told = second.block_on(deadlocks_told(&locks, "c", "d"));
    assert_eq!(told, 1, "the deadlock on the later runtime was not found");
}
