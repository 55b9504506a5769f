//! The state of one held lock, shared by its guard, `current()`, the watchdog and the macro's
//! abort: one status behind one mutex, and one `Notify` that wakes whoever waits for a loss.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::error::LostReason;
use crate::key::Key;
use crate::options::LockOptions;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Status {
    /// The acquire is on its way.
    Acquiring,
    Held,
    Lost(LostReason),
    Released,
}

/// Who holds a lock inside the process: the tokio task, or, for a future run by `block_on`
/// (`#[tokio::main]`, `#[tokio::test]`), which is no task, the thread that runs it: one thread
/// runs one `block_on` at a time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Owner {
    Task(tokio::task::Id),
    BlockOn(std::thread::ThreadId),
}

impl Owner {
    pub(crate) fn current() -> Owner {
        match tokio::task::try_id() {
            Some(task) => Owner::Task(task),
            None => Owner::BlockOn(std::thread::current().id()),
        }
    }
}

/// An owner token: in the text form every request carries (a uuid v4 is 36 characters), kept
/// inline rather than on the heap. Never shown: its `Debug` hides it.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct Token {
    text: [u8; Token::MAX],
    len: u8,
}

impl Token {
    /// The longest token: a uuid's hyphenated form.
    const MAX: usize = uuid::fmt::Hyphenated::LENGTH;

    /// A fresh token: a random uuid v4, written without allocating.
    pub(crate) fn new_v4() -> Token {
        let mut text = [0; Token::MAX];
        uuid::Uuid::new_v4().hyphenated().encode_lower(&mut text);
        Token {
            text,
            len: Token::MAX as u8,
        }
    }

    /// `text` as a token, if it is no longer than a uuid (tests name their own tokens, and a
    /// resumed election term brings back the one it saved).
    pub(crate) fn from_text(text: &str) -> Option<Token> {
        let mut token = Token {
            text: [0; Token::MAX],
            len: u8::try_from(text.len()).ok()?,
        };
        token
            .text
            .get_mut(..text.len())?
            .copy_from_slice(text.as_bytes());
        Some(token)
    }

    pub(crate) fn as_str(&self) -> &str {
        // Always whole characters: copied from a `str` or written as ASCII.
        std::str::from_utf8(&self.text[..usize::from(self.len)]).unwrap_or_default()
    }
}

impl std::ops::Deref for Token {
    type Target = str;

    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl PartialEq<str> for Token {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<owner token>")
    }
}

/// One lease of a lock, as the engine keeps it while an owner token asks for, holds and
/// releases the lock: what a store reads from it is its [`Key`], owner token and ttl.
pub struct Lease {
    /// The key's names in Redis; the key as the caller named it is [`Lease::key`].
    pub(crate) stored: Key,
    pub(crate) token: Token,
    pub(crate) manager_id: u64,
    /// The task that asked for the lock: the lock's owner in this process.
    pub(crate) task: Owner,
    pub(crate) options: LockOptions,
    fence: AtomicU64,
    /// When the last acquire attempt began (wall clock, ms), as the lock's value says.
    since_ms: AtomicU64,
    /// Whether that attempt wrote a value nobody was told is busy (`waiting=0`): its release may
    /// then compare the whole value.
    plain: AtomicBool,
    /// Handed to its caller as held, so that a body may have run under it (it may be lost or
    /// released since). Only such a lease is kept for `hold_at_least`: a lock that nobody used
    /// (an acquire that failed, was cancelled or was shut down after the grant, the keys a
    /// `lock_all` took before it failed) is given back at once.
    in_use: AtomicBool,
    times: Mutex<Times>,
    /// Who asked the holder to let go, from the first such request heard (see
    /// `LockManager::request_release`).
    requested: std::sync::OnceLock<Box<str>>,
    /// For a lease a steal took: the raw [`HolderId`](crate::store::HolderId) of the holder it
    /// was taken from, 0 for none (see `LockGuard::stolen_from`).
    stolen_from: AtomicU64,
    /// Woken on every change of `times.status`, and on a request to let go.
    changed: Notify,
}

