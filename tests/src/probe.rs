//! Looking at a lock from outside: whether it is free, and whether another owner finds it held.

use lock_runtime::{LockManager, LockOptions};

/// Takes and gives back `key` at once: true if nobody held it.
///
/// # Panics
///
/// If the probe fails for another reason than a busy lock, or its release fails.
pub async fn is_free(locks: &LockManager, key: &str) -> bool {
    match locks.lock(key, LockOptions::new()).await {
        Ok(guard) => {
            guard.release().await.expect("release the probe");
            true
        }
        Err(err) if err.is_busy() => false,
        Err(err) => panic!("probe of `{key}` failed: {err}"),
    }
}

/// True if another task, a different owner, finds `key` held.
///
/// # Panics
///
/// As [`is_free`], or if the probe task panics.
pub async fn busy_elsewhere(locks: &LockManager, key: &str) -> bool {
    let (locks, key) = (locks.clone(), key.to_owned());
    let probe = tokio::spawn(async move { !is_free(&locks, &key).await });
    probe.await.expect("probe task")
}
