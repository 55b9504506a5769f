//! `lock_all` that cannot take every key: all or nothing means nothing, so the keys it had taken
//! are free again at once, also under `hold_at_least` (no body ran under them), whether the call
//! failed or was cancelled.

use std::time::Duration;

use lock_tests::busy_elsewhere;
use lock_tests::prelude::*;

/// In stored order `a` and `b` come before `z`, which is the busy one.
const KEYS: [&str; 3] = ["partial:a", "partial:b", "partial:z"];

/// A minute: far longer than the test's patience, so a key kept for it cannot pass.
fn held_back(wait: Duration) -> LockOptions {
    LockOptions::new()
        .hold_at_least(Duration::from_secs(60))
        .wait(wait)
}

async fn a_failed_lock_all_keeps_no_key_for_hold_at_least(deployment: Deployment) {
    let other = deployment.connect().await;
    let busy = other.lock(KEYS[2], LockOptions::new()).await.expect("free");
    let err = deployment
        .locks
        .lock_all(KEYS, held_back(Duration::ZERO))
        .await
        .expect_err("the last key is busy");
    assert!(err.is_busy(), "{err}");
    for key in &KEYS[..2] {
        assert!(
            !busy_elsewhere(&other, key).await,
            "`{key}` is kept though no body ran\n{}",
            deployment.log()
        );
    }
    busy.release().await.expect("release");
}

async fn a_cancelled_lock_all_keeps_no_key_for_hold_at_least(deployment: Deployment) {
    let other = deployment.connect().await;
    let busy = other.lock(KEYS[2], LockOptions::new()).await.expect("free");
    let call = tokio::spawn({
        let locks = deployment.locks.clone();
        async move {
            locks
                .lock_all(KEYS, held_back(Duration::from_secs(60)))
                .await
        }
    });
    // It holds the first two keys and waits for the last.
    let taken =
        || async { busy_elsewhere(&other, KEYS[0]).await && busy_elsewhere(&other, KEYS[1]).await };
    assert!(eventually(taken).await, "{}", deployment.log());
    call.abort();
    assert!(call.await.expect_err("cancelled").is_cancelled());
    for key in &KEYS[..2] {
        assert!(
            eventually(|| async { !busy_elsewhere(&other, key).await }).await,
            "`{key}` is kept though no body ran\n{}",
            deployment.log()
        );
    }
    busy.release().await.expect("release");
}

lock_tests::on_backends!([memory, redis] [
    a_failed_lock_all_keeps_no_key_for_hold_at_least,
    a_cancelled_lock_all_keeps_no_key_for_hold_at_least,
]);