#[derive(Clone, Copy)]
struct Times {
    status: Status,
    /// Taken before the acquire was sent: every local deadline counts from here, so the local
    /// view of the lease always ends before the server's.
    started: Instant,
    /// Where the lease ends by the local clock, less a drift margin.
    deadline: Instant,
}

/// How much earlier than the server the holder gives up a lease: 1 % of the ttl plus 2 ms, for
/// clock drift between this process and the server.
pub(crate) fn drift_margin(ttl: Duration) -> Duration {
    ttl / 100 + Duration::from_millis(2)
}

impl Times {
    fn starting(started: Instant, ttl: Duration) -> Self {
        Times {
            started,
            deadline: started + ttl - drift_margin(ttl),
            status: Status::Acquiring,
        }
    }
}

impl Lease {
    pub(crate) fn new(
        stored: Key,
        token: Token,
        manager_id: u64,
        options: LockOptions,
        started: Instant,
    ) -> Self {
        Lease {
            stored,
            token,
            manager_id,
            task: Owner::current(),
            options,
            fence: AtomicU64::new(0),
            since_ms: AtomicU64::new(0),
            plain: AtomicBool::new(false),
            in_use: AtomicBool::new(false),
            times: Mutex::new(Times::starting(started, options.ttl)),
            requested: std::sync::OnceLock::new(),
            stolen_from: AtomicU64::new(0),
            changed: Notify::new(),
        }
    }

    /// The same lock for another acquire attempt under a fresh owner token (see
    /// `Store::retry_with_same_token`).
    pub(crate) fn with_new_token(&self, started: Instant) -> Self {
        let mut lease = Lease::new(
            self.stored.clone(),
            Token::new_v4(),
            self.manager_id,
            self.options,
            started,
        );
        lease.task = self.task;
        lease
    }

    /// The lock key, as the caller named it.
    pub fn key(&self) -> &str {
        self.stored.key()
    }

    /// The key of the lock this lease is of.
    pub fn lock_key(&self) -> &Key {
        &self.stored
    }

    /// The owner token: the lease's holder. Never log or show it.
    pub fn token(&self) -> &str {
        self.token.as_str()
    }

    /// The lease length the caller asked for.
    pub fn ttl(&self) -> Duration {
        self.options.ttl
    }

    fn times(&self) -> std::sync::MutexGuard<'_, Times> {
        self.times.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Applies `change` to the status; wakes the waiters of [`Lease::lost`] if it returns true.
    fn update(&self, change: impl FnOnce(&mut Status) -> bool) -> bool {
        let changed = change(&mut self.times().status);
        if changed {
            self.changed.notify_waiters();
        }
        changed
    }

    /// A new attempt to acquire is about to be sent: the lease would count from now.
    /// An acquire attempt begins at `since_ms` (wall clock), writing a value nobody was told is
    /// busy if `plain`.
    pub(crate) fn record_attempt(&self, since_ms: u64, plain: bool) {
        self.since_ms.store(since_ms, Ordering::Release);
        self.plain.store(plain, Ordering::Release);
    }

    /// When the attempt that took the lock began, if it wrote a value nobody was told is busy.
    /// A lock handed over by another holder of this process says no: its value was written by
    /// the hand-over.
    pub(crate) fn written_plain(&self) -> Option<u64> {
        self.plain
            .load(Ordering::Acquire)
            .then(|| self.since_ms.load(Ordering::Acquire))
    }

    /// The value the attempt that took the lock wrote changed since (a waiter marked it as
    /// awaited): renewals and the release stop comparing it, and go to the scripts at once.
    pub(crate) fn value_changed(&self) {
        self.plain.store(false, Ordering::Release);
    }

    pub(crate) fn restart(&self, started: Instant) {
        // A deadline that passed during an earlier, busy attempt says nothing about this one.
        *self.times() = Times::starting(started, self.options.ttl);
        self.changed.notify_waiters();
    }

