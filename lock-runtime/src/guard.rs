//! The RAII handle of a held lock.

use std::sync::Arc;
use std::time::Duration;

use tokio::runtime::Handle;
use tokio::time::Instant;

use crate::backend::{HandOff, Release, StoreError};
use crate::client::{Inner, WorkUnderWay};
use crate::error::{LockError, LostReason};
use crate::lease::{Lease, Status};
use crate::pending::{Pending, release_dropped};
use crate::protocol::release_id;
use crate::waiters::Slot;

/// A held lock. Release it with [`LockGuard::release`]; if the guard is dropped instead (an early
/// return, a panic, a cancelled future), the drop stops the renewals at once and releases the
/// lock in the background without blocking.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), lock_runtime::LockError> {
/// use std::time::Duration;
/// use lock_runtime::{LockManager, LockOptions};
///
/// let locks = LockManager::memory();
/// let guard = locks
///     .lock("invoice:7", LockOptions::new().ttl(Duration::from_secs(10)))
///     .await?;
/// let token = guard.fencing_token(); // hand this to the storage you write to
/// assert!(token > 0);
/// guard.release().await?;
/// # Ok(())
/// # }
/// ```
#[must_use = "the lock is released as soon as the guard is dropped"]
pub struct LockGuard {
    lease: Arc<Lease>,
    /// `None` once released, and for a guard that re-entered a lock the task already holds (the
    /// outer holder releases it).
    owner: Option<Owner>,
}

struct Owner {
    manager: Arc<Inner>,
    watch_id: u64,
    /// The runtime the lock was taken on: Drop spawns the release there if it has no runtime
    /// of its own to spawn it on.
    runtime: Option<Handle>,
    /// Handed to the caller as held: counted in the `lock.held` metric until released.
    counted: bool,
    /// A release was sent (and perhaps cancelled on the way): it may have landed.
    sent: bool,
}

impl std::fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockGuard")
            .field("key", &self.lease.key())
            .field("fencing_token", &self.lease.fencing_token())
            .field("is_held", &self.is_held())
            .field("reentered", &self.is_reentered())
            .finish()
    }
}

impl LockGuard {
    /// The guard of `pending`, whose acquire was granted, for the caller: counted as held in
    /// the metrics until it is released or dropped, and in use (kept for `hold_at_least` on
    /// release).
    pub(crate) fn granted(pending: Pending) -> Self {
        let (manager, lease, watch_id, runtime) = pending.into_parts();
        crate::metrics::held(lease.options.label);
        let guard = LockGuard {
            lease,
            owner: Some(Owner {
                manager,
                watch_id,
                runtime,
                counted: true,
                sent: false,
            }),
        };
        guard.in_use(true)
    }

    /// Whether the caller uses this lock, so that a body may run under it (see
    /// `Lease::in_use`): `lock_all` holds its keys back until it has them all. A guard that
    /// re-entered an outer lock leaves the outer holder's lease as it is.
    pub(crate) fn in_use(self, in_use: bool) -> Self {
        if self.owner.is_some() {
            self.lease.set_in_use(in_use);
        }
        self
    }

    /// A guard for a lock the task already holds.
    pub(crate) fn reentered(lease: Arc<Lease>) -> Self {
        LockGuard { lease, owner: None }
    }

    pub(crate) fn lease(&self) -> &Arc<Lease> {
        &self.lease
    }

    /// The lock key, as the caller named it.
    pub fn key(&self) -> &str {
        self.lease.key()
    }

    /// `Some(n)` if this guard holds one of the `n` permits of a semaphore
    /// ([`LockManager::semaphore`](crate::LockManager::semaphore)), `None` for a lock.
    pub fn permits(&self) -> Option<u32> {
        self.lease.stored.shape.permits()
    }

    /// Which lock of the key's name this guard holds: [`Mode::Exclusive`] for the lock (or a
    /// semaphore's permit), [`Mode::Read`] for a read share or [`Mode::Write`] for the write
    /// hold of the read-write lock. A read re-entered inside a write section reports `Write`,
    /// the hold it shares.
    ///
    /// [`Mode::Exclusive`]: crate::Mode::Exclusive
    /// [`Mode::Read`]: crate::Mode::Read
    /// [`Mode::Write`]: crate::Mode::Write
    pub fn mode(&self) -> crate::shape::Mode {
        self.lease.stored.shape.mode()
    }

