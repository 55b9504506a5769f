//! Servers configured by someone else: passwords, ACL users with few rights, eviction policies,
//! and the settings and URLs a manager refuses before it sends anything.

use std::time::Duration;

use lock_tests::logs::{Level, Logged};
use lock_tests::prelude::*;

#[tokio::test]
async fn a_url_without_the_password_the_server_requires_fails_at_connect() {
    let server = RedisServer::start_with(&["--requirepass", "s3cret"]);
    let url = format!("redis://{}", server.addr());
    let err = LockManager::connect(&url)
        .await
        .expect_err("the server requires a password");
    let shown = err.to_string();
    assert!(shown.contains("authentication required"), "{shown}");
    assert!(shown.contains("redis://:PASSWORD@host:port"), "{shown}");
    // With the password, the same server works.
    let locks = LockManager::connect(&server.url())
        .await
        .unwrap_or_else(|err| panic!("{err}\n{}", server.log()));
    let guard = locks.lock("k", LockOptions::new()).await.expect("free");
    guard.release().await.expect("release");
}

#[tokio::test]
async fn a_password_in_the_query_is_refused_without_being_shown() {
    let server = RedisServer::start_with(&["--requirepass", "s3cret"]);
    let url = format!("redis://{}/?password=s3cret", server.addr());
    let err = LockManager::connect(&url).await.expect_err("not read");
    assert!(matches!(err, LockError::Config(_)), "{err}");
    let shown = format!("{err} {err:?}");
    assert!(!shown.contains("s3cret"), "{shown}");
    assert!(shown.contains("USER:PASSWORD@host"), "{shown}");
}

#[tokio::test]
async fn an_upper_case_scheme_works_like_a_lower_case_one() {
    let server = RedisServer::start();
    let locks = LockManager::connect(&format!("REDIS://{}", server.addr()))
        .await
        .unwrap_or_else(|err| panic!("{err}\n{}", server.log()));
    let guard = locks.lock("k", LockOptions::new()).await.expect("free");
    guard.release().await.expect("release");
}

/// A Redis 7 user created without channel rights (`&*`), as new users are by default, and
/// without `SCRIPT`: every release still succeeds, waiting falls back to lease expiry, and the
/// reason is logged once at connect instead of an error per call.
#[tokio::test]
async fn an_acl_user_without_channel_or_script_rights_can_lock_and_release() {
    let server = RedisServer::start();
    // The rights plain locks need (docs/SERVERS.md lists those of every feature: tests/tests/acl.rs),
    // less the channels (and so also without SCRIPT or CONFIG).
    server.cmd(&[
        "ACL",
        "SETUSER",
        "locker",
        "on",
        ">pw",
        "~lock:*",
        "+evalsha",
        "+eval",
        "+get",
        "+set",
        "+del",
        "+incr",
        "+pexpire",
        "+pttl",
        "+time",
        "+type",
        "+hget",
        "+zadd",
        "+zrem",
        "+zrange",
        "+zrangebyscore",
        "+zcard",
        "+multi",
        "+exec",
        "+exists",
        "+info",
        "+ping",
        "+publish",
        "+subscribe",
        "+unsubscribe",
    ]);
    let url = format!("redis://locker:pw@{}", server.addr());
    let logged = Logged::default();
    let locks = {
        let _capture = logged.capture(Level::INFO);
        LockManager::connect(&url)
            .await
            .unwrap_or_else(|err| panic!("{err}\n{}", server.log()))
    };
    let log = logged.text();
    assert!(
        log.contains("may not publish to lock channels"),
        "no warning at connect:\n{log}"
    );
    for round in 0..3 {
        let guard = locks
            .lock("acl:job", LockOptions::new())
            .await
            .unwrap_or_else(|err| panic!("round {round}: {err}\n{}", server.log()));
        guard
            .release()
            .await
            .unwrap_or_else(|err| panic!("round {round}: release: {err}\n{}", server.log()));
    }
    assert!(!server.holds_lock("lock:{acl:job}"));
    // With the channels granted as docs/SERVERS.md says, nothing is reported and a waiter is woken
    // by the release.
    server.cmd(&["ACL", "SETUSER", "locker", "&lock:*"]);
    let granted = Logged::default();
    let notified = {
        let _capture = granted.capture(Level::INFO);
        LockManager::connect(&url).await.expect("connect")
    };
    assert!(
        !granted.text().contains("may not publish"),
        "{}",
        granted.text()
    );
    let held = notified
        .lock("acl:notified", LockOptions::new())
        .await
        .expect("free");
    // A waiter of another manager, as another process would have: only the release's
    // announcement wakes it before the 30 s lease runs out.
    let elsewhere = LockManager::connect(&url).await.expect("connect");
    let waiter = tokio::spawn(async move {
        let guard = elsewhere
            .lock("acl:notified", LockOptions::new().wait(PATIENCE))
            .await?;
        let entered = tokio::time::Instant::now();
        guard.release().await?;
        Ok::<_, LockError>(entered)
    });
    let awaited = wait_until_async(PATIENCE, || {
        server
            .stored_lock("lock:{acl:notified}")
            .is_some_and(|lock| lock.waiting)
    })
    .await;
    assert!(awaited, "the waiter never asked\n{}", server.log());
    let released = tokio::time::Instant::now();
    held.release().await.expect("release");
    let entered = waiter.await.expect("task").expect("woken");
    let waited = entered.duration_since(released);
    assert!(
        waited < Duration::from_secs(5),
        "not woken by the release: {waited:?}"
    );
    server.cmd(&["ACL", "SETUSER", "locker", "resetchannels"]);
    // A waiter is not told of the release; it enters when the short lease runs out.
    let held = locks
        .lock("acl:short", LockOptions::new().ttl(ms(500)).watchdog(false))
        .await
        .expect("free");
    let other = LockManager::connect(&url).await.expect("connect");
    let waited = tokio::spawn(async move {
        let started = tokio::time::Instant::now();
        let guard = other
            .lock("acl:short", LockOptions::new().wait(PATIENCE))
            .await?;
        guard.release().await?;
        Ok::<_, LockError>(started.elapsed())
    });
    let waited = waited
        .await
        .expect("task")
        .expect("entered after the lease");
    // At the end of the lease, not of the wait.
    assert!(waited < PATIENCE / 2, "{waited:?}");
    drop(held);
}

