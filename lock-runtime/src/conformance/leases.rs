//! The checks of a lease whose holder stops: it expires, and the holder, if it comes back,
//! can neither release nor renew the next holder's lock.

use std::time::{Duration, Instant};

use crate::guard::LockGuard;
use crate::manager::LockManager;
use crate::options::LockOptions;

use super::bounds::{LOCK_DELAY, LONG_TTL, PATIENCE, SHORT_TTL, SOON, Verdict};
use super::process::{Processes, Stallable};

/// How much earlier than our clock says a store may end a lease (its clock, the millisecond
/// granularity of its expiry).
const EXPIRY_TOLERANCE: Duration = Duration::from_millis(10);

/// Takes `key` with a short lease on `manager` from the stallable runtime, where its watchdog
/// then renews it.
async fn hold_on(
    process: &Stallable,
    manager: &LockManager,
    key: &str,
) -> Result<LockGuard, String> {
    hold_with(process, manager, key, LockOptions::new().ttl(SHORT_TTL)).await
}

/// Takes `key` under `options` on `manager` from the stallable runtime.
async fn hold_with(
    process: &Stallable,
    manager: &LockManager,
    key: &str,
    options: LockOptions,
) -> Result<LockGuard, String> {
    let (manager, key) = (manager.clone(), key.to_owned());
    process
        .run(async move { manager.lock(key, options).await })
        .await?
        .map_err(|err| format!("the first holder could not take the free lock: {err}"))
}

/// A holder with a lock-delay that stops renewing keeps the lock from the next holder for its
/// lease and its delay, and loses it soon after.
pub(crate) async fn stalled_holder_keeps_its_lock_delay(p: &mut Processes<'_>) -> Verdict {
    let [first, next] = <[_; 2]>::try_from(p.spawn_many(2).await?)
        .map_err(|_| "two managers asked for".to_owned())?;
    let key = p.key("lock");
    let mut process = Stallable::start()?;
    let asked = Instant::now();
    let options = LockOptions::new().ttl(SHORT_TTL).lock_delay(LOCK_DELAY);
    let stalled = hold_with(&process, &first, &key, options).await?;
    process.stall().await?;
    let stopped = Instant::now();
    let got = next
        .lock(&key, LockOptions::new().ttl(LONG_TTL).wait(PATIENCE))
        .await;
    let (since_asked, since_stopped) = (asked.elapsed(), stopped.elapsed());
    process.resume();
    drop(stalled);
    let kept = SHORT_TTL + LOCK_DELAY;
    let guard = got.map_err(|err| {
        format!(
            "the lock of a holder that stopped renewing did not come free: {err}; expected it \
             within {:?} of the stop ({kept:?} lease and delay, and a margin)",
            kept + SOON
        )
    })?;
    let _ = guard.release().await;
    if since_asked + EXPIRY_TOLERANCE < kept {
        return Err(format!(
            "the next holder got the lock {since_asked:?} after the stopped holder asked for it; \
             expected not before its {SHORT_TTL:?} lease and {LOCK_DELAY:?} lock-delay: the \
             store must keep a lock for the whole ttl it is asked (the lease and the delay)"
        ));
    }
    if since_stopped > kept + SOON {
        return Err(format!(
            "the next holder got the lock {since_stopped:?} after the holder stopped; expected \
             within {:?} ({kept:?} lease and delay, and a margin)",
            kept + SOON
        ));
    }
    Ok(format!(
        "taken over {since_asked:.2?} after the stopped holder asked (lease {SHORT_TTL:?}, \
         delay {LOCK_DELAY:?})"
    ))
}

/// A lock with a lock-delay that its holder releases goes to a waiter on another manager at
/// once: the delay keeps only a lock lost without a release.
pub(crate) async fn released_lock_skips_its_lock_delay(p: &mut Processes<'_>) -> Verdict {
    let [first, next] = <[_; 2]>::try_from(p.spawn_many(2).await?)
        .map_err(|_| "two managers asked for".to_owned())?;
    let key = p.key("lock");
    let options = LockOptions::new().ttl(LONG_TTL).lock_delay(LONG_TTL);
    let held = first
        .lock(&key, options)
        .await
        .map_err(|err| format!("the first holder could not take the free lock: {err}"))?;
    let waiter = {
        let (next, key) = (next.clone(), key.clone());
        tokio::spawn(async move { next.lock(key, LockOptions::new().wait(PATIENCE)).await })
    };
    let released = Instant::now();
    held.release()
        .await
        .map_err(|err| format!("the holder's release failed: {err}"))?;
    let got = waiter
        .await
        .map_err(|err| format!("the waiter's task failed: {err}"))?;
    let handed = released.elapsed();
    let guard = got.map_err(|err| {
        format!(
            "a waiter did not get a released lock with a lock-delay: {err}; expected it at once"
        )
    })?;
    let _ = guard.release().await;
    if handed > SOON {
        return Err(format!(
            "a waiter got a released lock with a {LONG_TTL:?} lock-delay {handed:?} after the \
             release; expected within {SOON:?}: a release deletes the lock"
        ));
    }
    Ok(format!("handed over {handed:.2?} after the release"))
}

