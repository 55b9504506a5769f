//! What must hold on every server version docs/SERVERS.md lists, beyond `behaviour.rs`: the attribute
//! on a real server, a waiter in another process woken by the release (and on a cluster older
//! than Redis 7, by the expiry instead, as docs/SERVERS.md says), and fair mode.
//!
//! The suite runs on whatever server the harness starts: `redis-server` from `PATH`, or the binary
//! named by `LOCK_TESTS_REDIS_SERVER`. scripts/compat.sh runs it, with `behaviour.rs`, on each
//! server of the compatibility matrix.

use std::time::{Duration, Instant};

use lock_runtime::{LostReason, distributed_lock};
use lock_tests::prelude::*;
use lock_tests::server_version;

/// Bounds a handover that a release notification makes take milliseconds, against the lease of
/// 10 s that a waiter not told sleeps on: generous for a loaded machine, far from the lease.
const NOTIFIED: Duration = Duration::from_secs(3);

/// A manager on `url` whose keys start with `prefix`.
async fn manager(url: &str, prefix: &str, log: impl FnOnce() -> String) -> LockManager {
    match LockManager::builder()
        .url(url)
        .key_prefix(prefix)
        .build()
        .await
    {
        Ok(locks) => locks,
        Err(err) => panic!("connect: {err}\n{}", log()),
    }
}

/// The fencing token the locked body ran under, read through `current()`.
#[distributed_lock(key = "ledger:<account>", ttl = "5s", wait = "0s", manager = locks)]
async fn post(locks: &LockManager, account: u32) -> Result<u64, LockError> {
    let inner = check_balance(locks, account).await?;
    let current = lock_runtime::current().expect("inside a locked body");
    assert_eq!(current.fencing_token(), inner, "the nested call re-entered");
    Ok(inner)
}

