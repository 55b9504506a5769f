//! Waiting for replica acknowledgements after an acquire (`wait_for_replicas`).

use std::time::Duration;

use lock_tests::prelude::*;

/// A master with one replica in sync.
fn master_and_replica() -> (RedisServer, RedisServer) {
    let master = RedisServer::start();
    let port = master.port().to_string();
    let replica = RedisServer::start_with(&["--replicaof", "127.0.0.1", &port]);
    let synced = wait_until(PATIENCE, || {
        replica
            .cmd(&["INFO", "replication"])
            .contains("master_link_status:up")
    });
    assert!(
        synced,
        "replica never synced\n{}\n{}",
        master.log(),
        replica.log()
    );
    (master, replica)
}

async fn manager(master: &RedisServer) -> LockManager {
    LockManager::builder()
        .url(master.url())
        .wait_for_replicas(1, ms(500))
        .build()
        .await
        .unwrap_or_else(|err| panic!("{err}\n{}", master.log()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acknowledged_lock_is_on_the_replica_when_acquire_returns() {
    let (master, replica) = master_and_replica();
    let locks = manager(&master).await;
    // A replica slow to acknowledge on a loaded machine costs a retry, within the wait.
    let guard = locks
        .lock("acked", LockOptions::new().wait(PATIENCE))
        .await
        .unwrap_or_else(|err| panic!("{err}\n{}", master.log()));
    assert!(replica.holds_lock("lock:{acked}"), "{}", replica.log());
    guard.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_replica_paused_acquire_fails_cleanly_and_leaves_no_lock() {
    let (master, replica) = master_and_replica();
    let locks = manager(&master).await;
    replica.pause();
    let ran = std::sync::atomic::AtomicBool::new(false);
    let result = locks
        .run_locked("unacked".into(), LockOptions::new(), async {
            ran.store(true, std::sync::atomic::Ordering::SeqCst);
            Ok::<_, LockError>(())
        })
        .await;
    replica.resume();
    let err = result.expect_err("no replica acknowledged");
    assert!(matches!(err, LockError::Backend { .. }), "{err}");
    assert!(err.to_string().contains("replicas acknowledged"), "{err}");
    assert!(!ran.load(std::sync::atomic::Ordering::SeqCst));
    assert!(!master.holds_lock("lock:{unacked}"), "{}", master.log());
}

/// A permit and a read share are acknowledged as a lock is; with the replica paused, neither is
/// taken and nothing of them is left on the master.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permits_and_shares_wait_for_replicas_too() {
    let (master, replica) = master_and_replica();
    let locks = manager(&master).await;
    let permit = locks
        .semaphore("pool", 2, LockOptions::new().wait(PATIENCE))
        .await
        .unwrap_or_else(|err| panic!("{err}\n{}", master.log()));
    let share = locks
        .read_lock("doc", LockOptions::new().wait(PATIENCE))
        .await
        .unwrap_or_else(|err| panic!("{err}\n{}", master.log()));
    assert_eq!(
        replica.cmd(&["ZCARD", "lock:{pool}:sem"]),
        "1",
        "{}",
        replica.log()
    );
    assert_eq!(
        replica.cmd(&["ZCARD", "lock:{doc}:rw:readers"]),
        "1",
        "{}",
        replica.log()
    );
    permit.release().await.expect("release");
    share.release().await.expect("release");

    replica.pause();
    let permit = locks.semaphore("unacked", 2, LockOptions::new()).await;
    let writer = locks.write_lock("unacked", LockOptions::new()).await;
    replica.resume();
    for (what, err) in [
        (
            "permit",
            permit.map(drop).expect_err("no replica acknowledged"),
        ),
        (
            "write",
            writer.map(drop).expect_err("no replica acknowledged"),
        ),
    ] {
        assert!(
            err.to_string().contains("replicas acknowledged"),
            "{what}: {err}"
        );
    }
    assert_eq!(
        master.cmd(&["EXISTS", "lock:{unacked}:sem"]),
        "0",
        "{}",
        master.log()
    );
    assert_eq!(
        master.cmd(&["EXISTS", "lock:{unacked}:rw:writer"]),
        "0",
        "{}",
        master.log()
    );
}

/// Whether a client of `master` is blocked in `WAIT` now.
fn blocked_in_wait(master: &RedisServer) -> bool {
    master
        .cmd(&["CLIENT", "LIST"])
        .lines()
        .any(|client| client.contains(" cmd=wait ") && client.contains(" flags=b "))
}

/// `WAIT` blocks the connection it is sent on: a lock waiting for a paused replica must not hold
/// up the renewals of locks that are already held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acquire_waiting_for_replicas_does_not_starve_renewals_of_other_locks() {
    let (master, replica) = master_and_replica();
    let locks = LockManager::builder()
        .url(master.url())
        .wait_for_replicas(1, Duration::from_secs(30))
        .build()
        .await
        .unwrap_or_else(|err| panic!("{err}\n{}", master.log()));
    // Its `WAIT` is capped at half its lease: a replica slow to acknowledge on a loaded machine
    // costs a retry within the wait budget, not the test.
    let ttl = Duration::from_secs(2);
    let held = locks
        .lock("healthy", LockOptions::new().ttl(ttl).wait(PATIENCE))
        .await
        .unwrap_or_else(|err| panic!("{err}\n{}", master.log()));
    replica.pause();
    // Granted, then blocked in WAIT for up to 30 s (half its lease), far longer than `healthy`
    // can live without renewals.
    let waiting = tokio::spawn({
        let locks = locks.clone();
        async move {
            locks
                .lock("unacked", LockOptions::new().ttl(Duration::from_secs(60)))
                .await
        }
    });
    let blocked = wait_until_async(PATIENCE, || blocked_in_wait(&master)).await;
    assert!(blocked, "the acquire never reached WAIT\n{}", master.log());
    let blocked_at = tokio::time::Instant::now();
    // Three of `healthy`'s leases pass while the other acquire stays blocked: only renewals
    // sent beside the blocked connection keep it on the server that long.
    let outlived = wait_until_async(PATIENCE, || {
        blocked_at.elapsed() > 3 * ttl || !held.is_held() || !master.holds_lock("lock:{healthy}")
    })
    .await;
    assert!(outlived);
    assert!(
        held.is_held() && master.holds_lock("lock:{healthy}"),
        "renewals queued behind WAIT: lost {:?} after the other acquire blocked\n{}",
        blocked_at.elapsed(),
        master.log()
    );
    assert!(
        blocked_in_wait(&master) && !waiting.is_finished(),
        "the other acquire was no longer blocked in WAIT: nothing was shown\n{}",
        master.log()
    );
    replica.resume();
    let acked = waiting
        .await
        .expect("task")
        .unwrap_or_else(|err| panic!("acknowledged once resumed: {err}\n{}", master.log()));
    assert!(replica.holds_lock("lock:{unacked}"), "{}", replica.log());
    acked.release().await.expect("release");
    held.release().await.expect("release");
}

/// A busy lock is answered at once: `WAIT` follows only a grant.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_answer_does_not_wait_for_replicas() {
    let (master, replica) = master_and_replica();
    // A `WAIT` would block a busy answer for 15 s (half the default lease).
    let locks = LockManager::builder()
        .url(master.url())
        .wait_for_replicas(1, Duration::from_secs(30))
        .build()
        .await
        .unwrap_or_else(|err| panic!("{err}\n{}", master.log()));
    let held = locks
        .lock("taken", LockOptions::new().wait(PATIENCE))
        .await
        .unwrap_or_else(|err| panic!("{err}\n{}", master.log()));
    replica.pause();
    let other = tokio::spawn({
        let locks = locks.clone();
        async move {
            let started = tokio::time::Instant::now();
            let err = locks
                .lock("taken", LockOptions::new())
                .await
                .expect_err("busy");
            (err, started.elapsed())
        }
    });
    let (err, took) = other.await.expect("task");
    replica.resume();
    assert!(err.is_busy(), "{err}");
    assert!(
        took < Duration::from_secs(5),
        "busy took {took:?}: it waited for replicas"
    );
    held.release().await.expect("release");
}

/// Too few acknowledgements is transient: within its wait budget the acquire tries again and
/// succeeds once the replica is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_back_within_the_wait_budget_lets_the_acquire_succeed() {
    let (master, replica) = master_and_replica();
    let locks = LockManager::builder()
        .url(master.url())
        .wait_for_replicas(1, ms(200))
        .build()
        .await
        .unwrap_or_else(|err| panic!("{err}\n{}", master.log()));
    replica.pause();
    master.cmd(&["CONFIG", "RESETSTAT"]);
    let acquire = tokio::spawn({
        let locks = locks.clone();
        async move {
            locks
                .lock("retried", LockOptions::new().wait(PATIENCE))
                .await
        }
    });
    // A second `WAIT` means the first one came back short and the acquire tried again.
    let waits = || {
        master
            .command_calls()
            .iter()
            .find(|(command, _)| command == "wait")
            .map_or(0, |&(_, calls)| calls)
    };
    let retried = wait_until_async(PATIENCE, || waits() >= 2).await;
    assert!(retried, "no second WAIT\n{}", master.log());
    replica.resume();
    let guard = acquire
        .await
        .expect("task")
        .unwrap_or_else(|err| panic!("{err}\n{}", master.log()));
    assert!(replica.holds_lock("lock:{retried}"));
    guard.release().await.expect("release");
}

