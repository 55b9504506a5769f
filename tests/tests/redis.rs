//! Behaviour that needs a real Redis: other processes, faults on the wire, data written from
//! outside, and what goes over the wire.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use lock_runtime::LostReason;
use lock_tests::free_port;
use lock_tests::prelude::*;

const CONTENDER: &str = env!("CARGO_BIN_EXE_contender");

/// Whether `count` clients of `server` are subscribed to the release channel of the lock stored
/// at `stored_key`: waiters waiting for it, each on its manager's subscription.
fn subscribers(server: &RedisServer, stored_key: &str, count: usize) -> bool {
    server
        .cmd(&["PUBSUB", "NUMSUB", stored_key])
        .ends_with(&format!("\n{count}"))
}

#[test]
fn mutual_exclusion_holds_across_processes_and_tokens_follow_entry_order() {
    let server = RedisServer::start();
    let dir = std::env::temp_dir().join(format!("lock-exclusion-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let children: Vec<_> = (0..2)
        .map(|i| {
            let out = dir.join(format!("contender-{i}.log"));
            let child = Command::new(CONTENDER)
                .args(["exclusion", &server.url(), "shared", "16", "25"])
                .arg(&out)
                .spawn()
                .expect("spawn contender");
            (child, out)
        })
        .collect();
    let mut sections: Vec<(u128, u128, u64)> = Vec::new();
    for (mut child, out) in children {
        let status = child.wait().expect("contender ran");
        assert!(
            status.success(),
            "contender failed: {status}\n{}",
            server.log()
        );
        let text = std::fs::read_to_string(&out).expect("contender output");
        for line in text.lines() {
            let mut fields = line.split(' ');
            let mut next = || fields.next().expect("three fields");
            let enter = next().parse().expect("enter");
            let exit = next().parse().expect("exit");
            let token = next().parse().expect("token");
            sections.push((enter, exit, token));
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(sections.len(), 2 * 16 * 25);
    sections.sort_unstable();
    for pair in sections.windows(2) {
        let (before, after) = (pair[0], pair[1]);
        assert!(
            before.1 <= after.0,
            "critical sections overlap: {before:?} and {after:?}"
        );
        assert!(
            before.2 < after.2,
            "fencing tokens out of entry order: {before:?} then {after:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiter_takes_over_when_the_holder_process_is_killed() {
    let server = RedisServer::start();
    let mut holder = Command::new(CONTENDER)
        .args(["hold", &server.url(), "job", "1000"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn holder");
    let mut line = String::new();
    BufReader::new(holder.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("holder reports");
    assert!(line.starts_with("held "), "{line}\n{}", server.log());

    let locks = connect(&server).await;
    let busy = locks.lock("job", LockOptions::new()).await;
    assert!(busy.expect_err("held by the child").is_busy());
    holder.kill().expect("SIGKILL the holder");
    let killed = Instant::now();
    holder.wait().expect("reaped");

    let guard = locks
        .lock("job", LockOptions::new().wait(PATIENCE))
        .await
        .unwrap_or_else(|err| panic!("{err}\n{}", server.log()));
    // About one ttl (1 s) after the kill: the waiter asks again when the lease ends.
    let took = killed.elapsed();
    assert!(took < Duration::from_secs(3), "{took:?}");
    guard.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_the_key_from_outside_is_reported_and_aborts_the_body() {
    let server = RedisServer::start();
    let locks = connect(&server).await;
    let finished = Arc::new(AtomicBool::new(false));
    let flag = finished.clone();
    let started = Instant::now();
    // Renewed every second, a 3 s lease ends by itself only if renewals are two seconds late:
    // the loss is the renewal's.
    let options = LockOptions::new().ttl(Duration::from_secs(3));
    let (entered, inside) = tokio::sync::oneshot::channel();
    let section = locks.run_locked("deleted".into(), options, async move {
        let _ = entered.send(());
        tokio::time::sleep(Duration::from_secs(60)).await;
        flag.store(true, Ordering::SeqCst);
        Ok::<_, LockError>(())
    });
    let deleter = async {
        // Deleted once the body runs: the lock is then the section's, not a grant on its way.
        inside.await.expect("the body started");
        assert!(server.holds_lock("lock:{deleted}"), "{}", server.log());
        assert_eq!(
            server.cmd(&["DEL", "lock:{deleted}"]),
            "1",
            "{}",
            server.log()
        );
    };
    let (result, ()) = tokio::join!(section, deleter);
    match result {
        Err(LockError::LeaseLost { key, reason, .. }) => {
            assert_eq!(key, "deleted");
            assert_eq!(reason, LostReason::NotOwner);
        }
        other => panic!("expected LeaseLost, got {other:?}"),
    }
    assert!(!finished.load(Ordering::SeqCst));
    // Noticed at a renewal, long before the body would have ended.
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overwriting_the_owner_from_outside_is_reported_and_left_alone() {
    let server = RedisServer::start();
    let locks = connect(&server).await;
    // A 3 s lease renewed every second: the loss is found by a renewal, not by the lease's end.
    let guard = locks
        .lock("stolen", LockOptions::new().ttl(Duration::from_secs(3)))
        .await
        .expect("free");
    server.cmd(&[
        "SET",
        "lock:{stolen}",
        "held fence=1 token=someone-else waiting=0",
        "PX",
        "60000",
    ]);
    let reason = tokio::time::timeout(PATIENCE, guard.lost())
        .await
        .expect("told at the next renewal");
    assert_eq!(reason, LostReason::NotOwner);
    let err = guard.release().await.expect_err("not ours");
    assert!(err.is_lease_lost(), "{err}");
    // The other owner's lock was not touched.
    assert_eq!(
        server
            .stored_lock("lock:{stolen}")
            .and_then(|lock| lock.token),
        Some("someone-else".to_owned())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_connection_is_reported_before_the_server_expires_the_lock() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.addr());
    let locks = LockManager::builder()
        .url(proxy.url())
        .request_timeout(ms(300))
        .build()
        .await
        .unwrap_or_else(|err| panic!("{err}\n{}", server.log()));
    let guard = locks
        .lock("stalled", LockOptions::new().ttl(Duration::from_secs(1)))
        .await
        .expect("free");
    proxy.blackhole(true);
    // No renewal gets through any more. The holder's lease ends at the latest `ends_by`; the
    // server's at the earliest `expires_from` (a renewal still on its way could only move it
    // later). Measured in this order, a slow step only widens the gap between them.
    let left = guard.remaining();
    let ends_by = tokio::time::Instant::now() + left;
    let asked = tokio::time::Instant::now();
    let pttl: u64 = server
        .cmd(&["PTTL", "lock:{stalled}"])
        .parse()
        .expect("a lock with an expiry");
    let expires_from = asked + ms(pttl);
    // The holder gives up while the server still has the lock: nobody else can have entered.
    assert!(
        ends_by <= expires_from,
        "the holder counts on {left:?}, the server keeps it {pttl} ms\n{}",
        server.log()
    );
    let reason = tokio::time::timeout(PATIENCE, guard.lost())
        .await
        .expect("told when the lease ends");
    assert_eq!(reason, LostReason::Expired);
    drop(guard);
    proxy.blackhole(false);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_connection_aborts_the_body_with_lease_lost() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.addr());
    let locks = LockManager::builder()
        .url(proxy.url())
        .request_timeout(ms(300))
        .build()
        .await
        .unwrap_or_else(|err| panic!("{err}\n{}", server.log()));
    let options = LockOptions::new().ttl(Duration::from_secs(1));
    let section = locks.run_locked("stalled-body".into(), options, async {
        // Held: from now on the server hears nothing more from this client.
        proxy.blackhole(true);
        tokio::time::sleep(PATIENCE).await;
        Ok::<_, LockError>(())
    });
    assert!(section.await.expect_err("lease lost").is_lease_lost());
    proxy.blackhole(false);
}

/// The caller learns of a lost lease when the body is dropped, not when a stalled server
/// finally answers (or fails to answer) the release.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_lease_is_returned_when_the_body_is_dropped_not_after_the_release() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.addr());
    let locks = LockManager::builder()
        .url(proxy.url())
        .request_timeout(PATIENCE)
        .build()
        .await
        .unwrap_or_else(|err| panic!("{err}\n{}", server.log()));
    let options = LockOptions::new().ttl(ms(600));
    let started = tokio::time::Instant::now();
    let section = locks.run_locked("stalled-release".into(), options, async {
        proxy.blackhole(true);
        tokio::time::sleep(Duration::from_secs(30)).await;
        Ok::<_, LockError>(())
    });
    let result = section.await;
    let took = started.elapsed();
    proxy.blackhole(false);
    assert!(result.expect_err("lease lost").is_lease_lost());
    // Lost at about 0.6 s; the release would have waited up to the 20 s request timeout.
    assert!(took < Duration::from_secs(10), "returned after {took:?}");
}

#[tokio::test]
async fn unreachable_redis_is_a_backend_error() {
    let url = format!("redis://127.0.0.1:{}", free_port());
    let err = LockManager::connect(&url)
        .await
        .expect_err("nothing listens");
    assert!(matches!(err, LockError::Backend { .. }), "{err}");
    assert!(err.to_string().contains("127.0.0.1"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_gone_after_connect_fails_the_acquire_and_the_body_does_not_run() {
    let server = RedisServer::start();
    let locks = LockManager::builder()
        .url(server.url())
        .request_timeout(ms(500))
        .build()
        .await
        .expect("connect");
    server.kill();
    let ran = AtomicBool::new(false);
    let result = locks
        .run_locked("down".into(), LockOptions::new(), async {
            ran.store(true, Ordering::SeqCst);
            Ok::<_, LockError>(())
        })
        .await;
    let err = result.expect_err("server is down");
    assert!(matches!(err, LockError::Backend { .. }), "{err}");
    assert!(err.to_string().contains("down"), "names the key: {err}");
    assert!(!ran.load(Ordering::SeqCst), "body ran without the lock");
}

#[tokio::test]
async fn wrong_password_is_a_clear_error_that_does_not_show_the_password() {
    let server = RedisServer::start_with(&["--requirepass", "right-one"]);
    let url = format!("redis://:wrong-one@127.0.0.1:{}", server.port());
    let err = LockManager::connect(&url).await.expect_err("bad password");
    let shown = format!("{err} {err:?}");
    assert!(matches!(err, LockError::Backend { .. }), "{shown}");
    assert!(!shown.contains("wrong-one"), "password leaked: {shown}");
    // The right password works.
    let locks = LockManager::connect(&server.url())
        .await
        .expect("right password");
    let guard = locks.lock("k", LockOptions::new()).await.expect("free");
    guard.release().await.expect("release");
}

#[tokio::test]
async fn a_key_holding_other_data_is_a_backend_error_and_is_left_untouched() {
    let server = RedisServer::start();
    let locks = connect(&server).await;
    server.cmd(&["RPUSH", "lock:{theirs}", "a", "b"]);
    server.cmd(&["HSET", "lock:{their-hash}", "field", "value"]);
    for key in ["theirs", "their-hash"] {
        let ran = AtomicBool::new(false);
        let result = locks
            .run_locked(key.into(), LockOptions::new(), async {
                ran.store(true, Ordering::SeqCst);
                Ok::<_, LockError>(())
            })
            .await;
        let err = result.expect_err("not a lock");
        assert!(matches!(err, LockError::Backend { .. }), "{err}");
        assert!(err.to_string().contains(key), "{err}");
        assert!(!ran.load(Ordering::SeqCst));
    }
    assert_eq!(server.cmd(&["LLEN", "lock:{theirs}"]), "2");
    assert_eq!(server.cmd(&["HGET", "lock:{their-hash}", "field"]), "value");
}

#[tokio::test]
async fn uncontended_acquire_and_release_take_two_round_trips() {
    let server = RedisServer::start();
    let locks = connect(&server).await;
    // Seeds the slot's counter and loads the release script once.
    let warm = locks
        .lock("order:1", LockOptions::new())
        .await
        .expect("free");
    warm.release().await.expect("release");
    server.cmd(&["CONFIG", "RESETSTAT"]);

    let guard = locks
        .lock("order:1", LockOptions::new())
        .await
        .expect("free");
    guard.release().await.expect("release");

    // One transaction to take it (MULTI ... EXEC, sent together), one script to release it.
    // Redis 7 counts the commands of a transaction and of a script each under its own name;
    // those never cross the network on their own.
    const INSIDE: [&str; 6] = ["set", "pttl", "exists", "incr", "get", "del"];
    let calls = server.command_calls();
    let sent: Vec<_> = calls
        .iter()
        .filter(|(name, _)| !INSIDE.contains(&name.as_str()))
        .cloned()
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    assert_eq!(
        sent,
        [
            ("evalsha".to_owned(), 1),
            ("exec".to_owned(), 1),
            ("multi".to_owned(), 1)
        ],
        "{calls:?}"
    );
}

#[tokio::test]
async fn reentering_a_held_key_sends_nothing() {
    let server = RedisServer::start();
    let locks = connect(&server).await;
    let inner_locks = locks.clone();
    locks
        .run_locked("nest".into(), LockOptions::new(), async {
            server.cmd(&["CONFIG", "RESETSTAT"]);
            for _ in 0..10 {
                let inner = inner_locks.lock("nest", LockOptions::new()).await?;
                inner.release().await?;
            }
            assert_eq!(server.command_calls(), vec![]);
            Ok::<_, LockError>(())
        })
        .await
        .expect("section");
}

#[tokio::test]
async fn the_lock_says_who_holds_it_and_its_release_leaves_only_the_slot_counter() {
    let server = RedisServer::start();
    let locks = LockManager::builder()
        .url(server.url())
        .app_name("billing jobs")
        .build()
        .await
        .expect("connect");
    let guard = locks
        .lock("visible", LockOptions::new())
        .await
        .expect("free");
    let value = server.cmd(&["GET", "lock:{visible}"]);
    let lock = server.stored_lock("lock:{visible}").expect("a lock");
    assert_eq!(lock.state, "held", "{value}");
    assert!(lock.token.is_some(), "{value}");
    assert_eq!(lock.holder_field("app"), Some("billing jobs"), "{value}");
    assert_eq!(
        lock.holder_field("pid"),
        Some(std::process::id().to_string().as_str()),
        "{value}"
    );
    assert!(lock.holder_field("host").is_some(), "{value}");
    assert!(lock.holder_field("since").is_some(), "{value}");
    assert_eq!(
        server.fence_counter("lock:", "lock:{visible}"),
        Some(guard.fencing_token()),
        "the token comes from the slot's counter"
    );
    let token = guard.fencing_token();
    guard.release().await.expect("release");
    assert_eq!(
        server.cmd(&["EXISTS", "lock:{visible}"]),
        "0",
        "a released lock leaves no key"
    );
    let counter = lock_runtime::inspect::fence_counter_key("lock:", "lock:{visible}");
    assert_eq!(
        server.cmd(&["PTTL", &counter]),
        "-1",
        "the counter never expires"
    );
    assert_eq!(server.cmd(&["DBSIZE"]), "1", "only the counter is left");
    // The next holder continues from it.
    let next = locks
        .lock("visible", LockOptions::new())
        .await
        .expect("free");
    assert!(next.fencing_token() > token);
    next.release().await.expect("release");
}

#[tokio::test]
async fn without_metadata_the_lock_says_only_its_owner_and_a_lost_counter_starts_from_the_clock() {
    let server = RedisServer::start();
    let locks = LockManager::builder()
        .url(server.url())
        .holder_metadata(false)
        .build()
        .await
        .expect("connect");
    let first = locks.lock("lean", LockOptions::new()).await.expect("free");
    let lock = server.stored_lock("lock:{lean}").expect("a lock");
    assert!(lock.holder.is_empty(), "{lock:?}");
    let first_token = first.fencing_token();
    first.release().await.expect("release");
    assert_eq!(server.cmd(&["EXISTS", "lock:{lean}"]), "0");
    // The counter is lost (evicted, flushed): tokens still rise, from the server's clock.
    let counter = lock_runtime::inspect::fence_counter_key("lock:", "lock:{lean}");
    server.cmd(&["DEL", &counter]);
    let second = locks.lock("lean", LockOptions::new()).await.expect("free");
    let second_token = second.fencing_token();
    assert!(second_token > first_token);
    second.release().await.expect("release");
    // And after a counter was set back (a failover that lost writes) below its seed.
    server.cmd(&["SET", &counter, "7"]);
    let third = locks.lock("lean", LockOptions::new()).await.expect("free");
    assert!(third.fencing_token() > second_token);
    third.release().await.expect("release");
}

/// Waits for `key`, which an earlier version holds at `lock:{<key>}`, and checks that it got in
/// only once that version's lease ran out.
async fn enters_once_the_old_lease_ran_out(
    server: &RedisServer,
    locks: &LockManager,
    key: &str,
) -> LockGuard {
    // Read after `started`: the old lease runs at least `left` past it.
    let started = Instant::now();
    let left: u64 = server
        .cmd(&["PTTL", &format!("lock:{{{key}}}")])
        .parse()
        .expect("a lease");
    let guard = locks
        .lock(key, LockOptions::new().wait(PATIENCE))
        .await
        .unwrap_or_else(|err| panic!("{err}\n{}", server.log()));
    // PTTL rounds down to the millisecond.
    assert!(
        started.elapsed() + ms(1) >= ms(left),
        "entered before the old lease ran out: {:?} of {left} ms",
        started.elapsed()
    );
    guard
}

/// A deployment upgraded one instance at a time: a lock an earlier version holds (a hash with a
/// token) is waited for, never overwritten, and tokens continue above its fence counter.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_held_in_the_earlier_format_is_busy_until_it_expires_and_tokens_continue_above_it() {
    let server = RedisServer::start();
    let locks = connect(&server).await;
    // Far above the server clock in microseconds, still below 2^53.
    let old_fence: u64 = 8_000_000_000_000_000;
    server.cmd(&[
        "HSET",
        "lock:{upgrade}",
        "token",
        "their-token",
        "fence",
        &old_fence.to_string(),
        "host",
        "old-host",
    ]);
    server.cmd(&["PEXPIRE", "lock:{upgrade}", "3000"]);
    server.cmd(&[
        "SET",
        "lock:{upgrade}:fence",
        &old_fence.to_string(),
        "PX",
        "60000",
    ]);

    let busy = locks
        .lock("upgrade", LockOptions::new())
        .await
        .expect_err("held by the earlier version");
    assert!(busy.is_busy(), "{busy}");
    assert_eq!(
        server.cmd(&["HGET", "lock:{upgrade}", "token"]),
        "their-token",
        "overwritten"
    );
    let guard = enters_once_the_old_lease_ran_out(&server, &locks, "upgrade").await;
    assert!(
        guard.fencing_token() > old_fence,
        "{} after {old_fence}",
        guard.fencing_token()
    );
    guard.release().await.expect("release");
}

#[tokio::test]
async fn an_uncontended_pair_runs_no_acquire_script_and_announces_nothing() {
    let server = RedisServer::start();
    let locks = connect(&server).await;
    let warm = locks.lock("pair", LockOptions::new()).await.expect("free");
    warm.release().await.expect("release");
    server.cmd(&["CONFIG", "RESETSTAT"]);

    let guard = locks.lock("pair", LockOptions::new()).await.expect("free");
    guard.release().await.expect("release");

    // To take it: MULTI, SET NX GET, PTTL, EXISTS (the fair line), INCR (the slot's counter),
    // EXEC. To release it: the compare-and-delete script, GET and DEL. Nobody waited, so no
    // PUBLISH, and nothing is left but the counter.
    let mut calls = server.command_calls();
    calls.sort();
    let expected: Vec<(String, u64)> = [
        "del", "evalsha", "exec", "exists", "get", "incr", "multi", "pttl", "set",
    ]
    .iter()
    .map(|name| ((*name).to_owned(), 1))
    .collect();
    assert_eq!(calls, expected);
    assert_eq!(
        server.cmd(&["DBSIZE"]),
        "1",
        "only the slot's counter is left"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_is_announced_when_someone_was_told_the_lock_is_busy() {
    let server = RedisServer::start();
    let holder = connect(&server).await;
    let other = connect(&server).await;
    let guard = holder.lock("told", LockOptions::new()).await.expect("free");
    assert!(!server.stored_lock("lock:{told}").expect("held").waiting);
    // A caller that does not wait is told busy and leaves no mark: nobody to announce to.
    let busy = other
        .lock("told", LockOptions::new())
        .await
        .expect_err("held");
    assert!(busy.is_busy(), "{busy}");
    assert!(!server.stored_lock("lock:{told}").expect("held").waiting);
    // One that waits marks the lock as awaited, before it sleeps.
    let busy = other
        .lock("told", LockOptions::new().wait(ms(50)))
        .await
        .expect_err("held");
    assert!(busy.is_busy(), "{busy}");
    let lock = server.stored_lock("lock:{told}").expect("held");
    assert!(lock.waiting, "the busy answer is recorded: {lock:?}");
    server.cmd(&["CONFIG", "RESETSTAT"]);
    guard.release().await.expect("release");
    let published = server
        .command_calls()
        .into_iter()
        .find(|(name, _)| name == "publish")
        .map_or(0, |(_, count)| count);
    assert_eq!(published, 1);
}

#[test]
fn dropping_a_guard_never_blocks_a_current_thread_runtime() {
    let server = RedisServer::start();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        for locks in [LockManager::memory(), connect(&server).await] {
            let guard = locks.lock("drop", LockOptions::new()).await.expect("free");
            drop(guard);
            // The release runs on this same thread once we yield; ttl is 30 s, so only the
            // release lets this in within its wait.
            let again = locks
                .lock("drop", LockOptions::new().wait(Duration::from_secs(10)))
                .await
                .expect("released in the background");
            again.release().await.expect("release");
        }
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_release_wakes_one_waiter_and_each_waiter_gets_its_turn() {
    let server = RedisServer::start();
    let locks = connect(&server).await;
    let guard = locks.lock("queue", LockOptions::new()).await.expect("free");
    let mut waiters = Vec::new();
    for _ in 0..4 {
        // A manager each, so that each waiter's subscription shows on the server.
        let locks = connect(&server).await;
        waiters.push(tokio::spawn(async move {
            let options = LockOptions::new().wait(PATIENCE);
            let guard = locks.lock("queue", options).await?;
            guard.release().await
        }));
    }
    let waiting = wait_until_async(PATIENCE, || subscribers(&server, "lock:{queue}", 4)).await;
    assert!(waiting, "the waiters never all waited\n{}", server.log());
    let started = Instant::now();
    guard.release().await.expect("release");
    for waiter in waiters {
        waiter
            .await
            .expect("task")
            .expect("each waiter got the lock");
    }
    // Four handovers by notification; the 30 s lease never had to run out.
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_still_hears_the_release_after_its_connections_were_cut() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.addr());
    let holder_side = connect(&server).await;
    let waiter_side = LockManager::connect(&proxy.url())
        .await
        .unwrap_or_else(|err| panic!("{err}\n{}", server.log()));
    let guard = holder_side
        .lock("cut", LockOptions::new())
        .await
        .expect("free");
    let waiter = tokio::spawn(async move {
        let options = LockOptions::new().wait(PATIENCE);
        let guard = waiter_side.lock("cut", options).await?;
        guard.release().await
    });
    // Once the waiter has subscribed, cut every connection through the proxy, and wait for it
    // to subscribe again on a new one.
    let subscribed = || subscriber_ids(&server);
    assert!(
        wait_until_async(PATIENCE, || subscribers(&server, "lock:{cut}", 1)).await,
        "{}",
        server.log()
    );
    let before = subscribed();
    proxy.cut();
    // The holder's manager is subscribed too (to the notices channel), directly: the waiter's
    // subscription is the one on a connection that was not there before.
    let again = wait_until_async(PATIENCE, || {
        subscribers(&server, "lock:{cut}", 1) && subscribed().iter().any(|id| !before.contains(id))
    })
    .await;
    assert!(again, "the waiter never subscribed again\n{}", server.log());
    let released = Instant::now();
    guard.release().await.expect("release");
    waiter
        .await
        .expect("task")
        .unwrap_or_else(|err| panic!("{err}\n{}", server.log()));
    // The lease had 30 s left: the waiter heard the release on its new subscription.
    assert!(
        released.elapsed() < Duration::from_secs(10),
        "{:?}",
        released.elapsed()
    );
}

/// The ids of the server's clients that are subscribed to something.
fn subscriber_ids(server: &RedisServer) -> Vec<String> {
    server
        .cmd(&["CLIENT", "LIST", "TYPE", "pubsub"])
        .lines()
        .filter_map(|line| line.split(' ').find_map(|field| field.strip_prefix("id=")))
        .map(str::to_owned)
        .collect()
}

#[test]
fn builder_debug_does_not_show_the_password() {
    let builder = LockManager::builder().url("redis://user:pa/ss#word@127.0.0.1:1/0");
    let shown = format!("{builder:?}");
    assert!(
        !shown.contains("pa/ss") && !shown.contains("word"),
        "{shown}"
    );
    assert!(shown.contains("127.0.0.1:1"), "{shown}");
}

/// A rolling upgrade from 0.2: a lock 0.2 holds is busy until it expires and never overwritten,
/// a `free fence=` marker 0.2 left at a release neither blocks the next acquire nor lets its
/// token go down, and tokens continue above every token 0.2 recorded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_and_markers_of_0_2_are_honoured_and_tokens_continue_above_them() {
    let server = RedisServer::start();
    let locks = connect(&server).await;
    // Far above the server clock in microseconds, still below 2^53.
    let old_fence: u64 = 8_000_000_000_000_000;

    // Released by 0.2, keeping its last token: taken over at once, above it.
    server.cmd(&[
        "SET",
        "lock:{released}",
        &format!("free fence={old_fence}"),
        "PX",
        "60000",
    ]);
    let guard = locks
        .lock("released", LockOptions::new())
        .await
        .unwrap_or_else(|err| panic!("the marker blocked it: {err}\n{}", server.log()));
    assert!(
        guard.fencing_token() > old_fence,
        "{}",
        guard.fencing_token()
    );
    let first = guard.fencing_token();
    guard.release().await.expect("release");
    assert_eq!(server.cmd(&["EXISTS", "lock:{released}"]), "0");
    let again = locks
        .lock("released", LockOptions::new())
        .await
        .expect("free");
    assert!(again.fencing_token() > first);
    again.release().await.expect("release");

    // Held by 0.2: busy until its lease ends, never overwritten, and the next token above it.
    let held = format!(
        "held fence={} token=their-token waiting=0 since=1 host=old pid=1 app=",
        old_fence + 1_000
    );
    server.cmd(&["SET", "lock:{held}", &held, "PX", "2000"]);
    let busy = locks
        .lock("held", LockOptions::new())
        .await
        .expect_err("held by 0.2");
    assert!(busy.is_busy(), "{busy}");
    // (Marked as awaited, as 0.2 itself marks it, so that its release is announced.)
    let stored = server.stored_lock("lock:{held}").expect("still held");
    assert_eq!(stored.token.as_deref(), Some("their-token"), "overwritten");
    assert_eq!(stored.fence, old_fence + 1_000, "overwritten");
    let guard = enters_once_the_old_lease_ran_out(&server, &locks, "held").await;
    assert!(guard.fencing_token() > old_fence + 1_000);
    guard.release().await.expect("release");

    // Freed by 0.2 for its first fair waiter: that waiter's turn is honoured.
    let until = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_millis()
        + 60_000;
    server.cmd(&[
        "SET",
        "lock:{turn}",
        &format!("free fence={old_fence} next=their-waiter until={until}"),
        "PX",
        "60000",
    ]);
    let busy = locks
        .lock("turn", LockOptions::new())
        .await
        .expect_err("the 0.2 waiter's turn");
    assert!(busy.is_busy(), "{busy}");
}
