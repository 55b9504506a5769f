//! The state a manager and its clones share, and what its guards need of it: releasing a lock
//! and reporting a failure. Kept apart from `manager` so that guards, which the manager hands
//! out, depend on this and not back on the manager.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use crate::backend::{Release, Store, StoreError};
use crate::background::Background;
use crate::error::LockError;
use crate::key::Key;
use crate::lease::{Lease, Status};
use crate::waiters::Waiters;
use crate::watchdog::Watchdog;

/// What every clone of one `LockManager` shares.
pub(crate) struct Inner {
    pub(crate) id: u64,
    /// Set by [`LockManager::shutdown`](crate::LockManager::shutdown): no more acquisitions.
    /// The deadlock detector reads it too (its [`Reach`](crate::deadlock::Reach)).
    pub(crate) closed: Arc<AtomicBool>,
    pub(crate) backend: Arc<dyn Store>,
    pub(crate) watchdog: Watchdog,
    /// Where background tasks run: the pinned runtime, or the caller's.
    pub(crate) background: Background,
    pub(crate) waiters: Arc<Waiters>,
    pub(crate) prefix: String,
    pub(crate) request_timeout: Duration,
    /// How much longer than a request an acquire may take: its `WAIT` for replicas.
    pub(crate) replica_wait: Duration,
    /// Work under way that puts something of this process on the server or takes it off:
    /// shutdown waits for all of it (see [`UnderWay`]).
    pub(crate) under_way: UnderWay,
    /// Its waiters, followed for deadlocks.
    pub(crate) deadlocks: Arc<crate::deadlock::Deadlocks>,
    /// The lock-delay of the calls that set none ([`LockManagerBuilder::lock_delay`]).
    ///
    /// [`LockManagerBuilder::lock_delay`]: crate::LockManagerBuilder::lock_delay
    pub(crate) lock_delay: Duration,
    /// Where the store's notices go (its [`Changes`](crate::store::Changes) hold it weakly:
    /// this keeps it alive, and is all that some builds do with it).
    pub(crate) notices: Arc<crate::notices::Notices>,
    /// [`LockManagerBuilder::app_name`](crate::LockManagerBuilder::app_name): who a notice
    /// this manager sends says it is.
    pub(crate) app_name: Option<String>,
    /// [`LockManagerBuilder::holder_metadata`](crate::LockManagerBuilder::holder_metadata):
    /// whether an election's record names its host, pid and app too.
    pub(crate) holder_metadata: bool,
}

/// A release begun by shutdown, with its answer.
pub(crate) type ShutdownRelease = tokio::task::JoinHandle<Result<Release, LockError>>;

/// A count of the work under way that puts something on the server or takes it off, and a
/// wake-up when it falls to zero: every acquire, from its call until it returns (a request on
/// the wire may take a lock, a waiter holds a mark or a place in line), every release, and every
/// place in line being left. Work that ends hands on to the work it starts (a failed acquire's
/// release of what it may have taken) before it stops counting, so the count reaches zero only
/// when nothing of the manager is left to clean up.
#[derive(Default)]
pub(crate) struct UnderWay {
    count: AtomicUsize,
    done: tokio::sync::Notify,
}

/// One piece of work under way, counted in [`UnderWay`] until dropped (with its answer, or with
/// the task that was to send it).
pub(crate) struct WorkUnderWay(Arc<Inner>);

impl WorkUnderWay {
    /// The manager the work goes through.
    pub(crate) fn manager(&self) -> &Arc<Inner> {
        &self.0
    }
}

impl Drop for WorkUnderWay {
    fn drop(&mut self) {
        let under_way = &self.0.under_way;
        if under_way.count.fetch_sub(1, Ordering::AcqRel) == 1 {
            under_way.done.notify_waiters();
        }
    }
}

impl UnderWay {
    /// Waits until no work is under way, for at most `limit`. Once the manager is closed, no
    /// work under way at one moment is enough: work counted after that began after the close
    /// and sends nothing (an acquire finds the manager closed), so a program that keeps
    /// calling `lock()` cannot hold shutdown up.
    pub(crate) async fn settled(&self, limit: Duration) {
        let done = self.done.notified();
        if self.count.load(Ordering::Acquire) == 0 {
            return;
        }
        let _ = tokio::time::timeout(limit, done).await;
    }
}

