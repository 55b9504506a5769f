//! Several locks taken as one: [`LockManager::lock_all`] and its [`MultiGuard`].
//!
//! Built on the single lock and nothing else: each key is an ordinary lock (its own owner
//! token, script calls, watchdog, waiting, fencing token), taken one after the other in one
//! canonical order (sorted by the stored key), so that two callers wanting overlapping keys in
//! different orders cannot each hold a key the other waits for. What this module adds is the
//! order, the shared wait budget, and giving back what was taken when a key cannot be had.

use std::fmt;
use std::future::Future;
use std::time::Duration;

use futures_util::future::{join_all, select_all};
use tokio::time::Instant;

use crate::current;
use crate::error::{LockError, LostReason};
use crate::guard::LockGuard;
use crate::manager::LockManager;
use crate::options::LockOptions;
use crate::section::{self, Held, box_body};
use crate::shape::Shape;

impl LockManager {
    /// Acquires every lock of `keys`, or none: either all are held when this returns `Ok`, or
    /// nothing is (the keys taken before a failure are released, and the release confirmed,
    /// before the error is returned; a dropped call releases them at once in the background).
    /// Keys given back so are free at once, never kept for `hold_at_least`: no body ran.
    ///
    /// - **Order.** The keys are taken one after the other, sorted by their stored name, so
    ///   callers that ask for overlapping keys in any order never deadlock. A key given twice
    ///   is one lock with one fencing token.
    /// - **Waiting.** `options.wait` is one budget for all of them: each key waits (notified by
    ///   releases, as [`lock`](Self::lock) does) for what is left of it; once it is spent, each
    ///   remaining key is tried once. Every other option (ttl, watchdog, `fair`, `max_hold`,
    ///   ...) applies to each key.
    /// - **Re-entry.** A key that a section of this task already holds is re-entered, as
    ///   `lock` does: its guard shares the outer lease and releases nothing. The
    ///   no-deadlock promise covers the keys of one call, not keys held around it.
    /// - **Errors** are those of `lock`, for the first key that could not be had, and name
    ///   it: [`LockError::Busy`] (with `waited` counted from the start of this call),
    ///   [`LockError::Backend`], [`LockError::HeldByThisTask`], [`LockError::ShutDown`]; and
    ///   [`LockError::Config`] for no keys, an empty key or bad options, before any is taken.
    ///
    /// The keys are not taken at one instant: until the call returns, another process can
    /// see the first keys held and the last ones free. Each key has its own fencing token.
    /// On every backend; on Redlock each key is a Redlock lock (with its fencing caveat, see
    /// [`LockManager::connect`]), and `fair` is refused there as for one lock. The keys may
    /// live in different Redis Cluster slots: nothing is sent to two keys in one command.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use std::time::Duration;
    /// use lock_runtime::{LockManager, LockOptions};
    ///
    /// let locks = LockManager::memory();
    /// let options = LockOptions::new().wait(Duration::from_secs(5));
    /// let both = locks.lock_all(["account:7", "account:3"], options).await?;
    /// assert_eq!(both.keys().collect::<Vec<_>>(), ["account:3", "account:7"]);
    /// let from = both.fencing_token("account:7"); // one token per key
    /// # assert!(from.is_some());
    /// both.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn lock_all<I>(&self, keys: I, options: LockOptions) -> Result<MultiGuard, LockError>
    where
        I: IntoIterator,
        I::Item: Into<String>,
    {
        let start = Instant::now();
        match options.shape()? {
            Shape::Lock => {}
            shape @ (Shape::Read | Shape::Write) => {
                return Err(LockError::Config(format!(
                    "lock_all takes locks, but its options ask for a {:?} hold of a read-write \
                     lock: take each read-write lock with `read_lock` or `write_lock`, or \
                     remove the mode from the options",
                    shape.mode()
                )));
            }
            Shape::Semaphore { permits } => {
                return Err(LockError::Config(format!(
                    "lock_all takes locks, but its options ask for one of {permits} permits: \
                     take each semaphore's permit with `semaphore`, or remove `permits` from \
                     the options"
                )));
            }
        }
        let mut keys = keys
            .into_iter()
            .map(|key| {
                let key = key.into();
                self.stored_key(&key).map(|stored| (stored.lock, key))
            })
            .collect::<Result<Vec<_>, _>>()?;
        if keys.is_empty() {
            return Err(no_keys());
        }
        keys.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        keys.dedup_by(|a, b| a.0 == b.0);
        // `wait(Duration::MAX)` means "as long as it takes", for every key.
        let give_up = start.checked_add(options.wait);
        // Dropped with the call (cancelled), each guard releases its lock at once. Not in use
        // until all are taken: a key given back before then is never kept for
        // `hold_at_least`, since no body ran under it.
        let mut taken: Vec<LockGuard> = Vec::with_capacity(keys.len());
        for (_, key) in keys {
            let wait = give_up.map_or(Duration::MAX, |at| {
                at.saturating_duration_since(Instant::now())
            });
            match self.lock(key, options.wait(wait)).await {
                Ok(guard) => taken.push(guard.in_use(false)),
                Err(err) => {
                    release_taken(taken).await;
                    return Err(waited_since(err, start));
                }
            }
        }
        let mut taken = taken.into_iter().map(|guard| guard.in_use(true));
        let first = taken.next().ok_or_else(no_keys)?;
        Ok(MultiGuard {
            first,
            rest: taken.collect(),
        })
    }

