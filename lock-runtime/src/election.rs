//! Leader election: of all the processes that campaign for a name, one leads at a time.
//!
//! Leading is holding the lock of that name: a campaign is a lock acquisition that waits (woken
//! by the holder's release, or at its lease's expiry), a term is one holding of the lock, kept
//! by the watchdog and ended by a lost lease, and the term's fencing token is the lock's. One
//! task per [`Leadership`] campaigns, leads, and campaigns again after a loss; the handle reads
//! its state through a `watch` channel and stops it by dropping (or sending on) a `oneshot`.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::runtime::Handle;
use tokio::sync::{oneshot, watch};

use crate::backoff::Backoff;
use crate::error::{LockError, LostReason};
use crate::guard::LockGuard;
use crate::lease::Lease;
use crate::manager::LockManager;
use crate::options::LockOptions;

/// Options for [`LockManager::elect`]. Every setter is `const`.
///
/// ```
/// use std::time::Duration;
/// use lock_runtime::ElectionOptions;
///
/// const SCHEDULER: ElectionOptions = ElectionOptions::new()
///     .ttl(Duration::from_secs(5))
///     .label("scheduler");
/// assert_eq!(SCHEDULER.ttl_value(), Duration::from_secs(5));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ElectionOptions {
    ttl: Duration,
    label: Option<&'static str>,
}

impl Default for ElectionOptions {
    fn default() -> Self {
        Self::new()
    }
}

impl ElectionOptions {
    /// The default lease: 15 s, the longest a crashed leader keeps the others waiting.
    pub const DEFAULT_TTL: Duration = Duration::from_secs(15);

    /// Defaults: ttl 15 s, no metrics label.
    pub const fn new() -> Self {
        ElectionOptions {
            ttl: Self::DEFAULT_TTL,
            label: None,
        }
    }

    /// The leader's lease, renewed every `ttl / 3` while it leads: how long a leader that
    /// died (or was cut off) keeps the others waiting, and how soon a leader cut off from the
    /// server stops calling itself leader (before the server would let another take over).
    pub const fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// The `lock.name` the election's lock carries in metrics (see
    /// [`LockOptions::label`]).
    pub const fn label(mut self, label: &'static str) -> Self {
        self.label = Some(label);
        self
    }

    /// The lease length.
    pub const fn ttl_value(&self) -> Duration {
        self.ttl
    }

    /// The metrics label, if any.
    pub const fn label_value(&self) -> Option<&'static str> {
        self.label
    }

    /// The lock a campaign takes: it waits as long as it takes, renewed while held.
    const fn lock_options(&self) -> LockOptions {
        let options = LockOptions::new().ttl(self.ttl).wait(Duration::MAX);
        match self.label {
            Some(label) => options.label(label),
            None => options,
        }
    }
}

impl LockManager {
    /// Campaigns for the leadership `name` among every process (and every handle) that does the
    /// same on this deployment, and keeps campaigning: the returned [`Leadership`] tells
    /// whether this process leads now, waits for a term to begin or to end, and gives the
    /// fencing token of the current term. After a lost lease it campaigns again by itself.
    ///
    /// The leadership is the lock `name` (stored like any other lock, so `lockctl` shows the
    /// leader): a campaign waits for its release, and is woken by it; the leader's watchdog
    /// renews it every `ttl / 3`. Dropping the handle, [`Leadership::step_down`] and
    /// [`LockManager::shutdown`] release it, and the next contender is elected at once; a
    /// leader that dies is replaced when its lease runs out.
    ///
    /// Errors at once: [`LockError::Config`] for an empty name, a ttl outside
    /// [`MIN_TTL`](crate::MIN_TTL)..=[`MAX_TTL`](crate::MAX_TTL), or a call outside a tokio
    /// runtime (unless [pinned](crate::LockManagerBuilder::runtime)), and
    /// [`LockError::ShutDown`] on a manager that was shut down. Server failures later are
    /// retried with backoff, never returned.
    ///
    /// On every backend, Redlock included (a term is then a Redlock lock, with its fencing
    /// caveats, see [`LockManager::connect`]).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), lock_runtime::LockError> {
    /// use std::time::Duration;
    /// use lock_runtime::{ElectionOptions, LockManager};
    ///
    /// let locks = LockManager::memory();
    /// let leadership = locks.elect("scheduler", ElectionOptions::new().ttl(Duration::from_secs(5)))?;
    /// let token = leadership.elected().await?; // this process leads now
    /// tokio::select! {
    ///     reason = leadership.deposed() => println!("no longer leader: {reason}"),
    ///     () = async { /* run the leader's work, writing with `token` */ } => {}
    /// }
    /// # let _ = token;
    /// leadership.step_down().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn elect(
        &self,
        name: impl Into<String>,
        options: ElectionOptions,
    ) -> Result<Leadership, LockError> {
        let name = name.into();
        let lock_options = options.lock_options();
        lock_options.validate()?;
        crate::key::Key::lock("", &name)?;
        if self.is_shut_down() {
            return Err(LockError::ShutDown { key: name });
        }
        let background = self.background();
        if background.pinned().is_none() && Handle::try_current().is_err() {
            return Err(LockError::Config(format!(
                "elect(`{}`) was called outside a tokio runtime: call it from within one, or \
                 pin the manager's background work with LockManagerBuilder::runtime",
                name.escape_debug()
            )));
        }
        let (state, watched) = watch::channel(State::default());
        let (stop, stopped) = oneshot::channel();
        let campaign = Campaign {
            locks: self.clone(),
            name: name.clone(),
            options: lock_options,
            state,
            stop: stopped,
        };
        background.spawn(campaign.run());
        Ok(Leadership {
            name,
            backend: self.backend().to_owned(),
            state: watched,
            reported: std::sync::Mutex::new(None),
            stop,
        })
    }
}