#[tokio::test]
async fn a_server_that_may_evict_lock_keys_is_reported_at_connect() {
    let server = RedisServer::start();
    server.cmd(&["CONFIG", "SET", "maxmemory-policy", "allkeys-lru"]);
    let logged = Logged::default();
    {
        let _capture = logged.capture(Level::INFO);
        LockManager::connect(&server.url())
            .await
            .unwrap_or_else(|err| panic!("{err}\n{}", server.log()));
    }
    let log = logged.text();
    assert!(log.contains("maxmemory-policy allkeys-lru"), "{log}");
    assert!(log.contains("noeviction"), "{log}");
    // The default policy says nothing.
    server.cmd(&["CONFIG", "SET", "maxmemory-policy", "noeviction"]);
    let quiet = Logged::default();
    {
        let _capture = quiet.capture(Level::INFO);
        LockManager::connect(&server.url()).await.expect("connect");
    }
    assert!(
        !quiet.text().contains("maxmemory-policy"),
        "{}",
        quiet.text()
    );
}

#[tokio::test]
async fn settings_that_cannot_work_are_refused_before_connecting() {
    let refused = [
        LockManager::builder()
            .url("redis://127.0.0.1:1")
            .request_timeout(Duration::ZERO),
        LockManager::builder()
            .url("redis://127.0.0.1:1")
            .key_prefix("locks:{app}:"),
    ];
    for builder in refused {
        let shown = format!("{builder:?}");
        let err = builder.build().await.expect_err(&shown);
        assert!(matches!(err, LockError::Config(_)), "{shown}: {err}");
    }
}

/// After an outside `DEL`, the holder's release says the lock was no longer its own, not that
/// renewals failed.
#[tokio::test]
async fn a_release_after_an_outside_delete_reports_another_owner_or_none() {
    let server = RedisServer::start();
    let locks = LockManager::connect(&server.url()).await.expect("connect");
    let guard = locks
        .lock("deleted", LockOptions::new())
        .await
        .expect("free");
    server.cmd(&["DEL", "lock:{deleted}"]);
    let err = guard.release().await.expect_err("gone");
    assert!(
        matches!(
            err,
            LockError::LeaseLost {
                reason: lock_runtime::LostReason::NotOwner,
                ..
            }
        ),
        "{err}"
    );
    assert!(!err.to_string().contains("no renewal succeeded"), "{err}");
}

/// A server that refuses scripts (an ACL without `EVALSHA`/`EVAL`, or a managed service that
/// disables scripting) cannot hold locks: `connect` fails saying so and how to fix it, naming the
/// server, instead of every acquire failing later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_refuses_scripts_fails_connect_saying_so() {
    let server = RedisServer::start();
    server.cmd(&[
        "ACL",
        "SETUSER",
        "noscript",
        "on",
        ">pw",
        "~lock:*",
        "&lock:*",
        "+@all",
        "-@scripting",
    ]);
    let url = format!("redis://noscript:pw@{}", server.addr());
    let err = LockManager::connect(&url)
        .await
        .expect_err("no scripts, no locks");
    let shown = err.to_string();
    assert!(shown.contains("refuses Lua scripts"), "{shown}");
    assert!(shown.contains("+evalsha +eval"), "{shown}");
    assert!(shown.contains(&server.addr().to_string()), "{shown}");
    assert!(
        shown.contains("no permissions to run the 'eval' command"),
        "{shown}"
    );
    assert!(!shown.contains(":pw"), "{shown}");

    // The fix the message gives, applied: locks work.
    server.cmd(&["ACL", "SETUSER", "noscript", "+evalsha", "+eval"]);
    let locks = LockManager::connect(&url)
        .await
        .unwrap_or_else(|err| panic!("connect: {err}\n{}", server.log()));
    let guard = locks
        .lock("report", LockOptions::new())
        .await
        .unwrap_or_else(|err| panic!("{err}\n{}", server.log()));
    guard.release().await.expect("release");
}

/// A loopback listener that answers every connection as an HTTP server answers a request it
/// cannot read, and closes it.
async fn http_server() -> std::net::SocketAddr {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind a loopback port");
    let addr = listener.local_addr().expect("its address");
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut request = [0u8; 512];
                let _ = conn.read(&mut request).await;
                let _ = conn
                    .write_all(
                        b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\
                          Connection: close\r\n\r\n",
                    )
                    .await;
            });
        }
    });
    addr
}

#[tokio::test]
async fn a_server_that_does_not_speak_redis_fails_connect_saying_what_to_check() {
    let addr = http_server().await;
    let url = format!("redis://{addr}");
    let err = LockManager::connect(&url)
        .await
        .expect_err("an HTTP server is no lock server");
    let shown = err.to_string();
    assert!(
        shown.contains(&format!(
            "the server at {addr} did not answer as Redis does"
        )),
        "{shown}"
    );
    assert!(shown.contains("the URL's port"), "{shown}");
    assert!(shown.contains("rediss://"), "{shown}");
    // It recurs as it is: the URL must change.
    assert!(!err.is_retryable(), "{shown}");
}
