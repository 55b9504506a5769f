//! The one error type of the crate.

use std::error::Error as StdError;
use std::fmt;
use std::time::Duration;

use crate::blocker::Blocker;
use crate::cycle::DeadlockCycle;
use crate::fence::FenceError;
use crate::shown::Shown;

/// A boxed error from a backend (a Redis error, an I/O error, ...).
pub type BoxError = Box<dyn StdError + Send + Sync + 'static>;

/// What went wrong with a lock.
///
/// Every variant that concerns one lock names its key, so a log line says which lock failed.
/// Messages never contain a password: servers are named by host and port only.
///
/// Whether to try again is [`is_retryable`](Self::is_retryable)'s answer. The enum and its
/// variants with named fields are `#[non_exhaustive]`: new variants and new fields may come in a
/// minor release, so a `match` has a `_` arm and `..` in each such variant's pattern:
///
/// ```
/// use lock_runtime::LockError;
///
/// fn status(err: &LockError) -> u16 {
///     match err {
///         LockError::Busy { retry_after, .. } => {
///             let _ = retry_after; // a Retry-After header
///             503
///         }
///         LockError::LeaseLost { key, .. } => {
///             eprintln!("lost `{key}`");
///             500
///         }
///         LockError::Config(_) => 500,
///         err if err.is_retryable() => 503,
///         _ => 500,
///     }
/// }
/// # let _ = status;
/// ```
///
/// Outside this crate such a variant is never built, and never matched without `..`:
///
/// ```compile_fail,E0638
/// use lock_runtime::LockError;
///
/// fn key(err: &LockError) -> Option<&str> {
///     match err {
///         LockError::ShutDown { key } => Some(key), // error: `..` required
///         _ => None,
///     }
/// }
/// ```
#[derive(thiserror::Error)]
#[non_exhaustive]
pub enum LockError {
    /// The lock was held by someone else for the whole `wait` budget.
    #[error(
        "lock `{key}` is busy: not acquired within {}{}{}{}",
        Shown(*waited),
        HeldBy(blocker.as_deref()),
        InDeadlock(deadlock.as_deref()),
        BusyAdvice(*retry_after, deadlock.is_some()),
        key = KeyDisplay(key)
    )]
    #[non_exhaustive]
    Busy {
        /// The lock key as the caller named it (without the prefix).
        key: String,
        /// How long the caller waited before giving up.
        waited: Duration,
        /// How much longer the lock stays busy, as the server said at the last attempt (the
        /// holder's remaining lease, which its renewals may extend, and its
        /// [lock-delay](crate::LockOptions::lock_delay) if it has one): a `Retry-After` for an
        /// HTTP answer. `None` where it is not known (the key has no expiry, or the lock is
        /// held by this process and was never asked about).
        retry_after: Option<Duration>,
        /// Who held the lock at the last attempt, as it recorded itself in the lock (host, pid,
        /// app, since when, fencing token where recorded; see [`Blocker`]), and the message
        /// says so. `None` for a semaphore or a read-write lock (several holders), where the
        /// holder recorded nothing (`holder_metadata(false)`), and on `memory://`. Never the
        /// holder's owner token.
        blocker: Option<Box<Blocker>>,
        /// The deadlock this wait was found part of, where one was found and no member chose
        /// to give up ([`Deadlock::Wait`](crate::Deadlock::Wait)): each waited until its
        /// budget ran out. The message names it; so does
        /// [`deadlock_cycle`](LockError::deadlock_cycle).
        deadlock: Option<Box<DeadlockCycle>>,
    },

    /// The lease ran out, or renewal proved that someone else now owns the lock, while it was held.
    #[error(
        "lease on lock `{key}` was lost while it was held: {reason}; {}",
        reason.advice(),
        key = KeyDisplay(key)
    )]
    #[non_exhaustive]
    LeaseLost {
        /// The lock key.
        key: String,
        /// Why the lease is known to be lost.
        reason: LostReason,
    },

    /// The backend failed: connection refused, authentication, a timeout, a wrong type at the key...
    /// The body of a locked section never runs after such an error.
    #[error(
        "{operation}{} failed on {server}: {source}{}",
        KeyInMessage(key.as_deref()),
        MayPass(*transient)
    )]
    #[non_exhaustive]
    Backend {
        /// What was being done (`acquire`, `release`, `connect`, ...).
        operation: &'static str,
        /// The lock key, when the failure concerns one lock.
        key: Option<String>,
        /// The server, as `host:port` (never with credentials).
        server: String,
        /// The underlying error.
        #[source]
        source: BoxError,
        /// Whether the failure may pass by itself: a dropped, refused or timed-out connection,
        /// a server loading or failing over, too few Redlock masters or replicas answering. What
        /// [`LockError::is_retryable`] answers for this variant.
        transient: bool,
    },

    /// The configuration is unusable (a bad URL, a missing default manager, a bad option value).
    #[error("invalid lock configuration: {0}")]
    Config(String),

    /// The task asking for the lock already holds it outside any section the request runs in
    /// (a guard from [`LockManager::lock`](crate::LockManager::lock) that was not made a scope
    /// with [`LockGuard::scope`](crate::LockGuard::scope), or a sibling branch of `join!`),
    /// under a lease the watchdog renews: it would wait for itself until its wait budget ran
    /// out. (With `watchdog(false)` the held lease runs out by itself, so the task waits for that
    /// as any other waiter would; with `wait` zero it is told [`LockError::Busy`].) The same
    /// holds for a read-write lock's write hold asked for again, or a read asked for outside the
    /// write's scope, and for a semaphore whose every permit this task holds.
    #[error(
        "`{key}` is already held by this task (the lock, the write hold of a read-write lock, or \
         every permit of a semaphore): waiting would wait for itself; release the guard first, \
         or, to re-enter a lock or read inside a write, run the nested code inside \
         `guard.scope(...)`",
        key = KeyDisplay(key)
    )]
    #[non_exhaustive]
    HeldByThisTask {
        /// The lock key.
        key: String,
    },

    /// The call's wait was part of a deadlock, and it was chosen to give up (it asked to, with
    /// [`Deadlock::Fail`](crate::Deadlock::Fail), and was the cycle's youngest wait among those
    /// that did): its task holds a lock that another waiter needs, which waits, itself or
    /// through others, for a lock this task holds. Nothing was acquired; the locks the task
    /// holds are still held. Let them go (return the error from the enclosing section) and
    /// retry the whole operation, or take the locks in one order everywhere (`keys = [..]`
    /// does).
    #[error(
        "lock `{key}` not acquired: its wait was part of a deadlock and gave up so that the \
         others can go on ({cycle}); release the locks this task holds and retry, or take them \
         in one order everywhere",
        key = KeyDisplay(key)
    )]
    #[non_exhaustive]
    Deadlock {
        /// The lock key this call waited for.
        key: String,
        /// Who waited for what, starting with this call.
        cycle: Box<DeadlockCycle>,
    },

    /// The manager was shut down ([`LockManager::shutdown`](crate::LockManager::shutdown)):
    /// it takes no more locks.
    #[error(
        "lock `{key}` not acquired: the lock manager was shut down, and takes no more locks \
         (the process is stopping; do not retry with this manager)",
        key = KeyDisplay(key)
    )]
    #[non_exhaustive]
    ShutDown {
        /// The lock key.
        key: String,
    },
    /// A claim on a fenced resource, or a fenced write, was refused or could not be made
    /// (see [`fence`](crate::fence)). In a `#[distributed_lock]` body that returns this error,
    /// `fence::postgres::claim(&mut tx, &fence).await.map_err(LockError::Fence)?`; an error
    /// type of your own can implement `From<FenceError>` and take `?` directly. (`LockError`
    /// has no `From<FenceError>`: rustc would offer it as the fix for every other error `?`
    /// cannot convert.)
    #[error(transparent)]
    Fence(FenceError),
}

