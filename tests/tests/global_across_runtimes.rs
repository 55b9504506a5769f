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

use lock_runtime::{LockError, LockManager, LockOptions, distributed_lock};
use lock_tests::RedisServer;
use tokio::sync::OnceCell;
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

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

#[distributed_lock(key = "global:order:<id>", ttl = "30s", wait = "5s")]
async fn place_order(id: u64) -> Result<u64, LockError> {
    Ok(id * 2)
}

#[distributed_lock(key = "global:slow:<id>", ttl = "300ms")]
async fn slow_job(id: u64) -> Result<bool, LockError> {
    tokio::time::sleep(ms(800)).await;
    Ok(lock_runtime::current().is_some_and(|held| held.is_held()))
}

#[distributed_lock(key = "global:shared:<id>", ttl = "30s", wait = "20s")]
async fn hold_for(id: u64, hold: Duration) -> Result<Instant, LockError> {
    let _ = id;
    tokio::time::sleep(hold).await;
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
    let holder = tokio::spawn(hold_for(id, ms(500)));
    tokio::time::sleep(ms(150)).await;
    let entered = enter(id).await.expect("waiter");
    let released = holder.await.expect("holder task").expect("holder");
    let after = entered.saturating_duration_since(released);
    assert!(
        after < Duration::from_secs(5),
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
    let cancelled = tokio::time::timeout(ms(200), never_finishes(5)).await;
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
