//! Where an acquisition waits: its place in this process's line of waiters for a key, and its
//! place in the line of fair waiters on the server.

use std::sync::Arc;

use tokio::time::Instant;

use crate::client::Inner;
use crate::key::Key;
use crate::lease::Lease;
use crate::pending::Pending;
use crate::protocol::release_id;
use crate::waiters::{Slot, Wake, Withdrawn};

/// Without an expiry on the busy key (set by something other than this crate) and without a
/// notification, look again this often.
const BLIND_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

/// A task's place in line for one key while it waits; leaving the line (on drop) stops the
/// notifications when it was the last waiter.
pub(super) struct Waiting {
    manager: Arc<Inner>,
    key: String,
    slot: Arc<Slot>,
    /// Releases of the key are announced to this process.
    pub(super) notified: bool,
    /// The subscription this waiter joined (see [`Waiters::subscription`](crate::waiters::Waiters::subscription)).
    pub(super) subscription: Arc<tokio::sync::OnceCell<()>>,
    /// The `lock.name` it is counted under in the `lock.waiting` gauge while in line.
    label: Option<&'static str>,
}

impl Waiting {
    /// Joins the line for the key of `lease`, and subscribes to its releases if this process
    /// does not yet.
    pub(super) async fn join(manager: &Arc<Inner>, lease: &Lease, give_up: Instant) -> Waiting {
        let key = lease.stored.lock.as_str();
        let (slot, watched) = manager.waiters.join(key, lease.stored.shape());
        let label = lease.options.label;
        crate::metrics::waiting(label, 1.0);
        let mut waiting = Waiting {
            manager: manager.clone(),
            key: key.to_owned(),
            slot,
            notified: false,
            subscription: watched.clone(),
            label,
        };
        // A failure is not remembered: the next waiter of the key tries again.
        let subscribe = watched.get_or_try_init(|| async {
            manager.backend.watch(key).await.inspect_err(|err| {
                tracing::warn!(key, error = %err, "cannot subscribe to lock releases; waiting on the lease alone");
            })
        });
        // Waiting on the lease alone is still correct, only slower: never let a slow subscription
        // eat the caller's wait budget.
        let limit = manager.request_timeout.min(give_up - Instant::now());
        let _ = tokio::time::timeout(limit, subscribe).await;
        waiting.notified = manager.backend.notifies() && watched.initialized();
        waiting
    }

    /// Whether this waiter is the first in this process's line for its key.
    pub(super) fn is_first(&self) -> bool {
        self.manager.waiters.is_first(&self.key, &self.slot)
    }

    /// This waiter leaves the line: if it watched the lease's expiry, the next one does now,
    /// looking again at `until`.
    pub(super) fn hand_over(&self, until: Instant) {
        self.manager.waiters.hand_over(&self.slot, until);
    }

    /// From now on this waiter is woken by name, under the release id of `token`, when the
    /// lock is freed for it (see `waiters`).
    pub(super) fn name(&self, token: &str) {
        self.manager
            .waiters
            .name(&self.key, &self.slot, release_id(token));
    }

