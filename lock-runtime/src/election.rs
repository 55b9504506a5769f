//! Leader election: of all the processes that campaign for a name, one leads at a time.
//!
//! Leading is holding the lock of that name: a campaign is a lock acquisition that waits (woken
//! by the holder's release, or at its lease's expiry), a term is one holding of the lock, kept
//! by the watchdog and ended by a lost lease, and the term's fencing token is the lock's. One
//! task per [`Leadership`] campaigns, leads, and campaigns again after a loss; the handle reads
//! its state through a `watch` channel and steers it (step down, resign) through a channel of
//! commands, whose drop stops it.
//!
//! Where the store keeps records (`record.rs`), each campaign records itself (who, where, its
//! priority, its term while it leads): that is how candidates are listed, how a winner sees a
//! live candidate of higher priority to give way to, and what [`LockManager::leader`] adds to
//! the lock. A winner announces its term, and a leader that lets go the end of it, where the
//! store carries notices, for [`LeaderWatch`]es (`watch.rs`). A saved [`Term`] is taken up again
//! by one renewal under its owner token (`term.rs`).

mod record;
mod term;
mod watch;

use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::runtime::Handle;
use tokio::sync::{mpsc, oneshot, watch as state_watch};

use crate::backoff::Backoff;
use crate::error::{LockError, LostReason};
use crate::guard::LockGuard;
use crate::lease::Lease;
use crate::manager::LockManager;
use crate::options::LockOptions;
use crate::store::{HolderId, Notice, NoticeKind, StoreError};
use record::{Record, TermRecord, now_ms};
pub use term::Term;
pub use watch::{Candidate, ElectionInfo, LeaderInfo, LeaderWatch};

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
    priority: u32,
    grace: Option<Duration>,
    lock_delay: Option<Duration>,
}

impl Default for ElectionOptions {
    fn default() -> Self {
        Self::new()
    }
}

impl ElectionOptions {
    /// The default lease: 15 s, the longest a crashed leader keeps the others waiting.
    pub const DEFAULT_TTL: Duration = Duration::from_secs(15);