/// After a failover the new master has no replicas yet: by default locks are refused, and with
/// `ReplicaShortage::UseConnected` they are taken with what is connected.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_no_replica_connected_the_shortage_policy_decides() {
    let lonely = RedisServer::start();
    let strict = LockManager::builder()
        .url(lonely.url())
        .wait_for_replicas(1, ms(100))
        .build()
        .await
        .unwrap_or_else(|err| panic!("{err}\n{}", lonely.log()));
    let err = strict
        .lock("k", LockOptions::new().wait(ms(300)))
        .await
        .expect_err("no replica to acknowledge");
    assert!(err.to_string().contains("0 of 1 replicas"), "{err}");
    assert!(!lonely.holds_lock("lock:{k}"), "the grant was given back");
    let lenient = LockManager::builder()
        .url(lonely.url())
        .wait_for_replicas(1, ms(100))
        .replica_shortage(lock_runtime::ReplicaShortage::UseConnected)
        .build()
        .await
        .unwrap_or_else(|err| panic!("{err}\n{}", lonely.log()));
    let guard = lenient
        .lock("k", LockOptions::new())
        .await
        .expect("taken with 0 connected");
    guard.release().await.expect("release");
}

/// An idle connection acquires wait on, closed by the server meanwhile (its `timeout`, a
/// restart), costs the next acquire nothing: it goes out on a fresh one, as on a Cluster, whose
/// client reconnects its nodes itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_wait_connection_the_server_closed_does_not_fail_the_next_acquire() {
    let (master, _replica) = master_and_replica();
    let locks = manager(&master).await;
    let warm = locks
        .lock("idle", LockOptions::new().wait(PATIENCE))
        .await
        .unwrap_or_else(|err| panic!("{err}\n{}", master.log()));
    warm.release().await.expect("release");
    master.cmd(&["CLIENT", "KILL", "TYPE", "normal"]);
    // Tried once: a failed attempt would not be retried.
    let guard = locks
        .lock("idle", LockOptions::new())
        .await
        .unwrap_or_else(|err| panic!("{err}\n{}", master.log()));
    guard.release().await.expect("release");
}

#[tokio::test]
async fn replica_settings_that_cannot_work_are_refused_at_build() {
    for (url, timeout) in [
        ("redis://127.0.0.1:1", Duration::ZERO),
        ("redis://127.0.0.1:1", Duration::MAX),
        ("redlock://127.0.0.1:1,127.0.0.1:2,127.0.0.1:3", ms(100)),
    ] {
        let err = LockManager::builder()
            .url(url)
            .wait_for_replicas(1, timeout)
            .build()
            .await
            .expect_err(url);
        assert!(
            matches!(err, LockError::Config(_)),
            "{url} {timeout:?}: {err}"
        );
    }
}
