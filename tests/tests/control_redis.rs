//! Control over holders on real Redis deployments (one server, Sentinel, Cluster, Redlock): a
//! request to let go and a steal sent by another manager, on a connection of its own, reach the
//! holder through the notices channel; the notice latencies are printed (`--nocapture`).

use std::sync::Arc;
use std::time::Duration;

use lock_runtime::fence::redis::{self as fenced};
use lock_runtime::fence::{Fence, FenceError};
use lock_runtime::testing::TestLocks;
use lock_runtime::{LostReason, ReleaseRequest};
use lock_tests::prelude::*;
use lock_tests::{SentinelSetup, on_backends, server_version};
use redis::aio::MultiplexedConnection;
use tokio::time::Instant;

/// The notices channel of the managers' default prefix.
const NOTICES: &str = "lock:notices";

/// How long after `returned` (when a call returned) the holder woke at `woke`, as a line of the
/// test's output: a notice may also come before the call's own answer.
fn latency(what: &str, f: &Deployment, returned: Instant, woke: Instant) -> Duration {
    let shown = match woke.checked_duration_since(returned) {
        Some(after) => format!("{} µs after", after.as_micros()),
        None => format!("{} µs before", (returned - woke).as_micros()),
    };
    eprintln!("{what} on {}: heard {shown} the call returned", kind(f));
    woke.saturating_duration_since(returned)
}

/// The deployment's kind, for the printed latencies.
fn kind(f: &Deployment) -> &'static str {
    let url = f.url();
    if url.starts_with("redlock://") {
        "redlock"
    } else if url.starts_with("redis+sentinel://") {
        "sentinel"
    } else if url.starts_with("redis+cluster://") {
        "cluster"
    } else {
        "one server"
    }
}

/// Whether `f` carries notices: every deployment does but a Cluster of Redis 5, whose
/// subscriptions would need RESP3 (Redis 6.0).
fn carries_notices(f: &Deployment) -> bool {
    f.redis_cluster().is_none() || server_version() >= (6, 0, 0)
}

/// Takes `key` on `f`'s manager and starts a task that waits for `event` of the guard,
/// yielding what it came to and when.
async fn held_until<T, F>(
    f: &Deployment,
    key: &str,
    event: impl FnOnce(Arc<LockGuard>) -> F,
) -> (Arc<LockGuard>, tokio::task::JoinHandle<(T, Instant)>)
where
    F: std::future::Future<Output = T> + Send + 'static,
    T: Send + 'static,
{
    let guard = Arc::new(
        f.locks
            .lock(key, LockOptions::new())
            .await
            .unwrap_or_else(|err| panic!("lock: {err}\n{}", f.log())),
    );
    let happened = event(guard.clone());
    let waited = tokio::spawn(async move { (happened.await, Instant::now()) });
    (guard, waited)
}

/// `held_until` a request to let go of it.
async fn held_until_asked(
    f: &Deployment,
    key: &str,
) -> (
    Arc<LockGuard>,
    tokio::task::JoinHandle<(ReleaseRequest, Instant)>,
) {
    held_until(
        f,
        key,
        |holder| async move { holder.release_requested().await },
    )
    .await
}

/// `held_until` its lease is lost.
async fn held_until_lost(
    f: &Deployment,
    key: &str,
) -> (
    Arc<LockGuard>,
    tokio::task::JoinHandle<(LostReason, Instant)>,
) {
    held_until(f, key, |holder| async move { holder.lost().await }).await
}

/// Waits for `task` within the test's patience.
async fn within_patience<T>(f: &Deployment, what: &str, task: tokio::task::JoinHandle<T>) -> T {
    tokio::time::timeout(PATIENCE, task)
        .await
        .unwrap_or_else(|_| panic!("{what} never came\n{}", f.log()))
        .expect("task")
}

async fn a_release_request_from_another_manager_reaches_the_holder_with_who_asked(f: Deployment) {
    let (guard, asked) = held_until_asked(&f, "report:nightly").await;
    let ops = f
        .connect_with(|builder| builder.app_name("ops-console"))
        .await;
    if !carries_notices(&f) {
        match ops.request_release("report:nightly", "").await {
            Err(LockError::Config(message)) => assert!(message.contains("carries no notices")),
            other => panic!("expected a configuration error, got {other:?}"),
        }
        return;
    }
    ops.request_release("report:nightly", "deploying 2.4")
        .await
        .unwrap_or_else(|err| panic!("request_release: {err}\n{}", f.log()));
    let returned = Instant::now();
    let (request, woke) = within_patience(&f, "the request", asked).await;
    let after = latency("release request", &f, returned, woke);
    assert!(after < PATIENCE, "{after:?}");
    assert_eq!(request.key(), "report:nightly");
    assert!(
        request.from().starts_with("ops-console on ")
            && request.from().ends_with(": deploying 2.4"),
        "{}",
        request.from()
    );
    // The holder decides: the lock is still held until it lets go.
    assert!(guard.is_held());
}