    /// Defaults: ttl 15 s, no metrics label, priority 0, a grace of `ttl / 3`.
    pub const fn new() -> Self {
        ElectionOptions {
            ttl: Self::DEFAULT_TTL,
            label: None,
            priority: 0,
            grace: None,
            lock_delay: None,
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

    /// The campaign's preference, honoured whenever the leadership changes hands (a release,
    /// a resignation, an expiry): a campaign that wins while a live candidate of higher
    /// priority campaigns gives the lock back unused (before anyone is told it leads) and lets
    /// that one win, waiting at most the [`grace`](Self::grace) for someone to take it; then
    /// it keeps its next win. So the highest live priority wins each change of hands, and a
    /// candidate of higher priority that died (its record stands up to `ttl` after its last
    /// write) delays the change by about one grace (one per candidate that gives way to it, at
    /// worst). A sitting leader is never preempted:
    /// a candidate of higher priority that arrives waits for the next change. Equal
    /// priorities do not defer to each other. Default 0.
    ///
    /// Needs the candidates' records: refused (by [`LockManager::elect`]) above 0 on a store
    /// that keeps none (a store of your own without
    /// [`Store::waits`](crate::store::Store::waits)).
    pub const fn priority(mut self, priority: u32) -> Self {
        self.priority = priority;
        self
    }

    /// The election's lock-delay (see [`LockOptions::lock_delay`]): after a term lost without a
    /// release (the leader crashed, paused past its lease, or was cut off), nobody is elected
    /// for `delay` more, so a leader that was only paused cannot act beside its successor for
    /// as long as the pause is shorter than the delay. A term ended by
    /// [`step_down`](Leadership::step_down), [`resign`](Leadership::resign) or a shutdown
    /// hands over at once. This is the guard for a leader whose work cannot carry the term's
    /// fencing token; it delays every failover after a crash by `delay`. Default: the
    /// manager's ([`LockManagerBuilder::lock_delay`](crate::LockManagerBuilder::lock_delay)).
    ///
    /// ```
    /// use std::time::Duration;
    /// use lock_runtime::ElectionOptions;
    ///
    /// const PRINTER: ElectionOptions = ElectionOptions::new()
    ///     .ttl(Duration::from_secs(5))
    ///     .lock_delay(Duration::from_secs(15));
    /// assert_eq!(PRINTER.lock_delay_value(), Some(Duration::from_secs(15)));
    /// ```
    pub const fn lock_delay(mut self, delay: Duration) -> Self {
        self.lock_delay = Some(delay);
        self
    }

    /// The lock-delay, if set here.
    pub const fn lock_delay_value(&self) -> Option<Duration> {
        self.lock_delay
    }

    /// How long a campaign that gave way (to a candidate of higher priority, or after
    /// [`Leadership::resign`]) waits for another to take the leadership before it campaigns
    /// (and keeps its win) again. Default `ttl / 3`.
    pub const fn grace(mut self, grace: Duration) -> Self {
        self.grace = Some(grace);
        self
    }

    /// The lease length.
    pub const fn ttl_value(&self) -> Duration {
        self.ttl
    }

    /// The priority.
    pub const fn priority_value(&self) -> u32 {
        self.priority
    }

    /// The grace (`ttl / 3` unless set).
    pub const fn grace_value(&self) -> Duration {
        match self.grace {
            Some(grace) => grace,
            None => Duration::from_nanos((self.ttl.as_nanos() / 3) as u64),
        }
    }

    /// The metrics label, if any.
    pub const fn label_value(&self) -> Option<&'static str> {
        self.label
    }

    /// The lock a campaign takes: it waits as long as it takes, renewed while held.
    const fn lock_options(&self) -> LockOptions {
        let mut options = LockOptions::new().ttl(self.ttl).wait(Duration::MAX);
        if let Some(delay) = self.lock_delay {
            options = options.lock_delay(delay);
        }
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
        self.campaign(name.into(), options, None)
    }

    /// Campaigns as [`elect`](Self::elect) does, first taking up `term`, a term this
    /// election's leader saved ([`Leadership::current_term`], [`Term::to_secret_text`]) before
    /// its process stopped: if the term's owner token still holds the election's lock (its
    /// lease has not run out, nobody took it), the campaign leads again at once with the
    /// term's fencing token, no new token, and nobody else can have led in between; if not,
    /// it campaigns as `elect` does and a win has a new, greater token.
    ///
    /// Taking up the term is one renewal of the lock under the saved owner token, checked by
    /// the store (as the watchdog's renewals are), on every store. It must come before the
    /// lease ends: a restart slower than the ttl campaigns anew. Two processes resuming the
    /// same term would both lead it: resume a term in the one process that replaces its
    /// leader.
    ///
    /// Errors as `elect`, and [`LockError::Config`] for a priority on a store that keeps no
    /// records.
    pub fn resume_election(
        &self,
        term: &Term,
        options: ElectionOptions,
    ) -> Result<Leadership, LockError> {
        self.campaign(term.name().to_owned(), options, Some(term.clone()))
    }

    fn campaign(
        &self,
        name: String,
        options: ElectionOptions,
        resume: Option<Term>,
    ) -> Result<Leadership, LockError> {
        let lock_options = options.lock_options();
        lock_options.validate()?;
        crate::key::Key::lock("", &name)?;
        if self.is_shut_down() {
            return Err(LockError::ShutDown { key: name });
        }
        let backend = &self.client().backend;
        if options.priority > 0 && !backend.keeps_waits() {
            let what = format!("a priority of `{}`", name.escape_debug());
            return Err(record::not_kept(&**backend, &what));
        }
        let background = self.background();
        if background.pinned().is_none() && Handle::try_current().is_err() {
            return Err(LockError::Config(format!(
                "elect(`{}`) was called outside a tokio runtime: call it from within one, or \
                 pin the manager's background work with LockManagerBuilder::runtime",
                name.escape_debug()
            )));
        }
        let (state, watched) = state_watch::channel(State::default());
        let (commands, received) = mpsc::unbounded_channel();
        let campaign = Campaign {
            locks: self.clone(),
            name: name.clone(),
            options: lock_options,
            election: options,
            state,
            commands: received,
            record: Arc::new(Kept {
                record: Mutex::new(self.record_of(&name, options.priority)),
                turn: tokio::sync::Mutex::new(()),
            }),
            resume,
            keep_next_win: false,
        };
        background.spawn(campaign.run());
        Ok(Leadership {
            name,
            backend: self.backend().to_owned(),
            locks: self.clone(),
            state: watched,
            reported: std::sync::Mutex::new(None),
            commands,
        })
    }

    /// A new campaign's record: who campaigns (unless holder metadata is off), from now.
    fn record_of(&self, name: &str, priority: u32) -> Record {
        let inner = self.client();
        let id = format!("{:016x}", uuid::Uuid::new_v4().as_u64_pair().0);
        let (host, pid, app) = if inner.holder_metadata {
            (
                gethostname::gethostname().into_string().ok(),
                Some(std::process::id()),
                inner.app_name.clone(),
            )
        } else {
            (None, None, None)
        };
        Record {
            id,
            election: name.to_owned(),
            priority,
            since_ms: now_ms(),
            until_ms: 0,
            host,
            pid,
            app,
            resigned: false,
            term: None,
        }
    }
}

/// A campaign for a leadership, started by [`LockManager::elect`]: whether this process leads,
/// futures for becoming leader and for losing it, and the fencing token of the current term.
/// It steers the campaign too: [`resign`](Leadership::resign) hands the leadership on and
/// campaigns on, [`step_down`](Leadership::step_down) stops; [`leader`](Leadership::leader)
/// and [`candidates`](Leadership::candidates) read the election, and
/// [`current_term`](Leadership::current_term) gives the term to save for a restart.
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
    /// Its manager, for reading the election.
    locks: LockManager,
    state: state_watch::Receiver<State>,
    /// The term whose token [`elected`](Leadership::elected) returned last, and its lease:
    /// the term [`deposed`](Leadership::deposed) reports the end of.
    reported: std::sync::Mutex<Option<(u64, Arc<Lease>)>>,
    /// Where `step_down` and `resign` steer the campaign; dropped with the handle, which stops
    /// the campaign.
    commands: mpsc::UnboundedSender<Command>,
}

