//! Per-lock options: lease length and its bounds, wait budget, watchdog and what to do when the
//! lease is lost.

use std::time::Duration;

use crate::error::LockError;
use crate::shape::{Mode, Shape};
use crate::shown::Exact;

/// The shortest lease accepted: renewal runs at a third of it and needs a few milliseconds.
pub const MIN_TTL: Duration = Duration::from_millis(lock_macro::__min_ttl_millis!());

/// The longest lease and `hold_at_least` accepted (one year).
///
/// `#[distributed_lock]` rejects a longer `ttl` or `hold_at_least` at compile time: both read this
/// number from one definition in the macro crate.
pub const MAX_TTL: Duration = Duration::from_secs(lock_macro::__max_ttl_secs!());

/// What a locked section does when its lease is lost while it runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnLeaseLost {
    /// Drop the body at its next `.await` and return [`LockError::LeaseLost`](crate::LockError::LeaseLost).
    #[default]
    Abort,
    /// Let the body run on; [`LockGuard::lost`](crate::LockGuard::lost) and
    /// [`CurrentLock::is_held`](crate::CurrentLock::is_held) still report the loss.
    Continue,
}

/// Options for one acquisition. Cheap to copy; every setter is `const`, so options can live in a
/// `const`.
///
/// ```
/// use std::time::Duration;
/// use lock_runtime::LockOptions;
///
/// const ORDER_LOCK: LockOptions = LockOptions::new()
///     .ttl(Duration::from_secs(10))
///     .wait(Duration::from_secs(2));
/// assert_eq!(ORDER_LOCK.ttl_value(), Duration::from_secs(10));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LockOptions {
    pub(crate) ttl: Duration,
    pub(crate) wait: Duration,
    pub(crate) watchdog: bool,
    pub(crate) on_lease_lost: OnLeaseLost,
    pub(crate) hold_at_least: Duration,
    pub(crate) max_hold: Option<Duration>,
    pub(crate) fair: bool,
    pub(crate) label: Option<&'static str>,
    /// `Some(n)`: one of the `n` permits of the semaphore of that name, not the lock.
    pub(crate) permits: Option<u32>,
    /// The lock, or a read or write hold of the read-write lock of that name.
    pub(crate) mode: Mode,
    /// What to do in a deadlock; `None`: the manager's default.
    pub(crate) deadlock: Option<Deadlock>,
    /// How long past its lease a lock lost without a release is granted to nobody; `None`:
    /// the manager's default.
    pub(crate) lock_delay: Option<Duration>,
}

/// What a call does when its wait is part of a deadlock: its task holds a lock that another
/// waiter's task (in this process or another) needs, while that one, directly or through
/// others, holds the lock this call waits for. How deadlocks are found, what it costs and
/// which waits are followed: [Deadlocks between nested
/// sections](crate#deadlocks-between-nested-sections) on the crate's front page.
///
/// A deadlock is found either way, and logged once at `WARN` (`deadlock among lock waiters`)
/// with every member's keys, host, pid and app; `lockctl deadlocks` lists the ones that stand.
/// Calls that set none follow
/// [`LockManagerBuilder::deadlock`](crate::LockManagerBuilder::deadlock).
///
/// ```
/// use std::time::Duration;
/// use lock_runtime::{Deadlock, LockOptions};
///
/// const TRANSFER: LockOptions = LockOptions::new()
///     .wait(Duration::from_secs(10))
///     .deadlock(Deadlock::Fail);
/// assert_eq!(TRANSFER.deadlock_value(), Some(Deadlock::Fail));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum Deadlock {
    /// Keep waiting until the wait budget runs out, as without detection (the default). A
    /// wait found part of a deadlock then ends in [`LockError::Busy`](crate::LockError::Busy)
    /// naming the cycle ([`LockError::deadlock_cycle`](crate::LockError::deadlock_cycle)).
    #[default]
    Wait,
    /// If this call is the cycle's youngest wait among the members that chose `Fail`, give up
    /// within about a second with [`LockError::Deadlock`](crate::LockError::Deadlock), naming
    /// the cycle; the others then go on once the caller lets its locks go.
    Fail,
}

impl Default for LockOptions {
    fn default() -> Self {
        Self::new()
    }
}

impl LockOptions {
    /// The default lease: 30 s.
    pub const DEFAULT_TTL: Duration = Duration::from_secs(30);