impl LockError {
    /// The lock key this error concerns, if any.
    pub fn key(&self) -> Option<&str> {
        match self {
            LockError::Busy { key, .. }
            | LockError::LeaseLost { key, .. }
            | LockError::ShutDown { key }
            | LockError::Deadlock { key, .. }
            | LockError::HeldByThisTask { key } => Some(key),
            LockError::Backend { key, .. } => key.as_deref(),
            LockError::Config(_) | LockError::Fence(_) => None,
        }
    }

    /// The deadlock this error names: the one a [`Deadlock`](Self::Deadlock) call gave up in,
    /// or the one a [`Busy`](Self::Busy) wait was found part of when no member chose to give
    /// up.
    pub fn deadlock_cycle(&self) -> Option<&DeadlockCycle> {
        match self {
            LockError::Deadlock { cycle, .. } => Some(cycle),
            LockError::Busy { deadlock, .. } => deadlock.as_deref(),
            _ => None,
        }
    }

    /// True for [`LockError::Busy`].
    pub fn is_busy(&self) -> bool {
        matches!(self, LockError::Busy { .. })
    }

    /// True for [`LockError::ShutDown`].
    pub fn is_shut_down(&self) -> bool {
        matches!(self, LockError::ShutDown { .. })
    }

    /// True for [`LockError::LeaseLost`].
    pub fn is_lease_lost(&self) -> bool {
        matches!(self, LockError::LeaseLost { .. })
    }

