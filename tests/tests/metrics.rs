//! The locks' metrics (cargo feature `metrics`), scraped from a Prometheus exporter after locked
//! calls on a real server: the counts add up, the series are labelled by key template, and no
//! rendered key shows.

use std::time::Duration;

use lock_runtime::{LockError, LockManager, LockOptions, distributed_lock};
use lock_tests::RedisServer;
use metrics_exporter_prometheus::PrometheusBuilder;

#[distributed_lock(key = "invoice:<id>", ttl = "5s", wait = "100ms", manager = locks)]
async fn bill(locks: &LockManager, id: u32, hold: Duration) -> Result<u32, LockError> {
    tokio::time::sleep(hold).await;
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
    let locks = LockManager::connect(&server.url())
        .await
        .unwrap_or_else(|err| panic!("connect: {err}\n{}", server.log()));
    // Three invoices one after the other, each acquired.
    for id in 1..=3 {
        bill(&locks, id, Duration::from_millis(5))
            .await
            .expect("free");
    }
    // Two tasks bill invoice 9 at once: one holds it 600 ms, the other gives up after 100 ms.
    let holder = tokio::spawn({
        let locks = locks.clone();
        async move { bill(&locks, 9, Duration::from_millis(600)).await }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let busy = bill(&locks, 9, Duration::ZERO).await;
    assert!(matches!(busy, Err(LockError::Busy { .. })), "{busy:?}");
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
    assert!(count("lock_hold_duration_sum", invoice) >= 0.6, "{text}");
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
    let guard = locks
        .lock(
            "lost:1",
            LockOptions::new().label("lost").ttl(Duration::from_secs(1)),
        )
        .await
        .expect("free");
    // Renewed every ttl / 3 while held ...
    tokio::time::sleep(Duration::from_millis(500)).await;
    let text = exporter.render();
    let renewed = value(&text, "lock_renewals", "lock_renewal_outcome=\"renewed\"");
    assert!(renewed.is_some_and(|renewed| renewed >= 1.0), "{text}");
    // ... until someone deletes the lock: the next renewal finds it gone.
    server.cmd(&["DEL", "lock:{lost:1}"]);
    let reason = tokio::time::timeout(Duration::from_secs(3), guard.lost())
        .await
        .expect("lost within a renewal period");
    assert_eq!(reason, lock_runtime::LostReason::NotOwner);
    drop(guard);
    let text = exporter.render();
    assert_eq!(
        value(
            &text,
            "lock_lease_losses",
            "lock_name=\"lost\",lock_lost_reason=\"not_owner\""
        ),
        Some(1.0),
        "{text}"
    );
    assert!(
        value(&text, "lock_renewals", "lock_renewal_outcome=\"not_owner\"").is_some(),
        "{text}"
    );
}
