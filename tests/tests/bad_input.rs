//! Bad input at runtime: URLs that name no usable deployment, keys at the edges of what a key
//! can hold, and servers that answer too slowly or with errors. Each gives a clear `LockError`
//! or the right behaviour: nothing is lost, nothing is left behind, nothing panics.
//!
//! Covered elsewhere: a key holding someone else's list or hash, and a wrong password
//! (`redis.rs`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use lock_tests::free_port;
use lock_tests::prelude::*;

/// The Redis key of the lock `key`: `lock:{<key>}`, with a `\` before keys that start with `}`
/// or `\` (so that the hash tag is never empty).
fn stored(key: &str) -> String {
    let escape = if key.starts_with(['}', '\\']) {
        "\\"
    } else {
        ""
    };
    format!("lock:{{{escape}{key}}}")
}

/// Runs `key`'s locked section on `locks` and says whether the body ran.
async fn body_runs(locks: &LockManager, key: &str, options: LockOptions) -> (bool, LockError) {
    let ran = AtomicBool::new(false);
    let result = locks
        .run_locked(key.into(), options, async {
            ran.store(true, Ordering::SeqCst);
            Ok::<_, LockError>(())
        })
        .await;
    let err = result.expect_err("the acquire should fail");
    (ran.load(Ordering::SeqCst), err)
}

#[tokio::test]
async fn urls_that_name_no_usable_deployment_are_config_errors_without_the_password() {
    let port = free_port();
    let bad = [
        String::new(),
        "garbage".into(),
        "not a url at all".into(),
        "127.0.0.1:6380".into(),
        "://127.0.0.1:6380".into(),
        format!("http://127.0.0.1:{port}"),
        format!("mysql://user:s3cret@127.0.0.1:{port}"),
        "redis://".into(),
        "redis://:s3cret@".into(),
        format!("redis://:{port}"),
        "redis://127.0.0.1:70000".into(),
        "redis://127.0.0.1:-1".into(),
        "redis://[::1".into(),
        format!("redis://127.0.0.1:{port}/not-a-db"),
        "redis+unix://".into(),
        "redlock://".into(),
        "redlock://user:s3cret@,,/0".into(),
        "redis+sentinel://".into(),
        format!("redis+sentinel://127.0.0.1:{port}"),
        format!("redis+sentinel://user:s3cret@127.0.0.1:{port}/"),
        // One slash short: the first `://` is inside the password.
        format!("redis:/user:s3cret://x@127.0.0.1:{port}"),
    ];
    for url in bad {
        let started = Instant::now();
        let err = LockManager::connect(&url)
            .await
            .expect_err("not a usable URL");
        let shown = format!("{err} {err:?}");
        assert!(matches!(err, LockError::Config(_)), "{url:?}: {shown}");
        assert!(!shown.contains("s3cret"), "{url:?} leaked: {shown}");
        // Rejected as written, without trying to connect anywhere.
        assert!(
            started.elapsed() < ms(500),
            "{url:?}: {:?}",
            started.elapsed()
        );
    }
}

