//! The locks' metrics (cargo feature `metrics`), scraped from a Prometheus exporter after locked
//! calls on a real server: the counts add up, the series are labelled by key template, and no
//! rendered key shows.

use std::future::Future;
use std::time::Duration;

use lock_runtime::{LockError, LockManager, LockOptions, distributed_lock};
use lock_tests::prelude::*;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

/// Holds invoice `id` until `done` completes.
#[distributed_lock(key = "invoice:<id>", ttl = "5s", wait = "100ms", manager = locks)]
async fn bill(
    locks: &LockManager,
    id: u32,
    done: impl Future<Output = ()>,
) -> Result<u32, LockError> {
    done.await;
    Ok(id)
}

/// The value of the series `name{labels}` in Prometheus text, if it is there.
fn value(text: &str, name: &str, labels: &str) -> Option<f64> {
    let series = format!("{name}{{{labels}}} ");
    text.lines()
        .find_map(|line| line.strip_prefix(series.as_str()))
        .and_then(|value| value.trim().parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locked_calls_show_in_the_scraped_metrics() {
    let exporter = PrometheusBuilder::new()
        .install_recorder()
        .expect("the only recorder of this test binary");
    let server = RedisServer::start();
    let locks = connect(&server).await;
    // Three invoices one after the other, each acquired.
    for id in 1..=3 {
        bill(&locks, id, std::future::ready(()))
            .await
            .expect("free");
    }
    // Two tasks bill invoice 9 at once: one holds it until the other has given up after its
    // 100 ms wait.
    let (give_back, given_back) = tokio::sync::oneshot::channel::<()>();
    let holder = tokio::spawn({
        let locks = locks.clone();
        async move {
            let done = async {
                let _ = given_back.await;
            };
            bill(&locks, 9, done).await
        }
    });
    let held = wait_until_async(PATIENCE, || server.holds_lock("lock:{invoice:9}")).await;
    assert!(
        held,
        "the first biller never held invoice 9\n{}",
        server.log()
    );
    let seen_held = tokio::time::Instant::now();
    let busy = bill(&locks, 9, std::future::ready(())).await;
    assert!(matches!(busy, Err(LockError::Busy { .. })), "{busy:?}");
    // The first biller held invoice 9 at least this long.
    let held_at_least = seen_held.elapsed();
    give_back.send(()).expect("the first biller holds on");
    // A lock held through the API with a label, and one without.
    let labelled = locks
        .lock("export:2026-11-25", LockOptions::new().label("export"))
        .await
        .expect("free");
    let unlabelled = locks
        .lock("adhoc:42", LockOptions::new())
        .await
        .expect("free");
    let text = exporter.render();
    let held = |name: &str| value(&text, "lock_held", &format!("lock_name=\"{name}\""));
    assert_eq!(held("export"), Some(1.0), "{text}");
    assert_eq!(held("unlabelled"), Some(1.0), "{text}");
    labelled.release().await.expect("release");
    drop(unlabelled);
    holder.await.expect("task").expect("the first biller");

    let text = exporter.render();
    let invoice = "lock_name=\"invoice:<id>\"";
    let count = |name: &str, labels: &str| value(&text, name, labels).unwrap_or(0.0);
    assert_eq!(
        count(
            "lock_acquisitions",
            &format!("{invoice},lock_outcome=\"acquired\"")
        ),
        4.0,
        "{text}"
    );
    assert_eq!(
        count(
            "lock_acquisitions",
            &format!("{invoice},lock_outcome=\"busy\"")
        ),
        1.0,
        "{text}"
    );
    // The busy caller asked at least twice: once at first, once when its wait ran out.
    assert!(count("lock_busy_answers", invoice) >= 1.0, "{text}");
    assert_eq!(count("lock_hold_duration_count", invoice), 4.0, "{text}");
    assert!(
        count("lock_hold_duration_sum", invoice) >= held_at_least.as_secs_f64(),
        "{held_at_least:?}\n{text}"
    );
    assert_eq!(
        count(
            "lock_acquire_duration_count",
            &format!("{invoice},lock_outcome=\"busy\"")
        ),
        1.0,
        "{text}"
    );
    assert!(
        count("lock_acquire_request_duration_count", invoice) >= 5.0,
        "{text}"
    );
    // Released: nothing is held any more.
    assert_eq!(value(&text, "lock_held", invoice), Some(0.0), "{text}");
    assert_eq!(
        value(&text, "lock_held", "lock_name=\"export\""),
        Some(0.0),
        "{text}"
    );
    // Bounded labels: the template, never a rendered key.
    assert!(!text.contains("invoice:9"), "{text}");
    assert!(!text.contains("export:2026"), "{text}");
    assert_eq!(count("lock_release_failures", invoice), 0.0, "{text}");

    // A lease lost while held is counted by reason. (The recorder is global to this test
    // binary, so this is part of the one test.)
    // A 3 s lease, renewed every second: a renewal delayed by a loaded machine still comes
    // long before the lease runs out by itself, so the loss is the renewal's.
    let renewals = |outcome: &str| {
        let text = exporter.render();
        let labels = format!("lock_renewal_outcome=\"{outcome}\"");
        value(&text, "lock_renewals", &labels).unwrap_or(0.0)
    };
    let renewed_before = renewals("renewed");
    let guard = locks
        .lock(
            "lost:1",
            LockOptions::new().label("lost").ttl(Duration::from_secs(3)),
        )
        .await
        .expect("free");
    // Renewed while held, and each renewal counted ...
    assert!(renewed(|| guard.remaining()).await, "{}", server.log());
    assert!(
        eventually(|| async { renewals("renewed") > renewed_before }).await,
        "{}",
        exporter.render()
    );
    // ... until someone deletes the lock: the next renewal finds it gone.
    server.cmd(&["DEL", "lock:{lost:1}"]);
    let reason = tokio::time::timeout(PATIENCE, guard.lost())
        .await
        .expect("lost at a renewal");
    assert_eq!(reason, lock_runtime::LostReason::NotOwner);
    drop(guard);
    // The loss is counted before the guard is told of it: whoever sees the loss sees it
    // counted, exactly once.
    let losses = |exporter: &PrometheusHandle| {
        let labels = "lock_name=\"lost\",lock_lost_reason=\"not_owner\"";
        value(&exporter.render(), "lock_lease_losses", labels)
    };
    assert_eq!(losses(&exporter), Some(1.0), "{}", exporter.render());
    assert!(
        eventually(|| async { renewals("not_owner") >= 1.0 }).await,
        "{}",
        exporter.render()
    );

    // Callers in line are counted by lock name while they wait, and no longer once served.
    let waiting = |exporter: &PrometheusHandle| {
        value(&exporter.render(), "lock_waiting", "lock_name=\"queue\"").unwrap_or(0.0)
    };
    let queue = LockOptions::new().label("queue").wait(PATIENCE);
    let held = locks.lock("queue:1", queue).await.expect("free");
    let waiters: Vec<_> = (0..2)
        .map(|_| {
            let locks = locks.clone();
            tokio::spawn(async move {
                let guard = locks.lock("queue:1", queue).await?;
                guard.release().await
            })
        })
        .collect();
    assert!(
        wait_until_async(PATIENCE, || waiting(&exporter) == 2.0).await,
        "{}",
        exporter.render()
    );
    held.release().await.expect("release");
    for waiter in waiters {
        waiter
            .await
            .expect("task")
            .expect("served after the release");
    }
    assert_eq!(waiting(&exporter), 0.0, "{}", exporter.render());
    assert_eq!(
        value(
            &exporter.render(),
            "lock_waiting",
            "lock_name=\"invoice:<id>\""
        ),
        Some(0.0),
        "the biller that gave up left the line"
    );

    // A call that gives up in a deadlock is counted by lock name, once.
    let fail = LockOptions::new()
        .label("transfer")
        .wait(PATIENCE)
        .deadlock(lock_runtime::Deadlock::Fail);
    let managers = [locks.clone(), locks.clone()];
    let gave_up = lock_tests::deadlocks::opposite_orders(managers, "acct:1", "acct:2", fail).await;
    assert_eq!(gave_up, 1);
    assert_eq!(
        value(
            &exporter.render(),
            "lock_deadlocks",
            "lock_name=\"transfer\""
        ),
        Some(1.0),
        "{}",
        exporter.render()
    );

    // A release the server never answers (it is paused past the request timeout) is counted
    // as unconfirmed, once.
    let impatient = LockManager::builder()
        .url(server.url())
        .request_timeout(Duration::from_millis(300))
        .build()
        .await
        .expect("connect");
    let guard = impatient
        .lock("unconfirmed:1", LockOptions::new().label("unconfirmed"))
        .await
        .expect("free");
    server.pause();
    let released = guard.release().await;
    server.resume();
    assert!(released.is_err(), "{released:?}");
    assert_eq!(
        value(
            &exporter.render(),
            "lock_release_failures",
            "lock_name=\"unconfirmed\""
        ),
        Some(1.0),
        "{}",
        exporter.render()
    );
}