/// Where the campaign says whether stepping down (or resigning) released the lock.
type Reply = oneshot::Sender<Result<(), LockError>>;

/// What the handle asks of its campaign.
enum Command {
    /// Stop campaigning, releasing a term in progress.
    StepDown(Reply),
    /// End the term in progress and go on campaigning.
    Resign(Reply),
}

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
    fn campaign_gone(&self, state: &state_watch::Receiver<State>) -> LockError {
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
        self.command(Command::StepDown).await
    }

    /// Ends the current term, if this handle leads, and goes on campaigning: the lock is
    /// released (and the server's confirmation awaited, as for
    /// [`step_down`](Self::step_down)), the end of the term is announced, and the campaign
    /// gives way: it waits until another candidate leads, or the
    /// [`grace`](ElectionOptions::grace) passes, before it campaigns again, and meanwhile no
    /// candidate defers to its priority. Another candidate that campaigns wins at once; with
    /// none, this one may win again after the grace, with a new term and token. Nothing to do
    /// (`Ok`) when this handle does not lead.
    ///
    /// [`deposed`](Self::deposed) reports the resigned term's end as
    /// [`LostReason::NotOwner`].
    ///
    /// Errors as [`step_down`](Self::step_down).
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
    /// first.resign().await?;
    /// assert!(second.elected().await? > token); // the other candidate leads now
    /// assert!(!first.is_leader()); // and the first still campaigns
    /// # Ok(())
    /// # }
    /// ```
    pub async fn resign(&self) -> Result<(), LockError> {
        self.command(Command::Resign).await
    }

    async fn command(&self, command: impl FnOnce(Reply) -> Command) -> Result<(), LockError> {
        let (reply, released) = oneshot::channel();
        if self.commands.send(command(reply)).is_err() {
            // The campaign is over already (shut down): nothing is held.
            return Ok(());
        }
        // No answer: the campaign ended meanwhile, holding nothing.
        released.await.unwrap_or(Ok(()))
    }

    /// The current term as it can be saved, while this handle leads: what a restarted process
    /// gives [`LockManager::resume_election`] to lead on with the same fencing token. Save it
    /// again at each new term (its token changes). Its text is a secret: see [`Term`].
    pub fn current_term(&self) -> Option<Term> {
        self.current()
            .map(|lease| Term::new(&self.name, lease.fencing_token(), lease.token))
    }

    /// Who leads this election now, as [`LockManager::leader`] reads it (this process or
    /// another).
    pub async fn leader(&self) -> Result<Option<LeaderInfo>, LockError> {
        self.locks.leader(&self.name).await
    }

    /// Who campaigns for this election now, this handle included, as
    /// [`LockManager::candidates`] reads them.
    pub async fn candidates(&self) -> Result<Vec<Candidate>, LockError> {
        self.locks.candidates(&self.name).await
    }
}