    /// Runs `body` while holding every lock of `keys`: [`lock_all`](Self::lock_all), then
    /// the body as a [scope](MultiGuard::scope) of the keys, then the release of all of them,
    /// also when the body returns an error or panics. This is what
    /// `#[distributed_lock(keys = [..])]` expands to.
    ///
    /// The body never runs without every lock. With
    /// [`OnLeaseLost::Abort`](crate::OnLeaseLost::Abort) (the default) the loss of any key's
    /// lease drops the body at its next `.await` and returns [`LockError::LeaseLost`] naming
    /// that key. A failed release after the body finished is logged and the body's result is
    /// returned.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), lock_runtime::LockError> {
    /// use lock_runtime::{LockManager, LockOptions};
    ///
    /// let locks = LockManager::memory();
    /// let moved = locks
    ///     .run_locked_all(["account:1", "account:2"], LockOptions::new(), async {
    ///         let held = lock_runtime::current_all();
    ///         Ok::<_, lock_runtime::LockError>(held.len())
    ///     })
    ///     .await?;
    /// assert_eq!(moved, 2);
    /// # Ok(())
    /// # }
    /// ```
    pub fn run_locked_all<I, F, T, E>(
        &self,
        keys: I,
        options: LockOptions,
        body: F,
    ) -> impl Future<Output = Result<T, E>>
    where
        I: IntoIterator,
        I::Item: Into<String>,
        F: Future<Output = Result<T, E>>,
        E: From<LockError>,
    {
        let keys: Vec<String> = keys.into_iter().map(Into::into).collect();
        self.run_locked_all_boxed(keys, options, |error| Err(E::from(error)), box_body(body))
    }

    /// [`LockManager::run_locked_all`] on a boxed body, for any output `R` that `into` can
    /// make from a lock error (see `run_locked_boxed`).
    pub(crate) fn run_locked_all_boxed<F, R>(
        &self,
        keys: Vec<String>,
        options: LockOptions,
        into: impl FnOnce(LockError) -> R,
        body: section::Body<F>,
    ) -> impl Future<Output = R>
    where
        F: Future<Output = R>,
    {
        let acquire = Box::pin(self.lock_all(keys, options));
        section::run(acquire, options.on_lease_lost, into, body)
    }
}

fn no_keys() -> LockError {
    LockError::Config("lock_all was given no keys: name at least one lock to take".into())
}

/// A `Busy` of one key reports the time the whole call waited.
fn waited_since(err: LockError, start: Instant) -> LockError {
    match err {
        LockError::Busy {
            key,
            retry_after,
            blocker,
            deadlock,
            ..
        } => LockError::Busy {
            key,
            waited: start.elapsed(),
            retry_after,
            blocker,
            deadlock,
        },
        other => other,
    }
}

/// Gives back the keys taken before a failure, all at once, and waits for the server, so that
/// the caller's next step (and everyone else) finds them free (never in use, they are not kept
/// for `hold_at_least`). A release that fails goes on in the background (the guard's drop), as
/// for any lock.
async fn release_taken(taken: Vec<LockGuard>) {
    let keys: Vec<String> = taken.iter().map(|guard| guard.key().to_owned()).collect();
    let released = join_all(taken.into_iter().map(LockGuard::release)).await;
    for (key, answer) in keys.iter().zip(released) {
        if let Err(err) = answer {
            tracing::warn!(key = %key, error = %err, "giving back a key of a failed lock_all failed");
        }
    }
}

/// The locks of [`LockManager::lock_all`], all held. Release them with
/// [`MultiGuard::release`]; dropped instead (an early return, a panic, a cancelled future),
/// every lock is released at once in the background, as a dropped [`LockGuard`] is.
///
/// Each key keeps everything a single lock has: its own lease renewed by the watchdog, its own
/// fencing token, its own lost-lease signal ([`lost`](Self::lost) resolves with the first key
/// lost).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use lock_runtime::{LockManager, LockOptions};
///
/// let locks = LockManager::memory();
/// let both = locks.lock_all(["stock:9", "cart:4"], LockOptions::new()).await?;
/// for (key, token) in both.fencing_tokens() {
///     println!("{key}: write with fencing token {token}");
/// }
/// assert!(both.is_held());
/// both.release().await?;
/// # Ok(())
/// # }
/// ```
#[must_use = "the locks are released as soon as the guard is dropped"]
pub struct MultiGuard {
    /// The first key in canonical order: a multi-guard holds at least one.
    first: LockGuard,
    rest: Vec<LockGuard>,
}

impl fmt::Debug for MultiGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MultiGuard")
            .field("locks", &self.guards().collect::<Vec<_>>())
            .field("is_held", &self.is_held())
            .finish()
    }
}