/// A campaign for a leadership, started by [`LockManager::elect`]: whether this process leads,
/// futures for becoming leader and for losing it, and the fencing token of the current term.
///
/// Dropping it steps down: the campaign stops, and a term in progress ends with the release of
/// its lock (in the background). [`step_down`](Leadership::step_down) does the same and waits
/// for the server to confirm the release. The campaign runs on the manager's pinned runtime, or
/// else on the one `elect` was called on; if that runtime shuts down first, the campaign ends
/// with it and a term in progress expires with its lease: step down, or shut the manager down,
/// before the runtime ends. A handle that is forgotten (`std::mem::forget`) is never dropped:
/// its campaign, and a term it wins, last as long as the runtime, as a forgotten
/// [`LockGuard`]'s lock does.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), lock_runtime::LockError> {
/// use lock_runtime::{ElectionOptions, LockManager};
///
/// let locks = LockManager::memory();
/// let first = locks.elect("compactor", ElectionOptions::new())?;
/// let token = first.elected().await?;
/// let second = locks.elect("compactor", ElectionOptions::new())?;
/// assert!(first.is_leader() && !second.is_leader());
///
/// first.step_down().await?;
/// let next = second.elected().await?; // at once: the release wakes the campaign
/// assert!(next > token);
/// # Ok(())
/// # }
/// ```
#[must_use = "dropping the leadership steps down at once"]
pub struct Leadership {
    name: String,
    /// For the error of a campaign whose runtime shut down.
    backend: String,
    state: watch::Receiver<State>,
    /// The term whose token [`elected`](Leadership::elected) returned last, and its lease:
    /// the term [`deposed`](Leadership::deposed) reports the end of.
    reported: std::sync::Mutex<Option<(u64, Arc<Lease>)>>,
    /// Sent (with a reply channel) by `step_down`, dropped with the handle: either stops the
    /// campaign.
    stop: oneshot::Sender<Reply>,
}

/// Where the campaign says whether stepping down released the lock.
type Reply = oneshot::Sender<Result<(), LockError>>;

/// What the campaign publishes.
#[derive(Clone, Default)]
struct State {
    /// The terms won so far; the current one's number while leading.
    term: u64,
    /// The lease of the current term, while it lasts.
    lease: Option<Arc<Lease>>,
    /// Why the last term ended.
    last_loss: Option<LostReason>,
    /// The number of the term `last_loss` ended.
    lost_term: u64,
    /// The manager was shut down: the campaign is over.
    shut_down: bool,
}

impl std::fmt::Debug for Leadership {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Leadership")
            .field("name", &self.name)
            .field("is_leader", &self.is_leader())
            .field("fencing_token", &self.fencing_token())
            .field("term", &self.term())
            .finish()
    }
}

impl Leadership {
    /// The name campaigned for.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// True while this handle leads: its term's lease is held (not lost, and not past its
    /// local deadline, which the watchdog moves), exactly as [`LockGuard::is_held`] reports.
    pub fn is_leader(&self) -> bool {
        self.current().is_some()
    }

    /// The fencing token of the current term while leading: strictly greater than the token of
    /// every earlier term of this name (as the lock's tokens are). Pass it with every write the
    /// leader makes, and have the storage refuse tokens smaller than the largest it has seen:
    /// that stops a leader that was paused past its lease.
    pub fn fencing_token(&self) -> Option<u64> {
        self.current().map(|lease| lease.fencing_token())
    }

