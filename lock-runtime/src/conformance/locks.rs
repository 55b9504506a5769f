//! The checks of a plain lock held by several processes: mutual exclusion, fencing order and
//! the wake-up of a waiter when the holder releases.

use std::time::{Duration, Instant};

use crate::options::LockOptions;

use super::bounds::{LONG_TTL, PATIENCE, SOON, Verdict};
use super::contention::{Take, contend, holds};
use super::process::Processes;

/// Managers contending in the mutual exclusion and fencing checks.
const MANAGERS: usize = 4;

/// Many tasks on several managers take one lock over and over; at no moment is more than one
/// of them inside.
pub(crate) async fn mutual_exclusion(p: &mut Processes<'_>) -> Verdict {
    let managers = p.spawn_many(MANAGERS).await?;
    let seen = contend(&managers, &p.key("lock"), Take::Lock).await?;
    if seen.most > 1 {
        return Err(format!(
            "saw {} holders of one lock at once across {MANAGERS} managers; expected at most 1",
            seen.most
        ));
    }
    Ok(format!(
        "{} holds over {MANAGERS} managers, never two at once",
        holds(MANAGERS)
    ))
}

/// The fencing tokens of successive holders, across managers, strictly increase.
pub(crate) async fn fencing_order(p: &mut Processes<'_>) -> Verdict {
    let managers = p.spawn_many(MANAGERS).await?;
    let seen = contend(&managers, &p.key("lock"), Take::Lock).await?;
    for pair in seen.tokens.windows(2) {
        let [(before, by), (after, then)] = pair else {
            continue;
        };
        if after <= before {
            return Err(format!(
                "token {after} (manager {then}) came after token {before} (manager {by}); \
                 expected every holder's token above every earlier holder's"
            ));
        }
    }
    Ok(format!(
        "{} successive holds over {MANAGERS} managers, each token above the one before",
        seen.tokens.len()
    ))
}

/// A waiter on another manager gets the lock soon after the holder releases it, long before
/// the holder's lease would have run out: the store tells waiters of a release.
pub(crate) async fn wake_on_release(p: &mut Processes<'_>) -> Verdict {
    let [holder, waiter] = <[_; 2]>::try_from(p.spawn_many(2).await?)
        .map_err(|_| "two managers asked for".to_owned())?;
    let key = p.key("lock");
    let long = LockOptions::new().ttl(LONG_TTL);
    let held = holder
        .lock(&key, long)
        .await
        .map_err(|err| format!("the holder could not take the free lock: {err}"))?;
    let waiting = {
        let key = key.clone();
        tokio::spawn(async move {
            let got = waiter.lock(&key, long.wait(PATIENCE)).await;
            (got, Instant::now())
        })
    };
    // Time for the waiter to ask and start waiting. The check holds in any order: a waiter
    // that has not asked yet is served by its first try.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let releasing = Instant::now();
    held.release()
        .await
        .map_err(|err| format!("the holder could not release: {err}"))?;
    let (got, at) = waiting
        .await
        .map_err(|err| format!("the waiting task ended abnormally: {err}"))?;
    let guard = got.map_err(|err| {
        format!(
            "the waiter on another manager did not get the lock after its release: {err}; \
             expected it within {SOON:?} of the release (the holder's {LONG_TTL:?} lease was \
             still running: the store must wake waiters on release)"
        )
    })?;
    let _ = guard.release().await;
    if at < releasing {
        return Err("the waiter got the lock while the holder still held it".to_owned());
    }
    let after = at - releasing;
    if after > SOON {
        return Err(format!(
            "the waiter got the lock {after:?} after the release; expected within {SOON:?}, long \
             before the holder's {LONG_TTL:?} lease would have run out"
        ));
    }
    Ok(format!(
        "woken {after:.0?} after the release (lease {LONG_TTL:?})"
    ))
}
