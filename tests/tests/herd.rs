//! No thundering herd: one release, or one lease running out, sends one waiter of a process to
//! the server, however many wait and however many masters announce the release.

use std::time::Duration;

use lock_runtime::{LockManager, LockOptions};
use lock_tests::{Masters, RedisServer};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Script calls a server has served since its stats were reset.
fn script_calls(server: &RedisServer) -> u64 {
    server
        .cmd(&["INFO", "commandstats"])
        .lines()
        .filter(|line| line.starts_with("cmdstat_eval"))
        .filter_map(|line| {
            line.split("calls=")
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

/// `count` tasks of `locks` that wait for `key`, hold it for `hold` once they have it, and
/// release it.
fn waiters(
    locks: &LockManager,
    key: &'static str,
    count: usize,
    hold: Duration,
) -> Vec<tokio::task::JoinHandle<()>> {
    (0..count)
        .map(|_| {
            let locks = locks.clone();
            tokio::spawn(async move {
                let options = LockOptions::new().wait(Duration::from_secs(60));
                if let Ok(guard) = locks.lock(key, options).await {
                    tokio::time::sleep(hold).await;
                    let _ = guard.release().await;
                }
            })
        })
        .collect()
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
    let tasks = waiters(&waiting, "herd", 4, Duration::from_secs(30));
    tokio::time::sleep(ms(500)).await;
    masters.node(0).cmd(&["CONFIG", "RESETSTAT"]);
    guard.release().await.expect("release");
    tokio::time::sleep(ms(500)).await;
    // The release itself, then one waiter's acquire.
    let calls = script_calls(masters.node(0));
    assert!(
        calls <= 2,
        "{calls} script calls on a master after one release\n{}",
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
    // Its holder froze: no release, no renewal.
    std::mem::forget(abandoned);
    let tasks = waiters(&waiting, "expiring", 8, Duration::from_secs(30));
    tokio::time::sleep(ms(500)).await;
    server.cmd(&["CONFIG", "RESETSTAT"]);
    tokio::time::sleep(ms(1500)).await;
    assert!(
        server.holds_lock("lock:{expiring}"),
        "a waiter took the lock after the expiry"
    );
    let calls = script_calls(&server);
    assert!(
        calls <= 2,
        "{calls} attempts at one expiry from 8 waiters\n{}",
        server.log()
    );
    for task in tasks {
        task.abort();
    }
}
