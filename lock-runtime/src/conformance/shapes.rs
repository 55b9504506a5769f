//! The shapes beyond a plain lock: whether the store holds them (asked by trying), a
//! semaphore admitting its permits and no more, a read-write lock's readers and writers; and
//! for a shape the store refuses, an error that names it.

use crate::error::LockError;
use crate::guard::LockGuard;
use crate::manager::LockManager;
use crate::options::LockOptions;

use super::bounds::{LONG_TTL, SOON, Verdict};
use super::contention::{Take, contend, holds};
use super::process::Processes;

/// The shapes a store may refuse.
#[derive(Clone, Copy)]
pub(crate) enum Kind {
    /// A semaphore of several permits.
    Semaphore,
    /// A read-write lock.
    ReadWrite,
}

impl Kind {
    /// What an error refusing it must name.
    pub(crate) fn noun(self) -> &'static str {
        match self {
            Kind::Semaphore => "semaphore",
            Kind::ReadWrite => "read-write lock",
        }
    }

    /// The name of the keys its probe uses.
    pub(crate) fn probe(self) -> &'static str {
        match self {
            Kind::Semaphore => "semaphore-probe",
            Kind::ReadWrite => "read-write-probe",
        }
    }
}

/// Whether a store holds a shape, as trying to take one on a free key tells.
pub(crate) enum Support {
    /// It took it.
    Holds,
    /// It refused with a configuration error: the error's text.
    Refuses(String),
    /// Something else went wrong: what.
    Broken(String),
}

/// Tries to take `kind` on a free key: the store's answer is what it supports.
pub(crate) async fn probe(p: &mut Processes<'_>, kind: Kind) -> Support {
    let manager = match p.spawn().await {
        Ok(manager) => manager,
        Err(err) => return Support::Broken(err),
    };
    let key = p.key("free");
    let options = LockOptions::new().ttl(LONG_TTL);
    let got = match kind {
        Kind::Semaphore => manager.semaphore(&key, 2, options).await,
        Kind::ReadWrite => manager.read_lock(&key, options).await,
    };
    match got {
        Ok(guard) => match guard.release().await {
            Ok(()) => Support::Holds,
            Err(err) => Support::Broken(format!(
                "a {} taken could not be released: {err}",
                kind.noun()
            )),
        },
        Err(err @ LockError::Config(_)) => Support::Refuses(err.to_string()),
        Err(err) => Support::Broken(format!(
            "taking a {} on a free key failed with {err}; expected it taken, or refused with a \
             configuration error",
            kind.noun()
        )),
    }
}

/// A refusal names the shape it refuses.
pub(crate) fn refusal_is_clear(kind: Kind, refusal: &str) -> Verdict {
    if refusal.contains(kind.noun()) {
        Ok(format!("refused: {refusal}"))
    } else {
        Err(format!(
            "the refusal `{refusal}` does not say `{}`; expected an error that names the shape",
            kind.noun()
        ))
    }
}

/// `result` is busy; what it took otherwise is given back.
async fn busy(result: Result<LockGuard, LockError>, what: &str) -> Result<(), String> {
    match result {
        Err(err) if err.is_busy() => Ok(()),
        Ok(guard) => {
            let _ = guard.release().await;
            Err(format!("{what} got in; expected busy"))
        }
        Err(err) => Err(format!("{what} failed with {err}; expected busy")),
    }
}

/// Permits of the semaphore checks.
const PERMITS: u32 = 3;