/// The task behind a [`Leadership`]. It holds its manager (as a guard does) for as long as
/// the handle lives: the handle ends it.
struct Campaign {
    locks: LockManager,
    name: String,
    options: LockOptions,
    election: ElectionOptions,
    state: state_watch::Sender<State>,
    commands: mpsc::UnboundedReceiver<Command>,
    /// Its record (where the store keeps records), shared with the task that writes it again
    /// every `ttl / 3`.
    record: Arc<Kept>,
    /// A saved term to take up before campaigning.
    resume: Option<Term>,
    /// It gave way and nobody took the leadership within the grace: its next win is kept
    /// whatever priorities the records show.
    keep_next_win: bool,
}

/// What a step of the campaign came to: done, stopped by the handle (with a reply channel
/// from `step_down`, none when the handle was dropped), or a resignation.
enum Step<T> {
    Done(T),
    Stop(Option<Reply>),
    Resign(Reply),
}

impl Campaign {
    async fn run(mut self) {
        self.keep_record();
        if let Some(term) = self.resume.take() {
            let adopt = term::adopt(self.locks.client(), &term, self.options);
            match until_stopped(&mut self.commands, false, adopt).await {
                Step::Done(Ok(Some(guard))) => {
                    tracing::info!(name = %self.name, fencing_token = term.fencing_token(), "resumed the saved term");
                    if !self.lead(guard).await {
                        return;
                    }
                }
                Step::Done(Ok(None)) => {
                    tracing::info!(name = %self.name, "the saved term has ended; campaigning anew");
                }
                Step::Done(Err(err)) => {
                    if err.is_shut_down() {
                        self.state.send_modify(|state| state.shut_down = true);
                        return;
                    }
                    tracing::warn!(name = %self.name, error = %err, "resuming the saved term failed; campaigning anew");
                }
                Step::Stop(reply) => return answer(reply, Ok(())),
                Step::Resign(reply) => answer(Some(reply), Ok(())),
            }
        }
        self.campaign().await;
    }

    async fn campaign(mut self) {
        let mut backoff = Backoff::connections();
        loop {
            let campaign = self.locks.lock(self.name.clone(), self.options);
            let acquired = match until_stopped(&mut self.commands, false, campaign).await {
                Step::Done(acquired) => acquired,
                Step::Stop(reply) => {
                    // The campaign's acquire was dropped: whatever it may have taken is
                    // released by its guard's drop.
                    return answer(reply, Ok(()));
                }
                Step::Resign(reply) => return answer(Some(reply), Ok(())),
            };
            match acquired {
                Ok(guard) => {
                    backoff.reset();
                    if self.defers().await {
                        // Given back unused, before anyone was told this one leads.
                        if let Err(err) = guard.release().await {
                            tracing::debug!(name = %self.name, error = %err, "giving way: the release failed");
                        }
                        if !self.give_way().await {
                            return;
                        }
                        continue;
                    }
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
                    if let Step::Stop(reply) = until_stopped(&mut self.commands, false, pause).await
                    {
                        return answer(reply, Ok(()));
                    }
                }
            }
        }
    }