    /// The fencing token of this acquisition: strictly greater than every token handed out
    /// earlier for the same key (see the crate docs for the exact guarantee). For a
    /// semaphore's permit, greater than every token handed out earlier for any permit of it. Pass it to the
    /// storage the lock protects and have that storage refuse smaller tokens than it has seen.
    pub fn fencing_token(&self) -> u64 {
        self.lease.fencing_token()
    }

    /// True while the lease is known to be held: not lost, not released, and its local deadline
    /// (which the watchdog moves) not passed.
    pub fn is_held(&self) -> bool {
        self.lease.is_held()
    }

    /// What is left of the lease by the local clock.
    pub fn remaining(&self) -> Duration {
        self.lease.remaining()
    }

    /// True if this guard re-entered a lock the task already held: releasing it does nothing.
    pub fn is_reentered(&self) -> bool {
        self.owner.is_none() && self.lease.status() != Status::Released
    }

    /// Runs `body` as a section of this lock: inside it, [`current()`](crate::current) reports
    /// the lock, and a nested acquisition of the same key on the same manager (`lock()`,
    /// `run_locked`, a `#[distributed_lock]` fn) re-enters it instead of waiting for itself.
    /// The guard still owns the lock: release it after the section.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), lock_runtime::LockError> {
    /// use lock_runtime::{LockManager, LockOptions};
    ///
    /// let locks = LockManager::memory();
    /// let guard = locks.lock("order:1", LockOptions::new()).await?;
    /// guard
    ///     .scope(async {
    ///         // Nested code that takes the same lock re-enters it.
    ///         let inner = locks.lock("order:1", LockOptions::new()).await?;
    ///         assert!(inner.is_reentered());
    ///         assert_eq!(lock_runtime::current().map(|held| held.fencing_token()), Some(inner.fencing_token()));
    ///         Ok::<_, lock_runtime::LockError>(())
    ///     })
    ///     .await?;
    /// guard.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn scope<F: std::future::Future>(
        &self,
        body: F,
    ) -> impl std::future::Future<Output = F::Output> + use<F> {
        crate::current::scope(self.lease.clone(), body)
    }

    /// Resolves when the lease is lost (renewal proved another owner, or no renewal succeeded
    /// before the lease ran out), with the reason. Never resolves for a lock released normally.
    pub async fn lost(&self) -> LostReason {
        self.lease.lost().await
    }

    /// Resolves once someone asks this holder to let go
    /// ([`LockManager::request_release`](crate::LockManager::request_release), `lockctl revoke`),
    /// with who asked; at once if someone has. The lock stays held: the holder decides whether
    /// to finish or to stop and release. Never resolves if the lock is released or lost first.
    ///
    /// Where the store carries notices (memory, every Redis deployment, PostgreSQL), the
    /// request arrives as one message from the server, within one round trip of the request.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), lock_runtime::LockError> {
    /// use lock_runtime::{LockManager, LockOptions};
    ///
    /// let locks = LockManager::memory();
    /// let guard = locks.lock("reindex", LockOptions::new()).await?;
    /// locks.request_release("reindex", "ops: deploy at 14:00").await?;
    /// let request = guard.release_requested().await;
    /// assert!(request.from().ends_with("ops: deploy at 14:00")); // after this host and pid
    /// guard.release().await?; // this holder chose to let go at once
    /// # Ok(())
    /// # }
    /// ```
    pub async fn release_requested(&self) -> crate::ReleaseRequest {
        self.lease.release_requested().await
    }

    /// For a guard [`LockManager::steal`](crate::LockManager::steal) returned: the holder it
    /// took the lock from, by the id `lockctl show` prints (12 hex digits, as its `Display`
    /// writes it); `None` if the lock was free, for any other guard, and
    /// where the store does not know who held it.
    pub fn stolen_from(&self) -> Option<crate::store::HolderId> {
        crate::store::HolderId::from_raw(self.lease.stolen_from())
    }

    /// Releases the lock and waits until the server confirms it, so the next holder can enter
    /// at once.
    ///
    /// Returns [`LockError::LeaseLost`] if the lock had expired or belongs to someone else by
    /// now (that lock is left untouched), and [`LockError::Backend`] if the server could not be
    /// reached; the guard then keeps the owner token and, if the failure may pass
    /// ([`LockError::is_retryable`]), retries in the background until the lease would have run
    /// out. A guard that re-entered an outer lock returns `Ok` at once.
    pub async fn release(mut self) -> Result<(), LockError> {
        let Some(owner) = self.owner.as_mut() else {
            return Ok(());
        };
        owner.manager.watchdog.unregister(owner.watch_id);
        if std::mem::take(&mut owner.counted) {
            // Counted once, also if this release is cancelled and the drop finishes it.
            crate::metrics::released(self.lease.options.label, || self.lease.started().elapsed());
        }
        owner.sent = true;
        let owner = &*owner;
        if self.lease.status() == Status::Lost(LostReason::ShutDown) {
            // Shutdown released it already.
            self.owner = None;
            return Err(LockError::LeaseLost {
                key: self.lease.key().to_owned(),
                reason: LostReason::ShutDown,
            });
        }
        // Counted as under way (for shutdown to wait on) until this returns or is dropped; it
        // also holds the manager the release goes through.
        let under_way = owner.manager.work_under_way();
        // On the heap, and only while it runs: a future that holds a guard and releases it at
        // the end would otherwise keep the release's space (about 400 B) all the while it
        // holds the lock.
        let answer = Box::pin(give_back(under_way.manager(), &self.lease)).await?;
        // Released or not ours: either way there is nothing left to retry.
        self.owner = None;
        match answer {
            Release::Released => {
                self.lease.mark_released();
                Ok(())
            }
            Release::NotOwner | Release::Gone => {
                // Gone is what an expiry and an outside DEL both leave: the server has no lock
                // of ours, which is what NotOwner says. (Expired means renewals failed.) A
                // lease already known stolen says so: the thief holds the lock now.
                let reason = match self.lease.status() {
                    Status::Lost(LostReason::Stolen) => LostReason::Stolen,
                    _ => LostReason::NotOwner,
                };
                self.lease.mark_lost(reason);
                self.lease.mark_released();
                tracing::warn!(key = %self.lease.key(), %reason, "release found the lock no longer ours");
                Err(LockError::LeaseLost {
                    key: self.lease.key().to_owned(),
                    reason,
                })
            }
        }
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        let Some(owner) = self.owner.take() else {
            return;
        };
        owner.manager.watchdog.unregister(owner.watch_id);
        if owner.counted {
            crate::metrics::released(self.lease.options.label, || self.lease.started().elapsed());
        }
        release_dropped(owner.manager, &self.lease, owner.runtime, owner.sent);
    }
}