    /// Whether the same call, made again later, may succeed where this one failed: what a job
    /// queue, an HTTP handler (503 with `Retry-After` rather than 500) or a retry loop asks.
    ///
    /// * Yes for [`Busy`](Self::Busy): someone else held the lock, and holds end
    ///   (`retry_after` says about when).
    /// * Yes for a [`Backend`](Self::Backend) failure that may pass by itself: a dropped,
    ///   refused or timed-out connection, a server loading its data or failing over, too few
    ///   Redlock masters or too few replica acknowledgements.
    /// * No for a `Backend` failure that recurs as it is: a command the server refuses, bad
    ///   credentials, data at a lock's key that is not a lock.
    /// * No for [`Config`](Self::Config), [`HeldByThisTask`](Self::HeldByThisTask) and
    ///   [`ShutDown`](Self::ShutDown): the program or its settings must change first.
    /// * No for [`LeaseLost`](Self::LeaseLost): the lock was lost, or found no longer ours,
    ///   while the work it guarded was under way, perhaps half done. Whether that work may run
    ///   again (is it idempotent? did the next holder do it?) only the caller can tell: match
    ///   `LeaseLost` yourself where it may.
    ///
    /// ```
    /// use std::time::Duration;
    /// use lock_runtime::{LockError, LockGuard, LockManager, LockOptions};
    ///
    /// /// Takes `key`, trying again after a failure that may pass, three times at most.
    /// async fn lock_patiently(locks: &LockManager, key: &str) -> Result<LockGuard, LockError> {
    ///     let options = LockOptions::new().wait(Duration::from_secs(1));
    ///     let mut attempt = 1;
    ///     loop {
    ///         match locks.lock(key, options).await {
    ///             Err(err) if err.is_retryable() && attempt < 3 => {
    ///                 attempt += 1;
    ///                 tokio::time::sleep(Duration::from_millis(100 * attempt)).await;
    ///             }
    ///             answer => return answer,
    ///         }
    ///     }
    /// }
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), LockError> {
    /// let locks = LockManager::connect("memory://").await?;
    /// lock_patiently(&locks, "report").await?.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn is_retryable(&self) -> bool {
        match self {
            LockError::Busy { .. } => true,
            LockError::Backend { transient, .. } => *transient,
            LockError::LeaseLost { .. }
            | LockError::Config(_)
            | LockError::HeldByThisTask { .. }
            | LockError::Deadlock { .. }
            | LockError::Fence(_)
            | LockError::ShutDown { .. } => false,
        }
    }

    /// A backend failure that recurs as it is (see [`is_retryable`](Self::is_retryable)).
    pub(crate) fn backend(
        operation: &'static str,
        key: Option<&str>,
        server: &str,
        source: impl Into<BoxError>,
    ) -> Self {
        Self::backend_with(operation, key, server, source.into(), false)
    }

    /// A backend failure that may pass by itself if `transient` (see
    /// [`is_retryable`](Self::is_retryable)).
    pub(crate) fn backend_with(
        operation: &'static str,
        key: Option<&str>,
        server: &str,
        source: BoxError,
        transient: bool,
    ) -> Self {
        LockError::Backend {
            operation,
            key: key.map(str::to_owned),
            server: server.to_owned(),
            source,
            transient,
        }
    }
}

