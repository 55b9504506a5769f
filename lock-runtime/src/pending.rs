//! The handle of an acquire on the wire, apart from the [`LockGuard`](crate::LockGuard) the
//! caller gets: dropped before its request was answered (a cancelled or failed acquire, or a
//! lock handed over to a waiter that left), it gives back whatever the request may have taken.
//! Once granted, it becomes the caller's guard; told busy, it is disarmed.

use std::sync::Arc;

use tokio::runtime::Handle;
use tokio::time::Instant;

use crate::backend::Release;
use crate::backoff::Backoff;
use crate::client::{Inner, WorkUnderWay};
use crate::error::LostReason;
use crate::lease::{Lease, Status};

/// The lease of an acquire whose answer is still out, registered with the watchdog under
/// `watch_id`: given back when dropped, unless it was disarmed or became a guard.
pub(crate) struct Pending {
    manager: Arc<Inner>,
    lease: Arc<Lease>,
    watch_id: u64,
    /// The runtime the acquire was sent from: the drop spawns the release there if it has no
    /// runtime of its own to spawn it on.
    runtime: Option<Handle>,
    /// Whether the drop gives the lease back: not once it is disarmed or a guard.
    armed: bool,
}

impl Pending {
    /// `lease`, registered with the watchdog under `watch_id`, whose acquire is about to be
    /// sent (or was just handed over).
    pub(crate) fn new(manager: Arc<Inner>, lease: Arc<Lease>, watch_id: u64) -> Self {
        Pending {
            manager,
            lease,
            watch_id,
            runtime: Handle::try_current().ok(),
            armed: true,
        }
    }

    pub(crate) fn lease(&self) -> &Arc<Lease> {
        &self.lease
    }

    pub(crate) fn watch_id(&self) -> u64 {
        self.watch_id
    }

    /// The acquire said busy: nothing to give back.
    pub(crate) fn disarm(mut self) {
        self.armed = false;
        self.manager.watchdog.unregister(self.watch_id);
    }

    /// Granted: what the caller's guard takes over.
    pub(crate) fn into_parts(mut self) -> (Arc<Inner>, Arc<Lease>, u64, Option<Handle>) {
        self.armed = false;
        (
            self.manager.clone(),
            self.lease.clone(),
            self.watch_id,
            self.runtime.take(),
        )
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        self.manager.watchdog.unregister(self.watch_id);
        release_dropped(
            self.manager.clone(),
            &self.lease,
            self.runtime.take(),
            false,
        );
    }
}

/// Releases `lease` in the background, for a guard or an acquire dropped while it held (or may
/// have taken) it, its watch already ended. `runtime`: the one it was taken on. `sent`: a
/// release of it was sent before and cancelled on the way, so it may have landed already.
pub(crate) fn release_dropped(
    manager: Arc<Inner>,
    lease: &Arc<Lease>,
    runtime: Option<Handle>,
    sent: bool,
) {
    if lease.status() == Status::Lost(LostReason::ShutDown) {
        // Shutdown released it already.
        return;
    }
    // An acquire that never completed (cancelled, failed, or timed out while its lease was
    // already given up) may still have landed: take it back (never kept for hold_at_least,
    // since nobody used it: see `Lease::keep`).
    // Either way, finding it gone says nothing went wrong.
    let expected = lease.status() == Status::Acquiring || sent;
    lease.mark_released();
    // The pinned runtime, else the one dropping the guard (alive, since it runs this),
    // else the one the lock was taken on, which may have shut down since.
    let runtime = manager
        .background
        .pinned()
        .cloned()
        .or_else(|| Handle::try_current().ok())
        .or(runtime);
    let Some(runtime) = runtime else {
        tracing::warn!(key = %lease.key(), "no tokio runtime to release the lock on; it expires with its lease");
        return;
    };
    // If the runtime is shutting down the task never runs and the lease simply runs out.
    let under_way = manager.work_under_way();
    runtime.spawn(release_in_background(
        manager,
        lease.clone(),
        expected,
        under_way,
    ));
}

/// Releases a dropped guard's lock, retrying a failure that may pass (see
/// [`LockError::is_retryable`](crate::LockError::is_retryable)) with backoff until the lease would have run out. One that will
/// recur as it is (a refused command, foreign data at the key) is not sent again: the lock then
/// expires with its lease.
async fn release_in_background(
    manager: Arc<Inner>,
    lease: Arc<Lease>,
    gone_expected: bool,
    // Counted until this task ends (or is dropped unrun), for shutdown to wait on.
    _under_way: WorkUnderWay,
) {
    let give_up = lease.deadline();
    let mut backoff = Backoff::requests();
    loop {
        match manager.release(&lease).await {
            Ok(Release::Released) => return,
            Ok(Release::NotOwner | Release::Gone) => {
                // After a cancelled acquire this is the normal answer: it never took the lock;
                // after a cancelled release, the release landed.
                if !gone_expected {
                    tracing::warn!(key = %lease.key(), "release found the lock no longer ours");
                }
                return;
            }
            Err(err) if !err.is_retryable() => {
                tracing::warn!(key = %lease.key(), error = %err, "release failed, and would again; the lock expires with its lease");
                return;
            }
            Err(err) => {
                if Instant::now() + backoff.peek() >= give_up {
                    tracing::warn!(key = %lease.key(), error = %err, "release failed; the lock expires with its lease");
                    return;
                }
                tracing::debug!(key = %lease.key(), error = %err, "release failed; retrying");
                tokio::time::sleep(backoff.pause()).await;
            }
        }
    }
}