impl MultiGuard {
    /// The guard of each key, in canonical order (sorted by stored name): its key, fencing
    /// token, remaining lease, whether it re-entered a lock the task held.
    pub fn guards(&self) -> impl Iterator<Item = &LockGuard> {
        std::iter::once(&self.first).chain(&self.rest)
    }

    /// The keys held, in canonical order, each once.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.guards().map(LockGuard::key)
    }

    /// The fencing token of `key`, if it is one of the keys.
    pub fn fencing_token(&self, key: &str) -> Option<u64> {
        self.guards()
            .find(|guard| guard.key() == key)
            .map(LockGuard::fencing_token)
    }

    /// Each key with its fencing token, in canonical order.
    pub fn fencing_tokens(&self) -> impl Iterator<Item = (&str, u64)> {
        self.guards()
            .map(|guard| (guard.key(), guard.fencing_token()))
    }

    /// True while every key's lease is known to be held.
    pub fn is_held(&self) -> bool {
        self.guards().all(LockGuard::is_held)
    }

    /// What is left of the shortest lease by the local clock.
    pub fn remaining(&self) -> Duration {
        self.guards()
            .map(LockGuard::remaining)
            .min()
            .unwrap_or_default()
    }

    /// Resolves when the lease of any key is lost, with that key and the reason. Never
    /// resolves while the locks are held or after they were released normally.
    pub async fn lost(&self) -> (&str, LostReason) {
        let (which, reason) = self.lost_at().await;
        let key = self.guards().nth(which).map_or("", LockGuard::key);
        (key, reason)
    }

    /// The position of the first key whose lease is lost, with the reason.
    async fn lost_at(&self) -> (usize, LostReason) {
        let losses = self.guards().map(|guard| Box::pin(guard.lost()));
        let (reason, which, _) = select_all(losses).await;
        (which, reason)
    }

    /// Runs `body` as a section of these locks: inside it, a nested acquisition of any of
    /// the keys on the same manager re-enters it, [`current()`](crate::current) reports the
    /// first key in canonical order and [`current_all()`](crate::current_all) every key. The
    /// guard still owns the locks: release it after the section. As with
    /// [`LockGuard::scope`], a lost lease does not stop the body; select on
    /// [`lost`](Self::lost) for that, or use [`LockManager::run_locked_all`].
    pub fn scope<F: Future>(&self, body: F) -> impl Future<Output = F::Output> + use<F> {
        let frames = current::with_all(self.first.lease(), self.rest.iter().map(LockGuard::lease));
        current::scope_frames(frames, body)
    }

    /// Releases every lock, all at once, and waits until the server confirms each.
    ///
    /// Every key is released whatever happens to the others; the keys that failed are
    /// reported in one [`MultiReleaseError`], each with the error its
    /// [`LockGuard::release`] gave (a key lost meanwhile, a server unreachable: that lock is
    /// then retried in the background until its lease would have run out).
    pub async fn release(self) -> Result<(), MultiReleaseError> {
        let released = join_all(self.into_guards().map(LockGuard::release)).await;
        let errors: Vec<LockError> = released.into_iter().filter_map(Result::err).collect();
        if errors.is_empty() {
            Ok(())
        } else {
            Err(MultiReleaseError { errors })
        }
    }

    fn into_guards(self) -> impl Iterator<Item = LockGuard> {
        std::iter::once(self.first).chain(self.rest)
    }
}

impl Held for MultiGuard {
    fn scope<F: Future>(&self, body: F) -> impl Future<Output = F::Output> {
        MultiGuard::scope(self, body)
    }

    type Lost = (usize, LostReason);

    fn lost(&self) -> impl Future<Output = (usize, LostReason)> {
        self.lost_at()
    }

    fn lost_now(&self) -> Option<(usize, LostReason)> {
        self.guards()
            .enumerate()
            .find_map(|(which, guard)| Some((which, guard.lease().lost_now()?)))
    }

    fn lost_error(&self, (which, reason): (usize, LostReason)) -> LockError {
        let key = self.guards().nth(which).map_or("", LockGuard::key);
        LockError::LeaseLost {
            key: key.to_owned(),
            reason,
        }
    }

    async fn finish(self) {
        if let Err(failed) = self.release().await {
            for err in failed.errors() {
                crate::guard::finish_failed(err);
            }
        }
    }
}

/// The keys of a [`MultiGuard`] whose release failed, each with its own error (which names the
/// key). The other keys were released.
#[derive(Debug)]
pub struct MultiReleaseError {
    errors: Vec<LockError>,
}

impl MultiReleaseError {
    /// One error per key that failed, in canonical key order.
    pub fn errors(&self) -> &[LockError] {
        &self.errors
    }

    /// The errors, by value.
    pub fn into_errors(self) -> Vec<LockError> {
        self.errors
    }
}

impl fmt::Display for MultiReleaseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let count = self.errors.len();
        write!(f, "{count} of the locks could not be released: ")?;
        for (i, err) in self.errors.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{err}")?;
        }
        Ok(())
    }
}

impl std::error::Error for MultiReleaseError {}
