//! Locks on a real Redis Cluster (`redis+cluster://`): the basic behaviour on slots spread over
//! three masters, sharded release notifications, renewal batches that span every master, a master
//! frozen under the failure detection (its leases alone are at stake), script reloads, and
//! failover of the master that serves a held lock.
//!
//! The tests that leave the topology alone share one 3-master cluster (each with its own key
//! prefix); a failover test forms its own cluster with one replica per master.

use std::collections::HashSet;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::{Duration, Instant};

use lock_runtime::LostReason;
use lock_tests::prelude::*;
use lock_tests::{free_port, key_slot};

/// Bounds a handover that a release makes take milliseconds, against the 30 s lease a waiter
/// not told would sleep on: generous for a loaded machine, far from the lease.
const NOTIFIED: Duration = Duration::from_secs(5);

/// How many clients of `node` are subscribed to the release channel of `stored` (the stored key
/// itself, in its slot): a waiter subscribes before it sleeps.
fn subscribers(node: &RedisServer, stored: &str) -> u64 {
    let answer = node.cmd(&["PUBSUB", "SHARDNUMSUB", stored]);
    answer
        .lines()
        .last()
        .and_then(|count| count.trim().parse().ok())
        .unwrap_or(0)
}

/// How many times `command` ran on `node` since its last `CONFIG RESETSTAT` (Redis 7 counts
/// the commands scripts run too).
fn calls(node: &RedisServer, command: &str) -> u64 {
    node.command_calls()
        .iter()
        .find(|(name, _)| name == command)
        .map_or(0, |&(_, calls)| calls)
}

/// The server's `PTTL` of `stored` on `node`.
fn pttl(node: &RedisServer, stored: &str) -> i64 {
    node.cmd(&["PTTL", stored]).parse().unwrap_or(-2)
}

/// Waits until the lease of `stored` on `node` is renewed (its `PTTL` rises, which only a
/// renewal makes it do) or `guard` is no longer held.
async fn renewed_or_lost(node: &RedisServer, stored: &str, guard: &LockGuard) -> bool {
    let mut last = pttl(node, stored);
    wait_until_async(PATIENCE, || {
        let now = pttl(node, stored);
        let rose = now > last;
        last = now;
        rose || !guard.is_held()
    })
    .await
}

/// The 3-master cluster of the tests that do not change the topology: started by the first test
/// that needs it, stopped when the last test using it is done.
fn shared_cluster() -> Arc<RedisCluster> {
    static SHARED: Mutex<Weak<RedisCluster>> = Mutex::new(Weak::new());
    let mut shared = SHARED.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(cluster) = shared.upgrade() {
        return cluster;
    }
    let cluster = Arc::new(RedisCluster::start(3, 0));
    *shared = Arc::downgrade(&cluster);
    cluster
}

/// A manager on `cluster` whose keys start with `prefix`, so tests sharing a cluster never meet.
async fn manager(cluster: &RedisCluster, prefix: &str) -> LockManager {
    LockManager::builder()
        .url(cluster.url())
        .key_prefix(prefix)
        .build()
        .await
        .unwrap_or_else(|err| panic!("connect: {err}\n{}", cluster.log()))
}

/// The shared cluster and a manager on it.
async fn fixture(prefix: &str) -> (Arc<RedisCluster>, LockManager) {
    let cluster = tokio::task::spawn_blocking(shared_cluster)
        .await
        .expect("cluster start");
    let locks = manager(&cluster, prefix).await;
    (cluster, locks)
}

