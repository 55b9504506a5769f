//! A master behind Sentinel: locks work through it and keep working across a failover.

use std::time::{Duration, Instant};

use lock_tests::SentinelSetup;
use lock_tests::prelude::*;

/// Bounds a handover that the release notification makes take milliseconds, against a lease of
/// 30 s that a waiter not told would sleep on: generous for a loaded machine, far from the lease.
const NOTIFIED: Duration = Duration::from_secs(5);

async fn manager(setup: &SentinelSetup) -> LockManager {
    LockManager::builder()
        .url(setup.url())
        .request_timeout(Duration::from_secs(2))
        .build()
        .await
        .unwrap_or_else(|err| panic!("connect: {err}\n{}", setup.log()))
}

/// Whether the lock stored at `stored` on `node` is marked as awaited: someone was told it is
/// busy since it was taken, so its release announces itself.
fn awaited(node: &RedisServer, stored: &str) -> bool {
    node.stored_lock(stored).is_some_and(|lock| lock.waiting)
}

/// The connections to `node` that are neither a sentinel's, nor a replica's, nor this probe:
/// the manager's, each as its client port and the last command it sent.
fn manager_connections(node: &RedisServer) -> Vec<(u16, String)> {
    node.cmd(&["CLIENT", "LIST"])
        .lines()
        .filter(|client| {
            !client.contains(" name=sentinel-")
                && !client.contains(" cmd=client|list ")
                && !client.contains(" flags=S ")
                && !client.contains(" flags=M ")
        })
        .filter_map(|client| {
            let field = |name: &str| {
                client
                    .split(' ')
                    .find_map(|field| field.strip_prefix(name))
                    .map(str::to_owned)
            };
            let port = field("addr=")?.rsplit_once(':')?.1.parse().ok()?;
            Some((port, field("cmd=")?))
        })
        .collect()
}

/// Whether the manager has switched to `node`: it connected there and finished its checks of
/// a new server, whose last is a `PUBLISH` to the permission probe's channel.
fn followed_to(node: &RedisServer) -> bool {
    manager_connections(node)
        .iter()
        .any(|(_, command)| command == "publish")
}

