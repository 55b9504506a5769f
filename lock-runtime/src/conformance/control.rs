//! The checks of control over a holder, for a store that carries notices
//! ([`Store::announces`](crate::store::Store::announces)) and one that steals
//! ([`Store::steals`](crate::store::Store::steals)): a request to let go reaches the holder on
//! another manager, every manager hears a notice (its announcer included), and a steal takes
//! the lock with a greater fencing token while its victim is told at once. A store that can do
//! neither refuses both with a [`LockError::Config`] that says so.

use std::time::{Duration, Instant};

use crate::error::{LockError, LostReason};
use crate::guard::LockGuard;
use crate::manager::LockManager;
use crate::options::LockOptions;
use crate::store::HolderId;

use super::bounds::{LONG_TTL, SOON, Verdict};
use super::process::Processes;

/// One check of a part, as the runner calls it.
pub(super) type Check =
    for<'p, 'a> fn(&'p mut Processes<'a>) -> std::pin::Pin<Box<dyn Future<Output = Verdict> + 'p>>;

/// Whether the store does a part of control, asked by trying it on a free key.
pub(super) enum Support {
    Does,
    /// Refused with this [`LockError::Config`] message.
    Refuses(String),
    /// Trying it went wrong otherwise.
    Broken(String),
}

/// The part of control a check is about.
#[derive(Clone, Copy)]
pub(super) enum Part {
    /// `request_release`: the store carries notices.
    Announce,
    /// `steal`.
    Steal,
}

impl Part {
    pub(super) fn noun(self) -> &'static str {
        match self {
            Part::Announce => "release requests (notices)",
            Part::Steal => "steals",
        }
    }

    pub(super) fn probe(self) -> &'static str {
        match self {
            Part::Announce => "announce_probe",
            Part::Steal => "steal_probe",
        }
    }
}

/// Tries `part` on a free key: a request to let go it (nobody hears it), a steal of it
/// (released at once).
pub(super) async fn probe(p: &mut Processes<'_>, part: Part) -> Support {
    let manager = match p.spawn().await {
        Ok(manager) => manager,
        Err(failure) => return Support::Broken(failure),
    };
    let key = p.key("free");
    let tried = match part {
        Part::Announce => manager.request_release(&key, "conformance probe").await,
        Part::Steal => match manager.steal(&key, long(), "conformance probe").await {
            Ok(guard) => guard.release().await,
            Err(err) => Err(err),
        },
    };
    match tried {
        Ok(()) => Support::Does,
        Err(LockError::Config(refusal)) => Support::Refuses(refusal),
        Err(err) => Support::Broken(format!("trying {} failed: {err}", part.noun())),
    }
}

/// A refusal says what was refused, so that a caller knows it is the store, not its key.
pub(super) fn refusal_is_clear(part: Part, refusal: &str) -> Verdict {
    let says = match part {
        Part::Announce => "carries no notices",
        Part::Steal => "cannot steal",
    };
    if refusal.contains(says) {
        Ok(format!("refused: {refusal}"))
    } else {
        Err(format!(
            "{} refused with `{refusal}`; expected a message saying the store {says}",
            part.noun()
        ))
    }
}

fn long() -> LockOptions {
    LockOptions::new().ttl(LONG_TTL)
}

/// Waits up to [`SOON`] for `future`; the time it took.
async fn soon<T>(future: impl Future<Output = T>) -> Option<(T, Duration)> {
    let began = Instant::now();
    tokio::time::timeout(SOON, future)
        .await
        .ok()
        .map(|done| (done, began.elapsed()))
}

/// Takes `key` on `manager` for a long lease.
async fn take(manager: &LockManager, key: &str) -> Result<LockGuard, String> {
    manager
        .lock(key, long())
        .await
        .map_err(|err| format!("the free lock `{key}` was not granted: {err}"))
}

