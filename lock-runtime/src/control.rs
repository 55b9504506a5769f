//! Control over a lock's holder from outside it: asking it to let go
//! ([`LockManager::request_release`]) and taking the lock from it ([`LockManager::steal`]).
//! Both travel as [`Notice`]s through a store that [`announces`](crate::store::Store::announces);
//! the holder's manager acts on them (see `notices.rs`).

use std::sync::Arc;

use tokio::time::Instant;

use crate::error::LockError;
use crate::guard::LockGuard;
use crate::key::Key;
use crate::lease::{Lease, Token};
use crate::manager::LockManager;
use crate::options::LockOptions;
use crate::pending::Pending;
use crate::shape::Shape;
use crate::store::{HolderId, Kind, LockState, Notice, NoticeKind, StoreError};

/// Who says a notice, for the audit line the holder writes: the application (if named), host
/// and pid of this process, and the caller's reason.
pub(crate) fn signed(app: Option<&str>, reason: &str) -> String {
    let host = gethostname::gethostname();
    let host = host.to_string_lossy();
    let pid = std::process::id();
    let who = match app {
        Some(app) if !app.is_empty() => format!("{app} on {host} pid {pid}"),
        _ => format!("{host} pid {pid}"),
    };
    if reason.is_empty() {
        who
    } else {
        format!("{who}: {reason}")
    }
}

/// Who holds the plain lock `key` now, as the store's inspection side reads it: the holder a
/// release request names, so that it reaches that holder even while its acquire's answer is
/// still on its way, and nobody who takes the lock later. `None` (the request then goes to
/// whoever holds the key when it arrives) where the store cannot be inspected, the read fails
/// or names no single holder.
async fn holder_now(inner: &crate::client::Inner, key: &str) -> Option<HolderId> {
    let inspect = inner.backend.inspect()?;
    let read = StoreError::within(inner.request_timeout, inspect.show(&inner.prefix, key));
    let locks = read.await.ok()?;
    let mut holders = locks
        .iter()
        .filter(|lock| lock.kind == Kind::Lock && lock.state == LockState::Held)
        .filter_map(|lock| lock.holder_id.as_deref())
        .filter_map(|hex| u64::from_str_radix(hex, 16).ok())
        .filter_map(HolderId::from_raw);
    let holder = holders.next()?;
    // Redlock's masters may disagree: only a holder every place names is named.
    holders.all(|other| other == holder).then_some(holder)
}

