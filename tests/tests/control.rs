//! Control over a lock's holder on memory://: a request to let go (`request_release`) and a
//! steal (`steal`), between two managers of one `memory://<name>` table, as two processes share
//! a server. Each prints the measured notification latency (shown with `--nocapture`).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use lock_runtime::fence::{self, Fence, FenceError};
use lock_runtime::{LostReason, distributed_lock};
use lock_tests::prelude::*;
use sqlx::sqlite::SqlitePoolOptions;
use tokio::time::timeout;

/// A lease far longer than any test waits: only a release or a steal ends it.
const LONG: Duration = Duration::from_secs(60);

fn long() -> LockOptions {
    LockOptions::new().ttl(LONG)
}

/// Two managers on the table `memory://<name>`, as two processes on one server: the holder's
/// and the operator's (named `ops`).
async fn two_processes(name: &str) -> (LockManager, LockManager) {
    let url = format!("memory://control-{name}");
    let holder = LockManager::connect(&url).await.expect("memory manager");
    let ops = LockManager::builder()
        .url(&url)
        .app_name("ops")
        .build()
        .await
        .expect("memory manager");
    (holder, ops)
}

/// Waits for `future` within [`PATIENCE`]; what it gave and how long it took.
async fn timed<T>(what: &str, future: impl std::future::Future<Output = T>) -> (T, Duration) {
    let began = Instant::now();
    let done = timeout(PATIENCE, future)
        .await
        .unwrap_or_else(|_| panic!("{what} did not come within {PATIENCE:?}"));
    let took = began.elapsed();
    println!("{what}: {} µs", took.as_micros());
    (done, took)
}