/// One line: the variant and its message, `Busy("lock `order:1` is busy: ...")`, which is what
/// `fn main() -> Result<(), LockError>` prints after `Error: `. The alternate form (`{:#?}`)
/// shows every field, as the derived `Debug` would, with keys shortened as in messages: a key
/// may be megabytes long.
impl fmt::Debug for LockError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if f.alternate() {
            return self.fields(f);
        }
        f.debug_tuple(self.variant())
            .field(&self.to_string())
            .finish()
    }
}

impl LockError {
    /// The variant's name, as `Debug` shows it.
    fn variant(&self) -> &'static str {
        match self {
            LockError::Busy { .. } => "Busy",
            LockError::LeaseLost { .. } => "LeaseLost",
            LockError::Backend { .. } => "Backend",
            LockError::Config(_) => "Config",
            LockError::HeldByThisTask { .. } => "HeldByThisTask",
            LockError::Deadlock { .. } => "Deadlock",
            LockError::ShutDown { .. } => "ShutDown",
            LockError::Fence(_) => "Fence",
        }
    }

    /// Every field, as the derived `Debug` would show them (the alternate `Debug`).
    fn fields(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LockError::Busy {
                key,
                waited,
                retry_after,
                blocker,
                deadlock,
            } => f
                .debug_struct("Busy")
                .field("key", &KeyDebug(key))
                .field("waited", waited)
                .field("retry_after", retry_after)
                .field("blocker", blocker)
                .field("deadlock", deadlock)
                .finish(),
            LockError::Deadlock { key, cycle } => f
                .debug_struct("Deadlock")
                .field("key", &KeyDebug(key))
                .field("cycle", cycle)
                .finish(),
            LockError::LeaseLost { key, reason } => f
                .debug_struct("LeaseLost")
                .field("key", &KeyDebug(key))
                .field("reason", reason)
                .finish(),
            LockError::Backend {
                operation,
                key,
                server,
                source,
                transient,
            } => f
                .debug_struct("Backend")
                .field("operation", operation)
                .field("key", &key.as_deref().map(KeyDebug))
                .field("server", server)
                .field("source", source)
                .field("transient", transient)
                .finish(),
            LockError::Config(reason) => f.debug_tuple("Config").field(reason).finish(),
            LockError::HeldByThisTask { key } => f
                .debug_struct("HeldByThisTask")
                .field("key", &KeyDebug(key))
                .finish(),
            LockError::ShutDown { key } => f
                .debug_struct("ShutDown")
                .field("key", &KeyDebug(key))
                .finish(),
            LockError::Fence(err) => f.debug_tuple("Fence").field(err).finish(),
        }
    }
}

/// A key in `Debug` output: quoted, escaped and shortened as [`KeyDisplay`].
struct KeyDebug<'a>(&'a str);

impl fmt::Debug for KeyDebug<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "\"{}\"", KeyDisplay(self.0))
    }
}