async fn a_steal_from_another_manager_gives_a_greater_token_and_the_victim_loses_its_lease(
    f: Deployment,
) {
    let (victim, lost) = held_until_lost(&f, "import:1").await;
    let thief = f.connect().await;
    let mine = thief
        .steal("import:1", LockOptions::new(), "import stuck for an hour")
        .await
        .unwrap_or_else(|err| panic!("steal: {err}\n{}", f.log()));
    let returned = Instant::now();
    assert!(
        mine.fencing_token() > victim.fencing_token(),
        "{} after {}",
        mine.fencing_token(),
        victim.fencing_token()
    );
    let (reason, woke) = within_patience(&f, "the loss", lost).await;
    let after = latency("steal", &f, returned, woke);
    assert!(after < PATIENCE, "{after:?}");
    if carries_notices(&f) {
        assert_eq!(reason, LostReason::Stolen);
    }
    // Else found at the victim's next renewal.
}

async fn the_victims_release_is_lease_lost_and_leaves_the_thiefs_lock_busy(f: Deployment) {
    let (victim, lost) = held_until_lost(&f, "import:2").await;
    let thief = f.connect().await;
    let mine = thief
        .steal("import:2", LockOptions::new(), "")
        .await
        .unwrap_or_else(|err| panic!("steal: {err}\n{}", f.log()));
    within_patience(&f, "the loss", lost).await;
    let victim = Arc::into_inner(victim).expect("the waiting task is done");
    match victim.release().await {
        Err(LockError::LeaseLost { key, .. }) => assert_eq!(key, "import:2"),
        other => panic!("expected LeaseLost, got {other:?}\n{}", f.log()),
    }
    assert!(mine.is_held());
    let third = f.connect().await;
    match third.lock("import:2", LockOptions::new()).await {
        Err(err) if err.is_busy() => {}
        other => panic!("expected busy, got {other:?}\n{}", f.log()),
    }
    mine.release()
        .await
        .unwrap_or_else(|err| panic!("the thief's release: {err}\n{}", f.log()));
}

async fn the_victims_later_fenced_write_is_refused_as_stale(f: Deployment) {
    let resource = "import:3";
    let mut data = data_of(&f, resource).await;
    let (victim, lost) = held_until_lost(&f, resource).await;
    fenced::claim(&mut data, &Fence::of(&victim))
        .await
        .expect("the victim's claim");
    let thief = f.connect().await;
    let mine = thief
        .steal(resource, LockOptions::new(), "")
        .await
        .unwrap_or_else(|err| panic!("steal: {err}\n{}", f.log()));
    fenced::set(&mut data, &Fence::of(&mine), "the thief's", None)
        .await
        .expect("the thief's write");
    within_patience(&f, "the loss", lost).await;
    match fenced::set(&mut data, &Fence::of(&victim), "the victim's", None).await {
        Err(FenceError::Stale {
            current, offered, ..
        }) => assert_eq!(
            (current, offered),
            (mine.fencing_token(), victim.fencing_token())
        ),
        other => panic!("expected Stale, got {other:?}"),
    }
}

/// A connection to the server that keeps `resource` and its fence: the one server, the
/// Sentinel master, or the Cluster master of its slot.
async fn data_of(f: &Deployment, resource: &str) -> MultiplexedConnection {
    let server = f.server_of(resource).expect("a server of the data");
    redis::Client::open(server.url())
        .expect("a valid URL")
        .get_multiplexed_async_connection()
        .await
        .unwrap_or_else(|err| panic!("connect: {err}\n{}", f.log()))
}

/// How many clients of each data server are subscribed to the notices channel.
fn notice_subscribers(f: &Deployment) -> Vec<String> {
    f.data_servers()
        .iter()
        .map(|server| server.cmd(&["PUBSUB", "NUMSUB", NOTICES]))
        .collect()
}