impl crate::section::Held for LockGuard {
    fn scope<F: std::future::Future>(
        &self,
        body: F,
    ) -> impl std::future::Future<Output = F::Output> {
        LockGuard::scope(self, body)
    }

    type Lost = LostReason;

    fn lost(&self) -> impl std::future::Future<Output = LostReason> {
        self.lease.lost()
    }

    fn lost_now(&self) -> Option<LostReason> {
        self.lease.lost_now()
    }

    fn lost_error(&self, reason: LostReason) -> LockError {
        LockError::LeaseLost {
            key: self.lease.key().to_owned(),
            reason,
        }
    }

    async fn finish(self) {
        if let Err(err) = self.release().await {
            finish_failed(&err);
        }
    }
}

/// Logs what the release at the end of a locked section came to, when it was not a plain
/// release: one calm line where shutdown released the lock already (what a stopping process
/// expects), a warning otherwise.
pub(crate) fn finish_failed(err: &LockError) {
    match err {
        LockError::LeaseLost {
            key,
            reason: LostReason::ShutDown,
        } => tracing::info!(key = %key, "lock released by shutdown"),
        err => tracing::warn!(
            key = err.key().unwrap_or_default(),
            error = %err,
            "locked section finished but its release failed"
        ),
    }
}

/// Gives the lock of `lease` back: to a waiter of this process if one offered to take it,
/// otherwise to the server.
async fn give_back(manager: &Arc<Inner>, lease: &Arc<Lease>) -> Result<Release, LockError> {
    match hand_off(manager, lease).await {
        Some(answer) => answer,
        None => manager.release(lease).await,
    }
}