#[distributed_lock(key = "ledger:<account>", ttl = "5s", wait = "0s", manager = locks)]
async fn check_balance(locks: &LockManager, account: u32) -> Result<u64, LockError> {
    Ok(lock_runtime::current()
        .expect("inside a locked body")
        .fencing_token())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_attribute_renders_its_key_reenters_and_fences_on_this_server() {
    let server = RedisServer::start();
    let locks = manager(&server.url(), "attr:", || server.log()).await;
    let first = post(&locks, 7)
        .await
        .unwrap_or_else(|err| panic!("{err}\n{}", server.log()));
    let second = post(&locks, 7)
        .await
        .unwrap_or_else(|err| panic!("{err}\n{}", server.log()));
    assert!(second > first, "tokens rise: {first} then {second}");

    // Held elsewhere: the attribute's zero wait answers busy, naming the rendered key.
    let other = manager(&server.url(), "attr:", || server.log()).await;
    let guard = other
        .lock("ledger:7", LockOptions::new())
        .await
        .expect("free");
    let busy = post(&locks, 7).await.expect_err("held by the other");
    assert!(busy.is_busy(), "{busy}");
    assert!(busy.to_string().contains("ledger:7"), "{busy}");
    guard.release().await.expect("release");
    let third = post(&locks, 7).await.expect("free again");
    assert!(third > second, "{third} after {second}");
}

/// What a handover between two managers took.
struct Handover {
    /// How long after the release the waiter got the lock.
    took: Duration,
    /// How much of the holder's lease was left at the release: what a waiter not told of it
    /// waits.
    lease_left: Duration,
}

/// `holder` takes `key` (stored as `stored` on `server`) with a 10 s lease, a waiter of `waiter`
/// (another manager: another process as far as the lock can tell) waits for it, and `holder`
/// releases once the server marked the lock as awaited (the waiter was told it is busy).
async fn handover_between_managers(
    holder: &LockManager,
    waiter: &LockManager,
    key: &str,
    server: &RedisServer,
    stored: &str,
) -> Handover {
    let ttl = Duration::from_secs(10);
    let guard = holder
        .lock(key, LockOptions::new().ttl(ttl).watchdog(false))
        .await
        .expect("free");
    let asked = server.requests_served();
    let waiter = waiter.clone();
    let key = key.to_owned();
    let task = tokio::spawn(async move {
        let guard = waiter.lock(key, LockOptions::new().wait(PATIENCE)).await?;
        let entered = Instant::now();
        guard.release().await?;
        Ok::<_, LockError>(entered)
    });
    // The waiter asks twice: told busy (which marks the lock awaited), then once more after it
    // subscribed to releases, in case one came in between. Only after that second ask does it
    // wait, and then a release it hears of (or, unannounced, the lease's end) lets it in. (Where
    // the first ask is a transaction and then a script, it counts two alone: the release may
    // then come before the second ask, which finds the lock free, as fast as a notification.
    // Servers without that transaction, the ones before Redis 7, count one per ask.)
    let awaited = wait_until_async(PATIENCE, || {
        server.stored_lock(stored).is_some_and(|lock| lock.waiting)
            && server.requests_served() >= asked + 2
    })
    .await;
    assert!(awaited, "the waiter never asked twice\n{}", server.log());
    let lease_left = guard.remaining();
    let released = Instant::now();
    guard.release().await.expect("release");
    let entered = task
        .await
        .expect("waiter task")
        .expect("waiter gets the lock");
    Handover {
        took: entered.duration_since(released),
        lease_left,
    }
}

/// A waiter of another manager is woken by the release. Redis Cluster announces releases with
/// sharded pub/sub, which came with Redis 7.0: on older clusters the waiter is not told and takes
/// the lock when the lease expires, as docs/DEPLOYMENTS.md says; it still gets it.
async fn a_waiter_in_another_process_is_woken_by_the_release(d: Deployment) {
    let waiter = d.connect().await;
    let stored = "lock:{wake}";
    let server = d.server_of(stored).expect("one server stores the lock");
    let Handover { took, lease_left } =
        handover_between_managers(&d.locks, &waiter, "wake", server, stored).await;
    assert!(lease_left > NOTIFIED, "{lease_left:?}");
    if d.redis_cluster().is_some() && server_version() < (7, 0, 0) {
        // Taken when the lease ran out: not before, and not long after on a loaded machine.
        assert!(
            took + ms(100) >= lease_left && took < lease_left + Duration::from_secs(5),
            "{took:?} with {lease_left:?} of the lease left\n{}",
            d.log()
        );
    } else {
        assert!(took < NOTIFIED, "{took:?}\n{}", d.log());
    }
}

lock_tests::on_backends!([redis, cluster][
    a_waiter_in_another_process_is_woken_by_the_release,
    a_hand_over_takes_the_cheapest_path_this_server_offers,
]);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fair_waiters_are_served_in_the_order_they_came() {
    let server = RedisServer::start();
    let a = manager(&server.url(), "fair:", || server.log()).await;
    let b = manager(&server.url(), "fair:", || server.log()).await;
    let line = || server.cmd(&["ZCARD", "fair:{line}:queue"]).parse().ok();
    lock_tests::fair::served_in_the_order_they_came_in_line(&a, &b, "line", line).await;
}

/// What this server offers the lean paths, as its version says: the transaction (`SET ... NX
/// GET`, Redis 7.0 and every Valkey), `DELIFEQ` (Valkey 9.0), `DELEX ... IFEQ` (Redis 8.4) and
/// `SET ... IFEQ` (Redis 8.4, Valkey 8.1).
struct Offers {
    transaction: bool,
    delifeq: bool,
    delex: bool,
    set_ifeq: bool,
    /// `INFO server`, for the messages.
    info: String,
}

impl Offers {
    fn of(server: &RedisServer) -> Offers {
        let info = server.cmd(&["INFO", "server"]);
        let version = |name: &str| -> Option<(u32, u32)> {
            let value = info.lines().find_map(|line| line.strip_prefix(name))?;
            let mut parts = value.trim().split('.').map(|part| part.parse::<u32>().ok());
            Some((parts.next()??, parts.next()??))
        };
        // Valkey reports the Redis version it is compatible with (7.2) as `redis_version`.
        let redis = version("redis_version:").unwrap_or((0, 0));
        let valkey = version("valkey_version:");
        let redis_8_4 = valkey.is_none() && redis >= (8, 4);
        Offers {
            transaction: redis >= (7, 0),
            delifeq: valkey.is_some_and(|valkey| valkey >= (9, 0)),
            delex: redis_8_4,
            set_ifeq: redis_8_4 || valkey.is_some_and(|valkey| valkey >= (8, 1)),
            info,
        }
    }
}

/// How many times `server` ran `command` since its stats were reset (`INFO commandstats`,
/// commands run by scripts and transactions included).
fn calls(server: &RedisServer, command: &str) -> u64 {
    server
        .command_calls()
        .into_iter()
        .find(|(name, _)| name == command)
        .map_or(0, |(_, count)| count)
}

/// Which path an uncontended acquire and release take on this server: a transaction where the
/// server has `SET ... NX GET` (Redis 7.0 and later, every Valkey), the acquire script before;
/// a native compare-and-delete where the server has one (`DELIFEQ` on Valkey 9.0, `DELEX` on
/// Redis 8.4), the compare-and-delete script elsewhere. The lock works the same on each.
#[tokio::test]
async fn an_uncontended_pair_takes_the_cheapest_path_this_server_offers() {
    let server = RedisServer::start();
    let locks = manager(&server.url(), "path:", || server.log()).await;
    // The first use of a slot seeds its counter through the script.
    let warm = locks.lock("pair", LockOptions::new()).await.expect("free");
    warm.release().await.expect("release");
    server.cmd(&["CONFIG", "RESETSTAT"]);
    let guard = locks.lock("pair", LockOptions::new()).await.expect("free");
    let token = guard.fencing_token();
    guard.release().await.expect("release");
    assert_eq!(server.cmd(&["EXISTS", "path:{pair}"]), "0", "released");
    let again = locks.lock("pair", LockOptions::new()).await.expect("free");
    assert!(again.fencing_token() > token);
    again.release().await.expect("release");

    let offers = Offers::of(&server);
    let shown = format!("{:?} on {}", server.command_calls(), offers.info);
    let count = |name: &str| calls(&server, name);
    if offers.transaction {
        assert_eq!(count("exec"), 2, "{shown}");
    } else {
        assert_eq!(count("exec"), 0, "{shown}");
    }
    if offers.delifeq {
        assert_eq!(count("delifeq"), 2, "{shown}");
    } else if offers.delex {
        assert_eq!(count("delex"), 2, "{shown}");
    }
    // Scripts: the acquire script where there is no transaction, the compare-and-delete script
    // where there is no native delete.
    let native_delete = offers.delifeq || offers.delex;
    let scripts = (if offers.transaction { 0 } else { 2 }) + (if native_delete { 0 } else { 2 });
    assert_eq!(count("evalsha"), scripts, "{shown}");
}

/// The watchdog's renewal on this server: where it has `SET ... IFEQ` (Valkey 8.1, Redis 8.4),
/// a lock nobody was told is busy is renewed by comparing its whole value, with no script;
/// elsewhere by renew.lua. Either way a lock a waiter marked as awaited (its value changed) is
/// still renewed, by the script, and a lock someone else took is reported lost and left as it
/// is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_lock_is_renewed_by_the_cheapest_path_this_server_offers() {
    let server = RedisServer::start();
    let locks = manager(&server.url(), "renew:", || server.log()).await;
    let other = manager(&server.url(), "renew:", || server.log()).await;
    let offers = Offers::of(&server);
    // Renewed every half second.
    let ttl = Duration::from_millis(1500);
    let options = LockOptions::new().ttl(ttl);
    // The first use of a slot seeds its counter through the script.
    let warm = locks.lock("plain", LockOptions::new()).await.expect("free");
    warm.release().await.expect("release");
    let shown = || {
        format!(
            "{:?} on {}\n{}",
            server.command_calls(),
            offers.info,
            server.log()
        )
    };

    // Nobody waits: renewed by SET IFEQ alone where the server has it.
    let plain = locks.lock("plain", options).await.expect("free");
    server.cmd(&["CONFIG", "RESETSTAT"]);
    let renewal = if offers.set_ifeq { "set" } else { "evalsha" };
    let renewed = wait_until_async(PATIENCE, || calls(&server, renewal) >= 2).await;
    assert!(renewed, "two renewals by {renewal}\n{}", shown());
    assert!(plain.is_held(), "{}", shown());
    if offers.set_ifeq {
        assert_eq!(
            server.requests_served(),
            0,
            "no script, no transaction\n{}",
            shown()
        );
        assert_eq!(calls(&server, "pexpire"), 0, "{}", shown());
    } else {
        assert_eq!(calls(&server, "set"), 0, "{}", shown());
    }
    plain.release().await.expect("release");

    // A waiter of another process marks the lock as awaited: its value is not the one its
    // acquire wrote any more. It is renewed all the same, by the script, which it goes to at
    // once from then on.
    let marked = locks.lock("marked", options).await.expect("free");
    let busy = other
        .lock("marked", LockOptions::new().wait(ms(300)))
        .await
        .expect_err("held");
    assert!(busy.is_busy(), "{busy}");
    let stored = server.stored_lock("renew:{marked}").expect("held");
    assert!(stored.waiting, "marked as awaited\n{}", shown());
    server.cmd(&["CONFIG", "RESETSTAT"]);
    let renewed = wait_until_async(PATIENCE, || calls(&server, "evalsha") >= 3).await;
    assert!(renewed, "three renewals by the script\n{}", shown());
    assert!(marked.is_held(), "{}", shown());
    // At most the first renewal after the mark (or that one sent again) compares in vain.
    assert!(calls(&server, "set") <= 2, "{}", shown());
    let still = server.stored_lock("renew:{marked}").expect("still held");
    assert_eq!(still.token, stored.token, "{}", shown());
    marked.release().await.expect("release");

    // Someone else holds it now (the lease ran out unseen, say): the renewal reports it lost,
    // as the script always has, and leaves the other holder's value and lease alone.
    let lost = locks.lock("lost", options).await.expect("free");
    let theirs = "held token=theirs waiting=0";
    server.cmd(&["SET", "renew:{lost}", theirs, "PX", "60000"]);
    let reason = tokio::time::timeout(PATIENCE, lost.lost())
        .await
        .unwrap_or_else(|_| panic!("never reported lost\n{}", shown()));
    assert_eq!(reason, LostReason::NotOwner, "{}", shown());
    assert_eq!(server.cmd(&["GET", "renew:{lost}"]), theirs);
    let pttl: u64 = server
        .cmd(&["PTTL", "renew:{lost}"])
        .parse()
        .expect("a number");
    assert!(
        pttl > 30_000,
        "{pttl} ms left: renewed for the wrong holder"
    );
}