    pub(crate) fn started(&self) -> Instant {
        self.times().started
    }

    /// The fencing token it was granted (0 before it is held).
    pub fn fencing_token(&self) -> u64 {
        self.fence.load(Ordering::Acquire)
    }

    pub(crate) fn deadline(&self) -> Instant {
        self.times().deadline
    }

    pub(crate) fn set_deadline(&self, deadline: Instant) {
        self.times().deadline = deadline;
    }

    pub(crate) fn status(&self) -> Status {
        self.times().status
    }

    pub(crate) fn is_held(&self) -> bool {
        let times = *self.times();
        times.status == Status::Held && Instant::now() < times.deadline
    }

    /// What is left of the lease by the local clock (zero once lost or released).
    pub(crate) fn remaining(&self) -> Duration {
        let times = *self.times();
        if times.status != Status::Held {
            return Duration::ZERO;
        }
        times.deadline.saturating_duration_since(Instant::now())
    }

    /// Whether the lease is (or was) in its caller's hands (see `in_use`).
    pub(crate) fn set_in_use(&self, in_use: bool) {
        self.in_use.store(in_use, Ordering::Release);
    }

    /// How long a release leaves the lock in place: what is left of `hold_at_least` for a
    /// lease its caller used, nothing for one it never had.
    pub(crate) fn keep(&self) -> Duration {
        if !self.in_use.load(Ordering::Acquire) {
            return Duration::ZERO;
        }
        self.options
            .hold_at_least
            .saturating_sub(self.started().elapsed())
    }

    pub(crate) fn mark_held(&self, fence: u64) {
        self.fence.store(fence, Ordering::Release);
        self.update(|status| {
            let acquiring = *status == Status::Acquiring;
            if acquiring {
                *status = Status::Held;
            }
            acquiring
        });
    }

    /// Marks the lease lost; returns false if it was already lost or released.
    pub(crate) fn mark_lost(&self, reason: LostReason) -> bool {
        self.update(|status| {
            let live = matches!(status, Status::Held | Status::Acquiring);
            if matches!(status, Status::Held) {
                // Counted before anyone waiting on `lost()` is woken, so that whoever sees the
                // loss also sees it counted.
                crate::metrics::lease_lost(self.options.label, reason);
            }
            if live {
                *status = Status::Lost(reason);
            }
            live
        })
    }

    pub(crate) fn mark_released(&self) {
        self.update(|status| {
            let changed = !matches!(status, Status::Released);
            *status = Status::Released;
            changed
        });
    }

    /// Why the lease is not held any more: the loss reason, or `Expired` once released or past
    /// its local deadline; `None` while it is held.
    pub(crate) fn not_held_reason(&self) -> Option<LostReason> {
        match self.status() {
            Status::Lost(reason) => Some(reason),
            _ if self.is_held() => None,
            _ => Some(LostReason::Expired),
        }
    }

    /// Why a lease whose deadline passed ran out: `max_hold` if the deadline is where it capped
    /// the lease, otherwise missing renewals.
    fn expiry_reason(&self) -> LostReason {
        let times = *self.times();
        let cap = self
            .options
            .max_hold
            .and_then(|max| times.started.checked_add(max));
        match cap {
            Some(cap) if times.deadline + drift_margin(self.options.ttl) >= cap => {
                LostReason::MaxHoldExceeded
            }
            _ => LostReason::Expired,
        }
    }

    /// The reason if the lease is known lost now, as the first poll of [`Lease::lost`] would
    /// tell it: a held lease whose local deadline passed is marked lost here.
    pub(crate) fn lost_now(&self) -> Option<LostReason> {
        let Times {
            status, deadline, ..
        } = *self.times();
        match status {
            Status::Lost(reason) => Some(reason),
            Status::Held if Instant::now() >= deadline => {
                self.mark_lost(self.expiry_reason());
                match self.status() {
                    Status::Lost(reason) => Some(reason),
                    _ => None,
                }
            }
            Status::Acquiring | Status::Held | Status::Released => None,
        }
    }

