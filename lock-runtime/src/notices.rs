//! What a manager does with the [`Notice`]s its store hears: a request to let go reaches the
//! holder's lease (its guard's `release_requested()` resolves), a steal loses the victim's lease
//! at once, and a leader's announcement reaches the manager's election followers. Each is
//! written to the log as an audit line naming who said it.

use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::broadcast;

use crate::error::LostReason;
use crate::lease::Lease;
use crate::store::{HolderId, Notice, NoticeKind};
use crate::watchdog::Watchdog;

/// How many leader announcements a slow election follower may fall behind by before it reads
/// the lock again instead.
const LEADER_BACKLOG: usize = 64;

/// A manager's receiver of notices. Its store holds it weakly, through
/// [`Changes`](crate::store::Changes).
pub(crate) struct Notices {
    /// Where the manager's held leases are found: its watchdog, once it exists (and those of
    /// the `testing` kit's managers over a layer around the same store).
    watchdogs: Mutex<Vec<Watchdog>>,
    /// Leader announcements, for the manager's election followers.
    leaders: broadcast::Sender<Arc<Notice>>,
}

impl Notices {
    pub(crate) fn new() -> Notices {
        Notices {
            watchdogs: Mutex::new(Vec::new()),
            leaders: broadcast::channel(LEADER_BACKLOG).0,
        }
    }

    /// A watchdog whose leases notices concern.
    pub(crate) fn serve(&self, watchdog: &Watchdog) {
        self.watchdogs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(watchdog.clone());
    }

    /// Leader announcements heard from now on.
    pub(crate) fn leaders(&self) -> broadcast::Receiver<Arc<Notice>> {
        self.leaders.subscribe()
    }

    /// The leases of this manager that `notice` is for: the held ones, and, where the notice
    /// names its holder, also one whose acquire's answer is still on its way. The store granted
    /// that one already (its owner token held the lock when the notice was sent), and the
    /// notice, on a connection of its own, may overtake the answer.
    fn addressed(&self, notice: &Notice) -> Vec<Arc<Lease>> {
        let watchdogs = self
            .watchdogs
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let acquiring = notice.holder.is_some();
        let mut leases: Vec<Arc<Lease>> = watchdogs
            .iter()
            .flat_map(|watchdog| watchdog.live_leases(&notice.key, acquiring))
            .collect();
        if let Some(holder) = notice.holder {
            leases.retain(|lease| HolderId::of_token(lease.token()) == holder);
        }
        leases
    }
}

impl crate::store::Hears for Notices {
    fn heard(&self, notice: &Notice) {
        match notice.kind {
            NoticeKind::ReleaseRequested => {
                for lease in self.addressed(notice) {
                    if lease.request_release(&notice.text) {
                        crate::metrics::release_requested(lease.options.label);
                        tracing::warn!(
                            key = %lease.key(),
                            from = %notice.text,
                            "the holder was asked to release the lock"
                        );
                    }
                }
            }
            NoticeKind::Stolen => {
                // A steal names its victim: a lease of the same key without that id is the
                // stealer's own (or another that took the lock since), and keeps it.
                if notice.holder.is_none() {
                    return;
                }
                for lease in self.addressed(notice) {
                    if lease.mark_lost(LostReason::Stolen) {
                        tracing::warn!(
                            key = %lease.key(),
                            from = %notice.text,
                            "the lock was stolen from its holder; its lease is lost"
                        );
                    }
                }
            }
            NoticeKind::Leader => {
                // An error only says that no election of this manager follows any.
                let _ = self.leaders.send(Arc::new(notice.clone()));
            }
        }
    }
}
