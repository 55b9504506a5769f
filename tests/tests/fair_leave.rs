//! A fair waiter that leaves the line at its turn (it gave up, or its call was dropped, just as
//! the lock was freed for it) frees the lock for the next in line, or, with nobody left in line,
//! for anyone: and then says so, as a release does. A waiter without `fair`, told the lock was
//! busy before the line formed, used to hear nothing and look again only when the turn would
//! have ended.

use std::time::Duration;

use lock_tests::StoredLock;
use lock_tests::prelude::*;
use tokio::time::Instant;

/// The turn of the first in line, long enough that a waiter that slept through the leave is
/// told apart from one that heard of it, on any machine.
const TURN: Duration = Duration::from_secs(20);

fn fair(wait: Duration) -> LockOptions {
    LockOptions::new().wait(wait).fair(true)
}

/// A waiter without `fair` for `key` of `locks`, returning when it got the lock.
fn plain_waiter(locks: &LockManager, key: &'static str) -> tokio::task::JoinHandle<Instant> {
    let locks = locks.clone();
    tokio::spawn(async move {
        let options = LockOptions::new().wait(Duration::from_secs(60));
        let guard = locks
            .lock(key, options)
            .await
            .expect("the lock, in the end");
        let entered = Instant::now();
        guard.release().await.expect("release");
        entered
    })
}

async fn manager(url: String) -> LockManager {
    LockManager::builder()
        .url(url)
        .fair_turn(TURN)
        .build()
        .await
        .expect("connect")
}

/// The fair waiter runs behind a proxy that stalls while the lock is freed for it, so that it
/// cannot take its turn: it leaves (its call is dropped) while the lock waits for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fair_waiter_leaving_at_its_turn_wakes_a_waiter_without_fair_on_redis() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.addr());
    let holders = manager(server.url()).await;
    let plain = manager(server.url()).await;
    let stalled = manager(proxy.url()).await;
    let stored = |server: &RedisServer| server.stored_lock("lock:{job}");
    let holder = holders
        .lock("job", LockOptions::new().ttl(Duration::from_secs(30)))
        .await
        .expect("free");
    let waiter = plain_waiter(&plain, "job");
    let told_busy = eventually(|| async { stored(&server).is_some_and(|lock| lock.waiting) });
    assert!(told_busy.await, "never told busy\n{}", server.log());
    let in_line = tokio::spawn({
        let stalled = stalled.clone();
        async move { stalled.lock("job", fair(Duration::from_secs(60))).await }
    });
    let queued = eventually(|| async { server.cmd(&["ZCARD", "lock:{job}:queue"]) == "1" });
    assert!(
        queued.await,
        "the fair waiter never got in line\n{}",
        server.log()
    );

    proxy.blackhole(true);
    holder.release().await.expect("release");
    let reserved = stored(&server)
        .as_ref()
        .is_some_and(StoredLock::is_reserved);
    assert!(
        reserved,
        "not freed for the fair waiter: {:?}",
        stored(&server)
    );
    in_line.abort();
    assert!(in_line.await.expect_err("dropped").is_cancelled());
    // Its leave was sent into the stall; it reaches the server now.
    proxy.blackhole(false);
    let left = Instant::now();
    let entered = waiter.await.expect("waiter task");
    let waited = entered.duration_since(left);
    println!("redis: the waiter without fair entered {waited:?} after the fair waiter left");
    assert!(
        waited < Duration::from_secs(5),
        "the waiter without fair entered {waited:?} after the fair waiter left: it slept \
         towards the end of the {TURN:?} turn"
    );
}

/// memory:// on tokio's paused clock: the fair waiter's call is simply not polled while the
/// lock is freed for it, then dropped.
#[tokio::test(start_paused = true)]
async fn a_fair_waiter_leaving_at_its_turn_wakes_a_waiter_without_fair_in_memory() {
    let url = format!("memory://fair-leave-{}", std::process::id());
    let (holders, plain, fairs) = (
        manager(url.clone()).await,
        manager(url.clone()).await,
        manager(url).await,
    );
    let holder = holders
        .lock("job", LockOptions::new().ttl(Duration::from_secs(30)))
        .await
        .expect("free");
    let waiter = plain_waiter(&plain, "job");
    // On the paused clock, time moves only once every task waits: the waiter asked by then.
    tokio::time::sleep(ms(1)).await;
    let mut in_line = Box::pin(fairs.lock("job", fair(Duration::from_secs(60))));
    let asked = tokio::time::timeout(ms(1), &mut in_line).await;
    assert!(asked.is_err(), "the lock is held: the fair waiter waits");
    holder.release().await.expect("release");
    // Its turn began; it leaves without having taken it.
    drop(in_line);
    let left = Instant::now();
    let entered = waiter.await.expect("waiter task");
    let waited = entered.duration_since(left);
    println!("memory: the waiter without fair entered {waited:?} after the fair waiter left");
    assert!(waited < ms(100), "{waited:?}");
}