/// Hands the lock of `lease` straight to the first waiter of this process that offered to take
/// it (see `waiters`), in one script call, instead of releasing it: `None` if nobody offered
/// (or the lock must be kept for `hold_at_least`, or the backend cannot), and the caller
/// releases as usual. The release answers of the holder's side are those of a release: a lock
/// released instead (someone elsewhere waits) is `Released` too.
///
/// The hand-over runs as a task of its own, counted as work under way: once its request may be
/// on the wire, what it wrote must be settled with the waiter whatever becomes of the caller. A
/// release cancelled meanwhile (a section aborted by shutdown or by a timeout around it) would
/// otherwise leave a lock written for the waiter that nobody knows of, held for its lease.
async fn hand_off(manager: &Arc<Inner>, lease: &Arc<Lease>) -> Option<Result<Release, LockError>> {
    if !manager.hands_off(&lease.stored) || !lease.keep().is_zero() || manager.is_closed() {
        return None;
    }
    let (slot, next) = manager.waiters.take_offer(&lease.stored.lock)?;
    let task = hand_over(manager.work_under_way(), lease.clone(), slot, next);
    match manager.background.spawn(task).await {
        Ok(answer) => answer,
        // Its runtime shut down under it: nothing was confirmed.
        Err(_) => Some(Err(manager.error(
            "release",
            lease,
            StoreError::transient("the hand-over to a waiter ended unanswered".to_owned()),
        ))),
    }
}

/// The hand-over of the lock of `lease` to the waiter of `slot`, under the waiter's lease
/// `next` (see [`hand_off`]).
async fn hand_over(
    under_way: WorkUnderWay,
    lease: Arc<Lease>,
    slot: Arc<Slot>,
    next: Arc<Lease>,
) -> Option<Result<Release, LockError>> {
    let manager = under_way.manager();
    // Settled on every way out: the waiter then tries itself.
    let mut settling = Settling {
        slot: &slot,
        settled: false,
    };
    // Registered before the request is sent, as for any acquire. The hand-over writes the
    // waiter's value: its release runs the script, which reads it.
    next.restart(Instant::now());
    next.record_attempt(crate::protocol::now_ms(), false);
    let watch_id = manager.watchdog.register(&next);
    let answer = tokio::time::timeout(
        manager.request_timeout,
        manager.backend.hand_off(&lease, &next),
    )
    .await;
    let answer = match answer {
        Ok(answer) => answer,
        Err(_) => Err(StoreError::timed_out(manager.request_timeout)),
    };
    // In time, the waiter's lease is held from now on. (Too late, the waiter's own retry under
    // the same token confirms it, as after any late grant.)
    if let Ok(HandOff::Handed { fence }) = answer
        && Instant::now() < next.deadline()
    {
        next.mark_held(fence);
        manager.watchdog.activate(watch_id);
        settling.settled = true;
        if slot.settle(Some(watch_id)) {
            // The waiter left meanwhile: nobody takes it, so it is given back.
            drop(Pending::new(manager.clone(), next, watch_id));
        }
        return Some(Ok(Release::Released));
    }
    // Not handed over: the waiter's attempt never began.
    manager.watchdog.unregister(watch_id);
    if let Err(failure) = &answer
        && !failure.is_transient()
    {
        // Refused as it is (a fence counter it cannot count on) and nothing was written: the
        // holder releases as usual, and the waiter tries itself.
        return None;
    }
    Some(match answer {
        Ok(HandOff::Handed { .. }) => Ok(Release::Released),
        Ok(HandOff::Released) => {
            // The waiter is woken by the settling; the announcement wakes nobody else here.
            manager
                .waiters
                .released_here(&lease.stored.lock, &release_id(&lease.token), false);
            Ok(Release::Released)
        }
        Ok(HandOff::NotOwner) => Ok(Release::NotOwner),
        Ok(HandOff::Gone) => Ok(Release::Gone),
        Err(failure) => Err(manager.error("release", &lease, failure)),
    })
}

/// Declines a taken offer when dropped, unless it was settled.
struct Settling<'a> {
    slot: &'a Slot,
    settled: bool,
}

impl Drop for Settling<'_> {
    fn drop(&mut self) {
        if !self.settled {
            // Declined: nothing was handed over, so the waiter has nothing to give back.
            self.slot.settle(None);
        }
    }
}