    /// One term: holds `guard` until its lease is lost or it resigns (then returns true:
    /// campaign again) or the handle stops the campaign (then releases it and returns false).
    async fn lead(&mut self, guard: LockGuard) -> bool {
        let lease = guard.lease().clone();
        let fencing_token = guard.fencing_token();
        self.begin_term(&lease).await;
        self.state.send_modify(|state| {
            state.term += 1;
            state.lease = Some(lease);
        });
        tracing::info!(name = %self.name, fencing_token, "elected leader");
        match until_stopped(&mut self.commands, true, guard.lost()).await {
            Step::Stop(reply) => {
                // Not leader any more before anyone else can be.
                self.state.send_modify(|state| state.lease = None);
                let released = let_go(guard).await;
                self.end_term(false).await;
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
            Step::Resign(reply) => {
                self.state.send_modify(|state| {
                    state.lease = None;
                    state.last_loss = Some(LostReason::NotOwner);
                    state.lost_term = state.term;
                });
                let released = let_go(guard).await;
                self.end_term(true).await;
                let _ = reply.send(released);
                tracing::info!(name = %self.name, fencing_token, "resigned the leadership");
                let going_on = self.give_way().await;
                self.record().resigned = false;
                self.write_record().await;
                going_on
            }
            Step::Done(reason) => {
                self.state.send_modify(|state| {
                    state.lease = None;
                    state.last_loss = Some(reason);
                    state.lost_term = state.term;
                });
                // Whatever is left of it (most likely nothing) goes back in the background.
                drop(guard);
                self.end_term(false).await;
                if reason == LostReason::ShutDown || self.locks.is_shut_down() {
                    self.state.send_modify(|state| state.shut_down = true);
                    return false;
                }
                tracing::warn!(name = %self.name, fencing_token, %reason, "leadership lost; campaigning again");
                true
            }
        }
    }

    fn record(&self) -> std::sync::MutexGuard<'_, Record> {
        self.record.record()
    }

    /// Whether the store keeps the candidates' records.
    fn keeps_records(&self) -> bool {
        self.locks.client().backend.keeps_waits()
    }

    /// Writes the campaign's record now, and starts the task that writes it again every
    /// `ttl / 3` and removes it when the campaign ends.
    fn keep_record(&self) {
        if !self.keeps_records() {
            return;
        }
        let record = self.record.clone();
        let locks = self.locks.clone();
        let ttl = self.election.ttl;
        let mut ended = self.state.subscribe();
        self.locks.background().spawn(async move {
            loop {
                write_record(&locks, &record, ttl).await;
                let pause = tokio::time::sleep(ttl / 3);
                tokio::pin!(pause);
                loop {
                    tokio::select! {
                        () = &mut pause => break,
                        changed = ended.changed() => if changed.is_err() {
                            let _turn = record.turn.lock().await;
                            let id = record.record().id.clone();
                            let inner = locks.client();
                            let removed = StoreError::within(
                                inner.request_timeout,
                                record::remove(&*inner.backend, &inner.prefix, &id),
                            )
                            .await;
                            if removed.is_err() {
                                tracing::debug!("an election's record was left to expire");
                            }
                            return;
                        },
                    }
                }
            }
        });
    }

    async fn write_record(&self) {
        if self.keeps_records() {
            write_record(&self.locks, &self.record, self.election.ttl).await;
        }
    }

    /// A term won: recorded (so that readers of the leader find it), then announced.
    async fn begin_term(&self, lease: &Lease) {
        let holder = HolderId::of_token(lease.token());
        self.record().term = Some(TermRecord {
            holder: crate::protocol::holder_hex(holder.get()),
            fence: lease.fencing_token(),
            elected_ms: now_ms(),
        });
        self.write_record().await;
        let text = self.record().format();
        self.announce(Some(holder), text).await;
    }

    /// The term ended (`resigned`: by a resignation): recorded, and announced.
    async fn end_term(&self, resigned: bool) {
        {
            let mut record = self.record();
            record.term = None;
            record.resigned = resigned;
        }
        self.write_record().await;
        self.announce(None, String::new()).await;
    }

    /// Tells the election's watchers of a new term (`holder`: its id) or of the end of one
    /// (`None`), where the store carries notices.
    async fn announce(&self, holder: Option<HolderId>, text: String) {
        let inner = self.locks.client();
        if !inner.backend.announces() {
            return;
        }
        let Ok(key) = crate::key::Key::lock(&inner.prefix, &self.name) else {
            return;
        };
        let notice = Notice::new(NoticeKind::Leader, key.name(), holder, text);
        let told = StoreError::within(inner.request_timeout, inner.backend.announce(&notice)).await;
        if told.is_err() {
            tracing::debug!(name = %self.name, "the leadership change was not announced; watchers read the lock");
        }
    }