/// The stored keys on `node` that start with `prefix` and hold a lock (not the fence counters
/// of their slots).
fn lock_keys(node: &RedisServer, prefix: &str) -> Vec<String> {
    let listed = node.cmd(&["KEYS", &format!("{prefix}*")]);
    listed
        .lines()
        .filter(|key| !key.is_empty() && *key != "(empty array)")
        .filter(|key| lock_runtime::inspect::lock_name(prefix, key).is_some())
        .filter(|key| node.holds_lock(key))
        .map(str::to_owned)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_manager_names_its_backend_by_the_seed_nodes() {
    let (cluster, locks) = fixture("describe:").await;
    let seeds: Vec<String> = cluster
        .nodes()
        .iter()
        .map(|node| node.addr().to_string())
        .collect();
    assert_eq!(
        locks.backend(),
        format!("redis cluster {}", seeds.join(","))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_seeds_fail_connect_naming_them_without_the_password() {
    let (a, b) = (free_port(), free_port());
    let url = format!("redis+cluster://app:s3cret@127.0.0.1:{a},127.0.0.1:{b}");
    let err = LockManager::builder()
        .url(url)
        .request_timeout(ms(500))
        .build()
        .await
        .expect_err("nothing listens there");
    let shown = format!("{err} {err:?}");
    assert!(matches!(err, LockError::Backend { .. }), "{shown}");
    assert!(
        shown.contains(&format!("127.0.0.1:{a},127.0.0.1:{b}")),
        "{shown}"
    );
    assert!(!shown.contains("s3cret"), "{shown}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_cluster_urls_need_the_tls_feature_and_hide_the_password() {
    let (a, b) = (free_port(), free_port());
    let url = format!("rediss+cluster://app:s3cret@127.0.0.1:{a},127.0.0.1:{b}");
    let err = LockManager::builder()
        .url(url)
        .request_timeout(ms(500))
        .build()
        .await
        .expect_err("no TLS built in, or nothing listens there");
    let shown = format!("{err} {err:?}");
    match err {
        // The workspace builds lock-runtime without its `tls` feature.
        LockError::Config(_) => assert!(shown.contains("`tls` feature"), "{shown}"),
        // With `--all-features`: TLS is there, the seeds are not.
        LockError::Backend { .. } => assert!(shown.contains(&format!("{a}")), "{shown}"),
        other => panic!("unexpected {other}"),
    }
    assert!(!shown.contains("s3cret"), "{shown}");
}

/// An uncontended lock on a cluster takes the lean path on the master of its slot, as on one
/// server: one transaction to take it and a compare-and-delete (native where the master has one)
/// to release it; no acquire or release script.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_uncontended_pair_on_a_cluster_takes_a_transaction_and_a_compare_and_delete() {
    let (cluster, locks) = fixture("lean:").await;
    // The first use of a slot seeds its counter through the script.
    let warm = locks.lock("pair", LockOptions::new()).await.expect("free");
    let first = warm.fencing_token();
    warm.release().await.expect("release");
    let node = cluster.master_for_key("lean:{pair}");
    node.cmd(&["CONFIG", "RESETSTAT"]);
    let guard = locks.lock("pair", LockOptions::new()).await.expect("free");
    assert!(guard.fencing_token() > first);
    guard.release().await.expect("release");
    assert_eq!(node.cmd(&["EXISTS", "lean:{pair}"]), "0", "released");
    let shown = format!("{:?}", node.command_calls());
    assert_eq!(calls(node, "exec"), 1, "{shown}");
    let native = calls(node, "delifeq") + calls(node, "delex");
    // The compare-and-delete script where the server has no native one.
    assert_eq!(calls(node, "evalsha"), 1 - native, "{shown}");
    // Busy and waited for from another process, the script marks it: the release then goes
    // through the script, which announces it.
    let held = locks.lock("pair", LockOptions::new()).await.expect("free");
    let waiter = {
        let locks = manager(&cluster, "lean:").await;
        tokio::spawn(async move {
            let options = LockOptions::new().wait(Duration::from_secs(30));
            locks.lock("pair", options).await.map(drop)
        })
    };
    let give_up = Instant::now() + NOTIFIED;
    while !node.cmd(&["GET", "lean:{pair}"]).contains("waiting=1") {
        assert!(Instant::now() < give_up, "never marked: {}", cluster.log());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    held.release().await.expect("release");
    tokio::time::timeout(NOTIFIED, waiter)
        .await
        .expect("woken by the release")
        .expect("task")
        .expect("acquired");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_lock_is_busy_for_others_and_free_after_release() {
    let (cluster, locks) = fixture("busy:").await;
    let guard = locks.lock("k", LockOptions::new()).await.expect("free");
    let err = locks
        .lock("k", LockOptions::new())
        .await
        .expect_err("held by the guard");
    assert!(err.is_busy(), "{err}\n{}", cluster.log());
    guard.release().await.expect("release");
    let again = locks
        .lock("k", LockOptions::new())
        .await
        .expect("free again");
    again.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_exclusion_holds_between_tasks_with_strictly_rising_tokens() {
    let (cluster, locks) = fixture("exclusion:").await;
    let inside = Arc::new(AtomicU32::new(0));
    let overlaps = Arc::new(AtomicU32::new(0));
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for _ in 0..6 {
        let locks = locks.clone();
        let inside = inside.clone();
        let overlaps = overlaps.clone();
        let order = order.clone();
        tasks.push(tokio::spawn(async move {
            for _ in 0..15 {
                let options = LockOptions::new().wait(PATIENCE);
                let guard = locks.lock("shared", options).await?;
                if inside.fetch_add(1, Ordering::SeqCst) != 0 {
                    overlaps.fetch_add(1, Ordering::SeqCst);
                }
                // Recorded inside the section: the order of entries.
                order
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push(guard.fencing_token());
                tokio::task::yield_now().await;
                inside.fetch_sub(1, Ordering::SeqCst);
                guard.release().await?;
            }
            Ok::<_, LockError>(())
        }));
    }
    for task in tasks {
        task.await
            .expect("task")
            .unwrap_or_else(|err| panic!("{err}\n{}", cluster.log()));
    }
    assert_eq!(overlaps.load(Ordering::SeqCst), 0, "{}", cluster.log());
    let tokens = order.lock().unwrap_or_else(PoisonError::into_inner).clone();
    assert_eq!(tokens.len(), 90);
    assert!(
        tokens.windows(2).all(|pair| pair[0] < pair[1]),
        "tokens do not rise in entry order: {tokens:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiter_is_woken_by_release_not_by_ttl() {
    let (cluster, locks) = fixture("wake:").await;
    let guard = locks.lock("wake", LockOptions::new()).await.expect("free");
    let waiter_locks = locks.clone();
    let waiter = tokio::spawn(async move {
        let options = LockOptions::new().wait(PATIENCE);
        let guard = waiter_locks.lock("wake", options).await?;
        let entered = Instant::now();
        guard.release().await?;
        Ok::<_, LockError>(entered)
    });
    // In line and subscribed: from here it sleeps until the release (or the 30 s lease).
    let master = cluster.master_for_key("wake:{wake}");
    let subscribed = wait_until_async(PATIENCE, || subscribers(master, "wake:{wake}") > 0).await;
    assert!(subscribed, "the waiter never waited\n{}", cluster.log());
    let released = Instant::now();
    guard.release().await.expect("release");
    let entered = waiter
        .await
        .expect("task")
        .unwrap_or_else(|err| panic!("{err}\n{}", cluster.log()));
    // The lease had 30 s left: entering this fast means the release woke the waiter.
    let handover = entered.duration_since(released);
    assert!(handover < NOTIFIED, "{handover:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watchdog_keeps_a_two_second_lease_across_a_six_second_body() {
    let (cluster, locks) = fixture("watchdog:").await;
    let ttl = Duration::from_secs(2);
    let guard = locks
        .lock("long-body", LockOptions::new().ttl(ttl))
        .await
        .expect("free");
    // Time must pass here: three leases, looked at every half lease.
    let body_ends = Instant::now() + 3 * ttl;
    while Instant::now() < body_ends {
        tokio::time::sleep(ttl / 2).await;
        assert!(guard.is_held(), "{}", cluster.log());
        let other = locks.lock("long-body", LockOptions::new()).await;
        assert!(other.expect_err("still held").is_busy());
    }
    guard
        .release()
        .await
        .expect("still ours after three leases");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_deleted_from_outside_is_reported_as_lease_lost() {
    let (cluster, locks) = fixture("deleted:").await;
    // Long enough that the next renewal, not the local deadline, finds it gone.
    let guard = locks
        .lock("gone", LockOptions::new().ttl(ms(3000)))
        .await
        .expect("free");
    let stored = "deleted:{gone}";
    let master = cluster.master_for_key(stored);
    assert_eq!(master.cmd(&["DEL", stored]), "1", "{}", cluster.log());
    let reason = tokio::time::timeout(PATIENCE, guard.lost())
        .await
        .expect("told at the next renewal");
    assert_eq!(reason, LostReason::NotOwner);
    let err = guard.release().await.expect_err("not ours any more");
    assert!(err.is_lease_lost(), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_on_cancel_frees_the_lock_immediately() {
    let (cluster, locks) = fixture("cancel:").await;
    let master = cluster.master_for_key("cancel:{cancel}");
    let holder_locks = locks.clone();
    let holder = async move {
        holder_locks
            .run_locked("cancel".into(), LockOptions::new(), async {
                std::future::pending::<()>().await;
                Ok::<_, LockError>(())
            })
            .await
    };
    // Cancelled (dropped) once its body runs under the lock.
    tokio::select! {
        ended = holder => panic!("the body never ends: {ended:?}"),
        held = wait_until_async(PATIENCE, || master.holds_lock("cancel:{cancel}")) => {
            assert!(held, "never held\n{}", cluster.log());
        }
    }
    let started = Instant::now();
    let guard = locks
        .lock("cancel", LockOptions::new().wait(PATIENCE))
        .await
        .unwrap_or_else(|err| panic!("{err}\n{}", cluster.log()));
    // ttl is 30 s: only the release spawned by the cancellation frees it this fast.
    assert!(started.elapsed() < NOTIFIED, "{:?}", started.elapsed());
    guard.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_spread_over_every_master_are_held_renewed_and_released_together() {
    let prefix = "spread:";
    let (cluster, locks) = fixture(prefix).await;
    let ttl = Duration::from_secs(2);
    let mut acquiring = Vec::new();
    for i in 0..300 {
        let locks = locks.clone();
        acquiring.push(tokio::spawn(async move {
            let options = LockOptions::new().ttl(ttl);
            locks.lock(format!("order:{i}"), options).await
        }));
    }
    let mut guards = Vec::new();
    for task in acquiring {
        let guard = task
            .await
            .expect("task")
            .unwrap_or_else(|err| panic!("{err}\n{}", cluster.log()));
        guards.push(guard);
    }
    let masters = cluster.masters();
    let held: Vec<usize> = masters
        .iter()
        .map(|master| lock_keys(master, prefix).len())
        .collect();
    assert_eq!(held.iter().sum::<usize>(), 300, "{held:?}");
    assert!(held.iter().all(|&n| n > 0), "not on every master: {held:?}");
    let slots: HashSet<u16> = (0..300)
        .map(|i| key_slot(format!("{prefix}{{order:{i}}}")))
        .collect();
    assert!(
        slots.len() > 200,
        "keys share too few slots: {}",
        slots.len()
    );

    // A few locks vanish from outside: the renewal answers must reach exactly their holders,
    // whatever slot group and position in it each renewal had.
    let deleted: HashSet<String> = [13, 101, 202, 299]
        .iter()
        .map(|i| format!("order:{i}"))
        .collect();
    for key in &deleted {
        let stored = format!("{prefix}{{{key}}}");
        let master = cluster.master_for_key(&stored);
        assert_eq!(master.cmd(&["DEL", &stored]), "1", "{}", cluster.log());
    }

    // The next renewal round tells their holders; the others are renewed through two leases
    // of rounds at ttl / 3, each spanning every master.
    let deleted_at = Instant::now();
    let told = wait_until_async(PATIENCE, || {
        guards
            .iter()
            .filter(|guard| deleted.contains(guard.key()))
            .all(|guard| !guard.is_held())
    })
    .await;
    assert!(told, "a deleted lock is still held\n{}", cluster.log());
    let outlived = wait_until_async(PATIENCE, || {
        deleted_at.elapsed() > 2 * ttl
            || guards
                .iter()
                .any(|guard| !deleted.contains(guard.key()) && !guard.is_held())
    })
    .await;
    assert!(outlived);
    let lost: HashSet<String> = guards
        .iter()
        .filter(|guard| !guard.is_held())
        .map(|guard| guard.key().to_owned())
        .collect();
    assert_eq!(lost, deleted, "{}", cluster.log());
    let busy = locks.lock("order:7", LockOptions::new()).await;
    assert!(busy.expect_err("still held").is_busy());

    let mut releasing = Vec::new();
    for guard in guards {
        let was_deleted = deleted.contains(guard.key());
        releasing.push((was_deleted, tokio::spawn(guard.release())));
    }
    for (was_deleted, task) in releasing {
        match task.await.expect("task") {
            Ok(()) => assert!(!was_deleted, "released a lock that was deleted"),
            Err(err) => assert!(was_deleted && err.is_lease_lost(), "{err}"),
        }
    }
    for master in &masters {
        let left = lock_keys(master, prefix);
        assert!(
            left.is_empty(),
            "left behind on {}: {left:?}",
            master.addr()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scripts_flushed_from_a_master_are_loaded_again_on_it() {
    let prefix = "flushed:";
    let (cluster, locks) = fixture(prefix).await;
    let stored = format!("{prefix}{{job}}");
    let master = cluster.master_for_key(&stored);
    let first = locks.lock("job", LockOptions::new()).await.expect("free");
    first.release().await.expect("release");
    assert_eq!(master.cmd(&["SCRIPT", "FLUSH"]), "OK", "{}", cluster.log());
    let guard = locks
        .lock("job", LockOptions::new().ttl(ms(3000)))
        .await
        .unwrap_or_else(|err| panic!("acquire after SCRIPT FLUSH: {err}\n{}", cluster.log()));
    assert_eq!(master.cmd(&["SCRIPT", "FLUSH"]), "OK", "{}", cluster.log());
    // The renewal at ttl / 3 meets NOSCRIPT too, and loads the script again.
    assert!(renewed_or_lost(master, &stored, &guard).await);
    assert!(guard.is_held(), "{}", cluster.log());
    assert_eq!(master.cmd(&["SCRIPT", "FLUSH"]), "OK", "{}", cluster.log());
    guard
        .release()
        .await
        .unwrap_or_else(|err| panic!("release after SCRIPT FLUSH: {err}\n{}", cluster.log()));
    assert!(lock_keys(master, prefix).is_empty());
}

/// A cluster of 3 masters with one replica each, for a test of its own to fail over.
async fn cluster_with_replicas() -> Arc<RedisCluster> {
    let cluster = tokio::task::spawn_blocking(|| RedisCluster::start(3, 1))
        .await
        .expect("cluster start");
    Arc::new(cluster)
}

/// A manager for a failover test. With `replica_acks`, each acquisition waits until one replica
/// has it, so that the lock survives the failover of its master; only the first holder asks for
/// that: once its master is gone the promoted replica has no replica of its own, and every
/// acquisition that waits for one would fail.
async fn failover_manager(cluster: &RedisCluster, replica_acks: bool) -> LockManager {
    let builder = LockManager::builder()
        .url(cluster.url())
        .request_timeout(Duration::from_secs(1));
    let builder = if replica_acks {
        builder.wait_for_replicas(1, ms(500))
    } else {
        builder
    };
    builder
        .build()
        .await
        .unwrap_or_else(|err| panic!("connect: {err}\n{}", cluster.log()))
}

/// Kills the master serving `stored` and returns once a replica has taken its slots.
async fn kill_master_of(cluster: &Arc<RedisCluster>, stored: &str) {
    let cluster = cluster.clone();
    let stored = stored.to_owned();
    tokio::task::spawn_blocking(move || {
        let master = cluster.master_for_key(&stored);
        cluster.kill_master_and_wait_failover(master);
    })
    .await
    .expect("failover");
}

/// A lock held through a failover, and a second manager trying to take it meanwhile.
struct Contested {
    key: String,
    first_token: u64,
    guard: Arc<LockGuard>,
    /// When and why the first holder was told its lease was lost.
    told_lost: tokio::task::JoinHandle<(Instant, LostReason)>,
    /// When the second acquirer's `lock` returned, and what it returned.
    second: tokio::task::JoinHandle<(Instant, Result<LockGuard, LockError>)>,
}

impl Contested {
    async fn start(first: &LockManager, second: &LockManager, key: &str, ttl: Duration) -> Self {
        // The first holder waits for a replica's acknowledgement: a slow one costs a retry.
        let guard = first
            .lock(key, LockOptions::new().ttl(ttl).wait(PATIENCE))
            .await
            .unwrap_or_else(|err| panic!("{key}: {err}"));
        let first_token = guard.fencing_token();
        let guard = Arc::new(guard);
        let watched = guard.clone();
        let told_lost = tokio::spawn(async move {
            let reason = watched.lost().await;
            (Instant::now(), reason)
        });
        let (second, owned_key) = (second.clone(), key.to_owned());
        let second = tokio::spawn(async move {
            let options = LockOptions::new().wait(Duration::from_secs(25));
            let guard = second.lock(owned_key, options).await;
            (Instant::now(), guard)
        });
        Contested {
            key: key.to_owned(),
            first_token,
            guard,
            told_lost,
            second,
        }
    }

    /// After the failover: the first holder either still holds the lock (then the second has
    /// not got it, and gets it once the first releases) or was told it lost it before the second
    /// got it. Returns whether the first still held it.
    async fn check_no_overlap(self, cluster: &RedisCluster) -> bool {
        let key = &self.key;
        let still_held = self.guard.is_held();
        let first_done = if still_held {
            assert!(
                !self.second.is_finished(),
                "{key}: the second acquirer finished while the first still held the lock\n{}",
                cluster.log()
            );
            self.told_lost.abort();
            let _ = self.told_lost.await;
            let guard = Arc::try_unwrap(self.guard)
                .unwrap_or_else(|_| unreachable!("the watcher has ended"));
            let releasing = Instant::now();
            guard.release().await.unwrap_or_else(|err| {
                panic!(
                    "{key}: held after failover, release: {err}\n{}",
                    cluster.log()
                )
            });
            releasing
        } else {
            let (told, reason) = self.told_lost.await.expect("watcher");
            assert!(
                matches!(reason, LostReason::Expired | LostReason::NotOwner),
                "{key}: {reason}"
            );
            told
        };
        let (acquired, second) = self.second.await.expect("second acquirer");
        let second = second.unwrap_or_else(|err| panic!("{key}: {err}\n{}", cluster.log()));
        assert!(
            first_done < acquired,
            "{key}: the second holder got the lock before the first (held after failover: \
             {still_held}) had released it or been told it lost it\n{}",
            cluster.log()
        );
        assert!(second.fencing_token() > self.first_token, "{key}");
        second.release().await.expect("release");
        still_held
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failover_of_a_held_locks_master_never_lets_two_holders_overlap() {
    let cluster = cluster_with_replicas().await;
    let first = failover_manager(&cluster, true).await;
    let second = failover_manager(&cluster, false).await;
    // Two locks on one master: a lease that runs out during the failover, and one that outlives
    // it and is renewed on the promoted replica.
    let master_port = cluster.master_for_key("lock:{short-lease}").port();
    let long_key = (0..)
        .map(|i| format!("long-lease-{i}"))
        .find(|key| cluster.master_for_key(format!("lock:{{{key}}}")).port() == master_port)
        .expect("some key lands on every master");
    let short = Contested::start(&first, &second, "short-lease", Duration::from_secs(2)).await;
    let long = Contested::start(&first, &second, &long_key, Duration::from_secs(8)).await;

    kill_master_of(&cluster, "lock:{short-lease}").await;
    // A renewal reaches the promoted replica, or the lease runs out.
    let promoted = cluster.master_for_key("lock:{short-lease}");
    for contested in [&short, &long] {
        let stored = format!("lock:{{{}}}", contested.key);
        let settled = renewed_or_lost(promoted, &stored, &contested.guard).await;
        assert!(settled, "{}: neither\n{}", contested.key, cluster.log());
    }

    // Either outcome is correct for either lease (failover takes ~1.5 to 3 s); usually the short
    // one runs out and the long one is kept.
    let short_held = short.check_no_overlap(&cluster).await;
    let long_held = long.check_no_overlap(&cluster).await;
    eprintln!("held after failover: short lease {short_held}, long lease {long_held}");

    // The promoted replica takes new locks, on its own slots and everywhere else.
    let locks = failover_manager(&cluster, false).await;
    for key in ["short-lease", "after-failover-1", "after-failover-2"] {
        let guard = locks
            .lock(key, LockOptions::new().wait(Duration::from_secs(5)))
            .await
            .unwrap_or_else(|err| panic!("{key}: {err}\n{}", cluster.log()));
        guard.release().await.expect("release");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiter_is_woken_by_a_release_after_its_master_failed_over() {
    let cluster = cluster_with_replicas().await;
    let holder_locks = failover_manager(&cluster, true).await;
    let waiter_locks = failover_manager(&cluster, false).await;
    // The holder waits for a replica's acknowledgement: a slow one costs a retry.
    let guard = holder_locks
        .lock("handover", LockOptions::new().wait(PATIENCE))
        .await
        .unwrap_or_else(|err| panic!("{err}\n{}", cluster.log()));
    let waiter = tokio::spawn(async move {
        let options = LockOptions::new().wait(Duration::from_secs(40));
        let guard = waiter_locks.lock("handover", options).await?;
        let entered = Instant::now();
        guard.release().await?;
        Ok::<_, LockError>(entered)
    });
    let master = cluster.master_for_key("lock:{handover}");
    let subscribed =
        wait_until_async(PATIENCE, || subscribers(master, "lock:{handover}") > 0).await;
    assert!(subscribed, "the waiter never waited\n{}", cluster.log());

    kill_master_of(&cluster, "lock:{handover}").await;
    let promoted = cluster.master_for_key("lock:{handover}");
    // The waiter's subscription follows the slot to the promoted replica, and the waiter, done
    // retrying the failed-over slot, is told there that the lock is busy (the `PTTL` of a busy
    // answer; renewals do not read it) and sleeps on its lease of about 30 s: from here only
    // a release notification wakes it early.
    let asleep = wait_until_async(PATIENCE, || {
        subscribers(promoted, "lock:{handover}") > 0 && calls(promoted, "pttl") > 0
    })
    .await;
    assert!(
        asleep,
        "the waiter never waited on the promoted replica\n{}",
        cluster.log()
    );
    let released = Instant::now();
    guard
        .release()
        .await
        .unwrap_or_else(|err| panic!("release after failover: {err}\n{}", cluster.log()));
    let entered = waiter
        .await
        .expect("task")
        .unwrap_or_else(|err| panic!("{err}\n{}", cluster.log()));
    // The lease had about 30 s left: only the release's notification wakes the waiter this fast.
    let handover = entered.duration_since(released);
    assert!(handover < NOTIFIED, "{handover:?}\n{}", cluster.log());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiter_is_woken_by_a_release_after_a_coordinated_failover_moved_its_slot() {
    let cluster = cluster_with_replicas().await;
    let holder_locks = failover_manager(&cluster, false).await;
    let waiter_locks = failover_manager(&cluster, false).await;
    let guard = holder_locks
        .lock("moved", LockOptions::new())
        .await
        .unwrap_or_else(|err| panic!("{err}\n{}", cluster.log()));
    let waiter = tokio::spawn(async move {
        let options = LockOptions::new().wait(Duration::from_secs(40));
        let guard = waiter_locks.lock("moved", options).await?;
        let entered = Instant::now();
        guard.release().await?;
        Ok::<_, LockError>(entered)
    });
    let master = cluster.master_for_key("lock:{moved}");
    let subscribed = wait_until_async(PATIENCE, || subscribers(master, "lock:{moved}") > 0).await;
    assert!(subscribed, "the waiter never waited\n{}", cluster.log());

    // The old master stays up as a replica: its subscribers are told the slot left it.
    let failed_over = cluster.clone();
    tokio::task::spawn_blocking(move || {
        let master = failed_over.master_for_key("lock:{moved}");
        failed_over.manual_failover(master);
    })
    .await
    .expect("failover");
    // The old master, a replica now, unsubscribed the waiter from the slot it lost: the
    // waiter subscribes again, on a node that serves the slot now (the new master, or its
    // replica, which hears the master's announcements too).
    let followed = wait_until_async(PATIENCE, || {
        let nodes = cluster.nodes().iter();
        nodes
            .map(|node| subscribers(node, "lock:{moved}"))
            .sum::<u64>()
            > 0
    })
    .await;
    assert!(
        followed,
        "the subscription stayed behind\n{}",
        cluster.log()
    );
    let released = Instant::now();
    guard
        .release()
        .await
        .unwrap_or_else(|err| panic!("release after failover: {err}\n{}", cluster.log()));
    let entered = waiter
        .await
        .expect("task")
        .unwrap_or_else(|err| panic!("{err}\n{}", cluster.log()));
    let handover = entered.duration_since(released);
    assert!(handover < NOTIFIED, "{handover:?}\n{}", cluster.log());
}

/// The master `replica` replicates, by its own `ROLE` answer.
fn master_of<'a>(cluster: &'a RedisCluster, replica: &RedisServer) -> &'a RedisServer {
    let role = replica.cmd(&["ROLE"]);
    let port: u16 = role
        .lines()
        .nth(2)
        .and_then(|port| port.parse().ok())
        .unwrap_or_else(|| panic!("not a replica: {role}"));
    cluster
        .nodes()
        .iter()
        .find(|node| node.port() == port)
        .expect("a node of the cluster")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scripts_are_reloaded_on_the_slots_master_while_another_node_hangs() {
    let cluster = cluster_with_replicas().await;
    let stored = "lock:{reload}";
    let master = cluster.master_for_key(stored);
    let own_replicas: HashSet<u16> = cluster
        .replicas_of(master)
        .iter()
        .map(|replica| replica.port())
        .collect();
    let elsewhere = cluster
        .replicas()
        .into_iter()
        .find(|replica| !own_replicas.contains(&replica.port()))
        .expect("a replica of another master");
    // CLUSTER SLOTS lists a replica only once it has replicated something; the client must know
    // the replica, or a command sent to every node would not wait for it.
    let other_master = master_of(&cluster, elsewhere);
    let written = (0..)
        .map(|i| format!("warm-{i}"))
        .find(|key| other_master.cmd(&["SET", key, "x"]) == "OK")
        .is_some();
    assert!(written);
    let listed = wait_until(PATIENCE, || {
        other_master
            .cmd(&["CLUSTER", "SLOTS"])
            .lines()
            .any(|line| line == elsewhere.port().to_string())
    });
    assert!(
        listed,
        "{} never listed\n{}",
        elsewhere.addr(),
        cluster.log()
    );

    let locks = failover_manager(&cluster, false).await;
    let warm = locks
        .lock("reload", LockOptions::new())
        .await
        .expect("free");
    warm.release().await.expect("release");

    // A node that hangs stays in the client's slot map: loading the script on every node would
    // wait for it and fail. Only the master serving the slot needs the script.
    elsewhere.pause();
    assert_eq!(master.cmd(&["SCRIPT", "FLUSH"]), "OK", "{}", cluster.log());
    let acquired = locks.lock("reload", LockOptions::new()).await;
    elsewhere.resume();
    let guard = acquired.unwrap_or_else(|err| panic!("{err}\n{}", cluster.log()));
    guard.release().await.expect("release");
}

/// A held lock watched for its loss: when and why it was told, if it was.
struct Watched {
    guard: Arc<LockGuard>,
    master_port: u16,
    told_lost: Arc<Mutex<Option<(Instant, LostReason)>>>,
}

impl Watched {
    fn told_lost(&self) -> Option<(Instant, LostReason)> {
        *self
            .told_lost
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

/// Freezes `frozen` (SIGSTOP) for `pause`, well under the cluster's 1 s failure detection, and
/// checks what the renewal driver made of it: no lease on another master is lost, and a lease
/// on the frozen master is lost only once its own local deadline (as it stood when the master
/// froze) has passed, and kept when that deadline lies clearly after the master resumed.
/// The leases are all `ttl` long. Returns (leases on the frozen master kept, lost).
async fn freeze_one_master(
    cluster: &Arc<RedisCluster>,
    held: &[Watched],
    frozen: u16,
    pause: Duration,
    ttl: Duration,
) -> (usize, usize) {
    // Where each frozen lease's deadline stood when its master stopped: nothing renews it
    // during the pause, so the holder may give it up from then on, not before.
    let froze_at = Instant::now();
    let deadlines: Vec<Instant> = held
        .iter()
        .map(|watched| froze_at + watched.guard.remaining())
        .collect();
    let stopped = cluster.clone();
    let resumed_at = tokio::task::spawn_blocking(move || {
        let node = stopped
            .nodes()
            .iter()
            .find(|node| node.port() == frozen)
            .expect("a node of the cluster");
        node.pause();
        std::thread::sleep(pause);
        node.resume();
        Instant::now()
    })
    .await
    .expect("pause and resume");
    // Each lease on the frozen master was either told it is lost or renewed since (its deadline
    // moved on), and a whole lease passed since the resume, so that late answers and retries
    // are booked and a healthy lease a stalled batch had cost would have been given up.
    let settled = wait_until_async(PATIENCE, || {
        let now = Instant::now();
        let frozen_settled = held.iter().zip(&deadlines).all(|(watched, &deadline)| {
            watched.master_port != frozen
                || watched.told_lost().is_some()
                || now + watched.guard.remaining() > deadline + ms(50)
        });
        frozen_settled && now >= resumed_at + ttl
    })
    .await;
    assert!(
        settled,
        "a frozen lease neither renewed nor lost\n{}",
        cluster.log()
    );

    let (mut kept, mut lost) = (0, 0);
    for (watched, &deadline) in held.iter().zip(&deadlines) {
        let key = watched.guard.key();
        let told = watched.told_lost();
        if watched.master_port != frozen {
            assert!(
                told.is_none() && watched.guard.is_held(),
                "{key} lives on a healthy master, yet its lease was lost ({told:?}) while \
                 master {frozen} was frozen for {pause:?}\n{}",
                cluster.log()
            );
            continue;
        }
        match told {
            None => {
                assert!(watched.guard.is_held(), "{key}: not held, never told");
                kept += 1;
            }
            Some((at, reason)) => {
                assert_eq!(reason, LostReason::Expired, "{key}");
                // 20 ms for the driver's wake-up and the test's own clock reading above.
                assert!(
                    at + ms(20) >= deadline,
                    "{key} was given up {:?} before its deadline",
                    deadline - at
                );
                // Renewed at once after the resume, it is lost only if the renewal's answer
                // came after its deadline: allow a third of a lease for that on a loaded machine.
                assert!(
                    deadline < resumed_at + ttl / 3,
                    "{key}: its deadline lay {:?} after the master resumed, yet it was lost",
                    deadline - resumed_at
                );
                lost += 1;
            }
        }
    }
    (kept, lost)
}

/// Issue 12, item 2: with locks on every master, one master frozen for most of a ttl (under the
/// failure detection, so no failover and no cluster-wide outage) stalls the renewals sent to it.
/// The answers of the other masters must still be booked as they arrive: a batch timed out as
/// a whole lost every lease on the healthy masters too (9 of 9 in the report).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_master_costs_only_its_own_leases_never_those_on_healthy_masters() {
    // A cluster of its own: the frozen master would stall the other tests' locks.
    let cluster = tokio::task::spawn_blocking(|| Arc::new(RedisCluster::start(3, 0)))
        .await
        .expect("cluster start");
    let locks = manager(&cluster, "stall:").await;
    // Renewed every 500 ms: a healthy lease has a second of slack on a loaded machine, while
    // the freezes stay under the cluster's failure detection.
    let ttl = ms(1500);
    // Four locks on each master, found by the slot of their stored key.
    let owners = cluster.clone();
    let placed: Vec<(String, u16)> = tokio::task::spawn_blocking(move || {
        let masters: Vec<u16> = owners.masters().iter().map(|m| m.port()).collect();
        let mut placed = Vec::new();
        for port in masters {
            let mine = (0..)
                .map(|i| format!("job:{i}"))
                .filter(|key| owners.master_for_key(format!("stall:{{{key}}}")).port() == port)
                .take(4);
            placed.extend(mine.map(|key| (key, port)));
        }
        placed
    })
    .await
    .expect("place keys");
    assert_eq!(placed.len(), 12);

    let mut held = Vec::new();
    for (key, master_port) in placed {
        let guard = locks
            .lock(&key, LockOptions::new().ttl(ttl))
            .await
            .unwrap_or_else(|err| panic!("{key}: {err}\n{}", cluster.log()));
        let guard = Arc::new(guard);
        let told_lost = Arc::new(Mutex::new(None));
        let (watched, told) = (guard.clone(), told_lost.clone());
        tokio::spawn(async move {
            let reason = watched.lost().await;
            *told.lock().unwrap_or_else(PoisonError::into_inner) = Some((Instant::now(), reason));
        });
        held.push(Watched {
            guard,
            master_port,
            told_lost,
        });
        // Acquired 25 ms apart, the leases fall due for renewal at different moments of the
        // ttl / 3 cycle, so the freezes below strike them at different points of it.
        tokio::time::sleep(ms(25)).await;
    }
    let masters: Vec<u16> = {
        let mut ports: Vec<u16> = held.iter().map(|w| w.master_port).collect();
        ports.dedup();
        ports
    };
    assert_eq!(masters.len(), 3, "{masters:?}");

    // A short freeze: the leases outlive it, on the frozen master too, unless a loaded
    // machine let their deadline pass before the resume (checked lease by lease).
    let (kept, lost) = freeze_one_master(&cluster, &held, masters[0], ms(400), ttl).await;
    eprintln!("frozen 400 ms: {kept} leases on the frozen master kept, {lost} lost");
    assert_eq!(kept + lost, 4, "{}", cluster.log());

    // Most of a ttl: the frozen master's leases run out if their deadline passes first, the
    // healthy masters' leases are renewed all along.
    let (kept, lost) = freeze_one_master(&cluster, &held, masters[1], ms(800), ttl).await;
    eprintln!("frozen 800 ms: {kept} leases on the frozen master kept, {lost} lost");

    for watched in held {
        let was_lost = watched.told_lost().is_some();
        let guard = Arc::try_unwrap(watched.guard).ok();
        if let Some(guard) = guard {
            let released = guard.release().await;
            assert_eq!(released.is_ok(), !was_lost, "{released:?}");
        }
    }
}

/// After a failover the promoted replica has no replica of its own: with `UseConnected`, locks
/// on its slots are taken with the acknowledgements of those connected (none), and with the
/// default policy they are refused within the wait budget.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_failover_the_replica_shortage_policy_decides() {
    let cluster = cluster_with_replicas().await;
    let build = |policy| {
        LockManager::builder()
            .url(cluster.url())
            .request_timeout(Duration::from_secs(1))
            .wait_for_replicas(1, ms(200))
            .replica_shortage(policy)
            .build()
    };
    let lenient = build(lock_runtime::ReplicaShortage::UseConnected)
        .await
        .unwrap_or_else(|err| panic!("connect: {err}\n{}", cluster.log()));
    let strict = build(lock_runtime::ReplicaShortage::Fail)
        .await
        .unwrap_or_else(|err| panic!("connect: {err}\n{}", cluster.log()));
    let warm = lenient
        .lock("orphaned", LockOptions::new().wait(PATIENCE))
        .await
        .unwrap_or_else(|err| panic!("{err}\n{}", cluster.log()));
    warm.release().await.expect("release");
    kill_master_of(&cluster, "lock:{orphaned}").await;
    let options = LockOptions::new().wait(PATIENCE);
    let guard = lenient
        .lock("orphaned", options)
        .await
        .unwrap_or_else(|err| {
            panic!(
                "taken with the replicas connected: {err}\n{}",
                cluster.log()
            )
        });
    guard.release().await.expect("release");
    let started = Instant::now();
    let wait = ms(800);
    let err = strict
        .lock("orphaned", LockOptions::new().wait(wait))
        .await
        .expect_err("no replica to acknowledge");
    assert!(err.to_string().contains("replicas acknowledged"), "{err}");
    // The budget, one more attempt (a 1 s request and a 200 ms WAIT) and a loaded machine.
    assert!(
        started.elapsed() < wait + Duration::from_secs(4),
        "{:?}",
        started.elapsed()
    );
}

/// A `WAIT` may outlast a request: the connection it blocks waits for its answer (the request
/// timeout and the replica timeout), so a replica that does not acknowledge is told as such and
/// the grant given back, as on one server, rather than the connection giving up first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_longer_than_the_request_timeout_is_answered_by_the_replicas() {
    let cluster = cluster_with_replicas().await;
    let stored = "lock:{slow-acks}";
    let locks = LockManager::builder()
        .url(cluster.url())
        .request_timeout(Duration::from_secs(1))
        .wait_for_replicas(1, Duration::from_secs(3))
        .build()
        .await
        .unwrap_or_else(|err| panic!("connect: {err}\n{}", cluster.log()));
    // The connection the acquire below waits on is made now, while every node answers.
    let warm = locks
        .lock("slow-acks", LockOptions::new().wait(PATIENCE))
        .await
        .unwrap_or_else(|err| panic!("{err}\n{}", cluster.log()));
    warm.release().await.expect("release");
    let master = cluster.master_for_key(stored);
    let replicas = cluster.replicas_of(master);
    for replica in &replicas {
        replica.pause();
    }
    let taken = locks.lock("slow-acks", LockOptions::new()).await;
    for replica in &replicas {
        replica.resume();
    }
    let err = taken.map(drop).expect_err("no replica acknowledged");
    assert!(
        err.to_string().contains("0 of 1 replicas acknowledged"),
        "{err}\n{}",
        cluster.log()
    );
    assert!(!master.holds_lock(stored), "{}", cluster.log());
}

/// An idle connection acquires wait on, closed by the master meanwhile (its `timeout`, a
/// restart), costs the next acquire nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_wait_connection_the_master_closed_does_not_fail_the_next_acquire() {
    let cluster = cluster_with_replicas().await;
    let locks = failover_manager(&cluster, true).await;
    let warm = locks
        .lock("idle", LockOptions::new().wait(PATIENCE))
        .await
        .unwrap_or_else(|err| panic!("{err}\n{}", cluster.log()));
    warm.release().await.expect("release");
    let master = cluster.master_for_key("lock:{idle}");
    master.cmd(&["CLIENT", "KILL", "TYPE", "normal"]);
    // Tried once: a failed attempt would not be retried.
    let guard = locks
        .lock("idle", LockOptions::new())
        .await
        .unwrap_or_else(|err| panic!("{err}\n{}", cluster.log()));
    guard.release().await.expect("release");
}

/// A task of this process waiting for a key it holds is handed the lock by the release, on the
/// master of the key's slot, with a higher fencing token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_hands_the_lock_to_a_waiter_of_this_process() {
    let prefix = "handoff:";
    let (cluster, locks) = fixture(prefix).await;
    let held = locks.lock("hot", LockOptions::new()).await.expect("free");
    let waiter = {
        let locks = locks.clone();
        tokio::spawn(async move { locks.lock("hot", LockOptions::new().wait(PATIENCE)).await })
    };
    // In line and subscribed, having taken its place without asking the server.
    let stored = format!("{prefix}{{hot}}");
    let master = cluster.master_for_key(&stored);
    let waiting = wait_until_async(PATIENCE, || subscribers(master, &stored) > 0).await;
    assert!(waiting, "the waiter never waited\n{}", cluster.log());
    assert!(
        master
            .stored_lock(&stored)
            .is_some_and(|lock| !lock.waiting),
        "the waiter asked the server although this process holds the lock"
    );
    let before = held.fencing_token();
    held.release().await.expect("release");
    let next = tokio::time::timeout(NOTIFIED, waiter)
        .await
        .expect("handed over at once")
        .expect("task")
        .unwrap_or_else(|err| panic!("{err}\n{}", cluster.log()));
    assert!(next.fencing_token() > before);
    let lock = master.stored_lock(&stored).expect("held");
    assert_eq!(lock.state, "held");
    assert_eq!(
        master.fence_counter(prefix, &stored),
        Some(next.fencing_token())
    );
    next.release().await.expect("release");
}

/// Fair waiters of two managers get the lock in the order they came: the line lives in the
/// lock's slot, and a waiter's turn is announced on the slot's shard channel.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fair_waiters_get_the_lock_in_the_order_they_came() {
    let prefix = "fair:";
    let (cluster, a) = fixture(prefix).await;
    let b = manager(&cluster, prefix).await;
    let master = cluster.master_for_key("fair:{turns}");
    let line = || master.cmd(&["ZCARD", "fair:{turns}:queue"]).parse().ok();
    lock_tests::fair::served_in_the_order_they_came_in_line(&a, &b, "turns", line).await;
    assert_eq!(master.cmd(&["EXISTS", "fair:{turns}:queue"]), "0");
}
