//! One acquisition: what `LockManager::lock` does once the task holds no outer section of the
//! key. Its steps are the checks before anything is sent, a wait behind a holder of this process
//! (or in the line of its waiters), attempts at the server, and what a busy answer and a failure
//! lead to; how it ended is recorded in one place, [`Acquisition::record`].

mod line;

use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::backend::{Acquire, Ask, Line, StoreError};
use crate::backoff::Backoff;
use crate::blocker::Blocker;
use crate::client::{Inner, without_token};
use crate::current;
use crate::error::LockError;
use crate::guard::LockGuard;
use crate::key::Key;
use crate::lease::{Lease, Token};
use crate::options::LockOptions;
use crate::pending::Pending;
use crate::shape::Shape;

use self::line::{InLine, Waiting};
use crate::deadlock::{Deadlocks, Entered};

/// A wait budget beyond any real wait.
const FOREVER: Duration = Duration::from_secs(30 * 365 * 24 * 3600);

/// How long an acquire may wait before its end is logged as slow: a call to
/// [`LockManager::lock`](crate::LockManager::lock) (or any other acquire) that ends acquired or
/// busy after waiting at least this long emits one `tracing` event at `INFO`,
/// `"slow lock acquire"`, with the fields `key`, `waited_ms`, `outcome` (`acquired` or `busy`)
/// and, where the last busy answer named the holder (see [`Blocker`]), `holder_id`, `host`,
/// `pid`, `app`, `since` (RFC 3339, UTC) and `fencing_token`. Never an owner token.
pub const SLOW_ACQUIRE: Duration = Duration::from_secs(1);

/// How an acquisition ended, for the caller.
type Done = Result<LockGuard, LockError>;

/// The subscription a waiter of this process hears a key's announcements through (see
/// [`Waiters::subscription`](crate::waiters::Waiters::subscription)).
type Subscription = Arc<tokio::sync::OnceCell<()>>;

/// Inside a locked section of the same task that holds `key` on `manager`: the guard that
/// re-enters it, or why it cannot. `None` outside one: the key is acquired.
pub(crate) fn reentered(manager: &Inner, key: &str, options: LockOptions) -> Option<Done> {
    let asked = options.asked_shape()?;
    let lease = current::held(manager.id, key, asked)?;
    // The hold found is of the same lock (see `Shape::same_lock`): a semaphore's permit under
    // another number of permits and a write hold inside a read share are refused; the rest
    // re-enter (the same shape again, or a read share inside a write hold).
    Some(match (lease.stored.shape, asked) {
        (Shape::Semaphore { permits: held }, Shape::Semaphore { permits }) if held != permits => {
            Err(permits_differ_here(key, held, permits))
        }
        (Shape::Read, Shape::Write) => Err(upgrade(key)),
        (
            Shape::Lock | Shape::Semaphore { .. } | Shape::Read | Shape::Write,
            Shape::Lock | Shape::Semaphore { .. } | Shape::Read | Shape::Write,
        ) => reenter(lease).map(LockGuard::reentered),
    })
}

/// A nested section of this task asks for `declared` permits of a semaphore it holds under
/// `held` permits.
fn permits_differ_here(key: &str, held: u32, declared: u32) -> LockError {
    LockError::Config(format!(
        "semaphore `{}` is held by this task with {}",
        key.escape_debug(),
        crate::backend::permits_mismatch(held, declared)
    ))
}

/// A task that holds a read share of `key` asks for its write hold: it would wait for itself.
fn upgrade(key: &str) -> LockError {
    LockError::Config(format!(
        "read-write lock `{}`: upgrade from read to write would deadlock: release the read lock \
         first, or take the write lock from the start",
        key.escape_debug()
    ))
}

/// Re-entering a lock the task holds is only allowed while its lease is: a nested section must
/// not run on a lease that was already lost.
fn reenter(lease: Arc<Lease>) -> Result<Arc<Lease>, LockError> {
    match lease.not_held_reason() {
        None => Ok(lease),
        Some(reason) => Err(LockError::LeaseLost {
            key: lease.key().to_owned(),
            reason,
        }),
    }
}