/// A holder that stops renewing (its process stalled: its watchdog does not run) loses the
/// lock to the next holder within its lease and a margin, and not before its lease could
/// have run out.
pub(crate) async fn crashed_holder_expires(p: &mut Processes<'_>) -> Verdict {
    let [first, next] = <[_; 2]>::try_from(p.spawn_many(2).await?)
        .map_err(|_| "two managers asked for".to_owned())?;
    let key = p.key("lock");
    let mut process = Stallable::start()?;
    let asked = Instant::now();
    let crashed = hold_on(&process, &first, &key).await?;
    process.stall().await?;
    let stalled = Instant::now();
    let got = next
        .lock(&key, LockOptions::new().ttl(LONG_TTL).wait(PATIENCE))
        .await;
    let since_asked = asked.elapsed();
    let since_stalled = stalled.elapsed();
    process.resume();
    drop(crashed);
    let guard = got.map_err(|err| {
        format!(
            "the lock of a holder that stopped renewing did not come free: {err}; expected it \
             within {:?} of the stop ({SHORT_TTL:?} lease and a margin)",
            SHORT_TTL + SOON
        )
    })?;
    let _ = guard.release().await;
    if since_asked + EXPIRY_TOLERANCE < SHORT_TTL {
        return Err(format!(
            "the next holder got the lock {since_asked:?} after the stopped holder asked for it; \
             expected not before its {SHORT_TTL:?} lease could have run out"
        ));
    }
    if since_stalled > SHORT_TTL + SOON {
        return Err(format!(
            "the next holder got the lock {since_stalled:?} after the holder stopped; expected \
             within {:?} ({SHORT_TTL:?} lease and a margin)",
            SHORT_TTL + SOON
        ));
    }
    Ok(format!(
        "taken over {since_asked:.2?} after the stopped holder asked (lease {SHORT_TTL:?})"
    ))
}

/// A holder stalled past its lease, whose lock was taken by another, learns when it goes on
/// that it lost the lease, and neither its renewals nor its release touch the new holder's
/// lock.
pub(crate) async fn stale_holder_cannot_renew_or_release(p: &mut Processes<'_>) -> Verdict {
    let [first, next, third] = <[_; 3]>::try_from(p.spawn_many(3).await?)
        .map_err(|_| "three managers asked for".to_owned())?;
    let key = p.key("lock");
    let mut process = Stallable::start()?;
    let stale = hold_on(&process, &first, &key).await?;
    process.stall().await?;
    let taken = next
        .lock(&key, LockOptions::new().ttl(LONG_TTL).wait(PATIENCE))
        .await;
    process.resume();
    let taken = taken.map_err(|err| {
        format!("the lock of a stalled holder did not come free: {err}; expected it after its {SHORT_TTL:?} lease")
    })?;
    let reason = tokio::time::timeout(SOON, stale.lost())
        .await
        .map_err(|_| {
            format!(
                "the stale holder was not told within {SOON:?} of going on that it lost its lease \
             (is_held = {}); expected its lost-lease signal",
                stale.is_held()
            )
        })?;
    match stale.release().await {
        Err(err) if err.is_lease_lost() => {}
        Ok(()) => {
            return Err(
                "the stale holder's release succeeded; expected LeaseLost, and the new \
                        holder's lock untouched"
                    .to_owned(),
            );
        }
        Err(err) => {
            return Err(format!(
                "the stale holder's release failed with {err}; expected LeaseLost"
            ));
        }
    }
    match third.lock(&key, LockOptions::new()).await {
        Err(err) if err.is_busy() => {}
        Ok(guard) => {
            let _ = guard.release().await;
            return Err(
                "after the stale holder went on and released, a third manager took the \
                        lock at once; expected it still held by the new holder"
                    .to_owned(),
            );
        }
        Err(err) => {
            return Err(format!(
                "a third manager's try failed with {err}; expected busy"
            ));
        }
    }
    if !taken.is_held() {
        return Err(
            "the new holder lost its lease once the stale holder went on; expected it kept"
                .to_owned(),
        );
    }
    taken.release().await.map_err(|err| {
        format!("the new holder could not release its lock after the stale holder went on: {err}; expected its lock untouched")
    })?;
    Ok(format!(
        "the stale holder was told ({reason}); its release said LeaseLost"
    ))
}