    /// How many terms this handle has won: the current term's number (from 1) while leading,
    /// 0 before the first.
    pub fn term(&self) -> u64 {
        self.state.borrow().term
    }

    /// The lease of the current term, if it is held.
    fn current(&self) -> Option<Arc<Lease>> {
        self.state
            .borrow()
            .lease
            .clone()
            .filter(|lease| lease.is_held())
    }

    /// Resolves with the term's fencing token once this handle leads; at once if it does
    /// already.
    ///
    /// Fails with [`LockError::ShutDown`] once the manager was shut down, and with
    /// [`LockError::Backend`] if the campaign stopped because the runtime it ran on shut down
    /// (see [`LockManagerBuilder::runtime`](crate::LockManagerBuilder::runtime)).
    pub async fn elected(&self) -> Result<u64, LockError> {
        let mut state = self.state.clone();
        loop {
            {
                let now = state.borrow_and_update();
                if let Some(lease) = now.lease.as_ref().filter(|lease| lease.is_held()) {
                    *self
                        .reported
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner) =
                        Some((now.term, lease.clone()));
                    return Ok(lease.fencing_token());
                }
                if now.shut_down {
                    return Err(LockError::ShutDown {
                        key: self.name.clone(),
                    });
                }
            }
            if state.changed().await.is_err() {
                return Err(self.campaign_gone(&state));
            }
        }
    }

    /// The error of a campaign that ended without a shutdown: its runtime shut down.
    fn campaign_gone(&self, state: &watch::Receiver<State>) -> LockError {
        if state.borrow().shut_down {
            return LockError::ShutDown {
                key: self.name.clone(),
            };
        }
        LockError::backend(
            "elect",
            Some(&self.name),
            &self.backend,
            "the runtime the campaign ran on has shut down; elect again from a running one, or \
             pin the manager to a runtime that outlives it",
        )
    }

    /// Resolves when the term whose token [`elected`](Self::elected) returned last ends, with
    /// the reason; at once if it has ended, even if a later term has begun since (call
    /// `elected` again for that one's token). Before any `elected`, it follows the current
    /// term, and resolves at once if this handle does not lead (with the reason the last term
    /// ended, or [`LostReason::NotOwner`] before the first: someone else holds the leadership,
    /// or nobody).
    ///
    /// Tying it to the reported term means a leader working with a token never misses the end
    /// of that token's term, however quickly the campaign wins the next one.
    ///
    /// A term ends when its lease is lost: the server shows another owner or none
    /// ([`LostReason::NotOwner`]), no renewal succeeded in time ([`LostReason::Expired`],
    /// reported before the server would let another contender in), or the manager was shut
    /// down ([`LostReason::ShutDown`]). The campaign then goes on by itself;
    /// [`elected`](Self::elected) waits for the next term.
    pub async fn deposed(&self) -> LostReason {
        let mut state = self.state.clone();
        let reported = self
            .reported
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        let (term, lease) = {
            let now = state.borrow_and_update();
            let (term, lease) = match reported {
                Some((term, lease)) => (term, Some(lease)),
                None => (now.term, now.lease.clone()),
            };
            let Some(lease) = lease else {
                return now.last_loss.unwrap_or(LostReason::NotOwner);
            };
            if lease.not_held_reason().is_some() {
                return why_ended(term, &lease, &now);
            }
            (term, lease)
        };
        loop {
            tokio::select! {
                reason = lease.lost() => return reason,
                changed = state.changed() => {
                    let now = state.borrow_and_update();
                    if changed.is_err() {
                        // The campaign stopped with the lease (its runtime shut down): nobody
                        // renews it any more.
                        return lease.not_held_reason().unwrap_or(LostReason::Expired);
                    }
                    if now.term != term || now.lease.is_none() {
                        return why_ended(term, &lease, &now);
                    }
                }
            }
        }
    }

    /// Stops campaigning; if this handle leads, ends the term by releasing the lock and waits
    /// until the server confirms, so that the next contender is elected at once.
    ///
    /// Errors as [`LockGuard::release`]: [`LockError::LeaseLost`] if the lease was lost
    /// meanwhile (the lock is left alone), [`LockError::Backend`] if the server did not
    /// confirm (the lock then expires with its lease).
    pub async fn step_down(self) -> Result<(), LockError> {
        let (reply, released) = oneshot::channel();
        if self.stop.send(reply).is_err() {
            // The campaign is over already (shut down): nothing is held.
            return Ok(());
        }
        // No answer: the campaign ended meanwhile, holding nothing.
        released.await.unwrap_or(Ok(()))
    }
}