impl Inner {
    /// Acquires `key` under `options`, waiting up to `options.wait`; run inside the
    /// `lock_acquire` span, whose `waited_ms` and `outcome` it records.
    pub(crate) async fn acquire(self: Arc<Self>, key: String, options: LockOptions) -> Done {
        // Counted until this call returns, and dropped last: what the call leaves to clean up
        // (a grant given back, a place in line left) is counted before this stops counting,
        // so that shutdown waits for it.
        let _under_way = self.work_under_way();
        let options = options.or_lock_delay(self.lock_delay);
        let stored = self.admit(&key, options)?;
        let mut acquisition = Acquisition::new(self, stored, options);
        let done = acquisition.run().await;
        acquisition.record(&done);
        done
    }

    /// The checks before anything is sent: the options, what the backend can hold, and an
    /// upgrade that would wait for the task's own read share. The key as stored, if all pass.
    fn admit(&self, key: &str, options: LockOptions) -> Result<Key, LockError> {
        let shape = options.shape()?;
        if options.fair && !self.backend.fair() {
            return Err(LockError::Config(format!(
                "fair = true needs a store that keeps one line of waiters in order, and {} keeps \
                 none (Redlock's masters could each order it their own way): leave fair out here",
                self.backend.describe()
            )));
        }
        if let Err(reason) = self.backend.supports(shape) {
            return Err(LockError::Config(format!(
                "{} cannot hold {} `{}`: {reason}",
                self.backend.describe(),
                shape.noun(),
                key.escape_debug()
            )));
        }
        let stored = Key::new(&self.prefix, key, shape)?;
        match shape {
            Shape::Write
                if self.watchdog.held_by_task_in(
                    &stored.lock,
                    crate::lease::Owner::current(),
                    Shape::Read,
                ) =>
            {
                Err(upgrade(key))
            }
            // An upgrade would wait for the task's own read share; nothing else is refused here.
            Shape::Lock | Shape::Semaphore { .. } | Shape::Read | Shape::Write => Ok(stored),
        }
    }

    /// What one acquire attempt of `lease` asks besides the lock, recorded in the lease for
    /// its release.
    fn ask(&self, lease: &Lease, waited: bool, line: Line) -> Ask {
        // A waiter's release must be announced for those behind it in this process, unless
        // releases here wake them without the server.
        let waited = waited && !self.hands_off(&lease.stored);
        let since_ms = crate::protocol::now_ms();
        lease.record_attempt(since_ms, !waited);
        Ask {
            waited,
            line,
            waits: !lease.options.wait.is_zero(),
            since_ms,
            label: lease.options.label,
            lock_delay: lease.options.delay(),
        }
    }

    /// Whether the task of `lease`, told the key is busy, holds it itself through this
    /// manager, so that waiting would wait for itself: the lock, or every permit of the
    /// semaphore (with one free elsewhere to come, it waits as anyone would).
    fn waits_for_itself(&self, lease: &Lease) -> bool {
        let stored = &lease.stored;
        match stored.shape {
            Shape::Lock | Shape::Read | Shape::Write => {
                self.watchdog.held_by_task(&stored.lock, lease.task)
            }
            Shape::Semaphore { permits } => {
                let held = self.watchdog.held_by_task_count(&stored.lock, lease.task);
                held >= usize::try_from(permits).unwrap_or(usize::MAX)
            }
        }
    }
}

/// What one attempt at the server came to.
enum Answer {
    /// The acquisition is over.
    Done(Done),
    /// Busy: the lease that holds the key has `remaining` left, if the server said. `watched`:
    /// the subscription this process heard the key's announcements through when it asked.
    /// `blocker`: who holds it, if the server's answer named it.
    Busy {
        remaining: Option<Duration>,
        watched: Option<Subscription>,
        blocker: Option<Box<Blocker>>,
        holder: Option<crate::store::HolderId>,
    },
    /// A failure that may pass, waited out within the budget: ask again.
    Again,
}