/// A try of `key` on `manager` is busy: what it said, or why that is wrong.
async fn busy(manager: &LockManager, key: &str) -> Result<LockError, String> {
    match manager.lock(key, long().wait(Duration::ZERO)).await {
        Err(busy @ LockError::Busy { .. }) => Ok(busy),
        Ok(guard) => {
            let _ = guard.release().await;
            Err(format!(
                "`{key}` was granted to another manager; expected it busy"
            ))
        }
        Err(err) => Err(format!("trying `{key}` failed: {err}; expected it busy")),
    }
}

/// A holder on one manager is asked to let go from another: its `release_requested()`
/// resolves soon with the reason, and it keeps the lock until it releases.
pub(super) async fn request_reaches_the_holder(p: &mut Processes<'_>) -> Verdict {
    let [holder, asker] = <[_; 2]>::try_from(p.spawn_many(2).await?)
        .map_err(|_| "two managers asked for".to_owned())?;
    let key = p.key("lock");
    let guard = take(&holder, &key).await?;
    asker
        .request_release(&key, "conformance: please let go")
        .await
        .map_err(|err| format!("request_release(`{key}`) failed: {err}"))?;
    let (request, took) = soon(guard.release_requested())
        .await
        .ok_or_else(|| format!("the holder on another manager heard no request within {SOON:?}"))?;
    if !request.from().ends_with("conformance: please let go") || request.key() != key {
        return Err(format!(
            "the holder heard `{request}`; expected the key `{key}` and the reason"
        ));
    }
    busy(&asker, &key).await?;
    if !guard.is_held() {
        return Err("the holder lost its lock to a request; expected it kept".into());
    }
    guard
        .release()
        .await
        .map_err(|err| format!("the asked holder's release failed: {err}"))?;
    Ok(format!(
        "heard on the holder's manager after {took:.2?}; the lock stayed held"
    ))
}

/// Every manager on the store hears a notice, its announcer included: three holders of three
/// keys on three managers, each asked by the first.
pub(super) async fn notices_reach_every_manager(p: &mut Processes<'_>) -> Verdict {
    let managers = p.spawn_many(3).await?;
    let mut guards = Vec::with_capacity(managers.len());
    for (n, manager) in managers.iter().enumerate() {
        guards.push(take(manager, &p.key(&format!("lock-{n}"))).await?);
    }
    let announcer = &managers[0];
    for n in 0..managers.len() {
        let key = p.key(&format!("lock-{n}"));
        announcer
            .request_release(&key, "conformance: everyone")
            .await
            .map_err(|err| format!("request_release(`{key}`) failed: {err}"))?;
    }
    let mut slowest = Duration::ZERO;
    for (n, guard) in guards.iter().enumerate() {
        let (_, took) = soon(guard.release_requested()).await.ok_or_else(|| {
            let whose = if n == 0 { " (the announcer's own)" } else { "" };
            format!("manager {n}{whose} heard no notice within {SOON:?}")
        })?;
        slowest = slowest.max(took);
    }
    for guard in guards {
        let _ = guard.release().await;
    }
    Ok(format!(
        "3 managers, the announcer included, heard it; the last after {slowest:.2?} more"
    ))
}

/// How a steal's victim learns of it.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Told {
    /// By a notice, at once: its lease is lost as [`LostReason::Stolen`].
    AtOnce,
    /// At its next renewal (the store carries no notices): lost as `Stolen` or `NotOwner`.
    AtRenewal,
}

/// The victim's lease where it learns at its next renewal: renewed every second, so that it
/// learns well within [`SOON`].
const RENEWED_SOON: Duration = Duration::from_secs(3);

