//! A test suite as users write it: many `#[tokio::test]`s (one runtime each, run in any order
//! and in parallel) share one global default manager, set once per process by whichever test
//! comes first, on a runtime that is shut down when that test ends. Every test locks through
//! `#[distributed_lock]` fns: a plain call, a renewal, a waiter woken by a release, a section
//! dropped mid-body, nested calls.
//!
//! A process of its own, since the global default can be set only once.

use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use lock_runtime::distributed_lock;
use lock_tests::prelude::*;
use tokio::sync::{OnceCell, oneshot};
use tokio::time::Instant;

/// The server of the whole binary. Statics are never dropped, so a small shell stops it when
/// this process exits, however it exits: it waits for its stdin, which only this process holds
/// open, to close.
fn server() -> &'static RedisServer {
    static SERVER: OnceLock<(RedisServer, Child)> = OnceLock::new();
    let (server, _reaper) = SERVER.get_or_init(|| {
        let server = RedisServer::start();
        let reaper = Command::new("sh")
            .arg("-c")
            .arg(format!(
                "read _ignored; redis-cli -p {} shutdown nosave >/dev/null 2>&1",
                server.port()
            ))
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn the reaper shell");
        (server, reaper)
    });
    server
}

/// Connects the global default on first use, from whichever test's runtime comes first.
async fn global() -> LockManager {
    static GLOBAL: OnceCell<LockManager> = OnceCell::const_new();
    GLOBAL
        .get_or_init(|| async {
            let locks = LockManager::connect(&server().url())
                .await
                .unwrap_or_else(|err| panic!("connect: {err}\n{}", server().log()));
            lock_runtime::set_global_default(locks.clone()).expect("set once");
            locks
        })
        .await
        .clone()
}

#[distributed_lock(key = "global:order:<id>", ttl = "30s", wait = "5s")]
async fn place_order(id: u64) -> Result<u64, LockError> {
    Ok(id * 2)
}

/// Runs longer than its ttl, renewal after renewal, and says whether it is still held then.
///
/// The renewal driver runs on the runtime of whichever test started it, and that test may end
/// while this body runs; the manager starts the driver again on the runtime of its next use
/// (see `LockManagerBuilder::runtime`). So the body uses the manager while it waits, as a body
/// that does its work through locks would: a body that never does misses its renewals then.
#[distributed_lock(key = "global:slow:<id>", ttl = "1s")]
async fn slow_job(id: u64) -> Result<bool, LockError> {
    let held = lock_runtime::current().expect("inside");
    let locks = lock_runtime::global_default().expect("set");
    let other_key = format!("global:slow-touch:{id}");
    let started = Instant::now();
    while started.elapsed() <= Duration::from_secs(1) {
        // As in `renewed`: an end never earlier than the lease's end now ...
        let left = held.remaining();
        let end = Instant::now() + left;
        let moved = eventually(|| async {
            let other = locks.lock(other_key.as_str(), LockOptions::new()).await;
            other.expect("free").release().await.expect("release");
            // ... and one never later than the lease's end then.
            let now = Instant::now();
            let left = held.remaining();
            !left.is_zero() && now + left > end
        })
        .await;
        if !moved {
            return Ok(false);
        }
    }
    Ok(held.is_held())
}

/// Holds the lock, says so on `inside`, and gives it back when `release` fires; returns when it
/// gave it back.
#[distributed_lock(key = "global:shared:<id>", ttl = "30s", wait = "20s")]
async fn hold_until(
    id: u64,
    inside: oneshot::Sender<()>,
    release: oneshot::Receiver<()>,
) -> Result<Instant, LockError> {
    let _ = id;
    inside.send(()).expect("the test waits for it");
    let _ = release.await;
    Ok(Instant::now())
}

#[distributed_lock(key = "global:shared:<id>", ttl = "30s", wait = "20s")]
async fn enter(id: u64) -> Result<Instant, LockError> {
    let _ = id;
    Ok(Instant::now())
}

#[distributed_lock(key = "global:nested:<id>", ttl = "30s")]
async fn outer(id: u64) -> Result<u64, LockError> {
    inner(id).await
}

#[distributed_lock(key = "global:nested:<id>", ttl = "30s")]
async fn inner(id: u64) -> Result<u64, LockError> {
    Ok(lock_runtime::current().map_or(0, |held| held.fencing_token()))
}

#[distributed_lock(key = "global:cancelled:<id>", ttl = "30s")]
async fn never_finishes(id: u64) -> Result<(), LockError> {
    let _ = id;
    std::future::pending().await
}

/// The lease of a released lock is 30 s: only the release notification hands it over this
/// quickly.
async fn handover(id: u64) {
    let (inside, held) = oneshot::channel();
    let (release, released) = oneshot::channel();
    let holder = tokio::spawn(hold_until(id, inside, released));
    held.await.expect("the holder entered");
    let waiter = tokio::spawn(enter(id));
    // The waiter waits: subscribed to the lock's releases.
    let channel = format!("lock:{{global:shared:{id}}}");
    let waiting = wait_until_async(PATIENCE, || {
        server()
            .cmd(&["PUBSUB", "NUMSUB", &channel])
            .ends_with("\n1")
    })
    .await;
    assert!(waiting, "the waiter never waited\n{}", server().log());
    release.send(()).expect("the holder holds on");
    let entered = waiter.await.expect("waiter task").expect("waiter");
    let released = holder.await.expect("holder task").expect("holder");
    let after = entered.saturating_duration_since(released);
    assert!(
        after < Duration::from_secs(10),
        "waited {after:?} after the release\n{}",
        server().log()
    );
}

#[tokio::test]
async fn first_a_plain_call() {
    global().await;
    assert_eq!(place_order(1).await.expect("locked call"), 2);
    handover(1).await;
}

#[tokio::test]
async fn second_a_plain_call() {
    global().await;
    assert_eq!(place_order(2).await.expect("locked call"), 4);
    handover(2).await;
}

#[tokio::test]
async fn a_body_longer_than_its_ttl_is_renewed() {
    global().await;
    assert!(
        slow_job(3).await.expect("locked call"),
        "still held at the end"
    );
}

#[tokio::test]
async fn a_waiter_is_woken_by_the_release() {
    global().await;
    handover(4).await;
    handover(4).await;
}

#[tokio::test]
async fn a_section_dropped_mid_body_releases_its_lock() {
    let locks = global().await;
    let cancelled = tokio::time::timeout(ms(500), never_finishes(5)).await;
    assert!(cancelled.is_err(), "the body never finishes");
    // The release is spawned by the guard's drop; it lands well before the 30 s lease ends.
    let guard = locks
        .lock(
            "global:cancelled:5",
            LockOptions::new().wait(Duration::from_secs(5)),
        )
        .await
        .expect("released in the background");
    guard.release().await.expect("release");
}

#[tokio::test]
async fn nested_calls_re_enter() {
    global().await;
    assert!(outer(6).await.expect("locked call") > 0);
    assert_eq!(place_order(6).await.expect("locked call"), 12);
}