/// One call acquiring one key, from its first attempt to its outcome.
///
/// Its fields drop in the order they are declared, which a cancelled call relies on: the
/// place in the line of fair waiters is left before the place in this process's line.
struct Acquisition {
    manager: Arc<Inner>,
    options: LockOptions,
    start: Instant,
    give_up: Instant,
    line: Line,
    /// The lease the next attempt asks under (a new one per attempt where the backend cannot
    /// retry under the same owner token).
    lease: Arc<Lease>,
    /// Our place in the line of fair waiters, once the server gave us one: left when this
    /// call ends without the lock.
    in_line: Option<InLine>,
    /// Our place in this process's line of waiters for the key, once we joined it.
    waiting: Option<Waiting>,
    /// Our place in this process's line is woken by name (see `waiters`).
    named: bool,
    /// The pause before asking again after a failure that may pass.
    backoff: Backoff,
    /// Nothing was tried yet: the first attempt asks under the lease's first owner token.
    first: bool,
    /// Who held the key at the last busy answer, as its value records it: what `Busy` and the
    /// slow-acquire event name.
    blocker: Option<Box<Blocker>>,
    /// This call among its manager's waiters, followed for deadlocks, while it waits for a
    /// plain lock.
    deadlock: Option<Entered>,
}

impl Acquisition {
    fn new(manager: Arc<Inner>, stored: Key, options: LockOptions) -> Self {
        let token = Token::new_v4();
        let start = Instant::now();
        // `wait(Duration::MAX)` means "as long as it takes".
        let give_up = start
            .checked_add(options.wait)
            .unwrap_or_else(|| start + FOREVER);
        let lease = Arc::new(Lease::new(stored, token, manager.id, options, start));
        let line = if options.wait.is_zero() {
            Line::No
        } else if options.fair {
            Line::Fair
        } else {
            Line::IfAny
        };
        Acquisition {
            manager,
            options,
            start,
            give_up,
            line,
            lease,
            in_line: None,
            waiting: None,
            named: false,
            backoff: Backoff::requests(),
            first: true,
            blocker: None,
            deadlock: None,
        }
    }

    async fn run(&mut self) -> Done {
        // The waits are boxed: only a call that waits pays for their space, and every other
        // one's future (and any future that awaits it and holds its guard) is that much
        // smaller.
        if let Some(holder) = self.line_here()
            && let ControlFlow::Break(done) = Box::pin(self.wait_behind(holder)).await
        {
            return done;
        }
        loop {
            match self.attempt().await {
                Answer::Done(done) => return done,
                Answer::Again => {}
                Answer::Busy {
                    remaining,
                    watched,
                    blocker,
                    holder,
                } => {
                    // The last answer's: the holder may have changed since an earlier one.
                    self.blocker = blocker;
                    self.blocked_by(holder.map(|holder| crate::protocol::holder_hex(holder.get())));
                    if let ControlFlow::Break(done) = Box::pin(self.busy(remaining, watched)).await
                    {
                        return done;
                    }
                }
            }
        }
    }

    /// The one place an acquisition's outcome is recorded: the `lock.acquire` metrics and the
    /// span's `waited_ms` and `outcome`. Every error an acquisition ends with other than these
    /// three is a failure of the server (`error`).
    fn record(&self, done: &Done) {
        let outcome = match done {
            Ok(_) => "acquired",
            Err(LockError::ShutDown { .. }) => "shut_down",
            Err(LockError::Busy { .. }) => "busy",
            Err(LockError::HeldByThisTask { .. }) => "held_by_this_task",
            Err(_) => "error",
        };
        let took = self.start.elapsed();
        crate::metrics::acquire(self.options.label, outcome, took);
        let span = tracing::Span::current();
        let waited_ms = u64::try_from(took.as_millis()).unwrap_or(u64::MAX);
        span.record("waited_ms", waited_ms);
        span.record("outcome", outcome);
        tracing::debug!(outcome, "lock acquire finished");
        if took >= SLOW_ACQUIRE && matches!(outcome, "acquired" | "busy") {
            self.slow(waited_ms, outcome);
        }
    }

