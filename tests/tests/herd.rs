//! No thundering herd: one release, or one lease running out, sends one waiter of a process to
//! the server, however many wait and however many masters announce the release.

use std::pin::pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use lock_tests::Masters;
use lock_tests::prelude::*;

/// How often a server ran `commands` since its stats were reset (on Redis 7, the commands of
/// scripts and transactions count each under its own name).
fn calls_of(server: &RedisServer, commands: &[&str]) -> u64 {
    server
        .cmd(&["INFO", "commandstats"])
        .lines()
        .filter_map(|line| {
            let (name, stats) = line.strip_prefix("cmdstat_")?.split_once(':')?;
            commands.contains(&name).then_some(stats)
        })
        .filter_map(|stats| {
            stats
                .split("calls=")
                .nth(1)?
                .split(',')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum()
}

async fn warm_up(locks: &LockManager) {
    let guard = locks
        .lock("warm-up", LockOptions::new())
        .await
        .expect("free");
    guard.release().await.expect("release");
}

/// `count` tasks of `locks` that wait for `key` and, once one has it, hold it until they are
/// aborted; returned once all of them wait: the first was told busy (`listens`: its manager
/// now listens on the server), the others joined the line in their process behind it (their
/// calls went to sleep) without asking the server.
async fn waiters(
    locks: &LockManager,
    key: &'static str,
    count: usize,
    listens: impl Fn() -> bool,
) -> Vec<tokio::task::JoinHandle<()>> {
    let mut tasks = Vec::new();
    for i in 0..count {
        let locks = locks.clone();
        let asked = Arc::new(AtomicBool::new(false));
        let flag = asked.clone();
        tasks.push(tokio::spawn(async move {
            let options = LockOptions::new().wait(Duration::from_secs(60));
            let mut call = pin!(locks.lock(key, options));
            let taken = std::future::poll_fn(|cx| {
                let polled = call.as_mut().poll(cx);
                if polled.is_pending() {
                    flag.store(true, Ordering::SeqCst);
                }
                polled
            })
            .await;
            if let Ok(_guard) = taken {
                std::future::pending::<()>().await;
            }
        }));
        let waits = wait_until_async(PATIENCE, || {
            asked.load(Ordering::SeqCst) && (i > 0 || listens())
        });
        assert!(waits.await, "waiter {i} never waited");
    }
    tasks
}

/// Whether a manager listens for the releases of `stored` on `server`: one of its callers was
/// told the lock is busy and waits.
fn someone_listens(server: &RedisServer, stored: &str) -> bool {
    server.cmd(&["PUBSUB", "NUMSUB", stored]).ends_with("\n1")
}

/// On Redlock every master announces a release; the process still sends one waiter.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_redlock_release_sends_one_waiter_of_a_process() {
    let masters = Masters::start(3);
    let connect = || async {
        LockManager::builder()
            .url(masters.url())
            .build()
            .await
            .unwrap_or_else(|err| panic!("{err}\n{}", masters.log()))
    };
    let owner = connect().await;
    let waiting = connect().await;
    // Every script in the masters' caches first: a first use costs a call more.
    warm_up(&owner).await;
    let guard = owner
        .lock("herd", LockOptions::new().ttl(Duration::from_secs(30)))
        .await
        .expect("free");
    let node = masters.node(0);
    let owner_token = node.stored_lock("lock:{herd}").and_then(|lock| lock.token);
    let tasks = waiters(&waiting, "herd", 4, || someone_listens(node, "lock:{herd}")).await;
    node.cmd(&["CONFIG", "RESETSTAT"]);
    guard.release().await.expect("release");
    // Taken by a waiter: a majority of the masters hold it under another owner token. (A
    // waiter woken by two masters' announcements may find the third still busy with the old
    // release, and hold the lock without it.)
    let taken = wait_until_async(PATIENCE, || {
        masters
            .nodes()
            .iter()
            .filter(|master| {
                master
                    .stored_lock("lock:{herd}")
                    .is_some_and(|lock| lock.state == "held" && lock.token != owner_token)
            })
            .count()
            >= 2
    });
    assert!(taken.await, "no waiter took it\n{}", masters.log());
    // One waiter's acquire, not one per waiter. A Redlock master's acquire script counts the
    // counter up when it grants (INCR) and reads the lease when it is busy (PTTL); its release
    // does neither, so the release, and any asking again of it under load, are not counted.
    let attempts = calls_of(node, &["incr", "pttl"]);
    assert!(
        attempts <= 2,
        "{attempts} acquire attempts on a master after one release, from 4 waiters\n{}",
        masters.log()
    );
    for task in tasks {
        task.abort();
    }
}

/// A lease that runs out is announced by nobody: the first waiter in line looks, the others
/// go on waiting.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_that_runs_out_sends_one_waiter_of_a_process() {
    let server = RedisServer::start();
    let connect = || async {
        LockManager::connect(&server.url())
            .await
            .unwrap_or_else(|err| panic!("{err}\n{}", server.log()))
    };
    let owner = connect().await;
    let waiting = connect().await;
    warm_up(&owner).await;
    let abandoned = owner
        .lock("expiring", LockOptions::new().ttl(ms(1500)).watchdog(false))
        .await
        .expect("free");
    let first = server
        .stored_lock("lock:{expiring}")
        .and_then(|lock| lock.token);
    // Its holder froze: no release, no renewal.
    std::mem::forget(abandoned);
    let listens = || someone_listens(&server, "lock:{expiring}");
    let tasks = waiters(&waiting, "expiring", 8, listens).await;
    server.cmd(&["CONFIG", "RESETSTAT"]);
    let taken = wait_until_async(PATIENCE, || {
        server
            .stored_lock("lock:{expiring}")
            .is_some_and(|lock| lock.state == "held" && lock.token != first)
    });
    assert!(
        taken.await,
        "no waiter took the lock after the expiry\n{}",
        server.log()
    );
    // One waiter's attempt, or two if it came a moment before the expiry, not one per waiter
    // (scripts and transactions: an attempt that the transaction sends on to a script counts
    // two).
    let calls = server.requests_served();
    assert!(
        calls <= 2,
        "{calls} attempts at one expiry from 8 waiters\n{}",
        server.log()
    );
    for task in tasks {
        task.abort();
    }
}
