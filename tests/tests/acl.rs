//! ACL rights: the line docs/SERVERS.md gives ("## ACL rights") grants every command the scripts
//! and transactions run, for every shape and feature, and nothing refused is left half-done or
//! reported as anything but a refused command.
//!
//! The line is read from the document itself, so that the two cannot drift apart.

use std::time::Duration;

use lock_runtime::{Deadlock, ElectionOptions, LockError, LockManager, LockOptions, Mode};
use lock_tests::deadlocks::ring;
use lock_tests::logs::{Level, Logged};
use lock_tests::prelude::*;
use lock_tests::server_version;

/// The `ACL SETUSER` line of docs/SERVERS.md's "ACL rights", for the user `app` with the
/// password `pw`, as arguments.
fn documented_line() -> Vec<String> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/SERVERS.md");
    let doc = std::fs::read_to_string(path).expect("docs/SERVERS.md");
    let section = doc
        .split_once("## ACL rights")
        .expect("an \"ACL rights\" section")
        .1;
    let line = section
        .lines()
        .find(|line| line.starts_with("ACL SETUSER"))
        .expect("an ACL SETUSER line in \"ACL rights\"");
    line.split_whitespace()
        .map(|word| word.replace(">PASSWORD", ">pw"))
        .collect()
}

/// The commands the documented line grants, in lower case.
fn granted() -> Vec<String> {
    documented_line()
        .iter()
        .filter_map(|word| word.strip_prefix('+'))
        .map(str::to_ascii_lowercase)
        .collect()
}

/// Creates the user `app` on `server` with exactly the documented line, less the commands
/// `without`; returns its URL.
fn documented_user(server: &RedisServer, without: &[&str]) -> String {
    let line = documented_line();
    let args: Vec<&str> = line
        .iter()
        .map(String::as_str)
        .filter(|word| {
            !without
                .iter()
                .any(|left| word.strip_prefix('+') == Some(left))
        })
        .collect();
    server.cmd(&args);
    format!("redis://app:pw@{}", server.addr())
}

/// The commands each Lua script runs (`redis.call`, `redis.pcall`) and asks for (`may`), in
/// lower case: every one the scripts may ever run.
fn script_commands() -> Vec<(String, String)> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../lock-runtime/scripts");
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).expect("the scripts") {
        let path = entry.expect("an entry").path();
        let source = std::fs::read_to_string(&path).expect("a script");
        let name = path
            .file_name()
            .expect("a name")
            .to_string_lossy()
            .into_owned();
        for (start, _) in source.match_indices("call('") {
            let rest = &source[start + "call('".len()..];
            let command = rest.split('\'').next().unwrap_or_default();
            found.push((name.clone(), command.to_ascii_lowercase()));
        }
        for (start, _) in source.match_indices("may(") {
            let args = source[start + "may(".len()..]
                .split(')')
                .next()
                .unwrap_or_default();
            for quoted in args.split('\'').skip(1).step_by(2) {
                found.push((name.clone(), quoted.to_ascii_lowercase()));
            }
        }
    }
    assert!(found.len() > 50, "the scripts were not read: {found:?}");
    found
}

#[test]
fn the_documented_line_grants_every_command_the_scripts_run() {
    let granted = granted();
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/SERVERS.md"))
        .expect("docs/SERVERS.md");
    for (script, command) in script_commands() {
        // Announcing on a Redis 7 cluster: granted beside the line, as the section says.
        if command == "spublish" {
            assert!(
                doc.contains("+spublish"),
                "{script}: SPUBLISH is not documented"
            );
            continue;
        }
        assert!(
            granted.contains(&command),
            "{script} runs {command}, which docs/SERVERS.md's ACL line does not grant: {granted:?}"
        );
    }
}

/// What the server refused to this user (`ACL LOG`): each entry's `object` (the command, key or
/// channel) and `context` (`toplevel`, `lua`, `multi`), also inside scripts, where a refused
/// `redis.pcall` is no error. Left out: `CONFIG GET`, which the connect tries and goes without
/// (granting it would show the server's passwords).
fn refusals(server: &RedisServer) -> Vec<String> {
    let reply = server.try_cmd(&["ACL", "LOG"]).expect("ACL LOG");
    let lock_tests::Reply::Array(entries) = reply else {
        panic!("ACL LOG answered {reply:?}");
    };
    entries
        .iter()
        .filter_map(|entry| {
            let lock_tests::Reply::Array(fields) = entry else {
                return Some(format!("{entry:?}"));
            };
            let field = |name: &str| {
                fields
                    .chunks(2)
                    .find(|pair| pair[0].to_string() == name)
                    .map(|pair| pair[1].to_string())
                    .unwrap_or_default()
            };
            let object = field("object");
            (object != "config|get")
                .then(|| format!("{} {object} ({})", field("reason"), field("context")))
        })
        .collect()
}