    /// The `slow lock acquire` event (see [`SLOW_ACQUIRE`]).
    fn slow(&self, waited_ms: u64, outcome: &str) {
        let key = self.lease.key();
        let Some(blocker) = self.blocker.as_deref() else {
            tracing::info!(key = %key, waited_ms, outcome, "slow lock acquire");
            return;
        };
        tracing::info!(
            key = %key,
            waited_ms,
            outcome,
            holder_id = %blocker.holder_id,
            host = blocker.host.as_deref(),
            pid = blocker.pid,
            app = blocker.app.as_deref(),
            since = blocker.since_text().map(tracing::field::display),
            fencing_token = blocker.fencing_token,
            "slow lock acquire"
        );
    }

    fn shut_down(&self) -> LockError {
        LockError::ShutDown {
            key: self.lease.key().to_owned(),
        }
    }

    /// Whether to wait in this process's line before asking the server, and behind which
    /// holder of this process, if one holds the key.
    ///
    /// This manager holds the key, or others of this process wait for it already: take a
    /// place in line rather than ask the server (which would only say "busy", and mark the
    /// lock as awaited from elsewhere), so that the line is served in order and the holder
    /// can hand the lock to the first in one step. A task that holds the key itself asks,
    /// and is told so below.
    /// A fair waiter always asks: its place in line is on the server.
    fn line_here(&self) -> Option<Option<Arc<Lease>>> {
        let manager = &self.manager;
        let options = &self.options;
        if !manager.hands_off(&self.lease.stored) || options.wait.is_zero() || options.fair {
            return None;
        }
        match manager.watchdog.held_lease(&self.lease.stored.lock) {
            // Held by this task: asking the server ends in `HeldByThisTask`.
            Some(held) if held.task == self.lease.task => None,
            Some(held) => Some(Some(held)),
            None if manager.waiters.has_line(&self.lease.stored.lock) => Some(None),
            None => None,
        }
    }

    /// Waits in this process's line, behind `holder` if one of this process holds the key,
    /// before the first attempt at the server.
    async fn wait_behind(&mut self, holder: Option<Arc<Lease>>) -> ControlFlow<Done> {
        self.first = false;
        self.blocked_by(
            holder
                .as_ref()
                .map(|holder| crate::protocol::token_id(&holder.token)),
        );
        let joined = Waiting::join(&self.manager, &self.lease, self.give_up).await;
        // A release between our look at the holder and our joining found nobody here to wake
        // (and announced nothing: nobody had asked the server). In line now, any later release
        // here wakes us, so look again: held here still (or handed on meanwhile), wait behind
        // the holder; freed, and nobody ahead of us to ask for it, ask at once.
        let holder = match self.manager.watchdog.held_lease(&self.lease.stored.lock) {
            Some(now) => {
                if !holder.as_ref().is_some_and(|seen| Arc::ptr_eq(seen, &now)) {
                    self.blocked_by(Some(crate::protocol::token_id(&now.token)));
                }
                Some(now)
            }
            None if holder.is_some() || joined.is_first() => {
                self.waiting = Some(joined);
                return ControlFlow::Continue(());
            }
            None => None,
        };
        // The holder's lease ends (by the local clock) at its deadline, which its
        // renewals move on: that is when the watch looks, not at a blind guess.
        let expires = holder.as_ref().map(|holder| holder.deadline());
        let doomed = self.deadlock.as_ref().map(|entered| &*entered.wait);
        let waited = joined
            .wait_in_line(
                &self.lease,
                expires,
                holder.as_ref(),
                self.give_up,
                false,
                doomed,
            )
            .await;
        if let Some(pending) = waited {
            return ControlFlow::Break(self.handed(pending));
        }
        self.waiting = Some(joined);
        match self.deadlocked() {
            Some(err) => ControlFlow::Break(Err(err)),
            None => ControlFlow::Continue(()),
        }
    }