    /// Sleeps in line until this waiter should try again: a release, the lease it knows of
    /// running out (`expires`, if it watches), or `give_up`. Where the backend hands locks
    /// over, a holder of this process may hand it the lock meanwhile, under `lease`: then its
    /// grant is returned. `holder` is the lease of this process that holds the lock, if one
    /// does: while it is renewed, its expiry is watched here without asking the server.
    /// `in_line`: the waiter has a place in the line of fair waiters, which it keeps by asking
    /// again every third of its lease.
    pub(super) async fn wait_in_line(
        &self,
        lease: &Arc<Lease>,
        expires: Option<Instant>,
        holder: Option<&Arc<Lease>>,
        give_up: Instant,
        in_line: bool,
        deadlock: Option<&crate::deadlock::Wait>,
    ) -> Option<Pending> {
        let now = Instant::now();
        let give_up = if in_line {
            give_up.min(now + lease.options.ttl / 3)
        } else {
            give_up
        };
        // The first waiter in line watches the lease's expiry, which nobody announces; the
        // others wait for a release (or for the watch to be handed to them), so that one
        // expiry costs one attempt, not one per waiter. Without notifications, everyone
        // watches.
        let watches = !self.notified || self.is_first();
        let mut wake_at = match expires {
            Some(expires) if watches => expires,
            Some(_) => give_up,
            None if watches => now + BLIND_WAIT,
            None => give_up,
        }
        .min(give_up);
        if self.manager.hands_off(&lease.stored) {
            self.slot.open_offer(lease.clone());
        }
        // Shutdown wakes the waiters in line when it closes the manager: one that joined after
        // that sees it closed here instead (the line's lock orders the two).
        while !self.manager.is_closed() {
            tokio::select! {
                biased;
                () = doomed(deadlock) => break,
                wake = self.slot.woken() => match wake {
                    Wake::Retry => break,
                    Wake::WatchUntil(at) => wake_at = wake_at.min(at),
                },
                () = tokio::time::sleep_until(wake_at) => {
                    let renewed = holder
                        .filter(|holder| holder.is_held())
                        .map(|holder| holder.deadline())
                        .filter(|&deadline| deadline > wake_at);
                    match renewed {
                        Some(deadline) if wake_at < give_up => wake_at = deadline.min(give_up),
                        _ => break,
                    }
                }
            }
        }
        let granted = match self.slot.withdraw_offer() {
            Withdrawn::Nothing => return None,
            Withdrawn::Granted(lease, watch_id) => (lease, watch_id),
            Withdrawn::InFlight => {
                // A holder is handing the lock over right now: its answer decides.
                self.slot.settled().await;
                match self.slot.withdraw_offer() {
                    Withdrawn::Granted(lease, watch_id) => (lease, watch_id),
                    Withdrawn::Nothing | Withdrawn::InFlight => return None,
                }
            }
        };
        let (lease, watch_id) = granted;
        // The next local waiter watches our lease: nobody announces its expiry.
        self.hand_over(lease.deadline());
        Some(Pending::new(self.manager.clone(), lease, watch_id))
    }
}

/// Ends when the call of `deadlock` is chosen to give up in a deadlock; never without one.
async fn doomed(deadlock: Option<&crate::deadlock::Wait>) {
    match deadlock {
        Some(wait) => wait.doomed().await,
        None => std::future::pending().await,
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        crate::metrics::waiting(self.label, -1.0);
        if let Some((lease, watch_id)) = self.slot.abandon() {
            // Handed the lock as it left (cancelled, or gave up): nobody holds it, give it back.
            drop(Pending::new(self.manager.clone(), lease, watch_id));
        }
        let backend = &self.manager.backend;
        self.manager
            .waiters
            .leave(&self.key, &self.slot, || backend.unwatch(&self.key));
    }
}

/// A place in the line of fair waiters: left (on the server, in the background) when dropped,
/// unless the lock was taken, which took it out of line.
pub(super) struct InLine {
    manager: Arc<Inner>,
    stored: Key,
    token: String,
    pub(super) left: bool,
}

impl InLine {
    pub(super) fn new(manager: &Arc<Inner>, lease: &Lease) -> InLine {
        InLine {
            manager: manager.clone(),
            stored: lease.stored.clone(),
            token: lease.token.as_str().to_owned(),
            left: false,
        }
    }
}

impl Drop for InLine {
    fn drop(&mut self) {
        if self.left {
            return;
        }
        // Counted from now, for shutdown to wait on.
        let under_way = self.manager.work_under_way();
        let stored = self.stored.clone();
        let token = std::mem::take(&mut self.token);
        let background = self.manager.background.clone();
        let spawned = background.try_spawn(async move {
            let manager = under_way.manager();
            let left = tokio::time::timeout(
                manager.request_timeout,
                manager.backend.leave(&stored, &token),
            )
            .await;
            if !matches!(left, Ok(Ok(()))) {
                tracing::debug!(key = %stored.lock, "could not leave the line of fair waiters; the place ends with the waiter's lease");
            }
        });
        if spawned.is_none() {
            tracing::debug!(key = %self.stored.lock, "no tokio runtime to leave the line of fair waiters on; the place ends with the waiter's lease");
        }
    }
}