/// Locks, semaphores and read-write locks, each taken, awaited (by a manager of another
/// "process" and by a task of the same one, which is handed the lock) and released.
async fn every_shape(url: &str, server: &RedisServer) {
    let one = LockManager::connect(url)
        .await
        .unwrap_or_else(|err| panic!("connect: {err}\n{}", server.log()));
    let two = LockManager::connect(url).await.expect("connect");
    let wait = LockOptions::new().wait(PATIENCE);
    let short = LockOptions::new().ttl(Duration::from_secs(10));
    // Each shape, and the key that shows a waiter elsewhere was told it is busy.
    for (name, options, told) in [
        ("lock", short, "lock:{acl:lock}"),
        ("fair", short.fair(true), "lock:{acl:fair}:queue"),
        (
            "semaphore",
            short.permits(1),
            "lock:{acl:semaphore}:sem:waiting",
        ),
        (
            "write",
            short.mode(Mode::Write),
            "lock:{acl:write}:rw:waiting",
        ),
    ] {
        let key = format!("acl:{name}");
        let held = one
            .lock(&key, options)
            .await
            .unwrap_or_else(|err| panic!("{name}: {err}\n{}", server.log()));
        // A waiter elsewhere, told busy, then served by the release's announcement.
        let elsewhere = {
            let (two, key) = (two.clone(), key.clone());
            let options = options.wait(PATIENCE);
            tokio::spawn(async move { two.lock(&key, options).await?.release().await })
        };
        // And one of the same process, which the release hands the lock to.
        let here = {
            let (one, key) = (one.clone(), key.clone());
            let options = options.wait(PATIENCE);
            tokio::spawn(async move { one.lock(&key, options).await?.release().await })
        };
        let asked = wait_until_async(PATIENCE, || {
            elsewhere.is_finished()
                || match name {
                    "lock" => server.stored_lock(told).is_some_and(|lock| lock.waiting),
                    _ => server.cmd(&["EXISTS", told]) == "1",
                }
        })
        .await;
        assert!(
            asked,
            "{name}: the waiter was never told busy\n{}",
            server.log()
        );
        held.release()
            .await
            .unwrap_or_else(|err| panic!("{name}: release: {err}\n{}", server.log()));
        elsewhere
            .await
            .expect("task")
            .unwrap_or_else(|err| panic!("{name}: the waiter elsewhere: {err}"));
        here.await
            .expect("task")
            .unwrap_or_else(|err| panic!("{name}: the waiter here: {err}"));
    }
    // Readers share; a writer that waits marks itself, and readers queue behind it.
    let read = one
        .read_lock("acl:rw", short)
        .await
        .unwrap_or_else(|err| panic!("read: {err}\n{}", server.log()));
    let writer = {
        let two = two.clone();
        tokio::spawn(async move { two.write_lock("acl:rw", wait).await?.release().await })
    };
    let marked = wait_until_async(PATIENCE, || {
        server.cmd(&["EXISTS", "lock:{acl:rw}:rw:writer-waiting"]) == "1"
    })
    .await;
    assert!(
        marked,
        "the writer never marked itself waiting\n{}",
        server.log()
    );
    let refused = one
        .read_lock("acl:rw", LockOptions::new())
        .await
        .expect_err("a new reader waits behind the writer");
    assert!(refused.is_busy(), "{refused}");
    read.release().await.expect("read released");
    writer
        .await
        .expect("task")
        .expect("the writer, after the reader");
    // Kept for hold_at_least, and renewed by the watchdog meanwhile.
    let kept = one
        .lock("acl:kept", short.hold_at_least(Duration::from_secs(1)))
        .await
        .expect("free");
    kept.release().await.expect("kept");
    // Renewed by the watchdog (every third of the lease) a few times: whether every renewal
    // was granted is what the server's log of refusals tells.
    let renewed = one
        .lock(
            "acl:renewed",
            LockOptions::new().ttl(Duration::from_secs(1)),
        )
        .await
        .expect("free");
    tokio::time::sleep(Duration::from_secs(2)).await;
    drop(renewed);
    // An election, won and given up.
    let leadership = one
        .elect(
            "acl:leader",
            ElectionOptions::new().ttl(Duration::from_secs(3)),
        )
        .expect("an election");
    leadership.elected().await.expect("elected");
    leadership.step_down().await.expect("stepped down");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_with_exactly_the_documented_rights_runs_every_shape_with_nothing_refused() {
    let server = RedisServer::start();
    let url = documented_user(&server, &[]);
    every_shape(&url, &server).await;
    // Waits published for deadlock detection across processes.
    let one = LockManager::connect(&url).await.expect("connect");
    let two = LockManager::connect(&url).await.expect("connect");
    let options = LockOptions::new()
        .ttl(Duration::from_secs(10))
        .wait(Duration::from_secs(30))
        .deadlock(Deadlock::Fail);
    let outcomes = ring(
        vec![
            (one, "acl:d1".into(), "acl:d2".into()),
            (two, "acl:d2".into(), "acl:d1".into()),
        ],
        options,
    )
    .await;
    let gave_up = outcomes
        .iter()
        .filter(|(outcome, _)| matches!(outcome, Err(LockError::Deadlock { .. })))
        .count();
    assert_eq!(gave_up, 1, "{outcomes:?}");
    let refused = refusals(&server);
    assert!(
        refused.is_empty(),
        "commands refused to the documented user: {refused:?}"
    );
}

/// A fair lock held by `app` (without `without`) and awaited in line by a fully granted user.
async fn fair_lock_with_a_waiter(
    server: &RedisServer,
    without: &[&str],
) -> (
    LockGuard,
    tokio::task::JoinHandle<Result<LockGuard, LockError>>,
) {
    let url = documented_user(server, without);
    let holder = LockManager::connect(&url).await.expect("connect");
    let guard = holder
        .lock(
            "acl:line",
            LockOptions::new().ttl(Duration::from_secs(30)).fair(true),
        )
        .await
        .unwrap_or_else(|err| panic!("{err}\n{}", server.log()));
    let waiter = LockManager::connect(&server.url()).await.expect("connect");
    let waiting = tokio::spawn(async move {
        waiter
            .lock("acl:line", LockOptions::new().wait(PATIENCE).fair(true))
            .await
    });
    let queued = wait_until_async(PATIENCE, || {
        server.cmd(&["ZCARD", "lock:{acl:line}:queue"]) == "1"
    })
    .await;
    assert!(queued, "the waiter never got in line\n{}", server.log());
    (guard, waiting)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fair_release_refused_a_command_leaves_the_lock_held_and_names_the_command() {
    let server = RedisServer::start();
    let (guard, waiting) = fair_lock_with_a_waiter(&server, &["zscore"]).await;
    let err = guard.release().await.expect_err("the release needs ZSCORE");
    let shown = err.to_string();
    assert!(shown.contains("the server refused"), "{shown}");
    if server_version() >= (7, 0, 0) {
        // Asked ahead, and named (before Redis 7.0 the server's refusal names no command).
        assert!(
            shown.contains("the server refused the command ZSCORE for this user (ACL)"),
            "{shown}"
        );
        assert!(shown.contains("ACL SETUSER <user> +zscore"), "{shown}");
    }
    assert!(!shown.contains(":pw"), "{shown}");
    // Nothing was written: the lock is still held, not freed for a waiter who was never told.
    let stored = server.stored_lock("lock:{acl:line}").expect("still stored");
    assert_eq!(stored.state, "held", "{stored:?}");
    assert!(!stored.is_reserved(), "{stored:?}");
    assert_eq!(server.cmd(&["ZCARD", "lock:{acl:line}:queue"]), "1");
    waiting.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fair_release_with_the_documented_rights_serves_the_waiter_at_once() {
    let server = RedisServer::start();
    let (guard, waiting) = fair_lock_with_a_waiter(&server, &[]).await;
    let released = tokio::time::Instant::now();
    guard.release().await.expect("released");
    let served = waiting.await.expect("task").expect("served");
    assert!(
        released.elapsed() < Duration::from_secs(5),
        "served only when the turn ran out: {:?}",
        released.elapsed()
    );
    served.release().await.expect("released");
    assert!(refusals(&server).is_empty(), "{:?}", refusals(&server));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_lock_refused_a_command_names_it_rather_than_blaming_the_data() {
    let server = RedisServer::start();
    let url = documented_user(&server, &["zremrangebyscore"]);
    let locks = LockManager::connect(&url).await.expect("connect");
    let err = locks
        .read_lock("acl:report", LockOptions::new())
        .await
        .expect_err("a read share needs ZREMRANGEBYSCORE");
    let shown = err.to_string();
    assert!(!shown.contains("not a read-write lock"), "{shown}");
    assert!(shown.contains("refused"), "{shown}");
    if server_version() >= (7, 0, 0) {
        assert!(
            shown.contains("the server refused the command ZREMRANGEBYSCORE for this user (ACL)"),
            "{shown}"
        );
    }
    assert!(!err.is_retryable(), "{err:?}");
    // Nothing of the lock was written.
    let written = server.stored_keys();
    assert!(written.is_empty(), "{written:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_names_the_rights_the_user_lacks_and_is_quiet_with_the_documented_ones() {
    if server_version() < (7, 0, 0) {
        // Before Redis 7.0 the server cannot be asked.
        return;
    }
    let server = RedisServer::start();
    let url = documented_user(&server, &["zscore", "hset"]);
    let logged = Logged::default();
    {
        let _capture = logged.capture(Level::INFO);
        LockManager::connect(&url)
            .await
            .unwrap_or_else(|err| panic!("{err}\n{}", server.log()));
    }
    let log = logged.text();
    assert!(log.contains("this user may not run ZSCORE HSET"), "{log}");
    assert!(log.contains("ACL SETUSER <user> +zscore +hset"), "{log}");
    assert!(!log.contains(":pw"), "{log}");

    let url = documented_user(&server, &[]);
    let quiet = Logged::default();
    {
        let _capture = quiet.capture(Level::INFO);
        LockManager::connect(&url).await.expect("connect");
    }
    assert!(!quiet.text().contains("may not"), "{}", quiet.text());
}