/// Whether one of the connections from `clients` (client ports) to `node` has bytes that `node`
/// has not read: a request sent to a paused server, waiting in its socket.
fn unread_from(node: &RedisServer, clients: &[u16]) -> bool {
    let port = |address: &str| {
        let hex = address.rsplit_once(':')?.1;
        u16::from_str_radix(hex, 16).ok()
    };
    let table = std::fs::read_to_string("/proc/net/tcp").expect("/proc/net/tcp");
    table.lines().skip(1).any(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let (Some(local), Some(remote), Some(queues)) =
            (fields.get(1), fields.get(2), fields.get(4))
        else {
            return false;
        };
        let unread = queues
            .split_once(':')
            .and_then(|(_, rx)| u64::from_str_radix(rx, 16).ok())
            .unwrap_or(0);
        port(local) == Some(node.port())
            && port(remote).is_some_and(|client| clients.contains(&client))
            && unread > 0
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_work_through_sentinel_and_waiters_are_woken_by_release() {
    let setup = SentinelSetup::start(1, 3);
    let locks = manager(&setup).await;
    assert!(
        locks.backend().starts_with("redis sentinel"),
        "{}",
        locks.backend()
    );
    let guard = locks.lock("k", LockOptions::new()).await.expect("free");
    assert!(
        locks
            .lock("k", LockOptions::new())
            .await
            .expect_err("held")
            .is_busy()
    );
    // Another manager, as another process would: it asks the server, which marks the lock as
    // awaited, and sleeps until the release announces itself.
    let waiter_locks = manager(&setup).await;
    let waiter = tokio::spawn(async move {
        let guard = waiter_locks
            .lock("k", LockOptions::new().wait(PATIENCE))
            .await?;
        let entered = Instant::now();
        guard.release().await?;
        Ok::<_, LockError>(entered)
    });
    assert!(
        wait_until_async(PATIENCE, || awaited(setup.master(), "lock:{k}")).await,
        "the waiter never asked\n{}",
        setup.log()
    );
    let released = Instant::now();
    guard.release().await.expect("release");
    let entered = waiter.await.expect("task").expect("waiter");
    let handover = entered.duration_since(released);
    assert!(handover < NOTIFIED, "{handover:?}\n{}", setup.log());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failover_during_a_hold_is_survived_or_reported_and_locking_works_after_it() {
    let setup = SentinelSetup::start(1, 3);
    let locks = manager(&setup).await;
    let ttl = Duration::from_secs(2);
    let guard = locks
        .lock("held", LockOptions::new().ttl(ttl))
        .await
        .expect("free");
    let fence = guard.fencing_token();
    let old_master = setup.master().addr();
    tokio::task::block_in_place(|| setup.kill_master_and_wait_failover());
    assert_ne!(setup.current_master_addr(), old_master);
    let failed_over = Instant::now();

    // Within one lease after the failover the holder either renewed on the promoted replica
    // (held past its lease) or was told it lost.
    let settled = wait_until_async(PATIENCE, || {
        !guard.is_held() || failed_over.elapsed() > ttl + ttl / 2
    })
    .await;
    assert!(settled);
    let other = locks
        .clone()
        .lock("held", LockOptions::new().wait(ms(10_000)))
        .await;
    match other {
        Ok(other) => {
            // Someone else got it: the first holder must have been told first.
            assert!(
                !guard.is_held(),
                "two holders after the failover\n{}",
                setup.log()
            );
            assert!(other.fencing_token() > fence);
            other.release().await.expect("release on the new master");
        }
        Err(err) => {
            assert!(err.is_busy(), "{err}\n{}", setup.log());
            assert!(guard.is_held(), "busy, so the first holder still has it");
        }
    }
    drop(guard);
    let again = locks
        .lock("after", LockOptions::new().wait(Duration::from_secs(10)))
        .await
        .unwrap_or_else(|err| panic!("{err}\n{}", setup.log()));
    again.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_waiting_through_a_failover_gets_the_lock() {
    let setup = SentinelSetup::start(1, 3);
    let locks = manager(&setup).await;
    let holder = locks
        .lock("queue", LockOptions::new().ttl(Duration::from_secs(2)))
        .await
        .expect("free");
    // Another manager, as another process would: the server marks the lock as awaited.
    let waiter_locks = manager(&setup).await;
    let waiter = tokio::spawn(async move {
        let guard = waiter_locks
            .lock("queue", LockOptions::new().wait(Duration::from_secs(40)))
            .await?;
        guard.release().await
    });
    assert!(
        wait_until_async(PATIENCE, || awaited(setup.master(), "lock:{queue}")).await,
        "the waiter never asked\n{}",
        setup.log()
    );
    tokio::task::block_in_place(|| setup.kill_master_and_wait_failover());
    // The holder finishes after the failover; its lease may or may not have survived it.
    let _ = holder.release().await;
    waiter
        .await
        .expect("task")
        .unwrap_or_else(|err| panic!("{err}\n{}", setup.log()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_builder_names_sentinels_and_master_without_a_url() {
    let setup = SentinelSetup::start(0, 1);
    let sentinels: Vec<String> = setup
        .sentinels()
        .iter()
        .map(|s| s.addr().to_string())
        .collect();
    let locks = LockManager::builder()
        .sentinel(&sentinels, setup.master_name())
        .build()
        .await
        .unwrap_or_else(|err| panic!("connect: {err}\n{}", setup.log()));
    let guard = locks.lock("k", LockOptions::new()).await.expect("free");
    assert!(setup.master().holds_lock("lock:{k}"));
    guard.release().await.expect("release");
}

/// A master paused through a failover still believes it is the master when it comes back, until
/// the sentinels demote it; locks granted there in the meantime are lost when they do. A client
/// that sent nothing during the failover hears of it from the sentinels' `+switch-master` and
/// takes its next lock on the new master, not the old one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_client_follows_an_announced_failover_before_the_old_master_is_demoted() {
    let setup = SentinelSetup::start(1, 3);
    let locks = manager(&setup).await;
    let before = locks
        .lock("before", LockOptions::new())
        .await
        .expect("lock");
    before.release().await.expect("release");
    let node_at = |addr| {
        setup
            .nodes()
            .iter()
            .find(|node| node.addr() == addr)
            .expect("a data node of the setup")
    };
    let old = node_at(setup.current_master_addr());
    let new = tokio::task::block_in_place(|| setup.pause_master_and_wait_failover());
    assert_ne!(new.addr(), old.addr(), "{}", setup.log());
    // The announcement is published as the replica is promoted: the client connects to it.
    assert!(
        wait_until_async(PATIENCE, || followed_to(new)).await,
        "the client never followed the announcement\n{}",
        setup.log()
    );
    old.resume();
    let after = locks.lock("after", LockOptions::new()).await.expect("lock");
    let exists = |node: &lock_tests::RedisServer| node.holds_lock("lock:{after}");
    assert!(
        exists(new),
        "the lock is on the new master\n{}",
        setup.log()
    );
    assert!(!exists(old), "nothing was granted by the old one");
    after.release().await.expect("release");
}

/// A paused master that resumes serves the requests queued while it was stopped before it
/// learns that it was replaced, while the promoted replica grants the same lock to others. A
/// grant it sends to a client that has followed the failover meanwhile is given back, and the
/// client takes the lock on the new master instead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_from_a_master_replaced_while_the_request_was_out_is_not_trusted() {
    let setup = SentinelSetup::start(1, 3);
    // Longer than the failover: the acquire waits at the paused master for its answer.
    let locks = LockManager::builder()
        .url(setup.url())
        .request_timeout(Duration::from_secs(20))
        .build()
        .await
        .unwrap_or_else(|err| panic!("connect: {err}\n{}", setup.log()));
    let before = locks
        .lock("before", LockOptions::new())
        .await
        .expect("lock");
    before.release().await.expect("release");
    let old_addr = setup.current_master_addr();
    let old = setup
        .nodes()
        .iter()
        .find(|node| node.addr() == old_addr)
        .expect("a data node of the setup");
    let own: Vec<u16> = manager_connections(old)
        .into_iter()
        .map(|(port, _)| port)
        .collect();
    assert!(!own.is_empty(), "{}", setup.log());
    old.pause();
    let taker = locks.clone();
    let acquire = tokio::spawn(async move {
        let options = LockOptions::new()
            .ttl(Duration::from_secs(30))
            .wait(Duration::from_secs(30));
        taker.lock("queued", options).await
    });
    // The acquire is sent, and waits unread in the paused master's socket.
    assert!(
        wait_until_async(PATIENCE, || unread_from(old, &own)).await,
        "the acquire never reached the paused master\n{}",
        setup.log()
    );
    let new = tokio::task::block_in_place(|| setup.wait_replaced(old));
    // The client hears the sentinels' `+switch-master` and follows.
    assert!(
        wait_until_async(PATIENCE, || followed_to(new)).await,
        "the client never followed the announcement\n{}",
        setup.log()
    );
    assert!(!acquire.is_finished(), "answered by a paused master");
    old.resume();
    let guard = acquire
        .await
        .expect("task")
        .unwrap_or_else(|err| panic!("lock: {err}\n{}", setup.log()));
    assert!(
        new.holds_lock("lock:{queued}"),
        "the lock is on the new master, not only on the replaced one\n{}",
        setup.log()
    );
    guard.release().await.expect("release");
}

/// Fair waiters of two managers get the lock in the order they came, through Sentinel.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fair_waiters_get_the_lock_in_the_order_they_came() {
    let setup = SentinelSetup::start(1, 3);
    let a = manager(&setup).await;
    let b = manager(&setup).await;
    let line = || {
        let queue = setup.master().cmd(&["ZCARD", "lock:{turns}:queue"]);
        queue.parse().ok()
    };
    lock_tests::fair::served_in_the_order_they_came_in_line(&a, &b, "turns", line).await;
}

/// Every sentinel announces a failover, and each announcement makes the client ask the
/// sentinels again: the three answers, coming together, must switch the client once. A second
/// switch to the same new master replaced the master the first had just connected to, and a
/// request sent there in between failed as "answered by an old master". Nor may the answers
/// that name the master the client already switched to connect to it again.
#[test]
fn the_announcements_of_one_failover_switch_the_client_once() {
    let setup = SentinelSetup::start(1, 3);
    let logged = lock_tests::logs::Logged::default();
    // One thread: the announcement listeners run where the capture is.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let _capture = logged.capture(lock_tests::logs::Level::WARN);
    runtime.block_on(async {
        let locks = manager(&setup).await;
        let before = locks
            .lock("before", LockOptions::new())
            .await
            .expect("lock");
        before.release().await.expect("release");
        // Blocks the only thread: the three announcements wait in their listeners' connections
        // and are read together once it returns.
        let new = setup.pause_master_and_wait_failover();
        // Still before the client heard of the failover: from now on the new master logs every
        // command it serves, with its arguments.
        let logs_every_command = new.cmd(&["CONFIG", "SET", "slowlog-log-slower-than", "0"]);
        assert_eq!(logs_every_command, "OK");
        new.cmd(&["CONFIG", "SET", "slowlog-max-len", "100000"]);
        new.cmd(&["SLOWLOG", "RESET"]);
        assert!(
            wait_until_async(PATIENCE, || followed_to(new)).await,
            "the client never followed the announcement\n{}",
            setup.log()
        );
        // Each listener's refresh has asked the sentinels and finished once the client takes a
        // lock three times in a row on the new master without an error.
        for round in 0..3 {
            let guard = locks
                .lock("after", LockOptions::new().wait(Duration::from_secs(5)))
                .await
                .unwrap_or_else(|err| panic!("round {round}: {err}\n{}", setup.log()));
            guard.release().await.expect("release");
        }
        let follows = logged.text().matches("follows a failover").count();
        assert_eq!(follows, 1, "{}", logged.text());
        // A connection checks a new server last by publishing to the permission probe's
        // channel: one such publish per connect.
        let served = new.cmd(&["SLOWLOG", "GET", "100000"]);
        let connects = served.matches("lock-runtime:permission-probe").count();
        assert_eq!(
            connects, 1,
            "connected to the new master {connects} times\n{served}"
        );
    });
}
