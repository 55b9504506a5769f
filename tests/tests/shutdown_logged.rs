//! What a normal shutdown logs: the sections it interrupts (a Ctrl-C in the middle of work)
//! each get one calm line for the lock it released, and nothing at WARN. In a test binary of
//! its own: the log is captured on the test's thread (see `deadlock_logged.rs`).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use lock_runtime::{LockError, LockManager, LockOptions, OnLeaseLost};
use lock_tests::logs::{Level, Logged};
use lock_tests::wait_until_async;
use tokio::sync::Notify;

#[tokio::test(flavor = "current_thread")]
async fn a_shutdown_under_running_sections_logs_one_calm_line_per_lock() {
    let logged = Logged::default();
    let _capture = logged.capture(Level::INFO);
    let locks = LockManager::builder()
        .url("memory://shutdown-logged")
        .build()
        .await
        .expect("memory manager");
    let go_on = Arc::new(Notify::new());
    let entered = Arc::new(AtomicUsize::new(0));
    // Sections that carry on when their lease is lost, as a body that must finish its step
    // does: they finish after shutdown released their locks.
    let options = LockOptions::new().on_lease_lost(OnLeaseLost::Continue);
    let sections: Vec<_> = ["sale:1", "sale:2"]
        .into_iter()
        .map(|key| {
            let (locks, go_on, entered) = (locks.clone(), go_on.clone(), entered.clone());
            tokio::spawn(async move {
                locks
                    .run_locked(key.to_owned(), options, async move {
                        let told = go_on.notified();
                        entered.fetch_add(1, Ordering::SeqCst);
                        told.await;
                        Ok::<(), LockError>(())
                    })
                    .await
            })
        })
        .collect();
    let both = wait_until_async(Duration::from_secs(10), || {
        entered.load(Ordering::SeqCst) == 2
    })
    .await;
    assert!(both, "both sections hold their locks");
    locks.shutdown().await.expect("shutdown");
    go_on.notify_waiters();
    for section in sections {
        section
            .await
            .expect("section task")
            .expect("the body's own result");
    }

    let text = logged.text();
    assert!(!text.contains("WARN"), "{text}");
    assert_eq!(
        text.matches("lock released by shutdown").count(),
        2,
        "{text}"
    );
    for key in ["sale:1", "sale:2"] {
        assert!(text.contains(key), "{text}");
    }
}