/// The task behind a [`Leadership`]. It holds its manager (as a guard does) for as long as
/// the handle lives: the handle ends it.
struct Campaign {
    locks: LockManager,
    name: String,
    options: LockOptions,
    state: watch::Sender<State>,
    stop: oneshot::Receiver<Reply>,
}

/// What a step of the campaign came to: done, or stopped by the handle (with a reply channel
/// from `step_down`, none when the handle was dropped).
enum Step<T> {
    Done(T),
    Stop(Option<Reply>),
}

impl Campaign {
    async fn run(mut self) {
        let mut backoff = Backoff::connections();
        loop {
            let campaign = self.locks.lock(self.name.clone(), self.options);
            let acquired = match until_stopped(&mut self.stop, campaign).await {
                Step::Done(acquired) => acquired,
                Step::Stop(reply) => {
                    // The campaign's acquire was dropped: whatever it may have taken is
                    // released by its guard's drop.
                    if let Some(reply) = reply {
                        let _ = reply.send(Ok(()));
                    }
                    return;
                }
            };
            match acquired {
                Ok(guard) => {
                    backoff.reset();
                    if !self.lead(guard).await {
                        return;
                    }
                }
                Err(err) if err.is_shut_down() => {
                    self.state.send_modify(|state| state.shut_down = true);
                    return;
                }
                Err(err) => {
                    // Transient failures are waited out inside the acquire; this one may pass
                    // too (a server restarted with another configuration, an ACL fixed).
                    tracing::warn!(name = %self.name, error = %err, "campaign for leadership failed; trying again");
                    let pause = tokio::time::sleep(backoff.pause());
                    if let Step::Stop(reply) = until_stopped(&mut self.stop, pause).await {
                        if let Some(reply) = reply {
                            let _ = reply.send(Ok(()));
                        }
                        return;
                    }
                }
            }
        }
    }

    /// One term: holds `guard` until its lease is lost (then returns true: campaign again) or
    /// the handle stops the campaign (then releases it and returns false).
    async fn lead(&mut self, guard: LockGuard) -> bool {
        let lease = guard.lease().clone();
        let fencing_token = guard.fencing_token();
        self.state.send_modify(|state| {
            state.term += 1;
            state.lease = Some(lease);
        });
        tracing::info!(name = %self.name, fencing_token, "elected leader");
        match until_stopped(&mut self.stop, guard.lost()).await {
            Step::Stop(reply) => {
                // Not leader any more before anyone else can be.
                self.state.send_modify(|state| state.lease = None);
                let released = match guard.release().await {
                    // Shutdown released it already: stepping down found nothing to do.
                    Err(LockError::LeaseLost {
                        reason: LostReason::ShutDown,
                        ..
                    }) => Ok(()),
                    released => released,
                };
                match reply {
                    Some(reply) => {
                        let _ = reply.send(released);
                    }
                    None => {
                        if let Err(err) = released {
                            tracing::warn!(name = %self.name, error = %err, "stepping down did not release the leadership");
                        }
                    }
                }
                tracing::info!(name = %self.name, fencing_token, "stepped down");
                false
            }
            Step::Done(reason) => {
                self.state.send_modify(|state| {
                    state.lease = None;
                    state.last_loss = Some(reason);
                    state.lost_term = state.term;
                });
                // Whatever is left of it (most likely nothing) goes back in the background.
                drop(guard);
                if reason == LostReason::ShutDown || self.locks.is_shut_down() {
                    self.state.send_modify(|state| state.shut_down = true);
                    return false;
                }
                tracing::warn!(name = %self.name, fencing_token, %reason, "leadership lost; campaigning again");
                true
            }
        }
    }
}

/// Why term `term`, whose lease is `lease`, ended: as the campaign recorded it, else as the
/// lease shows it.
fn why_ended(term: u64, lease: &Lease, now: &State) -> LostReason {
    match now.last_loss {
        Some(reason) if now.lost_term == term => reason,
        _ => lease.not_held_reason().unwrap_or(LostReason::NotOwner),
    }
}

/// Runs `work` unless the handle stops the campaign first.
async fn until_stopped<F: Future>(stop: &mut oneshot::Receiver<Reply>, work: F) -> Step<F::Output> {
    tokio::select! {
        biased;
        request = stop => Step::Stop(request.ok()),
        done = work => Step::Done(done),
    }
}