    /// Whether this win goes to a live candidate of higher priority instead: one campaigns
    /// (it does not lead by its record, and has not resigned). Not after a grace that nobody
    /// took the leadership in.
    async fn defers(&mut self) -> bool {
        if std::mem::take(&mut self.keep_next_win) || self.election.priority == u32::MAX {
            return false;
        }
        if !self.keeps_records() {
            return false;
        }
        let Ok(records) = self.locks.records(&self.name).await else {
            return false;
        };
        let id = self.record().id.clone();
        let higher = records.iter().find(|record| {
            record.election == self.name
                && record.id != id
                && !record.resigned
                && record.term.is_none()
                && record.priority > self.election.priority
        });
        if let Some(higher) = higher {
            tracing::info!(name = %self.name, priority = self.election.priority, to = higher.priority, "giving way to a candidate of higher priority");
        }
        higher.is_some()
    }

    /// Waits until another candidate leads, or the grace passes (then the next win is kept).
    /// False if the handle stopped the campaign meanwhile.
    async fn give_way(&mut self) -> bool {
        let taken = someone_leads(&self.locks, &self.name, self.election.grace_value());
        match until_stopped(&mut self.commands, false, taken).await {
            Step::Done(taken) => {
                self.keep_next_win = !taken;
                true
            }
            Step::Stop(reply) => {
                answer(reply, Ok(()));
                false
            }
            Step::Resign(reply) => {
                answer(Some(reply), Ok(()));
                true
            }
        }
    }
}

/// A campaign's record, shared by the campaign and the task that writes it again every
/// `ttl / 3`.
struct Kept {
    record: Mutex<Record>,
    /// Held across each write: one write at a time, each of the record as it stands when its
    /// turn comes, so a refresh that read the record before a win cannot land after the win's
    /// write and erase its term.
    turn: tokio::sync::Mutex<()>,
}

impl Kept {
    fn record(&self) -> std::sync::MutexGuard<'_, Record> {
        self.record.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Writes the campaign's record as it stands now, to stand for `ttl` from now, after any write
/// of it still under way.
async fn write_record(locks: &LockManager, kept: &Kept, ttl: Duration) {
    let _turn = kept.turn.lock().await;
    let now = {
        let mut record = kept.record();
        record.until_ms =
            now_ms().saturating_add(u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX));
        record.clone()
    };
    let inner = locks.client();
    let written = StoreError::within(
        inner.request_timeout,
        record::write(&*inner.backend, &inner.prefix, &now, Vec::new()),
    )
    .await;
    if written.is_err() {
        tracing::debug!(name = %now.election, "an election's record was not written; it is written again at the next tick");
    }
}

/// Whether a leader of election `name` appears within `within` (see
/// `LockManager::has_leader`: a winner that gives way too does not count, or two candidates
/// giving way to one that cannot win would each see the other and give way forever): read at
/// once, then at each leader announcement and every 50 ms.
async fn someone_leads(locks: &LockManager, name: &str, within: Duration) -> bool {
    let mut announced = locks.client().notices.leaders();
    let deadline = tokio::time::Instant::now() + within;
    loop {
        if let Ok(true) = locks.has_leader(name).await {
            return true;
        }
        let now = tokio::time::Instant::now();
        if now >= deadline {
            return false;
        }
        let pause = (deadline - now).min(Duration::from_millis(50));
        tokio::select! {
            () = tokio::time::sleep(pause) => {}
            _ = announced.recv() => {}
        }
    }
}

/// Releases a term's lock, as stepping down does.
async fn let_go(guard: LockGuard) -> Result<(), LockError> {
    match guard.release().await {
        // Shutdown released it already: stepping down found nothing to do.
        Err(LockError::LeaseLost {
            reason: LostReason::ShutDown,
            ..
        }) => Ok(()),
        released => released,
    }
}