    /// A holder of this process handed us the lock while we waited in line.
    fn handed(&mut self, pending: Pending) -> Done {
        if let Some(place) = &mut self.in_line {
            place.left = true;
        }
        if self.manager.is_closed() {
            // Handed over while shutting down, perhaps after the watchdog was
            // drained: the attempt's drop gives it back.
            return Err(self.shut_down());
        }
        Ok(LockGuard::granted(pending))
    }

    /// One attempt at the server.
    async fn attempt(&mut self) -> Answer {
        let manager = &self.manager;
        if !self.first && !manager.backend.retry_with_same_token() {
            self.lease = Arc::new(self.lease.with_new_token(Instant::now()));
        }
        self.first = false;
        // The test kit's gate holds the attempt here, before its lease and request timeout
        // start.
        if let Some(gate) = manager.backend.gate(&self.lease.stored) {
            gate.await;
        }
        if manager.is_closed() {
            return Answer::Done(Err(self.shut_down()));
        }
        self.lease.restart(Instant::now());
        // The subscription an announcement of this waiter's turn would come through, from
        // the moment the server gives it a place in line (see below).
        let watched = if self.line == Line::Fair && self.waiting.is_none() {
            manager.waiters.subscription(&self.lease.stored.lock)
        } else {
            None
        };
        let watch_id = manager.watchdog.register(&self.lease);
        let pending = Pending::new(manager.clone(), self.lease.clone(), watch_id);
        // Until its answer says otherwise, a waiting attempt may be taking a place in line
        // (a fair waiter's, or a writer's waiting mark): a call cancelled while the request
        // is on the wire leaves it when this is dropped, as one told so does.
        let mut on_the_wire = (self.in_line.is_none() && self.line != Line::No)
            .then(|| InLine::new(manager, &self.lease));
        let answer = self.send(&self.lease).await;
        if self.in_line.is_none() && may_be_in_line(&answer, self.line, manager.is_closed()) {
            self.in_line = Some(
                on_the_wire
                    .take()
                    .unwrap_or_else(|| InLine::new(manager, &self.lease)),
            );
        }
        if let Some(place) = &mut on_the_wire {
            // The answer came: it took no place in line.
            place.left = true;
        }
        if manager.is_closed() {
            // The attempt's drop gives back whatever it took, and `in_line`'s
            // leaves the line (or takes the writer's waiting mark away).
            return Answer::Done(Err(self.shut_down()));
        }
        match answer {
            Ok(Acquire::Acquired { fence }) => Answer::Done(self.granted(pending, fence)),
            Ok(Acquire::Busy {
                remaining,
                blocker,
                holder,
                ..
            }) => {
                pending.disarm();
                // One holder of several is not what blocks a semaphore or a read-write lock.
                let blocker = blocker.filter(|_| self.lease.stored.shape.waits_for_one_holder());
                Answer::Busy {
                    remaining,
                    watched,
                    blocker,
                    holder,
                }
            }
            Err(failure) => self.failed(pending, failure).await,
        }
    }