impl LockManager {
    /// Asks whoever holds the lock `key` to let go: the holder's
    /// [`LockGuard::release_requested`] (and [`CurrentLock::release_requested`] inside an
    /// attribute's body) resolves, within one round trip of this call, with who asked
    /// (this process's app name, host and pid) and `reason`. The holder writes an audit line
    /// to its log and decides: the lock stays held until it releases.
    ///
    /// Resolves once the store has taken the request; it does not wait for the holder, and a
    /// lock nobody holds hears nothing. A holder whose connection to the store is down when
    /// it is told misses the request. Only the plain lock `key` is addressed: the holders of
    /// a semaphore's permits or of a read-write lock of that name are not told. The asker
    /// writes an audit line too (`warn`, with the key and who asked).
    ///
    /// Without a [`request_timeout`](crate::LockManagerBuilder::request_timeout)-long answer
    /// from the store the request may or may not have been carried; asking again is harmless
    /// (a holder acts on the first request it hears).
    ///
    /// Errors: [`LockError::Config`] for an empty key, or on a store that carries no notices
    /// (every store of this crate carries them); [`LockError::Backend`] if the store failed;
    /// [`LockError::ShutDown`] after [`shutdown`](Self::shutdown).
    ///
    /// [`CurrentLock::release_requested`]: crate::CurrentLock::release_requested
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), lock_runtime::LockError> {
    /// use lock_runtime::{LockManager, LockOptions};
    ///
    /// let locks = LockManager::memory();
    /// let guard = locks.lock("nightly-report", LockOptions::new()).await?;
    /// locks.request_release("nightly-report", "deploying 2.4").await?;
    /// let request = guard.release_requested().await;
    /// assert!(request.from().ends_with("deploying 2.4"));
    /// guard.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn request_release(&self, key: &str, reason: &str) -> Result<(), LockError> {
        let inner = self.client();
        if self.is_shut_down() {
            return Err(LockError::ShutDown {
                key: key.to_owned(),
            });
        }
        let stored = Key::new(&inner.prefix, key, Shape::Lock)?;
        let backend = &inner.backend;
        if !backend.announces() {
            return Err(LockError::Config(format!(
                "{} carries no notices, so its holders cannot be asked to release `{}`: \
                 use a store that does (memory, Redis, PostgreSQL)",
                backend.describe(),
                key.escape_debug()
            )));
        }
        let holder = holder_now(inner, key).await;
        let notice = Notice::new(
            NoticeKind::ReleaseRequested,
            stored.name(),
            holder,
            signed(inner.app_name.as_deref(), reason),
        );
        StoreError::within(inner.request_timeout, backend.announce(&notice))
            .await
            .map_err(|failure| {
                LockError::from_failure("request_release", Some(key), backend.server(), failure)
            })?;
        tracing::warn!(
            key = %key,
            from = %notice.text,
            "asked the holder of the lock to release it; the holder decides"
        );
        Ok(())
    }

    /// Takes the lock `key` at once, whoever holds it, with a new fencing token greater than
    /// the holder's, and returns its guard (renewed by the watchdog like any other, for
    /// `options.ttl`). The holder's lease is lost within one round trip
    /// ([`LostReason::Stolen`](crate::LostReason::Stolen): its [`LockGuard::lost`] resolves,
    /// and it writes an audit line naming this process and `reason`), not at its next
    /// renewal; its later writes through the [`fence`](crate::fence) module are refused.
    ///
    /// A steal is for an operator's emergency or a preempting service: the victim's section
    /// may still be running when this returns, so anything not behind the fence can see both.
    /// A fair line of waiters keeps its places; the lock goes to the first in line when this
    /// guard releases it. [`LockGuard::stolen_from`] names the holder it was taken from.
    ///
    /// Inside a locked section of this task that holds `key` (on this manager) it is refused:
    /// the task is the holder already, a re-entered guard would carry no new fencing token,
    /// and taking the lock would make the task's own section lose it.
    ///
    /// Errors: [`LockError::Config`] for options that are not a plain lock's (`permits`, a
    /// read or write mode), inside a section of this task that holds `key`, or on a store
    /// that cannot steal (Redlock: its masters could each give
    /// the lock to a different thief); [`LockError::Backend`] if the store failed (the
    /// holder may or may not have lost the lock; stealing again is safe);
    /// [`LockError::ShutDown`] after [`shutdown`](Self::shutdown).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), lock_runtime::LockError> {
    /// use lock_runtime::{LockManager, LockOptions, LostReason};
    ///
    /// let locks = LockManager::memory();
    /// let stuck = locks.lock("import", LockOptions::new()).await?;
    /// let mine = locks.steal("import", LockOptions::new(), "import stuck for an hour").await?;
    /// assert!(mine.fencing_token() > stuck.fencing_token());
    /// assert_eq!(stuck.lost().await, LostReason::Stolen);
    /// mine.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn steal(
        &self,
        key: impl Into<String>,
        options: LockOptions,
        reason: &str,
    ) -> Result<LockGuard, LockError> {
        let key = key.into();
        let inner = self.client().clone();
        if crate::current::held(inner.id, &key, Shape::Lock).is_some() {
            // Re-entering would give no new fencing token, and taking it would make this
            // task's own section lose its lease: neither is a steal.
            return Err(LockError::Config(format!(
                "steal(`{}`) inside a locked section of this task that holds it: this task \
                 is its holder already",
                key.escape_debug()
            )));
        }
        let _under_way = inner.work_under_way();
        let options = options.or_lock_delay(inner.lock_delay);
        options.validate()?;
        if options.shape()? != Shape::Lock {
            return Err(LockError::Config(format!(
                "steal(`{}`) takes a plain lock: leave out permits and the read or write mode",
                key.escape_debug()
            )));
        }
        let backend = &inner.backend;
        if !backend.steals() {
            return Err(LockError::Config(format!(
                "{} cannot steal `{}`: release it with `lockctl unlock` instead, or use a \
                 store that can steal (memory, one Redis server, Sentinel, Cluster, PostgreSQL)",
                backend.describe(),
                key.escape_debug()
            )));
        }
        if inner.is_closed() {
            return Err(LockError::ShutDown { key });
        }
        let stored = Key::new(&inner.prefix, &key, Shape::Lock)?;
        let lease = Arc::new(Lease::new(
            stored,
            Token::new_v4(),
            inner.id,
            options,
            Instant::now(),
        ));
        let watch_id = inner.watchdog.register(&lease);
        let pending = Pending::new(inner.clone(), lease.clone(), watch_id);
        let from = signed(inner.app_name.as_deref(), reason);
        let limit = inner.request_timeout.min(options.ttl);
        let ttl = options.ttl + options.delay();
        let answer = StoreError::within(
            limit,
            backend.steal(&lease.stored, lease.token(), ttl, &from),
        );
        let stolen = answer.await.map_err(|failure| {
            LockError::from_failure("steal", Some(&key), backend.server(), failure)
        })?;
        lease.mark_held(stolen.fence);
        lease.set_stolen_from(stolen.victim.map_or(0, crate::store::HolderId::get));
        inner.watchdog.activate(watch_id);
        if inner.is_closed() {
            // Shutdown drained the watchdog before this lease was in it: the drop of
            // `pending` gives the lock back.
            return Err(LockError::ShutDown { key });
        }
        crate::metrics::stolen(options.label);
        let victim = stolen
            .victim
            .map_or_else(|| "none (it was free)".to_owned(), |id| id.to_string());
        tracing::warn!(
            key = %key,
            fencing_token = stolen.fence,
            victim = %victim,
            from = %from,
            "stole the lock from its holder"
        );
        Ok(LockGuard::granted(pending))
    }
}

#[cfg(test)]
mod tests;