    /// Defaults: ttl 30 s, no waiting (try once), watchdog on, abort on lease loss, no minimum hold,
    /// no maximum hold, not fair.
    pub const fn new() -> Self {
        LockOptions {
            ttl: Self::DEFAULT_TTL,
            wait: Duration::ZERO,
            watchdog: true,
            on_lease_lost: OnLeaseLost::Abort,
            hold_at_least: Duration::ZERO,
            max_hold: None,
            fair: false,
            label: None,
            permits: None,
            mode: Mode::Exclusive,
            deadlock: None,
            lock_delay: None,
        }
    }

    /// The lease length. With the watchdog on, the lease is renewed every `ttl / 3` while the lock
    /// is held, so `ttl` is how long a crashed holder keeps others waiting. Values under 3 ms are
    /// rejected at acquire time.
    pub const fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// How long to wait for a busy lock before failing with
    /// [`LockError::Busy`](crate::LockError::Busy). Zero (the default) tries once.
    pub const fn wait(mut self, wait: Duration) -> Self {
        self.wait = wait;
        self
    }

    /// Renew the lease while the lock is held (default `true`). With `false` the lease is fixed:
    /// it ends `ttl` after acquisition and the holder is told when it does.
    pub const fn watchdog(mut self, on: bool) -> Self {
        self.watchdog = on;
        self
    }

    /// What a locked section does when the lease is lost (default [`OnLeaseLost::Abort`]).
    pub const fn on_lease_lost(mut self, action: OnLeaseLost) -> Self {
        self.on_lease_lost = action;
        self
    }

    /// Keep the lock at least this long after acquisition, even if it is released sooner: the
    /// release then only shortens the lease to what is left of this time, and the lock expires by
    /// itself. Stops a fast job from running twice on instances whose schedules are slightly apart.
    pub const fn hold_at_least(mut self, at_least: Duration) -> Self {
        self.hold_at_least = at_least;
        self
    }

    /// Stop renewing after this long, so a hung holder cannot keep the lock forever; the lease then
    /// runs out and the holder is told as for any lost lease.
    pub const fn max_hold(mut self, max_hold: Duration) -> Self {
        self.max_hold = Some(max_hold);
        self
    }

    /// First come, first served (default `false`): a caller that finds the lock busy takes a
    /// place in a line kept on the server, across every process, and the lock goes to the first
    /// in line when it is released or its lease runs out; a holder that releases and asks again
    /// goes to the back. Without it, whoever asks first after a release gets the lock (a
    /// releaser that asks again at once usually wins it back), which costs fewer Redis calls
    /// when the lock is contended across processes.
    ///
    /// A waiter keeps its place by asking again every third of its `ttl`, and leaves the line
    /// when it gives up or its call is dropped; one that dies leaves it within its `ttl`. If the
    /// first in line does not come for the lock within its turn (250 ms by default,
    /// [`LockManagerBuilder::fair_turn`](crate::LockManagerBuilder::fair_turn)) of being told (it
    /// died, or is stuck), it loses its place and the next one's turn begins. While anyone waits in line,
    /// callers without `fair` never jump it either, but they are only told of the lock once
    /// the line is empty.
    ///
    /// On a single Redis, Sentinel and Redis Cluster. Redlock refuses it with
    /// [`LockError::Config`](crate::LockError::Config): its masters could each order the line
    /// their own way.
    ///
    /// ```
    /// use std::time::Duration;
    /// use lock_runtime::LockOptions;
    ///
    /// const IN_TURN: LockOptions = LockOptions::new().wait(Duration::from_secs(5)).fair(true);
    /// assert!(IN_TURN.fair_value());
    /// ```
    pub const fn fair(mut self, fair: bool) -> Self {
        self.fair = fair;
        self
    }

    /// The name this lock's metrics carry as `lock.name` (cargo feature `metrics`; see the
    /// metrics table in docs/METRICS.md): a fixed name per kind of lock, such as
    /// `"order"`, never a rendered key, so that the number of series stays bounded. Without
    /// one, `unlabelled`. `#[distributed_lock]` sets it to the key template.
    pub const fn label(mut self, label: &'static str) -> Self {
        self.label = Some(label);
        self
    }

    /// Take one of `permits` permits of the semaphore of the key's name instead of its lock:
    /// at most `permits` holders at a time (see
    /// [`LockManager::semaphore`](crate::LockManager::semaphore), which sets this). The lock
    /// and the semaphore of one name are apart and never exclude each other. Every caller of
    /// one semaphore must declare the same number: another number fails with
    /// [`LockError::Config`] while any permit is held. At least 1; not with [`fair`](Self::fair).
    ///
    /// ```
    /// use lock_runtime::LockOptions;
    ///
    /// const THREE_EXPORTS: LockOptions = LockOptions::new().permits(3);
    /// assert_eq!(THREE_EXPORTS.permits_value(), Some(3));
    /// ```
    pub const fn permits(mut self, permits: u32) -> Self {
        self.permits = Some(permits);
        self
    }