/// Why a lease is known to be lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LostReason {
    /// The server answered that the lock is gone or held under another owner token
    /// (deleted or overwritten from outside, or expired and taken by someone else).
    NotOwner,
    /// No renewal succeeded before the local deadline (the server may be unreachable); the lease is
    /// treated as lost shortly before the server would expire it.
    Expired,
    /// `max_hold` elapsed, so the watchdog stopped renewing and the lease ran out.
    MaxHoldExceeded,
    /// [`LockManager::shutdown`](crate::LockManager::shutdown) released the lock.
    ShutDown,
    /// Someone stole the lock ([`LockManager::steal`](crate::LockManager::steal), `lockctl
    /// steal`): it holds the lock now, with a greater fencing token.
    Stolen,
}

impl LostReason {
    /// What to make of the loss, after the message says why.
    fn advice(self) -> &'static str {
        match self {
            LostReason::NotOwner => {
                "another holder may have run meanwhile: check the work done under the lock \
                 before doing it again"
            }
            LostReason::Expired => {
                "check that the server is reachable and answers within `request_timeout`, or \
                 give the lock a longer ttl; another holder may have run meanwhile"
            }
            LostReason::MaxHoldExceeded => {
                "the section ran longer than `max_hold` allows: raise `max_hold` or shorten the \
                 section"
            }
            LostReason::ShutDown => "expected while the process stops",
            LostReason::Stolen => {
                "someone took the lock on purpose and holds it with a greater fencing token: \
                 stop the work, and leave what it wrote to the fence to judge"
            }
        }
    }
}

impl fmt::Display for LostReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LostReason::NotOwner => {
                "the server reports another owner or no lock (it expired or was deleted)"
            }
            LostReason::Expired => "no renewal succeeded before the lease ran out",
            LostReason::MaxHoldExceeded => "max_hold elapsed and renewal stopped",
            LostReason::ShutDown => "the lock manager was shut down and released it",
            LostReason::Stolen => "the lock was stolen",
        })
    }
}

/// Keys can be long (up to what Redis accepts); messages show at most the first 200 characters.
struct KeyDisplay<'a>(&'a str);

const KEY_SHOWN: usize = 200;

impl fmt::Display for KeyDisplay<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0.char_indices().nth(KEY_SHOWN) {
            None => write!(f, "{}", self.0.escape_debug()),
            Some((end, _)) => write!(
                f,
                "{}... ({} bytes)",
                self.0[..end].escape_debug(),
                self.0.len()
            ),
        }
    }
}

/// `; held by ...` after a busy lock's message, where its holder is known.
struct HeldBy<'a>(Option<&'a Blocker>);

impl fmt::Display for HeldBy<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(blocker) => write!(f, "; {blocker}"),
            None => Ok(()),
        }
    }
}

/// `; its wait was part of a deadlock ...` after a busy lock's message, where one was found.
struct InDeadlock<'a>(Option<&'a DeadlockCycle>);

impl fmt::Display for InDeadlock<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(cycle) => write!(
                f,
                "; its wait was part of a deadlock ({cycle}) in which no waiter chose to give up \
                 (`Deadlock::Wait`), so each waited until its budget ran out: take the locks in \
                 one order everywhere (`keys = [..]` does), or let waits give up with \
                 `Deadlock::Fail`"
            ),
            None => Ok(()),
        }
    }
}

/// What to do about a busy lock: when to try again, where the server said. Nothing where it
/// was found in a deadlock, whose message says what to do instead (waiting longer is not it).
struct BusyAdvice(Option<Duration>, bool);

impl fmt::Display for BusyAdvice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.1 {
            return Ok(());
        }
        match self.0 {
            Some(left) => write!(
                f,
                "; try again later (its holder's lease has {} left, which renewals may \
                 extend), or give the call a longer `wait`",
                Shown(left)
            ),
            None => f.write_str("; try again later, or give the call a longer `wait`"),
        }
    }
}