impl Inner {
    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Closes the manager (see [`LockManager::shutdown`](crate::LockManager::shutdown)): no
    /// more acquisitions, every waiter woken, every held lease marked lost and its release
    /// begun, each counted as work under way. `None` if it was closed already.
    pub(crate) fn close(self: &Arc<Self>) -> Option<Vec<(Arc<Lease>, ShutdownRelease)>> {
        // Counted before the manager is closed: a call that finds it closed waits for what
        // this one begins, however far it got.
        let closing = self.work_under_way();
        if self.closed.swap(true, Ordering::AcqRel) {
            return None;
        }
        // An acquire still on the wire is left to its own clean-up: it sees the manager closed
        // when its answer comes and drops its attempt, which releases whatever it took.
        // Released here instead, the release could overtake the acquire on the way and the
        // grant would then be left behind for its whole lease.
        let leases: Vec<_> = self
            .watchdog
            .drain()
            .into_iter()
            .filter(|lease| lease.status() != Status::Acquiring)
            .collect();
        for lease in &leases {
            lease.mark_lost(crate::error::LostReason::ShutDown);
        }
        self.waiters.wake_all();
        // Sent from tasks of their own, so that a call dropped before they are answered (a
        // shutdown under a timeout) still releases, and another call waits for them.
        // The leases stay marked lost by shutdown: their guards' own releases then send nothing.
        let releases = leases
            .into_iter()
            .map(|lease| {
                let under_way = self.work_under_way();
                let released = lease.clone();
                let release = self
                    .background
                    .spawn(async move { under_way.manager().release(&released).await });
                (lease, release)
            })
            .collect();
        drop(closing);
        Some(releases)
    }

    /// Counts a piece of work from now until the returned value is dropped.
    pub(crate) fn work_under_way(self: &Arc<Self>) -> WorkUnderWay {
        self.under_way.count.fetch_add(1, Ordering::AcqRel);
        WorkUnderWay(self.clone())
    }

    /// How long shutdown waits for the work under way: an acquire on the wire (its request
    /// and its `WAIT` for replicas), then the release of what it took or the leaving of its
    /// place in line, and a margin for a subscription being made meanwhile.
    pub(crate) fn settle_limit(&self) -> Duration {
        self.request_timeout * 3 + self.replica_wait
    }

    /// Whether a holder of `stored` hands it straight to a waiter of this process (see
    /// `Store::hands_off`): never a semaphore's permit, whose waiters may find another
    /// permit free and always ask the server.
    pub(crate) fn hands_off(&self, stored: &Key) -> bool {
        stored.shape.hands_over() && self.backend.hands_off()
    }

    /// One release round trip, bounded by the request timeout; a lease its caller used is kept
    /// for what is left of its `hold_at_least` (see [`Lease::keep`]).
    pub(crate) async fn release(&self, lease: &Lease) -> Result<Release, LockError> {
        let keep = lease.keep();
        let answer = tokio::time::timeout(
            self.request_timeout,
            self.backend.release_lease(lease, keep),
        )
        .await;
        match answer {
            Ok(Ok(Release::Released)) => {
                if self.hands_off(&lease.stored) && self.waiters.has_line(&lease.stored.lock) {
                    // Waiters of this process may wait without having told the server (see
                    // `waiters`), whatever mode the holder took the lock in: the release nobody
                    // may announce to them is theirs at once. (A fair waiter woken so asks
                    // once more and keeps its place.)
                    self.waiters.released_here(
                        &lease.stored.lock,
                        &crate::protocol::release_id(&lease.token),
                        true,
                    );
                }
                Ok(Release::Released)
            }
            Ok(Ok(release)) => Ok(release),
            Ok(Err(failure)) => Err(self.error("release", lease, failure)),
            Err(_) => Err(self.error(
                "release",
                lease,
                StoreError::timed_out(self.request_timeout),
            )),
        }
    }

    /// The error a caller sees for `failure` during `operation` on `lease`: never with the
    /// owner token (a server error may echo a command's arguments), and a timeout of the
    /// connection's own reads as one of ours (whichever gave up first, the message is the same).
    pub(crate) fn error(
        &self,
        operation: &'static str,
        lease: &Lease,
        failure: StoreError,
    ) -> LockError {
        let shown = failure.to_string();
        let transient = failure.is_transient();
        if failure.is_config() {
            return LockError::Config(format!(
                "semaphore `{}` on {}: {shown}",
                lease.key().escape_debug(),
                self.backend.server()
            ));
        }
        let source: crate::error::BoxError = if failure.timeout() == Some(None) {
            format!(
                "no answer within {}",
                crate::shown::Shown(self.request_timeout)
            )
            .into()
        } else if shown.contains(lease.token.as_str()) {
            without_token(&shown, &lease.token).into()
        } else {
            failure.into_source()
        };
        let server = self.backend.server();
        LockError::backend_with(operation, Some(lease.key()), server, source, transient)
    }
}

/// `text` with every occurrence of the owner token `token` masked.
pub(crate) fn without_token(text: &str, token: &str) -> String {
    text.replace(token, "<owner token>")
}