    /// Take the read-write lock of the key's name in `mode` ([`Mode::Read`] or
    /// [`Mode::Write`]) instead of its lock (see
    /// [`LockManager::read_lock`](crate::LockManager::read_lock) and
    /// [`write_lock`](crate::LockManager::write_lock), which set this). Not with
    /// [`permits`](Self::permits) nor [`fair`](Self::fair).
    ///
    /// ```
    /// use lock_runtime::{LockOptions, Mode};
    ///
    /// const WRITE: LockOptions = LockOptions::new().mode(Mode::Write);
    /// assert_eq!(WRITE.mode_value(), Mode::Write);
    /// ```
    pub const fn mode(mut self, mode: Mode) -> Self {
        self.mode = mode;
        self
    }

    /// What this call does if its wait turns out to be part of a deadlock (see [`Deadlock`]).
    /// Unset, the manager's default applies
    /// ([`LockManagerBuilder::deadlock`](crate::LockManagerBuilder::deadlock), itself
    /// [`Deadlock::Wait`] unless set). Deadlocks are followed between plain locks (not
    /// semaphores or read-write locks) of one manager's prefix.
    pub const fn deadlock(mut self, deadlock: Deadlock) -> Self {
        self.deadlock = Some(deadlock);
        self
    }

    /// Lock-delay: after a lease lost without a release (its holder stopped renewing: it
    /// crashed, paused or was cut off from the store; `max_hold` ran out; a fixed lease ended),
    /// nobody is granted the lock for `delay` more. A clean release (the guard released or
    /// dropped, the locked section ended, shutdown) still hands the lock over at once. Zero
    /// (the default, unless [`LockManagerBuilder::lock_delay`](crate::LockManagerBuilder::lock_delay)
    /// sets another for the manager's locks): none.
    ///
    /// For a resource that cannot check fencing tokens: a holder that stalls for less than
    /// `delay` past its lease, wakes and writes once more before it notices the loss, writes
    /// while nobody else holds the lock. The holder's own lease, its renewals (every `ttl / 3`)
    /// and its lost-lease signal still follow `ttl`; the store keeps the lock for
    /// `ttl + delay`, and a busy answer (and its `retry_after`) says when the lock can be
    /// granted, the delay included. A stall longer than `ttl + delay` still overlaps the next
    /// holder, and every crash keeps the lock from everyone for `delay` more. `ttl + delay` is
    /// at most [`MAX_TTL`](crate::MAX_TTL). See docs/GUARANTEES.md.
    ///
    /// ```
    /// use std::time::Duration;
    /// use lock_runtime::LockOptions;
    ///
    /// const PRINTER: LockOptions = LockOptions::new()
    ///     .ttl(Duration::from_secs(10))
    ///     .lock_delay(Duration::from_secs(15));
    /// assert_eq!(PRINTER.lock_delay_value(), Some(Duration::from_secs(15)));
    /// ```
    pub const fn lock_delay(mut self, delay: Duration) -> Self {
        self.lock_delay = Some(delay);
        self
    }

    /// These options with `delay` as their lock-delay if they set none: the manager's default.
    pub(crate) fn or_lock_delay(mut self, delay: Duration) -> Self {
        self.lock_delay = self.lock_delay.or(Some(delay));
        self
    }

    /// The lock-delay, zero for none (see [`lock_delay`](Self::lock_delay)).
    pub(crate) fn delay(&self) -> Duration {
        self.lock_delay.unwrap_or_default()
    }

    /// The ttl the store keeps a lock for: the lease and its lock-delay.
    fn kept_for(&self) -> Duration {
        self.ttl.saturating_add(self.delay())
    }

    /// Checks the values against what a lease can be: ttl within
    /// [`MIN_TTL`](crate::MIN_TTL)..=[`MAX_TTL`](crate::MAX_TTL), `hold_at_least` and
    /// `ttl + lock_delay` at most `MAX_TTL`. `wait` and `max_hold` may be anything
    /// (`Duration::MAX`: no limit).
    pub fn validate(&self) -> Result<(), LockError> {
        self.shape().map(drop)
    }