/// `(this may pass: ...)` after a backend failure that may pass by itself.
struct MayPass(bool);

impl fmt::Display for MayPass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0 {
            f.write_str(" (this may pass by itself: the same call may succeed later)")
        } else {
            Ok(())
        }
    }
}

struct KeyInMessage<'a>(Option<&'a str>);

impl fmt::Display for KeyInMessage<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(key) => write!(f, " of lock `{}`", KeyDisplay(key)),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cycle::CycleMember;

    #[test]
    fn long_keys_are_shortened_in_messages() {
        let err = LockError::Busy {
            key: "k".repeat(10_000),
            waited: Duration::ZERO,
            retry_after: None,
            blocker: None,
            deadlock: None,
        };
        let msg = err.to_string();
        assert!(msg.len() < 400, "{msg}");
        assert!(msg.contains("10000 bytes"), "{msg}");
    }

    #[test]
    fn long_keys_are_shortened_in_debug_output_too() {
        let err = LockError::Busy {
            key: "k".repeat(1 << 20),
            waited: Duration::ZERO,
            retry_after: None,
            blocker: None,
            deadlock: None,
        };
        for shown in [format!("{err:?}"), format!("{err:#?}")] {
            assert!(shown.len() < 1000, "{} bytes", shown.len());
            assert!(shown.starts_with("Busy"), "{shown}");
        }
        assert!(format!("{err:#?}").starts_with("Busy {\n    key: \"kkk"));
    }

    #[test]
    fn a_busy_lock_names_its_holder_where_it_is_recorded() {
        let blocker = Blocker::from_value(
            "held token=secret-owner-token waiting=0 since=1764045123456 host=web-1 pid=42 \
             app=billing",
            None,
        )
        .expect("recorded");
        let err = LockError::Busy {
            key: "invoice:7".into(),
            waited: Duration::ZERO,
            retry_after: None,
            blocker: Some(Box::new(blocker)),
            deadlock: None,
        };
        let shown = err.to_string();
        assert_eq!(
            shown,
            format!(
                "lock `invoice:7` is busy: not acquired within 0ns; held by pid 42 on web-1 \
                 (app \"billing\", holder {}) since 2025-11-25T04:32:03.456Z; try again \
                 later, or give the call a longer `wait`",
                crate::inspect::token_id("secret-owner-token")
            )
        );
        let debug = format!("{err:#?}");
        assert!(debug.contains("host: Some(\n"), "{debug}");
        assert!(debug.contains("\"web-1\""), "{debug}");
        for text in [shown, debug] {
            assert!(!text.contains("secret-owner-token"), "{text}");
        }
        // The holder is boxed: a busy error costs no more than before.
        assert!(std::mem::size_of::<LockError>() <= 88);
    }

    #[test]
    fn control_characters_in_keys_are_escaped() {
        let err = LockError::LeaseLost {
            key: "a\nb\0c".into(),
            reason: LostReason::NotOwner,
        };
        assert!(err.to_string().contains(r"a\nb\0c"), "{err}");
    }

    #[test]
    fn only_a_busy_lock_and_failures_that_may_pass_are_retryable() {
        let key = || "k".to_owned();
        let busy = LockError::Busy {
            key: key(),
            waited: Duration::ZERO,
            retry_after: None,
            blocker: None,
            deadlock: None,
        };
        assert!(busy.is_retryable());
        let lost = LockError::LeaseLost {
            key: key(),
            reason: LostReason::Expired,
        };
        assert!(!lost.is_retryable());
        assert!(!LockError::Config("ttl 0".into()).is_retryable());
        assert!(!LockError::HeldByThisTask { key: key() }.is_retryable());
        assert!(!LockError::ShutDown { key: key() }.is_retryable());
    }

    #[test]
    fn backend_errors_name_operation_key_and_server() {
        let err = LockError::backend("acquire", Some("order:1"), "127.0.0.1:1", "boom");
        assert_eq!(
            err.to_string(),
            "acquire of lock `order:1` failed on 127.0.0.1:1: boom"
        );
    }

    #[test]
    fn a_busy_message_says_the_wait_as_a_person_writes_it_and_what_to_do() {
        let err = LockError::Busy {
            key: "order:1".into(),
            waited: Duration::from_nanos(20_001_851_986),
            retry_after: Some(Duration::from_nanos(409_540)),
            blocker: None,
            deadlock: None,
        };
        assert_eq!(
            err.to_string(),
            "lock `order:1` is busy: not acquired within 20s; try again later (its holder's \
             lease has 410µs left, which renewals may extend), or give the call a longer `wait`"
        );
    }

    #[test]
    fn what_main_prints_for_a_lock_error_is_one_readable_line() {
        let err = LockError::backend("connect", None, "127.0.0.1:1", "connection refused");
        // `fn main() -> Result<(), LockError>` prints `Error: ` and this.
        assert_eq!(
            format!("{err:?}"),
            "Backend(\"connect failed on 127.0.0.1:1: connection refused\")"
        );
        let busy = LockError::Busy {
            key: "order:1".into(),
            waited: Duration::from_millis(5_000),
            retry_after: None,
            blocker: None,
            deadlock: None,
        };
        let shown = format!("{busy:?}");
        assert!(
            shown.starts_with("Busy(\"lock `order:1` is busy: not acquired within 5s;"),
            "{shown}"
        );
        assert!(!shown.contains('\n'), "{shown}");
        // Through `Box<dyn Error>` too, and the cause is still there to walk.
        let boxed: Box<dyn StdError> = Box::new(err);
        assert!(format!("{boxed:?}").starts_with("Backend(\"connect failed"));
        let source = boxed.source().map(ToString::to_string);
        assert_eq!(source.as_deref(), Some("connection refused"));
    }

    #[test]
    fn a_backend_failure_that_may_pass_says_so() {
        let err =
            LockError::backend_with("acquire", Some("k"), "127.0.0.1:1", "reset".into(), true);
        assert!(
            err.to_string()
                .ends_with("(this may pass by itself: the same call may succeed later)"),
            "{err}"
        );
    }

    #[test]
    fn a_lost_lease_says_what_to_make_of_it() {
        for reason in [
            LostReason::NotOwner,
            LostReason::Expired,
            LostReason::MaxHoldExceeded,
            LostReason::ShutDown,
        ] {
            let err = LockError::LeaseLost {
                key: "k".into(),
                reason,
            };
            let shown = err.to_string();
            assert!(
                shown.contains(&format!("{reason}; {}", reason.advice())),
                "{shown}"
            );
        }
    }

    #[test]
    fn a_busy_wait_found_in_a_deadlock_names_the_cycle() {
        let member = |waits_for: &str, holds: &str, pid| CycleMember {
            waits_for: waits_for.into(),
            holds: vec![holds.into()],
            host: Some("web-1".into()),
            pid: Some(pid),
            app: None,
            waiting_since: std::time::UNIX_EPOCH,
        };
        let cycle = DeadlockCycle {
            members: vec![member("b", "a", 1), member("a", "b", 2)],
        };
        let err = LockError::Busy {
            key: "b".into(),
            waited: Duration::from_secs(2),
            retry_after: None,
            blocker: None,
            deadlock: Some(Box::new(cycle.clone())),
        };
        let shown = err.to_string();
        assert!(
            shown.contains(&format!("its wait was part of a deadlock ({cycle})")),
            "{shown}"
        );
        assert!(
            shown.contains("pid 1 on web-1 holds `a` and waits for `b`"),
            "{shown}"
        );
        assert!(shown.ends_with("`Deadlock::Fail`"), "{shown}");
        assert!(!shown.contains("longer `wait`"), "{shown}");
        assert_eq!(err.deadlock_cycle(), Some(&cycle));
    }
}
