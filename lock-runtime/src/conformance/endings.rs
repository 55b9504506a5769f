//! The checks of work that ends early: an acquire or a section dropped (cancelled), and a
//! section that panics. Each leaves nothing held: another manager takes the lock at once,
//! where the long lease that was taken would otherwise keep it.

use std::time::Duration;

use crate::error::LockError;
use crate::manager::LockManager;
use crate::options::LockOptions;

use super::bounds::{LONG_TTL, PATIENCE, SOON, Verdict};
use super::process::Processes;

/// How far into an uncontended acquire it is dropped: before its first answer, and at a few
/// moments after.
const DROPPED_AFTER: [Duration; 6] = [
    Duration::ZERO,
    Duration::from_millis(1),
    Duration::from_millis(2),
    Duration::from_millis(5),
    Duration::from_millis(10),
    Duration::from_millis(20),
];

/// Another manager takes `key` within [`SOON`], and gives it back: what `ended` left is not
/// held.
async fn nothing_held(other: &LockManager, key: &str, ended: &str) -> Result<(), String> {
    let options = LockOptions::new().ttl(LONG_TTL).wait(SOON);
    let guard = other.lock(key, options).await.map_err(|err| {
        format!(
            "after {ended}, another manager could not take the lock within {SOON:?}: {err}; \
             expected nothing held (the {LONG_TTL:?} lease it took would keep it)"
        )
    })?;
    guard
        .release()
        .await
        .map_err(|err| format!("the other manager could not release the lock: {err}"))
}

/// An acquire dropped while it runs (uncontended, at several moments; or while it waits for
/// a held lock) leaves nothing held.
pub(crate) async fn dropped_acquire(p: &mut Processes<'_>) -> Verdict {
    let [dropping, holder, other] = <[_; 3]>::try_from(p.spawn_many(3).await?)
        .map_err(|_| "three managers asked for".to_owned())?;
    let long = LockOptions::new().ttl(LONG_TTL);
    let key = p.key("free");
    for after in DROPPED_AFTER {
        // A wait, so that what an earlier round left being released is no error.
        match tokio::time::timeout(after, dropping.lock(&key, long.wait(SOON))).await {
            // Done before it could be dropped: the guard is, which releases too.
            Ok(Ok(guard)) => drop(guard),
            Ok(Err(err)) => return Err(format!("an acquire of the free lock failed: {err}")),
            Err(_) => {}
        }
        nothing_held(
            &other,
            &key,
            &format!("an acquire dropped {after:?} into it"),
        )
        .await?;
    }
    let key = p.key("held");
    let held = holder
        .lock(&key, long)
        .await
        .map_err(|err| format!("the holder could not take the free lock: {err}"))?;
    let waiting = dropping.lock(&key, long.wait(PATIENCE));
    if let Ok(got) = tokio::time::timeout(Duration::from_millis(300), waiting).await {
        return Err(format!(
            "an acquire of a held lock ended while the lock was held ({}); expected it to wait",
            got.map_or_else(|err| err.to_string(), |_| "acquired".to_owned())
        ));
    }
    held.release()
        .await
        .map_err(|err| format!("the holder could not release: {err}"))?;
    nothing_held(&other, &key, "an acquire dropped while it waited").await?;
    Ok(format!(
        "dropped {} times uncontended and once waiting",
        DROPPED_AFTER.len()
    ))
}

/// A locked section dropped while its body runs (its task aborted) leaves nothing held.
pub(crate) async fn dropped_section(p: &mut Processes<'_>) -> Verdict {
    let [dropping, other] = <[_; 2]>::try_from(p.spawn_many(2).await?)
        .map_err(|_| "two managers asked for".to_owned())?;
    let key = p.key("lock");
    let (entered, is_entered) = tokio::sync::oneshot::channel::<()>();
    let section = {
        let key = key.clone();
        tokio::spawn(async move {
            let body = async move {
                let _ = entered.send(());
                std::future::pending::<Result<(), LockError>>().await
            };
            dropping
                .run_locked(key, LockOptions::new().ttl(LONG_TTL), body)
                .await
        })
    };
    tokio::time::timeout(PATIENCE, is_entered)
        .await
        .map_err(|_| format!("the section's body did not start within {PATIENCE:?}"))?
        .map_err(|_| "the section ended before its body started".to_owned())?;
    section.abort();
    let _ = section.await;
    nothing_held(&other, &key, "a section dropped while its body ran").await?;
    Ok("the section's lock came free once it was dropped".to_owned())
}

/// The body of the panicking section.
fn panics() -> Result<(), LockError> {
    panic!("a locked section of the conformance kit panics on purpose")
}

/// A locked section whose body panics releases its lock.
pub(crate) async fn panicking_section(p: &mut Processes<'_>) -> Verdict {
    let [panicking, other] = <[_; 2]>::try_from(p.spawn_many(2).await?)
        .map_err(|_| "two managers asked for".to_owned())?;
    let key = p.key("lock");
    let section = {
        let key = key.clone();
        tokio::spawn(async move {
            let body = async { panics() };
            panicking
                .run_locked(key, LockOptions::new().ttl(LONG_TTL), body)
                .await
        })
    };
    match section.await {
        Err(err) if err.is_panic() => {}
        Err(err) => {
            return Err(format!(
                "the section's task ended with {err}; expected its panic"
            ));
        }
        Ok(answer) => {
            return Err(format!(
                "the section returned {answer:?}; expected its body's panic to go through"
            ));
        }
    }
    nothing_held(&other, &key, "a section that panicked").await?;
    Ok("the section's lock came free after its panic".to_owned())
}