/// The ids of the data servers' clients that are subscribed to something.
fn subscriber_ids(f: &Deployment) -> Vec<String> {
    f.data_servers()
        .iter()
        .flat_map(|server| {
            server
                .cmd(&["CLIENT", "LIST", "TYPE", "pubsub"])
                .lines()
                .filter_map(|line| line.split(' ').find_map(|field| field.strip_prefix("id=")))
                .map(|id| format!("{} {id}", server.addr()))
                .collect::<Vec<_>>()
        })
        .collect()
}

async fn a_holder_whose_subscription_was_cut_hears_notices_again_once_resubscribed(f: Deployment) {
    if !carries_notices(&f) {
        return;
    }
    let ops = f.connect().await;
    let (_guard, asked) = held_until_asked(&f, "report:cut").await;
    let before = notice_subscribers(&f);
    let cut = subscriber_ids(&f);
    for server in f.data_servers() {
        server.cmd(&["CLIENT", "KILL", "TYPE", "pubsub"]);
    }
    // Back once every manager subscribed again where it was subscribed before, each on a
    // connection of its feed made since the cut.
    let back = wait_until_async(PATIENCE, || {
        notice_subscribers(&f) == before && subscriber_ids(&f).iter().all(|id| !cut.contains(id))
    })
    .await;
    assert!(
        back,
        "{before:?} became {:?}\n{}",
        notice_subscribers(&f),
        f.log()
    );
    ops.request_release("report:cut", "after the cut")
        .await
        .unwrap_or_else(|err| panic!("request_release: {err}\n{}", f.log()));
    let returned = Instant::now();
    let (request, woke) = within_patience(&f, "the request", asked).await;
    latency("release request after a resubscription", &f, returned, woke);
    assert!(
        request.from().ends_with(": after the cut"),
        "{}",
        request.from()
    );
}

on_backends!(mod announce; [redis, sentinel, cluster, redlock] [
    a_release_request_from_another_manager_reaches_the_holder_with_who_asked,
    a_holder_whose_subscription_was_cut_hears_notices_again_once_resubscribed,
]);

on_backends!(mod steal; [redis, sentinel, cluster] [
    a_steal_from_another_manager_gives_a_greater_token_and_the_victim_loses_its_lease,
    the_victims_release_is_lease_lost_and_leaves_the_thiefs_lock_busy,
    the_victims_later_fenced_write_is_refused_as_stale,
]);

/// Notices follow a Sentinel failover: each manager subscribes on the promoted master, where a
/// request to let go is then told.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_sentinel_failover_notices_travel_through_the_new_master() {
    let setup = SentinelSetup::start(1, 3);
    let holder = LockManager::connect(&setup.url())
        .await
        .unwrap_or_else(|err| panic!("connect: {err}\n{}", setup.log()));
    let ops = LockManager::connect(&setup.url())
        .await
        .unwrap_or_else(|err| panic!("connect: {err}\n{}", setup.log()));
    let promoted = tokio::task::block_in_place(|| setup.kill_master_and_wait_failover());
    // Both managers followed: each subscribed to the notices channel there.
    let followed = wait_until_async(PATIENCE, || {
        promoted
            .cmd(&["PUBSUB", "NUMSUB", NOTICES])
            .ends_with("\n2")
    })
    .await;
    assert!(followed, "{}", setup.log());
    let guard = holder
        .lock("report:failover", LockOptions::new().wait(PATIENCE))
        .await
        .unwrap_or_else(|err| panic!("lock: {err}\n{}", setup.log()));
    ops.request_release("report:failover", "after the failover")
        .await
        .unwrap_or_else(|err| panic!("request_release: {err}\n{}", setup.log()));
    let request = tokio::time::timeout(PATIENCE, guard.release_requested())
        .await
        .unwrap_or_else(|_| panic!("never heard\n{}", setup.log()));
    assert!(
        request.from().ends_with(": after the failover"),
        "{}",
        request.from()
    );
}