/// The same on a Redis Cluster of these servers: the master serving a lock renews it by
/// `SET ... IFEQ` where it has the command, by renew.lua elsewhere, and a lock a waiter of
/// another process marked as awaited is renewed by the script and stays held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_lock_on_a_cluster_is_renewed_by_the_cheapest_path_its_master_offers() {
    let d = lock_tests::Deployment::cluster().await;
    let other = d.connect().await;
    let ttl = Duration::from_millis(1500);
    let options = LockOptions::new().ttl(ttl);
    for key in ["plain", "marked"] {
        // The first use of a slot seeds its counter through the script.
        let warm = d.locks.lock(key, LockOptions::new()).await.expect("free");
        warm.release().await.expect("release");
    }
    let master = |key: &str| d.server_of(&format!("lock:{{{key}}}")).expect("a master");
    let offers = Offers::of(master("plain"));
    let shown = |server: &RedisServer| {
        format!(
            "{:?} on {}\n{}",
            server.command_calls(),
            offers.info,
            d.log()
        )
    };

    let server = master("plain");
    let plain = d.locks.lock("plain", options).await.expect("free");
    server.cmd(&["CONFIG", "RESETSTAT"]);
    let renewal = if offers.set_ifeq { "set" } else { "evalsha" };
    let renewed = wait_until_async(PATIENCE, || calls(server, renewal) >= 2).await;
    assert!(renewed, "two renewals by {renewal}\n{}", shown(server));
    assert!(plain.is_held(), "{}", shown(server));
    if offers.set_ifeq {
        assert_eq!(calls(server, "evalsha"), 0, "no script\n{}", shown(server));
    } else {
        assert_eq!(calls(server, "set"), 0, "{}", shown(server));
    }
    plain.release().await.expect("release");

    let server = master("marked");
    let marked = d.locks.lock("marked", options).await.expect("free");
    let busy = other
        .lock("marked", LockOptions::new().wait(ms(300)))
        .await
        .expect_err("held");
    assert!(busy.is_busy(), "{busy}");
    let stored = server.stored_lock("lock:{marked}").expect("held");
    assert!(stored.waiting, "marked as awaited\n{}", shown(server));
    server.cmd(&["CONFIG", "RESETSTAT"]);
    let renewed = wait_until_async(PATIENCE, || calls(server, "evalsha") >= 3).await;
    assert!(renewed, "three renewals by the script\n{}", shown(server));
    assert!(marked.is_held(), "{}", shown(server));
    assert!(calls(server, "set") <= 2, "{}", shown(server));
    let still = server.stored_lock("lock:{marked}").expect("still held");
    assert_eq!(still.token, stored.token, "{}", shown(server));
    marked.release().await.expect("release");
}