    /// Checks the values as [`validate`](Self::validate) says, and what `permits`, `mode` and
    /// `fair` may be together; the shape they ask for if they pass. Derived once per
    /// acquisition: every step that differs between the lock, a semaphore and a read-write
    /// lock matches on it.
    pub(crate) fn shape(&self) -> Result<Shape, LockError> {
        if self.ttl < MIN_TTL || self.ttl > MAX_TTL {
            return Err(LockError::Config(format!(
                "ttl {} is outside {}..={}",
                Exact(self.ttl),
                Exact(MIN_TTL),
                Exact(MAX_TTL)
            )));
        }
        if self.hold_at_least > MAX_TTL {
            return Err(LockError::Config(format!(
                "hold_at_least {} is longer than the maximum {}",
                Exact(self.hold_at_least),
                Exact(MAX_TTL)
            )));
        }
        if self.kept_for() > MAX_TTL {
            return Err(LockError::Config(format!(
                "ttl {} and lock_delay {} together are longer than the maximum {}: shorten \
                 the lock_delay",
                Exact(self.ttl),
                Exact(self.delay()),
                Exact(MAX_TTL)
            )));
        }
        let refused = |why: &str| Err(LockError::Config(why.to_owned()));
        match (self.permits, self.mode, self.fair) {
            (Some(0), _, _) => {
                refused("permits 0: a semaphore that nobody could ever hold; declare at least 1")
            }
            (Some(_), _, true) => refused(
                "fair = true orders the waiters of a lock; a semaphore's waiters are not served \
                 in order: leave fair out, or take the lock",
            ),
            (Some(_), Mode::Read | Mode::Write, false) => refused(
                "a read-write lock and a semaphore are different locks: set either a read or \
                 write mode or permits, not both",
            ),
            (Some(permits), Mode::Exclusive, false) => Ok(Shape::Semaphore { permits }),
            (None, Mode::Read | Mode::Write, true) => refused(
                "fair = true orders the waiters of a lock; a read-write lock already lets a \
                 waiting writer go before new readers: leave fair out, or take the lock",
            ),
            (None, Mode::Read, false) => Ok(Shape::Read),
            (None, Mode::Write, false) => Ok(Shape::Write),
            (None, Mode::Exclusive, _) => Ok(Shape::Lock),
        }
    }

    /// The shape these options ask for, without the checks of [`validate`](Self::validate):
    /// what a nested section of the task re-enters. `None` for both permits and a read or
    /// write mode, which name no one lock.
    pub(crate) fn asked_shape(&self) -> Option<Shape> {
        match (self.permits, self.mode) {
            (None, Mode::Exclusive) => Some(Shape::Lock),
            (Some(permits), Mode::Exclusive) => Some(Shape::Semaphore { permits }),
            (None, Mode::Read) => Some(Shape::Read),
            (None, Mode::Write) => Some(Shape::Write),
            (Some(_), Mode::Read | Mode::Write) => None,
        }
    }

    /// The lease length.
    pub const fn ttl_value(&self) -> Duration {
        self.ttl
    }

    /// The wait budget.
    pub const fn wait_value(&self) -> Duration {
        self.wait
    }

    /// Whether the watchdog renews the lease.
    pub const fn watchdog_value(&self) -> bool {
        self.watchdog
    }

    /// What happens when the lease is lost.
    pub const fn on_lease_lost_value(&self) -> OnLeaseLost {
        self.on_lease_lost
    }

    /// The minimum hold time.
    pub const fn hold_at_least_value(&self) -> Duration {
        self.hold_at_least
    }

    /// The maximum hold time, if any.
    pub const fn max_hold_value(&self) -> Option<Duration> {
        self.max_hold
    }

    /// Whether waiters are served first come, first served.
    pub const fn fair_value(&self) -> bool {
        self.fair
    }

    /// The number of permits of the semaphore taken, or `None` for the lock.
    pub const fn permits_value(&self) -> Option<u32> {
        self.permits
    }

    /// Which lock of the key's name is taken (see [`Mode`]).
    pub const fn mode_value(&self) -> Mode {
        self.mode
    }

    /// What this call does in a deadlock, if set here (see [`deadlock`](Self::deadlock)).
    pub const fn deadlock_value(&self) -> Option<Deadlock> {
        self.deadlock
    }

    /// The lock-delay, if set here (see [`lock_delay`](Self::lock_delay)); `None`: the
    /// manager's default.
    pub const fn lock_delay_value(&self) -> Option<Duration> {
        self.lock_delay
    }

    /// The metrics label, if any.
    pub const fn label_value(&self) -> Option<&'static str> {
        self.label
    }
}