/// Answers a step down or resignation, if one asked.
fn answer(reply: Option<Reply>, result: Result<(), LockError>) {
    if let Some(reply) = reply {
        let _ = reply.send(result);
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

/// Runs `work` unless the handle stops the campaign first, or (where `resignable`) resigns; a
/// resignation that is not for this step is answered at once (nothing to resign).
async fn until_stopped<F: Future>(
    commands: &mut mpsc::UnboundedReceiver<Command>,
    resignable: bool,
    work: F,
) -> Step<F::Output> {
    tokio::pin!(work);
    loop {
        tokio::select! {
            biased;
            command = commands.recv() => match command {
                None => return Step::Stop(None),
                Some(Command::StepDown(reply)) => return Step::Stop(Some(reply)),
                Some(Command::Resign(reply)) if resignable => return Step::Resign(reply),
                Some(Command::Resign(reply)) => {
                    let _ = reply.send(Ok(()));
                }
            },
            done = &mut work => return Step::Done(done),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::time::Duration;

    use tokio::sync::Notify;

    use super::*;
    use crate::backend::memory::MemoryBackend;
    use crate::protocol::waits::WaitsUpdate;
    use crate::store::forward::forward;
    use crate::store::{Acquire, Ask, Booking, BoxFuture, Key, Renewal, Store, StoreError};
    use crate::waiters::Waiters;

    /// The memory store where a campaign's first write of its record is slow, as over a
    /// network: its acquire waits for that write to begin, and the write lands only after the
    /// next write of a record has landed (or after a second, when none comes meanwhile).
    #[derive(Default)]
    struct SlowFirstWrite {
        writes: AtomicUsize,
        first_begun: Notify,
        next_landed: Notify,
        first_landed: AtomicBool,
        landed: Notify,
    }

    struct Slowed {
        inner: Arc<dyn Store>,
        slow: Arc<SlowFirstWrite>,
    }

    impl Store for Slowed {
        forward!(inner; announces, announce, steals, steal, describe, server, gate, fair,
            supports, leave, release, release_lease, hands_off, hand_off, notifies, attach,
            watch, unwatch, keeps_waits, retry_with_same_token, inspect);

        fn acquire<'a>(
            &'a self,
            key: &'a Key,
            token: &'a str,
            ttl: Duration,
            ask: Ask,
        ) -> BoxFuture<'a, Result<Acquire, StoreError>> {
            Box::pin(async move {
                let begun = self.slow.first_begun.notified();
                let _ = tokio::time::timeout(Duration::from_secs(1), begun).await;
                self.inner.acquire(key, token, ttl, ask).await
            })
        }

        fn renew<'a>(&'a self, batch: &'a [Renewal], book: Booking<'a>) -> BoxFuture<'a, ()> {
            self.inner.renew(batch, book)
        }

        fn waits<'a>(
            &'a self,
            key: &'a str,
            update: &'a WaitsUpdate,
        ) -> BoxFuture<'a, Result<Vec<(String, String)>, StoreError>> {
            Box::pin(async move {
                if update.set().is_empty() {
                    return self.inner.waits(key, update).await;
                }
                let slow = &self.slow;
                if slow.writes.fetch_add(1, Ordering::SeqCst) > 0 {
                    let written = self.inner.waits(key, update).await;
                    slow.next_landed.notify_one();
                    return written;
                }
                slow.first_begun.notify_one();
                let next = slow.next_landed.notified();
                let _ = tokio::time::timeout(Duration::from_secs(1), next).await;
                let written = self.inner.waits(key, update).await;
                slow.first_landed.store(true, Ordering::SeqCst);
                slow.landed.notify_one();
                written
            })
        }
    }

    /// The memory store where the write of a term's record lands `late`, and the acquire says
    /// when it was granted.
    struct LateTerm {
        inner: Arc<dyn Store>,
        late: Duration,
        granted: Notify,
    }

    impl Store for LateTerm {
        forward!(inner; announces, announce, steals, steal, describe, server, gate, fair,
            supports, leave, release, release_lease, hands_off, hand_off, notifies, attach,
            watch, unwatch, keeps_waits, retry_with_same_token, inspect);

        fn acquire<'a>(
            &'a self,
            key: &'a Key,
            token: &'a str,
            ttl: Duration,
            ask: Ask,
        ) -> BoxFuture<'a, Result<Acquire, StoreError>> {
            Box::pin(async move {
                let acquired = self.inner.acquire(key, token, ttl, ask).await;
                self.granted.notify_one();
                acquired
            })
        }

        fn renew<'a>(&'a self, batch: &'a [Renewal], book: Booking<'a>) -> BoxFuture<'a, ()> {
            self.inner.renew(batch, book)
        }

        fn waits<'a>(
            &'a self,
            key: &'a str,
            update: &'a WaitsUpdate,
        ) -> BoxFuture<'a, Result<Vec<(String, String)>, StoreError>> {
            Box::pin(async move {
                if update
                    .set()
                    .iter()
                    .any(|(_, text)| text.contains("elected="))
                {
                    tokio::time::sleep(self.late).await;
                }
                self.inner.waits(key, update).await
            })
        }
    }

    /// A watch that first read the leader in the moment between its win and its record (so
    /// from the lock alone) tells it again, in full, once the record is written.
    #[tokio::test(start_paused = true)]
    async fn a_watch_that_read_the_leader_before_its_record_tells_it_again_with_it() {
        let store = Arc::new(LateTerm {
            inner: Arc::new(MemoryBackend::new(Arc::new(Waiters::default()))),
            late: Duration::from_secs(3),
            granted: Notify::new(),
        });
        let locks = LockManager::builder()
            .store(store.clone())
            .build()
            .await
            .expect("manager");
        let leadership = locks
            .elect("jobs", ElectionOptions::new())
            .expect("campaign");
        store.granted.notified().await;
        let mut watch = locks.observe("jobs").await.expect("watch");
        let first = watch.leader().cloned().expect("the lock's holder");
        let token = leadership.elected().await.expect("elected");
        let told = tokio::time::timeout(Duration::from_secs(60), watch.changed())
            .await
            .expect("told again once the record is written")
            .expect("a leader");
        assert_eq!(told.holder_id, first.holder_id);
        assert_eq!(told.fencing_token, Some(token));
        assert_eq!(
            Some(&told),
            locks.leader("jobs").await.expect("read").as_ref()
        );
        leadership.step_down().await.expect("stepped down");
    }

    /// A refresh of the record that read it before the win must not land after the win's
    /// write: it would erase the term, and nobody would lead by the records until the next
    /// refresh.
    #[tokio::test(start_paused = true)]
    async fn a_slow_write_of_the_record_from_before_the_win_does_not_erase_the_term() {
        let slow = Arc::new(SlowFirstWrite::default());
        let store: Arc<dyn Store> = Arc::new(Slowed {
            inner: Arc::new(MemoryBackend::new(Arc::new(Waiters::default()))),
            slow: slow.clone(),
        });
        let locks = LockManager::builder()
            .store(store)
            .build()
            .await
            .expect("manager");
        let leadership = locks
            .elect("jobs", ElectionOptions::new())
            .expect("campaign");
        leadership.elected().await.expect("elected");
        while !slow.first_landed.load(Ordering::SeqCst) {
            slow.landed.notified().await;
        }
        let candidates = locks.candidates("jobs").await.expect("read");
        assert_eq!(candidates.len(), 1);
        assert!(candidates[0].leading, "{candidates:?}");
        assert!(locks.has_leader("jobs").await.expect("read"));
        leadership.step_down().await.expect("stepped down");
    }

    /// A giving-way winner holds the lock without a term record, as a plain holder does: it
    /// must not count as a leader, or candidates giving way to one that cannot win would see
    /// each other's brief holds and give way forever.
    #[tokio::test]
    async fn a_holder_without_a_term_record_is_no_leader() {
        let locks = LockManager::memory();
        let plain = locks.lock("jobs", LockOptions::new()).await.expect("free");
        assert!(!locks.has_leader("jobs").await.expect("read"));
        plain.release().await.expect("released");
        let leadership = locks
            .elect("jobs", ElectionOptions::new())
            .expect("campaign");
        leadership.elected().await.expect("elected");
        // The record is written right after the win.
        let read = async {
            while !locks.has_leader("jobs").await.expect("read") {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        };
        tokio::time::timeout(Duration::from_secs(20), read)
            .await
            .expect("the leader's record");
        leadership.step_down().await.expect("stepped down");
    }
}