/// With `wait_for_replicas`, a steal returns once the replica has the stealer's lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_steal_waiting_for_replicas_returns_once_the_replica_has_the_stealers_lock() {
    let master = RedisServer::start();
    let port = master.port().to_string();
    let replica = RedisServer::start_with(&["--replicaof", "127.0.0.1", &port]);
    let synced = wait_until_async(PATIENCE, || {
        replica
            .cmd(&["INFO", "replication"])
            .contains("master_link_status:up")
    })
    .await;
    assert!(synced, "{}\n{}", master.log(), replica.log());
    let locks = connect(&master).await;
    let victim = locks
        .lock("import:replicated", LockOptions::new())
        .await
        .expect("lock");
    let thief = LockManager::builder()
        .url(master.url())
        .wait_for_replicas(1, Duration::from_secs(10))
        .build()
        .await
        .unwrap_or_else(|err| panic!("connect: {err}\n{}", master.log()));
    let stored = "lock:{import:replicated}";
    let holder = |server: &RedisServer| server.stored_lock(stored).and_then(|lock| lock.token_id());
    let victims = holder(&master).expect("the victim holds it");
    let mine = thief
        .steal("import:replicated", LockOptions::new(), "")
        .await
        .unwrap_or_else(|err| panic!("steal: {err}\n{}", master.log()));
    assert!(mine.fencing_token() > victim.fencing_token());
    // Acknowledged before the steal returned: read at once, no wait for the replica.
    let stealers = holder(&master).expect("the stealer holds it");
    assert_ne!(stealers, victims);
    assert_eq!(holder(&replica), Some(stealers), "{}", replica.log());
    let stats = master.cmd(&["INFO", "commandstats"]);
    assert!(stats.contains("cmdstat_wait:calls=1,"), "{stats}");
}

/// Redlock cannot steal: its masters would each grant every thief.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_refuses_a_steal_as_a_configuration_error() {
    let f = Deployment::redlock().await;
    let guard = f
        .locks
        .lock("import:4", LockOptions::new())
        .await
        .expect("lock");
    let thief = f.connect().await;
    match thief.steal("import:4", LockOptions::new(), "").await {
        Err(LockError::Config(message)) => {
            assert!(message.contains("cannot steal"), "{message}");
        }
        other => panic!("expected a configuration error, got {other:?}"),
    }
    assert!(guard.is_held());
}

/// The testing kit's fault layer forwards notices: a manager built over it, on a real server,
/// hears a request to let go from another manager.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_manager_over_the_fault_layer_hears_a_release_request() {
    let server = RedisServer::start();
    let kit = TestLocks::over_url(&server.url()).await.expect("kit");
    let guard = kit
        .manager()
        .lock("report:kit", LockOptions::new())
        .await
        .expect("lock");
    let ops = connect(&server).await;
    ops.request_release("report:kit", "from outside")
        .await
        .expect("request_release");
    let request = tokio::time::timeout(PATIENCE, guard.release_requested())
        .await
        .unwrap_or_else(|_| panic!("never heard\n{}", server.log()));
    assert!(
        request.from().ends_with(": from outside"),
        "{}",
        request.from()
    );
}

/// The testing kit's fault layer forwards steals: a manager built over it takes a lock from
/// another manager's holder, which loses it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_manager_over_the_fault_layer_steals_a_lock() {
    let server = RedisServer::start();
    let locks = connect(&server).await;
    let victim = locks
        .lock("import:kit", LockOptions::new())
        .await
        .expect("lock");
    let kit = TestLocks::over_url(&server.url()).await.expect("kit");
    let mine = kit
        .manager()
        .steal("import:kit", LockOptions::new(), "")
        .await
        .unwrap_or_else(|err| panic!("steal: {err}\n{}", server.log()));
    assert!(mine.fencing_token() > victim.fencing_token());
    let reason = tokio::time::timeout(PATIENCE, victim.lost())
        .await
        .unwrap_or_else(|_| panic!("never lost\n{}", server.log()));
    assert_eq!(reason, LostReason::Stolen);
}

/// Two databases of one server (a staging `/1` beside a production `/0`) name their locks alike,
/// and `PUBLISH` reaches every database's subscribers: a request made in one database never
/// reaches the holder of the same key in the other. The holder hears the request of its own
/// database, sent after the other one, first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_request_stays_in_its_database() {
    let server = RedisServer::start();
    let production = LockManager::connect(&format!("{}/0", server.url()))
        .await
        .unwrap_or_else(|err| panic!("connect: {err}\n{}", server.log()));
    let staging = LockManager::connect(&format!("{}/1", server.url()))
        .await
        .unwrap_or_else(|err| panic!("connect: {err}\n{}", server.log()));
    let guard = production
        .lock("job", LockOptions::new())
        .await
        .expect("free in db 0");
    staging
        .request_release("job", "staging maintenance")
        .await
        .expect("asked in db 1");
    production
        .request_release("job", "production deploy")
        .await
        .expect("asked in db 0");
    let request = tokio::time::timeout(PATIENCE, guard.release_requested())
        .await
        .unwrap_or_else(|_| panic!("never heard\n{}", server.log()));
    assert!(
        request.from().ends_with(": production deploy"),
        "the holder in db 0 heard a request made in db 1: {}",
        request.from()
    );
    guard.release().await.expect("released");
}