/// Keys at the edges: braces (the hash tag's own syntax), colons, line breaks, NUL, non-ASCII,
/// and one of a megabyte.
fn odd_keys() -> Vec<String> {
    vec![
        "{".into(),
        "}".into(),
        "{{{}}}".repeat(5),
        "}{".into(),
        "\\}".into(),
        ":".into(),
        "a:b::c:".into(),
        "line\nbreak\r\n".into(),
        "nul\0byte\0".into(),
        "ключ-🔒-é\u{feff}".into(),
        " ".into(),
        "k".repeat(1 << 20),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn odd_keys_are_held_exclusively_under_exactly_their_own_name() {
    let server = RedisServer::start();
    let holder = connect(&server).await;
    let other = connect(&server).await;
    // The fence counters of the slots the keys fell in: all that outlives a released lock.
    let mut counters = std::collections::HashSet::new();
    for key in odd_keys() {
        let shown: String = key.escape_debug().take(40).collect();
        let guard = holder
            .lock(key.clone(), LockOptions::new())
            .await
            .unwrap_or_else(|err| panic!("{shown}: {err}\n{}", server.log()));
        assert!(
            server
                .stored_lock(&stored(&key))
                .is_some_and(|lock| lock.state == "held" && lock.token.is_some()),
            "{shown}: stored under lock:{{<key>}}"
        );
        let counter = lock_runtime::inspect::fence_counter_key("lock:", &stored(&key));
        assert_eq!(
            server.cmd(&["GET", &counter]),
            guard.fencing_token().to_string(),
            "{shown}: the token comes from its slot's counter"
        );
        counters.insert(counter);
        // The lock, next to the counters: the locks released before left nothing.
        assert_eq!(
            server.cmd(&["DBSIZE"]),
            (counters.len() + 1).to_string(),
            "{shown}: nothing else written"
        );
        let busy = other
            .lock(key.clone(), LockOptions::new())
            .await
            .expect_err("held by the other manager");
        assert!(busy.is_busy(), "{shown}: {busy}");
        assert_eq!(busy.key(), Some(key.as_str()), "{shown}");

        // A waiter subscribes to the key's channel and is woken by the release: with a 30 s
        // lease, nothing else could let it in within seconds.
        let waiter = {
            let other = other.clone();
            let key = key.clone();
            tokio::spawn(async move {
                let options = LockOptions::new().wait(PATIENCE);
                other.lock(key, options).await
            })
        };
        let channel = stored(&key);
        let subscribed = wait_until_async(PATIENCE, || {
            server.cmd(&["PUBSUB", "NUMSUB", &channel]).ends_with("\n1")
        })
        .await;
        assert!(subscribed, "{shown}: the waiter never subscribed");
        let released = Instant::now();
        guard.release().await.expect("release");
        let again = waiter
            .await
            .expect("waiter task")
            .unwrap_or_else(|err| panic!("{shown}: {err}\n{}", server.log()));
        assert!(released.elapsed() < Duration::from_secs(10), "{shown}");
        again.release().await.expect("release");
        assert!(!server.holds_lock(&stored(&key)), "{shown}");
    }
}

#[tokio::test]
async fn odd_keys_are_held_exclusively_in_memory_too() {
    let locks = LockManager::memory();
    for key in odd_keys() {
        let guard = locks
            .lock(key.clone(), LockOptions::new())
            .await
            .expect("free");
        let busy = locks
            .lock(key.clone(), LockOptions::new())
            .await
            .expect_err("held");
        assert!(busy.is_busy(), "{busy}");
        assert_eq!(busy.key(), Some(key.as_str()));
        guard.release().await.expect("release");
        let again = locks.lock(key, LockOptions::new()).await.expect("free");
        again.release().await.expect("release");
    }
}

lock_tests::on_backends!([memory, redis][an_empty_key_is_a_config_error_and_the_body_does_not_run]);

async fn an_empty_key_is_a_config_error_and_the_body_does_not_run(d: Deployment) {
    let (ran, err) = body_runs(&d.locks, "", LockOptions::new()).await;
    assert!(matches!(err, LockError::Config(_)), "{err}");
    assert!(!ran, "the body ran without a lock");
    if let Some(server) = d.server_of("lock:{}") {
        assert_eq!(server.cmd(&["DBSIZE"]), "0", "nothing written");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_slower_than_the_request_timeout_fails_the_acquire_and_leaves_nothing() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.addr());
    let locks = LockManager::builder()
        .url(proxy.url())
        .request_timeout(ms(200))
        .build()
        .await
        .unwrap_or_else(|err| panic!("{err}\n{}", server.log()));
    // Each way takes 300 ms: an answer takes 600 ms, three times the request timeout.
    proxy.set_delay(ms(300));
    let (ran, err) = body_runs(&locks, "slow", LockOptions::new()).await;
    let shown = err.to_string();
    assert!(matches!(err, LockError::Backend { .. }), "{shown}");
    assert!(shown.contains("`slow`"), "names the key: {shown}");
    assert!(shown.contains("no answer"), "says why: {shown}");
    assert!(!ran, "the body ran without a lock");

    // The acquire reached the server after the client gave up on it; the lock it took is given
    // back rather than left to block everyone for its 30 s lease.
    proxy.set_delay(Duration::ZERO);
    let gone = wait_until_async(PATIENCE, || !server.holds_lock(&stored("slow"))).await;
    assert!(gone, "the late lock was left behind\n{}", server.log());
    // Answers the proxy delayed before it was made fast may still be ahead on the connection:
    // a wait budget rides them out.
    let guard = locks
        .lock("slow", LockOptions::new().wait(Duration::from_secs(10)))
        .await
        .expect("free once the server is fast again");
    guard.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transient_slowness_is_waited_out_within_the_wait_budget() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.addr());
    let locks = LockManager::builder()
        .url(proxy.url())
        .request_timeout(ms(200))
        .build()
        .await
        .unwrap_or_else(|err| panic!("{err}\n{}", server.log()));
    server.cmd(&["CONFIG", "RESETSTAT"]);
    proxy.set_delay(ms(300));
    // Healed once an acquire has reached the server: 300 ms after it was sent, when the
    // client had given up on it.
    let heal = async {
        let reached = wait_until_async(PATIENCE, || {
            server
                .command_calls()
                .iter()
                .any(|(name, _)| name.starts_with("eval") || name == "exec")
        })
        .await;
        assert!(reached, "no acquire reached the server\n{}", server.log());
        proxy.set_delay(Duration::ZERO);
    };
    let options = LockOptions::new().wait(PATIENCE);
    let (guard, ()) = tokio::join!(locks.lock("slowly", options), heal);
    let guard = guard.unwrap_or_else(|err| panic!("{err}\n{}", server.log()));
    assert!(
        server
            .stored_lock(&stored("slowly"))
            .is_some_and(|lock| lock.state == "held"),
        "{}",
        server.log()
    );
    guard.release().await.expect("release");
    assert!(!server.holds_lock(&stored("slowly")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scripts_flushed_from_the_server_are_loaded_again() {
    let server = RedisServer::start();
    let locks = connect(&server).await;
    let options = LockOptions::new().ttl(Duration::from_secs(1));
    // Every script runs once, so the server knows all three before they are flushed.
    let warm = locks.lock("warm", options).await.expect("free");
    assert!(renewed(|| warm.remaining()).await, "{}", server.log());
    warm.release().await.expect("release");

    server.cmd(&["SCRIPT", "FLUSH"]);
    let guard = locks
        .lock("flushed", options)
        .await
        .unwrap_or_else(|err| panic!("acquire after a flush: {err}\n{}", server.log()));
    server.cmd(&["SCRIPT", "FLUSH"]);
    // Only a renewal after the flush moves the lease's end.
    assert!(
        renewed(|| guard.remaining()).await,
        "renewal after a flush\n{}",
        server.log()
    );
    assert!(guard.is_held(), "renewal after a flush");
    assert!(server.holds_lock(&stored("flushed")));
    server.cmd(&["SCRIPT", "FLUSH"]);
    guard
        .release()
        .await
        .unwrap_or_else(|err| panic!("release after a flush: {err}\n{}", server.log()));
    assert!(!server.holds_lock(&stored("flushed")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_refused_for_lack_of_memory_fail_the_acquire_and_spare_held_locks() {
    let server = RedisServer::start();
    let locks = connect(&server).await;
    let held = locks
        .lock("held", LockOptions::new().ttl(Duration::from_secs(1)))
        .await
        .expect("free");
    server.cmd(&["CONFIG", "SET", "maxmemory-policy", "noeviction"]);
    server.cmd(&["CONFIG", "SET", "maxmemory", "1"]);

    let (ran, err) = body_runs(&locks, "oom", LockOptions::new()).await;
    let shown = err.to_string();
    assert!(matches!(err, LockError::Backend { .. }), "{shown}");
    assert!(shown.contains("`oom`"), "names the key: {shown}");
    assert!(shown.contains("OOM"), "says why: {shown}");
    assert!(!ran, "the body ran without a lock");
    assert_eq!(server.cmd(&["EXISTS", &stored("oom")]), "0");

    // Renewing and releasing free memory or need none: a lock held before keeps working.
    assert!(
        renewed(|| held.remaining()).await,
        "renewed while memory is full\n{}",
        server.log()
    );
    assert!(held.is_held(), "renewed while memory is full");
    held.release().await.expect("released while memory is full");
    // A release deletes the lock: it needs no memory.
    assert_eq!(server.cmd(&["EXISTS", &stored("held")]), "0");

    server.cmd(&["CONFIG", "SET", "maxmemory", "0"]);
    let guard = locks
        .lock("oom", LockOptions::new())
        .await
        .expect("free once memory is back");
    guard.release().await.expect("release");
}

/// A fence counter that is not a number, or too large to count on exactly, is reported and left
/// alone: no lock is written that could hand out a token lower than one handed out before.
#[tokio::test]
async fn a_fence_counter_tokens_cannot_continue_from_fails_the_acquire_and_writes_nothing() {
    let server = RedisServer::start();
    let locks = connect(&server).await;
    for (key, counter) in [
        ("fence-text", "not-a-number"),
        ("fence-huge", "9007199254740993"),
        ("fence-negative", "-5"),
    ] {
        let fence = lock_runtime::inspect::fence_counter_key("lock:", &stored(key));
        server.cmd(&["SET", &fence, counter]);
        let (ran, err) = body_runs(&locks, key, LockOptions::new()).await;
        assert!(!ran, "{key}: the body ran");
        assert!(matches!(err, LockError::Backend { .. }), "{key}: {err}");
        assert!(err.to_string().contains("fence counter"), "{key}: {err}");
        assert_eq!(
            server.cmd(&["EXISTS", &stored(key)]),
            "0",
            "{key}: a lock was written"
        );
        // Not reset: an attempt may count it up (the transaction's INCR), never make it usable.
        let left = server.cmd(&["GET", &fence]);
        assert!(
            left.parse::<i64>()
                .map_or(true, |left| !(1..1 << 53).contains(&left)),
            "{key}: the counter became {left}"
        );
    }
}

/// Someone else's hash that happens to have a `token` field has no expiry, as a lock always
/// has: it is reported as foreign data, not waited for as a lock held forever.
#[tokio::test]
async fn a_foreign_hash_with_a_token_field_is_foreign_data_not_a_busy_lock() {
    let server = RedisServer::start();
    let locks = connect(&server).await;
    server.cmd(&["HSET", &stored("session"), "token", "abc", "user", "7"]);
    let started = Instant::now();
    let (ran, err) = body_runs(&locks, "session", LockOptions::new().wait(PATIENCE)).await;
    assert!(!ran);
    assert!(!err.is_busy(), "{err}");
    assert!(err.to_string().contains("not a lock"), "{err}");
    assert!(started.elapsed() < Duration::from_secs(10), "waited for it");
    assert_eq!(
        server.cmd(&["HGET", &stored("session"), "user"]),
        "7",
        "left untouched"
    );
}