/// A steal from a holder on another manager: a greater fencing token, the victim's lease lost
/// soon (as [`LostReason::Stolen`] where it is told at once), a busy try naming the thief (where
/// the store names a holder), and the victim's release refused without touching the thief's
/// lock.
pub(super) async fn steal_takes_the_lock(p: &mut Processes<'_>, told: Told) -> Verdict {
    let [victim, thief, other] = <[_; 3]>::try_from(p.spawn_many(3).await?)
        .map_err(|_| "three managers asked for".to_owned())?;
    let key = p.key("lock");
    let held = match told {
        Told::AtOnce => take(&victim, &key).await?,
        Told::AtRenewal => victim
            .lock(&key, LockOptions::new().ttl(RENEWED_SOON))
            .await
            .map_err(|err| format!("the free lock `{key}` was not granted: {err}"))?,
    };
    let stolen = thief
        .steal(&key, long(), "conformance: stuck")
        .await
        .map_err(|err| format!("steal(`{key}`) failed: {err}"))?;
    if stolen.fencing_token() <= held.fencing_token() {
        return Err(format!(
            "the thief's fencing token {} is not above the victim's {}",
            stolen.fencing_token(),
            held.fencing_token()
        ));
    }
    let victim_id = HolderId::of_token(held.lease().token());
    if stolen.stolen_from().is_some_and(|id| id != victim_id) {
        return Err("the steal named another holder than the victim".into());
    }
    let (reason, took) = soon(held.lost())
        .await
        .ok_or_else(|| format!("the victim's lease was not lost within {SOON:?}"))?;
    let expected = match told {
        Told::AtOnce => reason == LostReason::Stolen,
        Told::AtRenewal => matches!(reason, LostReason::Stolen | LostReason::NotOwner),
    };
    if !expected {
        return Err(format!(
            "the victim's lease was lost as `{reason}`; expected Stolen"
        ));
    }
    let named = names_the_thief(&busy(&other, &key).await?, &stolen)?;
    let tokens = format!(
        "token {} over {}",
        stolen.fencing_token(),
        held.fencing_token()
    );
    match held.release().await {
        Err(LockError::LeaseLost { .. }) => {}
        other => {
            return Err(format!(
                "the victim's release answered {other:?}; expected LeaseLost"
            ));
        }
    }
    busy(&other, &key).await?;
    if !stolen.is_held() {
        return Err("the thief lost the lock when the victim released".into());
    }
    stolen
        .release()
        .await
        .map_err(|err| format!("the thief's release failed: {err}"))?;
    let how = match told {
        Told::AtOnce => "heard it",
        Told::AtRenewal => "learnt it at its renewal",
    };
    Ok(format!(
        "{tokens}; the victim {how} after {took:.2?}; {named}"
    ))
}

/// A busy answer after a steal names the thief, where the store names a holder at all.
fn names_the_thief(busy: &LockError, thief: &LockGuard) -> Result<&'static str, String> {
    let LockError::Busy { blocker, .. } = busy else {
        return Ok("not busy");
    };
    let Some(blocker) = blocker else {
        return Ok("the store names no holder in a busy answer");
    };
    let id = HolderId::of_token(thief.lease().token());
    let thief_id = id.to_string();
    if blocker.holder_id != thief_id {
        return Err(format!(
            "a busy try named holder {} after the steal; expected the thief {thief_id}",
            blocker.holder_id
        ));
    }
    Ok("a busy try names the thief")
}

/// Stealing a free lock takes it, from nobody.
pub(super) async fn steal_of_a_free_lock_takes_it(p: &mut Processes<'_>) -> Verdict {
    let [thief, other] = <[_; 2]>::try_from(p.spawn_many(2).await?)
        .map_err(|_| "two managers asked for".to_owned())?;
    let key = p.key("lock");
    let guard = thief
        .steal(&key, long(), "conformance: free")
        .await
        .map_err(|err| format!("steal(`{key}`) of a free lock failed: {err}"))?;
    if let Some(id) = guard.stolen_from() {
        return Err(format!("the steal of a free lock named a victim {id}"));
    }
    busy(&other, &key).await?;
    guard
        .release()
        .await
        .map_err(|err| format!("the release failed: {err}"))?;
    let again = take(&other, &key).await?;
    let _ = again.release().await;
    Ok("held by the thief, then free again on its release".into())
}