    /// Sends the acquire request of `lease`, and waits for its answer as long as it may take.
    async fn send(&self, lease: &Lease) -> Result<Acquire, StoreError> {
        let manager = &self.manager;
        let options = &self.options;
        // Never longer than the lease itself: an answer after that would be stale.
        let limit = (manager.request_timeout + manager.replica_wait).min(options.ttl);
        let answer = tokio::time::timeout(
            limit,
            manager.backend.acquire(
                &lease.stored,
                &lease.token,
                options.ttl,
                manager.ask(lease, self.waiting.is_some(), self.line),
            ),
        )
        .await;
        match answer {
            // Granted, but so late that the lease may be over already: retrying with the
            // same token refreshes it and gives it a fresh deadline.
            Ok(Ok(Acquire::Acquired { .. })) if Instant::now() >= lease.deadline() => {
                Err(StoreError::transient(format!(
                    "granted only after its {} lease ran out",
                    crate::shown::Shown(options.ttl)
                )))
            }
            Ok(answer) => answer,
            Err(_) => Err(StoreError::timed_out(limit)),
        }
    }

    /// The server granted the attempt of `pending` under the fencing token `fence`.
    fn granted(&mut self, pending: Pending, fence: u64) -> Done {
        let lease = pending.lease();
        lease.mark_held(fence);
        if let crate::lease::Status::Lost(reason) = lease.status() {
            // Lost before its answer came (a steal whose notice overtook it): the body must
            // not run. The attempt's drop gives back whatever is still ours (nothing, after a
            // steal: the release finds another owner).
            return Err(LockError::LeaseLost {
                key: lease.key().to_owned(),
                reason,
            });
        }
        self.manager.watchdog.activate(pending.watch_id());
        if self.manager.is_closed() {
            // Shutdown drained the watchdog before this lease was in it, so nothing
            // renews it: the attempt's drop gives the grant back.
            return Err(self.shut_down());
        }
        // Taking it took us out of line.
        if let Some(place) = &mut self.in_line {
            place.left = true;
        }
        if let Some(waiting) = &self.waiting {
            // The next local waiter watches our lease: nobody announces its expiry.
            // Another holder's permit may end sooner than ours: the next waiter for
            // a semaphore asks at once, and learns when.
            // So may a read-write lock's other readers, or its writer.
            let until = if lease.stored.shape.next_waiter_watches_the_lease() {
                lease.deadline()
            } else {
                Instant::now()
            };
            waiting.hand_over(until);
        }
        Ok(LockGuard::granted(pending))
    }

    /// The attempt of `pending` failed: waited out and tried again if it may pass, else the
    /// acquisition's error.
    async fn failed(&mut self, pending: Pending, failure: StoreError) -> Answer {
        // Within the wait budget a dropped connection or a failover is waited out
        // like a busy lock. The retry reuses the owner token where the backend
        // allows it, so an attempt that landed unseen is simply confirmed.
        if failure.is_transient() && Instant::now() + self.backoff.peek() < self.give_up {
            let lease = pending.lease();
            tracing::debug!(key = %lease.key(), error = %without_token(&failure.to_string(), &lease.token), "acquire failed; retrying");
            pending.disarm();
            tokio::time::sleep(self.backoff.pause()).await;
            return Answer::Again;
        }
        // Dropping the attempt releases whatever it may have taken.
        Answer::Done(Err(self.manager.error("acquire", pending.lease(), failure)))
    }

