//! What a manager meets in a real program, beyond one lock on one manager: several managers on
//! one deployment, a guard's section seen by nested code, and a manager shut down.

use std::time::Duration;

use lock_runtime::{LockManager, LockOptions};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

async fn memory(url: &str) -> LockManager {
    LockManager::connect(url)
        .await
        .unwrap_or_else(|err| panic!("{url}: {err}"))
}

#[tokio::test]
async fn managers_connected_to_memory_share_one_lock_table() {
    let a = memory("memory://").await;
    let b = memory("memory://").await;
    let key = "lifecycle:shared-job";
    let held = a.lock(key, LockOptions::new()).await.expect("free");
    let err = b
        .lock(key, LockOptions::new())
        .await
        .expect_err("held through the other manager");
    assert!(err.is_busy(), "{err}");
    let first = held.fencing_token();
    held.release().await.expect("release");
    let next = b.lock(key, LockOptions::new()).await.expect("free again");
    assert!(
        next.fencing_token() > first,
        "fencing tokens rise across managers"
    );
    next.release().await.expect("release");
}

#[tokio::test]
async fn named_memory_tables_are_apart_from_each_other_and_from_the_default() {
    let key = "lifecycle:isolated-job";
    let a = memory("memory://lifecycle-a").await;
    let a_again = memory("memory://lifecycle-a").await;
    let b = memory("memory://lifecycle-b").await;
    let default = memory("memory://").await;
    let held = a.lock(key, LockOptions::new()).await.expect("free");
    assert!(
        a_again
            .lock(key, LockOptions::new())
            .await
            .expect_err("same name, same table")
            .is_busy()
    );
    let other = b
        .lock(key, LockOptions::new())
        .await
        .expect("another table");
    let third = default
        .lock(key, LockOptions::new())
        .await
        .expect("the default table is another one too");
    for guard in [held, other, third] {
        guard.release().await.expect("release");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_through_one_manager_wakes_a_waiter_of_another_at_once() {
    let key = "lifecycle:handover";
    let holder = memory("memory://lifecycle-handover").await;
    let waiter = memory("memory://lifecycle-handover").await;
    let held = holder.lock(key, LockOptions::new()).await.expect("free");
    let waiting = tokio::spawn(async move {
        let started = tokio::time::Instant::now();
        let guard = waiter
            .lock(key, LockOptions::new().wait(Duration::from_secs(20)))
            .await?;
        let waited = started.elapsed();
        guard.release().await?;
        Ok::<_, lock_runtime::LockError>(waited)
    });
    tokio::time::sleep(ms(100)).await;
    held.release().await.expect("release");
    let waited = waiting.await.expect("task").expect("acquired");
    // The lease is 30 s: only a notification explains a handover this soon.
    assert!(waited < Duration::from_secs(5), "{waited:?}");
}