/// A holder hands the lock to a waiter of its own process: where the server has `SET ...
/// IFEQ` (Valkey 8.1, Redis 8.4), in one transaction without a script (`SET ... IFEQ`, `INCR`),
/// and the lock handed over is renewed and released by comparing its value as a lock taken
/// freely is; elsewhere by handoff.lua. A waiter of another process that marked the lock as
/// awaited turns the hand-over into a release it can win, on either path.
fn server_of_broken(d: &Deployment) -> &RedisServer {
    d.server_of("lock:{broken}")
        .expect("one server stores the lock")
}

async fn a_hand_over_takes_the_cheapest_path_this_server_offers(d: Deployment) {
    let stored = "lock:{pass}";
    let server = d.server_of(stored).expect("one server stores the lock");
    let offers = Offers::of(server);
    // A cluster older than Redis 7.0 has no sharded pub/sub: its waiters subscribe to nothing,
    // and are seen waiting by their call alone.
    let listeners = if d.redis_cluster().is_some() && server_version() < (7, 0, 0) {
        0
    } else {
        1
    };
    let shown = || {
        format!(
            "{:?} on {}\n{}",
            server.command_calls(),
            offers.info,
            d.log()
        )
    };
    // The first use of a slot seeds its counter through the script.
    let warm = d
        .locks
        .lock("pass", LockOptions::new())
        .await
        .expect("free");
    warm.release().await.expect("release");
    // Each holder's lease outlasts the round by far: a waiter in line here looks at the server
    // itself when its holder's lease would end unrenewed (marking the lock as awaited, which
    // turns the hand-over into a release), and a renewal that comes late on a loaded machine
    // must not do that. The last waiter takes a short lease, whose renewals are checked below.
    let ttl = Duration::from_millis(1500);
    let long = Duration::from_secs(30);
    let mut holder = d
        .locks
        .lock("pass", LockOptions::new().ttl(long))
        .await
        .expect("free");
    let counter = lock_runtime::inspect::fence_counter_key("lock:", stored);
    for round in 0..3 {
        if round == 2 {
            // A counter lost (a restart without persistence, say): the token the waiter gets
            // still comes after the holder's.
            server.cmd(&["DEL", &counter]);
        }
        let lease = if round == 2 { ttl } else { long };
        // The last round's waiter unsubscribes when it leaves the line, without waiting for
        // the server: until the server has dropped that subscription, the next waiter would
        // be seen waiting before it joined the line, and the release could go before it.
        let unsubscribed = wait_until_async(PATIENCE, || {
            d.listeners(stored).is_none_or(|now| now < listeners.max(1))
        })
        .await;
        assert!(
            unsubscribed,
            "round {round}: the last waiter stayed subscribed"
        );
        let waiter = {
            let locks = d.locks.clone();
            async move {
                locks
                    .lock("pass", LockOptions::new().ttl(lease).wait(PATIENCE))
                    .await
            }
        };
        let waiter = d.spawn_waiting(stored, listeners, waiter).await;
        server.cmd(&["CONFIG", "RESETSTAT"]);
        let before = holder.fencing_token();
        holder.release().await.expect("release");
        let next = waiter
            .await
            .expect("waiter task")
            .unwrap_or_else(|err| panic!("round {round}: {err}\n{}", shown()));
        assert!(next.fencing_token() > before, "{}", shown());
        if round == 2 {
            holder = next;
            continue;
        }
        if offers.set_ifeq {
            assert_eq!(calls(server, "exec"), 1, "round {round}: {}", shown());
            assert_eq!(calls(server, "set"), 1, "round {round}: {}", shown());
            assert_eq!(calls(server, "evalsha"), 0, "round {round}: {}", shown());
        } else {
            // (The first hand-over also puts the script in the server's cache.)
            assert!(calls(server, "evalsha") >= 1, "round {round}: {}", shown());
            assert_eq!(calls(server, "exec"), 0, "round {round}: {}", shown());
        }
        assert_eq!(
            calls(server, "publish") + calls(server, "spublish"),
            0,
            "{}",
            shown()
        );
        holder = next;
    }
    // The lock handed over is renewed as one taken freely.
    server.cmd(&["CONFIG", "RESETSTAT"]);
    let renewal = if offers.set_ifeq { "set" } else { "evalsha" };
    let renewed = wait_until_async(PATIENCE, || calls(server, renewal) >= 2).await;
    assert!(renewed, "two renewals by {renewal}\n{}", shown());
    assert!(holder.is_held(), "{}", shown());
    if offers.set_ifeq {
        assert_eq!(calls(server, "evalsha"), 0, "{}", shown());
    }

    // Someone elsewhere waits: the release is announced and the lock is free for both.
    let other = d.connect().await;
    let busy = other
        .lock("pass", LockOptions::new().wait(ms(300)))
        .await
        .expect_err("held");
    assert!(busy.is_busy(), "{busy}");
    // Each takes the lock in turn and gives it back.
    let take_and_give_back = |locks: LockManager| async move {
        let guard = locks
            .lock("pass", LockOptions::new().wait(PATIENCE))
            .await?;
        guard.release().await
    };
    let waiter = d
        .spawn_waiting(stored, listeners, take_and_give_back(d.locks.clone()))
        .await;
    let outside = tokio::spawn(take_and_give_back(other.clone()));
    holder.release().await.expect("release");
    let here = waiter.await.expect("task");
    let there = outside.await.expect("task");
    here.unwrap_or_else(|err| panic!("the waiter here: {err}\n{}", shown()));
    there.unwrap_or_else(|err| panic!("the waiter elsewhere: {err}\n{}", shown()));

    // A counter that cannot be counted on: nothing is handed over without a token. The
    // holder's release succeeds, the waiter is told what is wrong, and nothing stays held.
    let broken = d
        .locks
        .lock("broken", LockOptions::new())
        .await
        .expect("free");
    let broken_counter = lock_runtime::inspect::fence_counter_key("lock:", "lock:{broken}");
    server_of_broken(&d).cmd(&["SET", &broken_counter, "not-a-number"]);
    let waiter = {
        let locks = d.locks.clone();
        async move {
            locks
                .lock("broken", LockOptions::new().wait(PATIENCE))
                .await
        }
    };
    let waiter = d.spawn_waiting("lock:{broken}", listeners, waiter).await;
    broken.release().await.expect("the holder's release");
    let told = waiter.await.expect("task").expect_err("no token to give");
    assert!(!told.is_retryable(), "{told:?}");
    assert!(
        !server_of_broken(&d).holds_lock("lock:{broken}"),
        "{}",
        shown()
    );
    server_of_broken(&d).cmd(&["DEL", &broken_counter]);
}