/// A semaphore of N permits admits N holders on N managers, refuses the next, and gives a
/// released permit to it; many tasks contending never exceed N.
pub(crate) async fn semaphore_admits_its_permits(p: &mut Processes<'_>) -> Verdict {
    let managers = p.spawn_many(PERMITS as usize + 1).await?;
    let key = p.key("semaphore");
    let now = LockOptions::new().ttl(LONG_TTL);
    let mut held = Vec::new();
    for (index, manager) in managers.iter().take(PERMITS as usize).enumerate() {
        let permit = manager.semaphore(&key, PERMITS, now).await.map_err(|err| {
            format!(
                "holder {} of {PERMITS} was refused: {err}; expected {PERMITS} admitted",
                index + 1
            )
        })?;
        held.push(permit);
    }
    let last = &managers[PERMITS as usize];
    let what = format!("a holder beyond the {PERMITS} permits");
    busy(last.semaphore(&key, PERMITS, now).await, &what).await?;
    let freed = held.remove(0);
    freed
        .release()
        .await
        .map_err(|err| format!("a permit's release failed: {err}"))?;
    let next = last
        .semaphore(&key, PERMITS, now.wait(SOON))
        .await
        .map_err(|err| format!("a released permit was not taken within {SOON:?}: {err}"))?;
    held.push(next);
    for permit in held {
        permit
            .release()
            .await
            .map_err(|err| format!("a permit's release failed: {err}"))?;
    }
    let seen = contend(&managers, &p.key("contended"), Take::Permit(PERMITS - 1)).await?;
    if seen.most > (PERMITS - 1) as usize {
        return Err(format!(
            "saw {} holders of a semaphore of {} permits at once; expected at most {}",
            seen.most,
            PERMITS - 1,
            PERMITS - 1
        ));
    }
    Ok(format!(
        "{PERMITS} admitted and no more; {} contended holds of {} permits, at most {} at once",
        holds(managers.len()),
        PERMITS - 1,
        seen.most
    ))
}

/// Readers on different managers hold a read-write lock at once.
pub(crate) async fn readers_share(p: &mut Processes<'_>) -> Verdict {
    let [one, two] = <[_; 2]>::try_from(p.spawn_many(2).await?)
        .map_err(|_| "two managers asked for".to_owned())?;
    let key = p.key("rw");
    let now = LockOptions::new().ttl(LONG_TTL);
    let first = one
        .read_lock(&key, now)
        .await
        .map_err(|err| format!("a reader of a free read-write lock was refused: {err}"))?;
    let second = two.read_lock(&key, now).await.map_err(|err| {
        format!("a second reader on another manager was refused while a reader held the lock: {err}; expected readers to share")
    })?;
    for share in [first, second] {
        share
            .release()
            .await
            .map_err(|err| format!("a read share's release failed: {err}"))?;
    }
    Ok("two readers on two managers held it at once".to_owned())
}

/// A writer waits for the readers, and while it holds, readers and other writers are busy.
pub(crate) async fn writer_excludes(p: &mut Processes<'_>) -> Verdict {
    let managers = p.spawn_many(3).await?;
    let [reader, writer, other]: [&LockManager; 3] = [&managers[0], &managers[1], &managers[2]];
    let key = p.key("rw");
    let now = LockOptions::new().ttl(LONG_TTL);
    let share = reader
        .read_lock(&key, now)
        .await
        .map_err(|err| format!("a reader of a free read-write lock was refused: {err}"))?;
    busy(
        writer.write_lock(&key, now).await,
        "a writer while a reader held the lock",
    )
    .await?;
    share
        .release()
        .await
        .map_err(|err| format!("a read share's release failed: {err}"))?;
    let hold = writer
        .write_lock(&key, now.wait(SOON))
        .await
        .map_err(|err| {
            format!(
                "a writer did not get the lock within {SOON:?} of the last reader's release: {err}"
            )
        })?;
    busy(
        reader.read_lock(&key, now).await,
        "a reader while a writer held the lock",
    )
    .await?;
    busy(
        other.write_lock(&key, now).await,
        "a second writer while a writer held the lock",
    )
    .await?;
    hold.release()
        .await
        .map_err(|err| format!("the write hold's release failed: {err}"))?;
    let share = reader
        .read_lock(&key, now.wait(SOON))
        .await
        .map_err(|err| {
            format!("a reader did not get the lock within {SOON:?} of the writer's release: {err}")
        })?;
    share
        .release()
        .await
        .map_err(|err| format!("a read share's release failed: {err}"))?;
    Ok("the writer waited for the reader, and kept readers and a writer out".to_owned())
}