/// The other manager's try of `key` is busy.
async fn busy_for(locks: &LockManager, key: &str) {
    match locks.lock(key, long().wait(Duration::ZERO)).await {
        Err(LockError::Busy { .. }) => {}
        other => panic!("`{key}` is not busy for another manager: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_request_reaches_the_holder_on_another_manager_with_who_asked() {
    let (holder, ops) = two_processes("request").await;
    let guard = holder.lock("report", long()).await.expect("free");
    ops.request_release("report", "deploy at 14:00")
        .await
        .expect("asked");
    let (request, _) = timed("release request heard", guard.release_requested()).await;
    assert_eq!(request.key(), "report");
    assert!(request.from().starts_with("ops on "), "{request}");
    assert!(request.from().ends_with(": deploy at 14:00"), "{request}");
    assert!(
        request
            .from()
            .contains(&format!("pid {}", std::process::id())),
        "{request}"
    );
    guard.release().await.expect("released");
}

#[distributed_lock(key = "nightly:<day>", ttl = "60s", manager = locks)]
async fn nightly(
    locks: &LockManager,
    day: u32,
    started: &tokio::sync::Notify,
) -> Result<String, LockError> {
    started.notify_one();
    let current = lock_runtime::current().expect("inside the section");
    Ok(current.release_requested().await.from().to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inside_a_locked_body_current_release_requested_fires() {
    let (holder, ops) = two_processes("attribute").await;
    let started = Arc::new(tokio::sync::Notify::new());
    let body = tokio::spawn({
        let started = started.clone();
        async move { nightly(&holder, 7, &started).await }
    });
    started.notified().await;
    let began = Instant::now();
    ops.request_release("nightly:7", "maintenance")
        .await
        .expect("asked");
    let from = timeout(PATIENCE, body)
        .await
        .expect("the body returned when asked")
        .expect("the body ran")
        .expect("the section ended well");
    println!(
        "release request heard inside the body: {} µs",
        began.elapsed().as_micros()
    );
    assert!(from.ends_with(": maintenance"), "{from}");
    // The body returned, so the section released: the lock is free.
    let again = ops.lock("nightly:7", long().wait(Duration::ZERO)).await;
    again.expect("released after the body").release().await.ok();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_that_ignores_the_request_keeps_the_lock() {
    let (holder, ops) = two_processes("ignored").await;
    let guard = holder.lock("import", long()).await.expect("free");
    ops.request_release("import", "please")
        .await
        .expect("asked");
    timed("release request heard", guard.release_requested()).await;
    busy_for(&ops, "import").await;
    assert!(guard.is_held());
    // Asked twice, it still decides: the first request is the one it keeps.
    ops.request_release("import", "again").await.expect("asked");
    assert!(guard.release_requested().await.from().ends_with(": please"));
    busy_for(&ops, "import").await;
    guard
        .release()
        .await
        .expect("the holder releases when it chooses");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_for_a_free_lock_is_harmless() {
    let (holder, ops) = two_processes("free").await;
    ops.request_release("idle", "nobody holds it")
        .await
        .expect("a request nobody hears is no error");
    // A later holder was not asked: its request has not come.
    let guard = holder.lock("idle", long()).await.expect("free");
    let asked = timeout(Duration::from_millis(50), guard.release_requested()).await;
    assert!(asked.is_err(), "a later holder heard {asked:?}");
    guard.release().await.expect("released");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_a_plain_lock_is_asked_not_a_semaphore_of_its_name() {
    let (holder, ops) = two_processes("shapes").await;
    let permit = holder.semaphore("pool", 2, long()).await.expect("a permit");
    let lock = holder.lock("pool", long()).await.expect("free");
    ops.request_release("pool", "drain").await.expect("asked");
    timed("release request heard", lock.release_requested()).await;
    let permit_asked = timeout(Duration::from_millis(50), permit.release_requested()).await;
    assert!(permit_asked.is_err(), "the semaphore's holder was asked");
    lock.release().await.expect("released");
    permit.release().await.expect("released");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_steal_loses_the_victims_lease_as_stolen_with_a_greater_fence() {
    let (holder, ops) = two_processes("steal").await;
    let victim = holder.lock("batch", long()).await.expect("free");
    let began = Instant::now();
    let thief = ops
        .steal("batch", long(), "batch stuck for an hour")
        .await
        .expect("stolen");
    let reason = timeout(PATIENCE, victim.lost())
        .await
        .expect("lost in time");
    println!(
        "steal heard by the victim: {} µs after the steal began",
        began.elapsed().as_micros()
    );
    assert_eq!(reason, LostReason::Stolen);
    assert!(thief.fencing_token() > victim.fencing_token());
    assert!(thief.stolen_from().is_some(), "the steal names its victim");
    busy_for(&holder, "batch").await;
    match victim.release().await {
        Err(LockError::LeaseLost { key, reason, .. }) => {
            assert_eq!(key, "batch");
            assert_eq!(reason, LostReason::Stolen, "the release says why");
        }
        other => panic!("the victim's release answered {other:?}"),
    }
    assert!(
        thief.is_held(),
        "the victim's release took the thief's lock"
    );
    busy_for(&holder, "batch").await;
    thief.release().await.expect("released");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_steal_of_a_free_lock_just_takes_it() {
    let (holder, ops) = two_processes("steal-free").await;
    let thief = ops.steal("spare", long(), "warm-up").await.expect("taken");
    assert_eq!(thief.stolen_from(), None);
    busy_for(&holder, "spare").await;
    thief.release().await.expect("released");
    holder
        .lock("spare", long())
        .await
        .expect("free again")
        .release()
        .await
        .expect("released");
}

#[distributed_lock(key = "export:<name>", ttl = "60s", manager = locks)]
async fn export(
    locks: &LockManager,
    name: &str,
    started: &tokio::sync::Notify,
) -> Result<u32, LockError> {
    started.notify_one();
    std::future::pending::<()>().await;
    Ok(1)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_locked_body_whose_lock_is_stolen_is_stopped_with_stolen() {
    let (holder, ops) = two_processes("attribute-steal").await;
    let started = Arc::new(tokio::sync::Notify::new());
    let call = tokio::spawn({
        let started = started.clone();
        async move { export(&holder, "daily", &started).await }
    });
    started.notified().await;
    let began = Instant::now();
    let thief = ops
        .steal("export:daily", long(), "rerun")
        .await
        .expect("stolen");
    let outcome = timeout(PATIENCE, call)
        .await
        .expect("the body was stopped")
        .expect("the task ran");
    println!(
        "locked body stopped by the steal: {} µs",
        began.elapsed().as_micros()
    );
    match outcome {
        Err(LockError::LeaseLost { key, reason, .. }) => {
            assert_eq!(key, "export:daily");
            assert_eq!(reason, LostReason::Stolen);
        }
        other => panic!("expected LeaseLost(Stolen), got {other:?}"),
    }
    assert!(thief.is_held());
    thief.release().await.expect("released");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fence_refuses_the_victims_write_after_a_steal() {
    let pool = SqlitePoolOptions::new()
        .max_connections(1)
        .connect("sqlite::memory:")
        .await
        .expect("an in-memory SQLite");
    let mut conn = pool.acquire().await.expect("a connection");
    fence::sqlite::FenceTable::default()
        .create_if_missing(&mut conn)
        .await
        .expect("fence table");
    let (holder, ops) = two_processes("fence").await;
    let victim = holder.lock("cart:7", long()).await.expect("free");
    fence::sqlite::claim(&mut conn, &Fence::of(&victim))
        .await
        .expect("the holder claims its resource");
    let thief = ops
        .steal("cart:7", long(), "cart stuck")
        .await
        .expect("stolen");
    let (reason, _) = timed("steal heard by the victim", victim.lost()).await;
    assert_eq!(reason, LostReason::Stolen);
    fence::sqlite::claim(&mut conn, &Fence::of(&thief))
        .await
        .expect("the thief claims it");
    // The victim's section may still be running: its write is refused.
    let stale = fence::sqlite::check(&mut conn, &Fence::of(&victim)).await;
    assert!(
        matches!(stale, Err(FenceError::Stale { .. })),
        "the victim's write was not refused: {stale:?}"
    );
    fence::sqlite::check(&mut conn, &Fence::of(&thief))
        .await
        .expect("the thief's write is accepted");
    thief.release().await.expect("released");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_steal_inside_a_section_that_holds_the_key_is_refused() {
    let (holder, _ops) = two_processes("reentrant").await;
    let outer_kept = AtomicBool::new(false);
    let inner = holder
        .run_locked("ledger".into(), long(), async {
            let stolen = holder.steal("ledger", long(), "from myself").await;
            let current = lock_runtime::current().expect("inside the section");
            outer_kept.store(current.is_held(), Ordering::SeqCst);
            Ok::<_, LockError>(stolen.map(|guard| guard.fencing_token()))
        })
        .await
        .expect("the section ran");
    match inner {
        Err(LockError::Config(message)) => {
            assert!(
                message.contains("this task is its holder already"),
                "{message}"
            )
        }
        other => panic!("a steal from this task's own section gave {other:?}"),
    }
    assert!(
        outer_kept.load(Ordering::SeqCst),
        "the section lost its own lock"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_steal_after_shutdown_is_refused_and_takes_nothing() {
    let (holder, ops) = two_processes("shutdown").await;
    let guard = holder.lock("job", long()).await.expect("free");
    ops.shutdown().await.expect("shut down");
    match ops.steal("job", long(), "too late").await {
        Err(LockError::ShutDown { key, .. }) => assert_eq!(key, "job"),
        other => panic!("a steal after shutdown gave {other:?}"),
    }
    match ops.request_release("job", "too late").await {
        Err(LockError::ShutDown { key, .. }) => assert_eq!(key, "job"),
        other => panic!("a request after shutdown gave {other:?}"),
    }
    assert!(guard.is_held());
    guard.release().await.expect("still ours");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn steals_and_requests_are_counted_in_the_metrics() {
    let exporter = metrics_exporter_prometheus::PrometheusBuilder::new()
        .install_recorder()
        .expect("the only recorder of this test binary");
    let (holder, ops) = two_processes("metrics").await;
    let labelled = long().label("control-metrics");
    let victim = holder.lock("counted", labelled).await.expect("free");
    ops.request_release("counted", "count me")
        .await
        .expect("asked");
    timed("release request heard", victim.release_requested()).await;
    let thief = ops
        .steal("counted", labelled, "count me")
        .await
        .expect("stolen");
    timed("steal heard by the victim", victim.lost()).await;
    thief.release().await.expect("released");
    let text = exporter.render();
    for series in [
        "lock_release_requests{lock_name=\"control-metrics\"} 1",
        "lock_steals{lock_name=\"control-metrics\"} 1",
        "lock_lease_losses{lock_name=\"control-metrics\",lock_lost_reason=\"stolen\"} 1",
    ] {
        assert!(
            text.lines().any(|line| line == series),
            "no `{series}` in\n{text}"
        );
    }
}

/// The audit lines, at `warn`: the asker's and the holder's for a request, the thief's and the
/// victim's for a steal, each naming the key and who asked and why.
#[tokio::test]
async fn requests_and_steals_leave_audit_lines_naming_the_key_and_who_asked() {
    use lock_tests::logs::{Level, Logged};
    let logged = Logged::default();
    let (holder, ops) = two_processes("audit").await;
    {
        let _capture = logged.capture(Level::WARN);
        let guard = holder.lock("order:42", long()).await.expect("free");
        ops.request_release("order:42", "deploy at 14:00")
            .await
            .expect("asked");
        let thief = ops
            .steal("order:42", long(), "stuck for an hour")
            .await
            .expect("stolen");
        assert_eq!(guard.lost().await, LostReason::Stolen);
        thief.release().await.expect("released");
    }
    let text = logged.text();
    println!("{text}");
    for line in [
        "asked the holder of the lock to release it; the holder decides",
        "the holder was asked to release the lock",
        "stole the lock from its holder",
        "the lock was stolen from its holder; its lease is lost",
    ] {
        let found = text.lines().find(|logged| logged.contains(line));
        let found = found.unwrap_or_else(|| panic!("no `{line}` in\n{text}"));
        assert!(found.contains(" WARN "), "{found}");
        assert!(found.contains("key=order:42"), "{found}");
        assert!(found.contains("ops on "), "who asked: {found}");
    }
}

#[distributed_lock(key = "sync:<name>", ttl = "60s", on_lease_lost = "continue", manager = locks)]
async fn sync_on(
    locks: &LockManager,
    name: &str,
    started: &tokio::sync::Notify,
) -> Result<LostReason, LockError> {
    started.notify_one();
    let current = lock_runtime::current().expect("inside the section");
    Ok(current.lost().await)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_that_continues_after_a_loss_is_told_stolen() {
    let (holder, ops) = two_processes("attribute-continue").await;
    let started = Arc::new(tokio::sync::Notify::new());
    let call = tokio::spawn({
        let started = started.clone();
        async move { sync_on(&holder, "orders", &started).await }
    });
    started.notified().await;
    let thief = ops
        .steal("sync:orders", long(), "resync")
        .await
        .expect("stolen");
    let (told, _) = timed("steal heard inside a continuing body", call).await;
    let told = told.expect("the task ran").expect("the body returned");
    assert_eq!(told, LostReason::Stolen);
    thief.release().await.expect("released");
}

/// A steal and the thief's shutdown at once, over and over: the lock ends either still the
/// victim's (the steal was refused) or free (stolen, then released by the shutdown); never held
/// by a shut-down manager.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_steal_racing_shutdown_never_leaves_the_lock_to_a_closed_manager() {
    let url = "memory://control-steal-shutdown";
    let holder = LockManager::connect(url).await.expect("memory manager");
    let other = LockManager::connect(url).await.expect("memory manager");
    let (mut stolen, mut refused) = (0, 0);
    for round in 0..50 {
        let key = format!("race:{round}");
        let victim = holder.lock(&key, long()).await.expect("free");
        let ops = LockManager::connect(url).await.expect("memory manager");
        let (steal, closed) = tokio::join!(
            tokio::spawn({
                let (ops, key) = (ops.clone(), key.clone());
                async move { ops.steal(key, long(), "race").await }
            }),
            tokio::spawn({
                let ops = ops.clone();
                async move { ops.shutdown().await }
            }),
        );
        closed.expect("the shutdown ran").ok();
        match steal.expect("the steal ran") {
            Ok(guard) => {
                stolen += 1;
                drop(guard);
            }
            Err(LockError::ShutDown { .. }) => refused += 1,
            Err(other) => panic!("round {round}: the steal gave {other:?}"),
        }
        if victim.is_held() {
            victim.release().await.expect("still the victim's");
        } else {
            assert_eq!(victim.lost().await, LostReason::Stolen);
        }
        let next = other.lock(&key, long().wait(PATIENCE)).await;
        next.unwrap_or_else(|err| panic!("round {round}: {err}"))
            .release()
            .await
            .expect("released");
    }
    println!("{stolen} steals went through before the shutdown, {refused} were refused");
}