    /// Someone asked the holder to let go (`from` says who): the first request is kept, and
    /// wakes [`Lease::release_requested`]. Returns false if one was heard before.
    pub(crate) fn request_release(&self, from: &str) -> bool {
        let first = self.requested.set(from.into()).is_ok();
        if first {
            self.changed.notify_waiters();
        }
        first
    }

    /// This lease was taken by a steal from the holder whose raw id is `victim` (0: none, or
    /// the store does not know).
    pub(crate) fn set_stolen_from(&self, victim: u64) {
        self.stolen_from.store(victim, Ordering::Release);
    }

    /// The raw id of the holder this lease's steal took the lock from; 0 for none.
    pub(crate) fn stolen_from(&self) -> u64 {
        self.stolen_from.load(Ordering::Acquire)
    }

    /// Who asked the holder to let go, if anyone has.
    pub(crate) fn release_request(&self) -> Option<&str> {
        self.requested.get().map(|from| &**from)
    }

    /// Resolves with who asked once someone asks the holder to let go (at once if someone
    /// has); never resolves if the lease is released or lost first.
    pub(crate) async fn release_requested(&self) -> crate::release_request::ReleaseRequest {
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if let Some(from) = self.release_request() {
                return crate::release_request::ReleaseRequest::new(self.key(), from);
            }
            if matches!(self.status(), Status::Released | Status::Lost(_)) {
                break;
            }
            changed.await;
        }
        std::future::pending().await
    }

    /// Resolves with the reason once the lease is lost; never resolves if it is released first.
    ///
    /// Watches the local deadline itself as well, so the loss is reported on time even if the
    /// watchdog could not run (its runtime shut down).
    pub(crate) async fn lost(&self) -> LostReason {
        loop {
            // Registered before the status is read, so no change in between goes unnoticed.
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            let Times {
                status, deadline, ..
            } = *self.times();
            match status {
                Status::Lost(reason) => return reason,
                Status::Released => break,
                Status::Acquiring | Status::Held => {}
            }
            // A timeout rather than a `select!`: the same two futures, in less space (one per
            // locked section while it runs).
            if tokio::time::timeout_at(deadline, &mut changed)
                .await
                .is_err()
            {
                // A renewal may have moved the deadline meanwhile.
                if Instant::now() >= self.deadline() && self.status() == Status::Held {
                    self.mark_lost(self.expiry_reason());
                }
            }
        }
        std::future::pending().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_is_a_uuid_v4_in_text_and_never_shown() {
        let token = Token::new_v4();
        assert_eq!(token.len(), 36);
        let parsed = uuid::Uuid::parse_str(&token).expect("a uuid");
        assert_eq!(parsed.get_version_num(), 4);
        assert_eq!(parsed.hyphenated().to_string(), token.as_str());
        assert_ne!(Token::new_v4(), token);
        assert_eq!(format!("{token:?}"), "<owner token>");
    }

    #[tokio::test(start_paused = true)]
    async fn a_held_lease_past_its_deadline_is_lost_at_a_look() {
        let stored = Key::lock("lock:", "k").expect("valid key");
        let ttl = Duration::from_secs(1);
        let lease = Lease::new(
            stored,
            Token::new_v4(),
            1,
            LockOptions::new().ttl(ttl),
            Instant::now(),
        );
        lease.mark_held(1);
        assert_eq!(lease.lost_now(), None);
        tokio::time::advance(ttl).await;
        assert_eq!(lease.lost_now(), Some(LostReason::Expired));
        assert_eq!(lease.status(), Status::Lost(LostReason::Expired));
        lease.mark_released();
        assert_eq!(lease.lost_now(), None);
    }

    #[test]
    fn a_named_token_reads_back_as_named() {
        let token = Token::from_text("owner-a").expect("short enough");
        assert_eq!(&*token, "owner-a");
        assert!(Token::from_text(&"x".repeat(37)).is_none());
    }
}