    /// The server said busy, and the lease that holds the key has `remaining` left (if it
    /// said): give up with `Busy` once the wait budget is spent, else wait in line until a
    /// release or that expiry, or until a holder of this process hands us the lock.
    async fn busy(
        &mut self,
        remaining: Option<Duration>,
        watched: Option<Subscription>,
    ) -> ControlFlow<Done> {
        let now = Instant::now();
        // The server counts the lease in whole milliseconds and expires the key in the
        // millisecond after the one its PTTL ends in: looking again when the PTTL ends
        // (the timer rounds up to its next millisecond tick) lands about on the expiry.
        // Early, the answer is a PTTL of 0, and the next look is at once: a lease with under
        // a millisecond left costs its watcher a few round trips, never a whole extra tick.
        let expires = remaining.map(|remaining| now + remaining);
        if let Some(err) = self.deadlocked() {
            return ControlFlow::Break(Err(err));
        }
        if now >= self.give_up {
            if let (Some(waiting), Some(expires)) = (&self.waiting, expires) {
                waiting.hand_over(expires);
            }
            return ControlFlow::Break(Err(LockError::Busy {
                key: self.lease.key().to_owned(),
                waited: now - self.start,
                retry_after: remaining,
                blocker: self.blocker.clone(),
                deadlock: self
                    .deadlock
                    .as_ref()
                    .and_then(|entered| entered.wait.part_of()),
            }));
        }
        if self.waiting.is_none() {
            if self.manager.waits_for_itself(&self.lease) {
                return ControlFlow::Break(Err(LockError::HeldByThisTask {
                    key: self.lease.key().to_owned(),
                }));
            }
            if self.join(watched).await {
                return ControlFlow::Continue(());
            }
        }
        let Some(waiting) = self.waiting.as_ref() else {
            return ControlFlow::Continue(());
        };
        if self.in_line.is_some() && !self.named {
            // Woken by name when the lock is freed for us (see `waiters`).
            self.named = true;
            waiting.name(&self.lease.token);
        }
        let in_line = self.in_line.is_some();
        let doomed = self.deadlock.as_ref().map(|entered| &*entered.wait);
        match waiting
            .wait_in_line(&self.lease, expires, None, self.give_up, in_line, doomed)
            .await
        {
            Some(pending) => ControlFlow::Break(self.handed(pending)),
            None => match self.deadlocked() {
                Some(err) => ControlFlow::Break(Err(err)),
                None => ControlFlow::Continue(()),
            },
        }
    }

    /// The holder of the key this call waits for is `holder` (a token id), as the last busy
    /// answer (or this process's line) named it: a plain lock's wait is followed for deadlocks
    /// from its first busy answer on.
    fn blocked_by(&mut self, holder: Option<String>) {
        if !self.lease.stored.shape.waits_for_one_holder() || self.options.wait.is_zero() {
            return;
        }
        match &self.deadlock {
            Some(entered) => entered.wait.blocked_by(holder),
            None => {
                self.deadlock = Some(Deadlocks::enter(
                    &self.manager.deadlocks,
                    &self.lease,
                    holder,
                ))
            }
        }
    }

    /// The error this call gives up with if it was chosen to in a deadlock.
    fn deadlocked(&self) -> Option<LockError> {
        let cycle = self.deadlock.as_ref()?.wait.verdict()?;
        crate::metrics::deadlock(self.options.label);
        Some(LockError::Deadlock {
            key: self.lease.key().to_owned(),
            cycle: Box::new(cycle),
        })
    }

    /// Joins this process's line for the key after a first busy answer; whether to try the
    /// server again at once before waiting. `watched`: the subscription this process heard
    /// the key's announcements through when the busy attempt asked.
    async fn join(&mut self, watched: Option<Subscription>) -> bool {
        let joined = Waiting::join(&self.manager, &self.lease, self.give_up).await;
        // Subscribe first, then try again at once: a release between the busy answer
        // and the subscription would otherwise go unnoticed. A fair waiter whose process
        // heard the key's announcements already when it asked, through the same
        // subscription it joins now, needs no second try: an announcement of its turn
        // that came meanwhile is kept for it.
        let same_subscription = watched
            .as_ref()
            .is_some_and(|before| Arc::ptr_eq(before, &joined.subscription));
        let retry = !(self.in_line.is_some() && same_subscription && joined.notified);
        self.waiting = Some(joined);
        retry
    }
}

/// Whether the attempt that got `answer` may have a place in line on the server (a fair
/// waiter's, or a writer's waiting mark): told so, or, shutting down, not told otherwise by an
/// answer that never came. Leaving a line one is not in changes nothing.
fn may_be_in_line(answer: &Result<Acquire, StoreError>, line: Line, closing: bool) -> bool {
    match answer {
        Ok(Acquire::Busy { in_line, .. }) => *in_line,
        Ok(Acquire::Acquired { .. }) => false,
        Err(_) => closing && line != Line::No,
    }
}