/// On every server: a lock of 0.1 (a hash with a token and a lease) is busy, and a hash
/// without a lease is someone else's data, named as such; neither is touched.
#[tokio::test]
async fn a_hash_at_the_key_is_a_0_1_lock_or_foreign_data_on_this_server() {
    let server = RedisServer::start();
    let locks = manager(&server.url(), "hash:", || server.log()).await;
    // Seeded first, so that the acquires below take the transaction where the server has one.
    let warm = locks.lock("old", LockOptions::new()).await.expect("free");
    warm.release().await.expect("release");
    server.cmd(&["HSET", "hash:{old}", "token", "their-token"]);
    server.cmd(&["PEXPIRE", "hash:{old}", "60000"]);
    let busy = locks
        .lock("old", LockOptions::new())
        .await
        .expect_err("held by 0.1");
    assert!(busy.is_busy(), "{busy}");
    assert_eq!(server.cmd(&["HGET", "hash:{old}", "token"]), "their-token");

    let warm = locks
        .lock("theirs", LockOptions::new())
        .await
        .expect("free");
    warm.release().await.expect("release");
    server.cmd(&["HSET", "hash:{theirs}", "token", "abc"]);
    let err = locks
        .lock("theirs", LockOptions::new())
        .await
        .expect_err("not a lock");
    assert!(err.to_string().contains("not a lock"), "{err}");
    assert_eq!(server.cmd(&["HGET", "hash:{theirs}", "token"]), "abc");
}
