//! Errors say whether trying again may help ([`LockError::is_retryable`]), and the library acts
//! on it: a dropped guard's release is not sent again after a failure that would recur.

use std::time::Duration;

use lock_tests::logs::{Level, Logged};
use lock_tests::prelude::*;

/// What the errors a caller meets say about trying again.
#[tokio::test]
async fn errors_say_whether_trying_again_may_help() {
    let url = format!("memory://retry-{}", std::process::id());
    let locks = LockManager::connect(&url).await.expect("memory");
    let held = locks
        .lock("retry:busy", LockOptions::new())
        .await
        .expect("free");
    let other = LockManager::connect(&url).await.expect("memory");
    let busy = other
        .lock("retry:busy", LockOptions::new())
        .await
        .expect_err("held elsewhere");
    assert!(busy.is_busy() && busy.is_retryable(), "{busy:?}");
    let itself = locks
        .lock("retry:busy", LockOptions::new().wait(ms(100)))
        .await
        .expect_err("held by this task");
    assert!(!itself.is_retryable(), "{itself:?}");
    held.release().await.expect("release");

    let config = locks
        .lock("retry:config", LockOptions::new().ttl(Duration::ZERO))
        .await
        .expect_err("no lease");
    assert!(!config.is_retryable(), "{config:?}");

    // Nobody listens there: a refused connection may pass.
    let port = lock_tests::free_port();
    let refused = LockManager::connect(&format!("redis://127.0.0.1:{port}"))
        .await
        .expect_err("nobody listens");
    assert!(
        matches!(refused, LockError::Backend { .. }) && refused.is_retryable(),
        "{refused:?}"
    );

    let server = RedisServer::start();
    let bad_password = format!("redis://nobody:wrong@{}", server.addr());
    let denied = LockManager::connect(&bad_password)
        .await
        .expect_err("bad credentials");
    assert!(!denied.is_retryable(), "{denied:?}");

    // Data at the key that is not a lock stays there.
    let locks = connect(&server).await;
    server.cmd(&["HSET", "lock:{retry:foreign}", "owner", "someone"]);
    let foreign = locks
        .lock("retry:foreign", LockOptions::new())
        .await
        .expect_err("not a lock");
    assert!(!foreign.is_retryable(), "{foreign:?}");

    locks.shutdown().await.expect("shut down");
    let shut = locks
        .lock("retry:shut", LockOptions::new())
        .await
        .expect_err("shut down");
    assert!(shut.is_shut_down() && !shut.is_retryable(), "{shut:?}");
}

/// How many calls of `command` the server refused before running them (`rejected_calls`, Redis
/// 7: an ACL that denies it, for one).
fn rejected_calls(server: &RedisServer, command: &str) -> u64 {
    let stats = server.cmd(&["INFO", "commandstats"]);
    let prefix = format!("cmdstat_{command}:");
    stats
        .lines()
        .find_map(|line| line.strip_prefix(prefix.as_str()))
        .and_then(|fields| {
            fields
                .split(',')
                .find_map(|field| field.strip_prefix("rejected_calls="))
        })
        .and_then(|count| count.trim().parse().ok())
        .unwrap_or(0)
}

/// A dropped guard's release that the server refuses, and would refuse again (the user lost
/// the right to run scripts, and to delete natively where the server can), is sent once, not again and again until the lease runs out.
/// (Current-thread runtime: the background release logs on this thread.)
#[tokio::test]
async fn a_background_release_is_not_sent_again_after_a_failure_that_would_recur() {
    if lock_tests::server_version() < (7, 0, 0) {
        // Counting the refused calls needs `rejected_calls` (Redis 7.0).
        eprintln!("skipped: the server counts no rejected calls before Redis 7.0");
        return;
    }
    let server = RedisServer::start();
    server.cmd(&[
        "ACL", "SETUSER", "locker", "on", ">pw", "~lock:*", "&lock:*", "+@all",
    ]);
    let url = format!("redis://locker:pw@{}", server.addr());
    let locks = LockManager::connect(&url)
        .await
        .unwrap_or_else(|err| panic!("{err}\n{}", server.log()));
    let options = LockOptions::new().ttl(Duration::from_secs(30));
    let guard = locks.lock("refused", options).await.expect("free");
    server.cmd(&["ACL", "SETUSER", "locker", "-@scripting"]);
    // Where the server releases natively (Valkey 9.0's DELIFEQ, Redis 8.4's DELEX), that right
    // goes too; an older server refuses to name a command it does not know, which is ignored.
    for native in ["-delifeq", "-delex"] {
        let _ = server.try_cmd(&["ACL", "SETUSER", "locker", native]);
    }
    let logged = Logged::default();
    let _capture = logged.capture(Level::WARN);
    drop(guard);
    let gave_up = eventually(|| async { logged.text().contains("release failed") }).await;
    let text = logged.text();
    assert!(gave_up, "the background release never gave up:\n{text}");
    assert!(text.contains("would again"), "{text}");
    let sent: u64 = ["evalsha", "eval", "delifeq", "delex"]
        .into_iter()
        .map(|command| rejected_calls(&server, command))
        .sum();
    assert_eq!(sent, 1, "the refused release was sent {sent} times");
    assert!(
        server.holds_lock("lock:{refused}"),
        "it expires with its lease"
    );
}
