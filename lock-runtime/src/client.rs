//! The state a manager and its clones share, and what its guards need of it: releasing a lock
//! and reporting a failure. Kept apart from `manager` so that guards, which the manager hands
//! out, depend on this and not back on the manager.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use crate::LockError;
use crate::backend::{Backend, Failure, Release};
use crate::background::Background;
use crate::key::StoredKey;
use crate::lease::Lease;
use crate::waiters::Waiters;
use crate::watchdog::Watchdog;

/// What every clone of one `LockManager` shares.
pub(crate) struct Inner {
    pub(crate) id: u64,
    /// Set by [`LockManager::shutdown`](crate::LockManager::shutdown): no more acquisitions.
    pub(crate) closed: AtomicBool,
    pub(crate) backend: Arc<dyn Backend>,
    pub(crate) watchdog: Watchdog,
    /// Where background tasks run: the pinned runtime, or the caller's.
    pub(crate) background: Background,
    pub(crate) waiters: Arc<Waiters>,
    pub(crate) prefix: String,
    pub(crate) request_timeout: Duration,
    /// How much longer than a request an acquire may take: its `WAIT` for replicas.
    pub(crate) replica_wait: Duration,
    /// Releases under way that the watchdog no longer knows of (a guard's release or drop):
    /// shutdown waits for them too.
    pub(crate) releasing: Releasing,
}

/// A count of releases under way, and a wake-up when it falls to zero.
#[derive(Default)]
pub(crate) struct Releasing {
    count: AtomicUsize,
    done: tokio::sync::Notify,
}

/// One release under way, counted in [`Releasing`] until dropped (with its answer, or with the
/// task that was to send it).
pub(crate) struct ReleaseUnderWay(Arc<Inner>);

impl ReleaseUnderWay {
    /// The manager the release goes through.
    pub(crate) fn manager(&self) -> &Arc<Inner> {
        &self.0
    }
}

impl Drop for ReleaseUnderWay {
    fn drop(&mut self) {
        let releasing = &self.0.releasing;
        if releasing.count.fetch_sub(1, Ordering::AcqRel) == 1 {
            releasing.done.notify_waiters();
        }
    }
}

impl Releasing {
    /// Waits until no release is under way, for at most `limit`.
    pub(crate) async fn settled(&self, limit: Duration) {
        let _ = tokio::time::timeout(limit, async {
            loop {
                let done = self.done.notified();
                if self.count.load(Ordering::Acquire) == 0 {
                    return;
                }
                done.await;
            }
        })
        .await;
    }
}

impl Inner {
    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Counts a release from now until the returned value is dropped.
    pub(crate) fn release_under_way(self: &Arc<Self>) -> ReleaseUnderWay {
        self.releasing.count.fetch_add(1, Ordering::AcqRel);
        ReleaseUnderWay(self.clone())
    }

    /// Whether a holder of `stored` hands it straight to a waiter of this process (see
    /// `Backend::hands_off`): never a semaphore's permit, whose waiters may find another
    /// permit free and always ask the server.
    pub(crate) fn hands_off(&self, stored: &StoredKey) -> bool {
        stored.is_lock() && self.backend.hands_off()
    }

    /// One release round trip, bounded by the request timeout; a lease its caller used is kept
    /// for what is left of its `hold_at_least` (see [`Lease::keep`]).
    pub(crate) async fn release(&self, lease: &Lease) -> Result<Release, LockError> {
        let keep = lease.keep();
        let answer = tokio::time::timeout(
            self.request_timeout,
            self.backend.release(&lease.stored, &lease.token, keep),
        )
        .await;
        match answer {
            Ok(Ok(Release::Released)) => {
                if self.hands_off(&lease.stored) && self.waiters.has_line(&lease.stored.lock) {
                    // Waiters of this process may wait without having told the server (see
                    // `waiters`), whatever mode the holder took the lock in: the release nobody
                    // may announce to them is theirs at once. (A fair waiter woken so asks
                    // once more and keeps its place.)
                    self.waiters
                        .released_here(&lease.stored.lock, &release_id(&lease.token), true);
                }
                Ok(Release::Released)
            }
            Ok(Ok(release)) => Ok(release),
            Ok(Err(failure)) => {
                crate::metrics::release_failed(lease.options.label);
                Err(self.error("release", lease, failure))
            }
            Err(_) => {
                crate::metrics::release_failed(lease.options.label);
                Err(self.error("release", lease, Failure::timed_out(self.request_timeout)))
            }
        }
    }

    /// The error a caller sees for `failure` during `operation` on `lease`: never with the
    /// owner token (a server error may echo a command's arguments), and a timeout of the
    /// connection's own reads as one of ours (whichever gave up first, the message is the same).
    pub(crate) fn error(
        &self,
        operation: &'static str,
        lease: &Lease,
        failure: Failure,
    ) -> LockError {
        let shown = failure.to_string();
        if failure.is_config() {
            return LockError::Config(format!(
                "semaphore `{}` on {}: {shown}",
                lease.key.escape_debug(),
                self.backend.server()
            ));
        }
        let source: crate::BoxError = if failure.timeout() == Some(None) {
            format!("no answer within {:?}", self.request_timeout).into()
        } else if shown.contains(lease.token.as_str()) {
            without_token(&shown, &lease.token).into()
        } else {
            failure.into_source()
        };
        LockError::backend(operation, Some(&lease.key), self.backend.server(), source)
    }
}

/// The id a release of `token` announces (release.lua): the first 12 hex digits of the SHA-1 of
/// the owner token.
pub(crate) fn release_id(token: &str) -> Vec<u8> {
    crate::inspect::token_id(token).into_bytes()
}

/// `text` with every occurrence of the owner token `token` masked.
pub(crate) fn without_token(text: &str, token: &str) -> String {
    text.replace(token, "<owner token>")
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_release_id_is_what_the_release_script_announces() {
        // release.lua: string.sub(redis.sha1hex(token), 1, 12); SHA-1("abc") = a9993e36 4706...
        assert_eq!(super::release_id("abc"), b"a9993e364706");
    }
}
