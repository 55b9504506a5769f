//! Deterministic lock faults for your own tests (Cargo feature `testing`).
//!
//! ```toml
//! [dev-dependencies]
//! lock-runtime = { path = "../lock-runtime/lock-runtime", features = ["testing"] }
//! ```
//!
//! A [`TestLocks`] is a lock deployment for one test: an in-memory table of its own (so tests
//! running side by side never meet), or a real server ([`TestLocks::over_url`]), seen through a
//! fault layer that answers as the test scripts it and records everything that passes. The code
//! under test takes its locks as usual, through [`TestLocks::manager`], or through
//! `#[distributed_lock]` without `manager = ...` inside [`TestLocks::scope`]:
//!
//! ```
//! use std::time::Duration;
//! use lock_runtime::testing::{Fault, TestLocks};
//! use lock_runtime::{LockError, distributed_lock};
//!
//! #[distributed_lock(key = "order:<user_id>", wait = "5s")]
//! async fn place_order(user_id: u64) -> Result<u64, LockError> {
//!     Ok(lock_runtime::current().map_or(0, |lock| lock.fencing_token()))
//! }
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() {
//! // In a test: #[tokio::test(start_paused = true)]
//! let kit = TestLocks::new();
//! // Busy for longer than the 5 s the call waits: it gives up with LockError::Busy.
//! kit.on("order:<user_id>").busy(u32::MAX, Duration::from_secs(30));
//! let err = kit.scope(place_order(7)).await.expect_err("busy");
//! assert!(err.is_busy());
//!
//! // Then a dropped connection, which a call that waits rides out.
//! kit.clear_faults();
//! kit.on("order:7").fail_acquires(1, Fault::Transient);
//! let token = kit.scope(place_order(7)).await.expect("the retry takes the lock");
//! kit.assert_acquired_in_order(&["order:7"]);
//! kit.assert_not_held("order:7");
//! assert_eq!(kit.fencing_tokens("order:7"), vec![token]);
//! # }
//! ```
//!
//! # Faults
//!
//! Scripted with [`TestLocks::on`] for an exact key, a glob (`order:*`) or an attribute's key
//! template (`order:<user_id>`, whose placeholders match anything), in the order they are
//! scripted: `kit.on("k").busy(2, ttl).fail_acquires(1, Fault::Transient)` answers busy twice,
//! then fails once, then lets acquires through.
//!
//! | script | what the code under test sees |
//! |---|---|
//! | [`busy(n, remaining)`](Script::busy) | the next `n` acquires find the lock held for `remaining` more: [`LockError::Busy`] once `wait` is spent |
//! | [`fail_acquires(n, fault)`](Script::fail_acquires) | the next `n` acquires fail: [`LockError::Backend`], retried within `wait` when [`Fault::Transient`] |
//! | [`lose_lease_now(reason)`](Script::lose_lease_now) | every held lease of the key is lost at once: its guard's [`lost()`](crate::LockGuard::lost) fires, a locked section aborts with [`LockError::LeaseLost`], and the lock is free for others |
//! | [`lose_lease_at_next_renewal(reason)`](Script::lose_lease_at_next_renewal) | the same, at the watchdog's next renewal of a lease of the key |
//! | [`slow_releases(delay)`](Script::slow_releases) | every release waits `delay` first (beyond the request timeout: a release that times out) |
//! | [`fail_releases(n, fault)`](Script::fail_releases) | the next `n` releases fail: [`LockError::Backend`] from `release()`; with `u32::MAX` the lock stays until its lease runs out |
//! | [`pause_next_acquire()`](Script::pause_next_acquire) | the next acquire waits at a [`Gate`] until the test opens it, however long (neither its request timeout nor its lease runs meanwhile): a point in the middle of the code under test |
//! | [`TestLocks::phantom_holder`] | another instance holds the key for a while, with a [`Holder`] and a fencing token of its own |
//!
//! Busy answers, failures, pauses and slow releases are simulated at the client: the request
//! never reaches the deployment (a failed release leaves the lock in place, as a release lost
//! on the way does). Lost leases and phantom holders are real: a lost lease is taken off the
//! deployment, so others can take it, and a phantom holder is a real acquire under an owner
//! token of its own. Over a real server the phantom's stored value carries this process's host
//! and pid (the [`Holder`] is what the kit reports).
//!
//! # Time
//!
//! Leases, waits, renewals and retries run on tokio's clock, so under
//! `#[tokio::test(start_paused = true)]` a 30 s lease renewed by its watchdog, or a 5 s wait,
//! take no wall time, and the same script gives the same run. (Over a real server the server's
//! clock does not pause: use real time there.)
//!
//! # Observation
//!
//! [`TestLocks::history`] lists what happened, in order ([`Event`]): acquired (with the fencing
//! token), busy, failed, released, lost. [`TestLocks::held`] says what is held now (a lock
//! released with `hold_at_least` is held until its keep ends, as other instances are told),
//! [`TestLocks::waiters`] how many tasks wait for a key, and the `assert_*` methods check one
//! thing in one line, showing the history when they fail. [`TestLocks::until`] waits for a
//! state (never for time).
//!
//! # The default manager
//!
//! `#[distributed_lock]` without `manager = ...` uses the process-wide default, which tests
//! running side by side cannot share. [`TestLocks::scope`] (or [`with_default`]) makes a manager
//! the default of the future it runs, and of nothing else: a task spawned inside does not
//! inherit it (scope its future too, or pass `manager = ...`).

mod layer;

use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::backend::{Acquire, Ask, Store};
use crate::builder::LockManagerBuilder;
use crate::error::{LockError, LostReason};
use crate::key::Key;
use crate::manager::{LockManager, SCOPED};
use crate::shape::Shape;
use layer::{Action, FaultLayer, Pattern, Shared};

/// Runs `future` with `manager` as the default of `#[distributed_lock]` (without
/// `manager = ...`): in it, [`global_default`](crate::global_default) answers `manager`, before
/// any manager set by [`set_global_default`](crate::set_global_default). Tasks spawned inside
/// do not inherit it.
pub fn with_default<F: Future>(
    manager: &LockManager,
    future: F,
) -> impl Future<Output = F::Output> + use<F> {
    SCOPED.scope(manager.clone(), future)
}

/// A scripted backend failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// One that may pass (a dropped connection, a failover): retried within `wait`, and
    /// [`is_retryable`](LockError::is_retryable).
    Transient,
    /// One that recurs (a refused command, bad credentials): never retried.
    Permanent,
}

/// Who a [phantom holder](TestLocks::phantom_holder) says it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    /// The host it runs on.
    pub host: String,
    /// Its process id.
    pub pid: u32,
    /// Its application name.
    pub app: String,
}

impl Holder {
    /// A holder on `host`, process `pid`, of application `app`.
    pub fn new(host: impl Into<String>, pid: u32, app: impl Into<String>) -> Holder {
        Holder {
            host: host.into(),
            pid,
            app: app.into(),
        }
    }
}

/// One thing that happened to a lock of a [`TestLocks`], in [`TestLocks::history`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Event {
    /// Taken, with this fencing token; by a phantom holder if `phantom`.
    Acquired {
        /// The lock key.
        key: String,
        /// Its fencing token.
        fencing_token: u64,
        /// The phantom holder that took it, if one did.
        phantom: Option<Holder>,
    },
    /// An acquire was answered busy.
    Busy {
        /// The lock key.
        key: String,
        /// How much longer the lock stays busy, as the answer said.
        remaining: Option<Duration>,
        /// Whether the script answered, rather than the deployment.
        scripted: bool,
    },
    /// An acquire or release failed.
    Failed {
        /// The lock key.
        key: String,
        /// `acquire` or `release`.
        operation: &'static str,
        /// Whether the failure may pass ([`Fault::Transient`]).
        retryable: bool,
        /// Whether the script failed it, rather than the deployment.
        scripted: bool,
    },
    /// Released by its holder.
    Released {
        /// The lock key.
        key: String,
        /// The fencing token it was held with.
        fencing_token: u64,
    },
    /// The lease was lost: scripted, or found at a renewal or release.
    Lost {
        /// The lock key.
        key: String,
        /// The fencing token it was held with.
        fencing_token: u64,
        /// Why.
        reason: LostReason,
    },
}

impl Event {
    /// The lock key this event is about.
    pub fn key(&self) -> &str {
        match self {
            Event::Acquired { key, .. }
            | Event::Busy { key, .. }
            | Event::Failed { key, .. }
            | Event::Released { key, .. }
            | Event::Lost { key, .. } => key,
        }
    }
}

impl fmt::Display for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let scripted = |scripted: bool| if scripted { " (scripted)" } else { "" };
        match self {
            Event::Acquired {
                key,
                fencing_token,
                phantom: None,
            } => write!(f, "acquired `{key}`, fencing token {fencing_token}"),
            Event::Acquired {
                key,
                fencing_token,
                phantom: Some(holder),
            } => write!(
                f,
                "acquired `{key}` by phantom holder {}/{}/{}, fencing token {fencing_token}",
                holder.host, holder.pid, holder.app
            ),
            Event::Busy {
                key,
                remaining,
                scripted: by_script,
            } => match remaining {
                Some(remaining) => write!(
                    f,
                    "busy `{key}` for {remaining:?} more{}",
                    scripted(*by_script)
                ),
                None => write!(f, "busy `{key}`, with no expiry{}", scripted(*by_script)),
            },
            Event::Failed {
                key,
                operation,
                retryable,
                scripted: by_script,
            } => {
                let kind = if *retryable { "transient" } else { "permanent" };
                write!(
                    f,
                    "{operation} of `{key}` failed, {kind}{}",
                    scripted(*by_script)
                )
            }
            Event::Released { key, fencing_token } => {
                write!(f, "released `{key}`, fencing token {fencing_token}")
            }
            Event::Lost {
                key,
                fencing_token,
                reason,
            } => write!(f, "lost `{key}` ({fencing_token}): {reason}"),
        }
    }
}

/// A lock held now, in [`TestLocks::held`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Held {
    /// The lock key.
    pub key: String,
    /// Its fencing token.
    pub fencing_token: u64,
    /// The phantom holder that holds it, if one does.
    pub phantom: Option<Holder>,
}

/// Where an acquire stops until the test lets it go ([`Script::pause_next_acquire`]).
#[derive(Debug, Default)]
pub struct Gate {
    reached: AtomicBool,
    opened: AtomicBool,
    changed: Notify,
    /// The task whose acquire the gate holds, once one came to it: its retries come to it
    /// again, while other tasks' acquires pass.
    claimed: Mutex<Option<Option<tokio::task::Id>>>,
}

impl Gate {
    /// Whether the gate holds an acquire made by the current task: the first task to ask claims
    /// it.
    pub(crate) fn claim(&self) -> bool {
        let me = tokio::task::try_id();
        let mut claimed = self.claimed.lock().unwrap_or_else(PoisonError::into_inner);
        match *claimed {
            Some(task) => task == me,
            None => {
                *claimed = Some(me);
                true
            }
        }
    }

    /// Resolves once an acquire waits at the gate.
    pub async fn reached(&self) {
        self.until(&self.reached).await;
    }

    /// Lets the acquire that waits (or the one that comes) go on to the deployment. Until then
    /// the gate stays closed, whatever time passes.
    pub fn open(&self) {
        self.opened.store(true, Ordering::Release);
        self.changed.notify_waiters();
    }

    /// An acquire comes to the gate: waits until it opens.
    pub(crate) async fn arrive(&self) {
        self.reached.store(true, Ordering::Release);
        self.changed.notify_waiters();
        self.until(&self.opened).await;
    }

    /// Resolves once `flag` is set: registered for the next change before looking, so that a
    /// change between the look and the wait is not missed.
    async fn until(&self, flag: &AtomicBool) {
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if flag.load(Ordering::Acquire) {
                return;
            }
            changed.await;
        }
    }
}

/// A lock deployment for one test, with scripted faults and a record of what was taken. See
/// the [module docs](self).
pub struct TestLocks {
    /// The manager whose backend the layer wraps; never used for locks itself.
    base: LockManager,
    layer: Arc<FaultLayer>,
    shared: Arc<Shared>,
    /// Every manager handed out; the first is [`TestLocks::manager`].
    managers: Mutex<Vec<LockManager>>,
}

impl fmt::Debug for TestLocks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TestLocks")
            .field("backend", &self.layer.describe())
            .finish_non_exhaustive()
    }
}

impl Default for TestLocks {
    fn default() -> Self {
        TestLocks::new()
    }
}

impl TestLocks {
    /// A kit over a lock table of its own in this process's memory.
    pub fn new() -> TestLocks {
        TestLocks::around(LockManager::memory())
    }

    /// A kit over the deployment at `url` (`redis://127.0.0.1:7000`): the same scripts
    /// against a real server.
    pub async fn over_url(url: &str) -> Result<TestLocks, LockError> {
        TestLocks::over(LockManager::builder().url(url)).await
    }

    /// A kit over the deployment `builder` connects to, with its settings (key prefix,
    /// timeouts, ...).
    pub async fn over(builder: LockManagerBuilder) -> Result<TestLocks, LockError> {
        Ok(TestLocks::around(builder.build().await?))
    }

    fn around(base: LockManager) -> TestLocks {
        let shared = Arc::new(Shared::default());
        let client = base.client();
        let layer = Arc::new(FaultLayer::new(
            client.backend.clone(),
            shared.clone(),
            client.prefix.clone(),
        ));
        let manager = base.over_backend(layer.clone());
        TestLocks {
            base,
            layer,
            shared,
            managers: Mutex::new(vec![manager]),
        }
    }

    fn managers(&self) -> std::sync::MutexGuard<'_, Vec<LockManager>> {
        self.managers.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The manager the code under test takes its locks through.
    pub fn manager(&self) -> LockManager {
        self.managers()[0].clone()
    }

    /// Another manager on the same deployment, with the same faults: a second instance of the
    /// service, which contends with the first as another process would.
    pub fn instance(&self) -> LockManager {
        let manager = self.base.over_backend(self.layer.clone());
        self.managers().push(manager.clone());
        manager
    }

    /// Runs `future` with [`TestLocks::manager`] as the default of `#[distributed_lock]`
    /// (see [`with_default`]).
    pub fn scope<F: Future>(&self, future: F) -> impl Future<Output = F::Output> + use<F> {
        SCOPED.scope(self.manager(), future)
    }

    /// Scripts faults for the keys `pattern` names: an exact key, a glob (`order:*`) or a key
    /// template (`order:<user_id>`).
    pub fn on(&self, pattern: &str) -> Script<'_> {
        Script {
            kit: self,
            pattern: pattern.to_owned(),
        }
    }

    /// Forgets every scripted fault (what they did stays in the history).
    pub fn clear_faults(&self) {
        self.shared.state().rules.clear();
    }

    /// Makes another instance hold `key` for `ttl` (it never renews), as `holder`: a real
    /// acquire under an owner token of its own. Fails with [`LockError::Busy`] if the lock is
    /// held.
    pub async fn phantom_holder(
        &self,
        key: &str,
        holder: Holder,
        ttl: Duration,
    ) -> Result<Phantom, LockError> {
        let stored = Key::lock(self.layer.prefix(), key)?;
        let token = uuid::Uuid::new_v4().to_string();
        let ask = Ask {
            since_ms: crate::protocol::now_ms(),
            ..Ask::default()
        };
        let inner = self.layer.inner();
        match inner.acquire(&stored, &token, ttl, ask).await {
            Ok(Acquire::Acquired { fence }) => {
                let phantom = Some(holder.clone());
                self.shared
                    .granted(key, &stored, &token, fence, ttl, phantom);
                Ok(Phantom {
                    key: key.to_owned(),
                    stored,
                    token,
                    fencing_token: fence,
                    holder,
                    layer: self.layer.clone(),
                })
            }
            Ok(Acquire::Busy {
                remaining, blocker, ..
            }) => Err(LockError::Busy {
                key: key.to_owned(),
                waited: Duration::ZERO,
                retry_after: remaining,
                blocker,
                deadlock: None,
            }),
            Err(failure) => Err(backend_error(
                "acquire",
                key,
                inner.server(),
                failure,
                &token,
            )),
        }
    }

    /// Everything that happened so far, in order.
    pub fn history(&self) -> Vec<Event> {
        self.shared.state().history.clone()
    }

    /// The locks held now (as far as this deployment saw: a lease that ran out without a
    /// renewal drops out when it would expire on the server), in the order they were taken.
    /// A lock released with [`hold_at_least`](crate::LockOptions::hold_at_least) counts as
    /// held until its keep ends, as the deployment tells other instances it is busy until then
    /// (its release is in the history when its section ended).
    pub fn held(&self) -> Vec<Held> {
        let now = Instant::now();
        let state = self.shared.state();
        let mut held: Vec<_> = state
            .grants
            .values()
            .filter(|grant| grant.expires > now)
            .collect();
        held.sort_by_key(|grant| grant.seq);
        held.into_iter()
            .map(|grant| Held {
                key: grant.key.clone(),
                fencing_token: grant.fence,
                phantom: grant.phantom.clone(),
            })
            .collect()
    }

    /// Whether `key` is held now, by the code under test or a phantom holder, or kept for
    /// `hold_at_least` after its release (see [`held`](TestLocks::held)).
    pub fn is_held(&self, key: &str) -> bool {
        self.held().iter().any(|held| held.key == key)
    }

    /// The keys taken by the code under test (not by phantom holders), in order.
    pub fn acquired(&self) -> Vec<String> {
        self.shared
            .state()
            .history
            .iter()
            .filter_map(|event| match event {
                Event::Acquired {
                    key, phantom: None, ..
                } => Some(key.clone()),
                _ => None,
            })
            .collect()
    }

    /// The fencing tokens `key` was taken with, in order (by phantom holders too).
    pub fn fencing_tokens(&self, key: &str) -> Vec<u64> {
        self.shared
            .state()
            .history
            .iter()
            .filter_map(|event| match event {
                Event::Acquired {
                    key: taken,
                    fencing_token,
                    ..
                } if taken == key => Some(*fencing_token),
                _ => None,
            })
            .collect()
    }

    /// How many tasks of this process wait for `key` (a lock, semaphore or read-write lock of
    /// that name) now.
    pub fn waiters(&self, key: &str) -> usize {
        let prefix = self.layer.prefix();
        let names = [
            Key::lock(prefix, key),
            Key::new(prefix, key, Shape::Semaphore { permits: 1 }),
            Key::new(prefix, key, Shape::Read),
        ];
        let waiters = &self.base.client().waiters;
        names
            .into_iter()
            .flatten()
            .map(|stored| waiters.count(&stored.lock))
            .sum()
    }

    /// Waits until `done` says so of the kit, letting the code under test run meanwhile. It
    /// waits for a state, never for time (it does not let a paused clock advance), and panics
    /// with the history after 10 s of wall time.
    pub async fn until(&self, done: impl Fn(&TestLocks) -> bool) {
        let patience = std::time::Instant::now() + Duration::from_secs(10);
        while !done(self) {
            assert!(
                std::time::Instant::now() < patience,
                "TestLocks::until: the state waited for did not come within 10 s\n{}",
                self.shown_history()
            );
            tokio::task::yield_now().await;
        }
    }

    /// The history, one event a line, for a failure message.
    pub fn shown_history(&self) -> String {
        let history = self.history();
        if history.is_empty() {
            return "history: (nothing happened)".to_owned();
        }
        let mut shown = String::from("history:");
        for (i, event) in history.iter().enumerate() {
            shown.push_str(&format!("\n  {i:>3}. {event}"));
        }
        shown
    }

    /// Asserts that the code under test took exactly these keys, in this order (each
    /// acquisition once; phantom holders left out).
    #[track_caller]
    pub fn assert_acquired_in_order(&self, keys: &[&str]) {
        let acquired = self.acquired();
        assert!(
            acquired.iter().map(String::as_str).eq(keys.iter().copied()),
            "expected the keys {keys:?} to be acquired in this order, found {acquired:?}\n{}",
            self.shown_history()
        );
    }

    /// Asserts that `key` is held now (as [`is_held`](TestLocks::is_held) says: a lock kept for
    /// `hold_at_least` is held until its keep ends).
    #[track_caller]
    pub fn assert_held(&self, key: &str) {
        assert!(
            self.is_held(key),
            "expected `{key}` to be held\n{}",
            self.shown_history()
        );
    }

    /// Asserts that `key` is not held now (nor kept for `hold_at_least`).
    #[track_caller]
    pub fn assert_not_held(&self, key: &str) {
        assert!(
            !self.is_held(key),
            "expected `{key}` not to be held\n{}",
            self.shown_history()
        );
    }

    /// Asserts that a lease of `key` was lost.
    #[track_caller]
    pub fn assert_lost(&self, key: &str) {
        let lost = self
            .history()
            .iter()
            .any(|event| matches!(event, Event::Lost { key: lost, .. } if lost == key));
        assert!(
            lost,
            "expected a lease of `{key}` to be lost\n{}",
            self.shown_history()
        );
    }

    /// Asserts that the code under test never took `key`.
    #[track_caller]
    pub fn assert_never_acquired(&self, key: &str) {
        assert!(
            !self.acquired().iter().any(|taken| taken == key),
            "expected `{key}` never to be acquired\n{}",
            self.shown_history()
        );
    }
}

/// Faults for the keys of one pattern (see [`TestLocks::on`]). Each method adds to the script
/// and returns the script, so that faults chain in the order they are to happen.
#[must_use = "a script does nothing until its faults are added"]
pub struct Script<'a> {
    kit: &'a TestLocks,
    pattern: String,
}

impl fmt::Debug for Script<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Script")
            .field("pattern", &self.pattern)
            .finish_non_exhaustive()
    }
}

impl Script<'_> {
    fn add(&self, action: Action) -> &Self {
        self.kit.shared.push_rule(&self.pattern, action);
        self
    }

    /// The next `times` acquires find the lock held by someone else for `remaining` more
    /// (`u32::MAX`: every acquire, until [`clear`](Script::clear)). A caller that waits asks
    /// again at once after its first busy answer, then when `remaining` has passed.
    pub fn busy(&self, times: u32, remaining: Duration) -> &Self {
        self.add(Action::Busy {
            left: times,
            remaining: Some(remaining),
        })
    }

    /// The next `times` acquires fail with `fault` (`u32::MAX`: every one).
    pub fn fail_acquires(&self, times: u32, fault: Fault) -> &Self {
        self.add(Action::FailAcquires { left: times, fault })
    }

    /// The next renewal of a lease of these keys (held now or taken later) finds it lost, for
    /// `reason` ([`LostReason::Expired`] or [`LostReason::NotOwner`]); the lock is taken off the
    /// deployment, but for an expiry of a lease with a
    /// [`lock_delay`](crate::LockOptions::lock_delay), which keeps it from everyone for the
    /// delay, as a real expiry would.
    pub fn lose_lease_at_next_renewal(&self, reason: LostReason) -> &Self {
        self.add(Action::LoseAtRenewal(reason))
    }

    /// Loses every lease of these keys held now, at once, for `reason`: each guard's lost
    /// signal fires, a locked section with `on_lease_lost = "abort"` stops at its next
    /// `.await`, and the lock is taken off the deployment (an expiry of a lease with a
    /// [`lock_delay`](crate::LockOptions::lock_delay) keeps it from everyone for the delay
    /// instead, as a real expiry would). With none held, the next lease taken
    /// is lost at its first renewal. Returns how many leases were lost now.
    pub async fn lose_lease_now(&self, reason: LostReason) -> usize {
        let pattern = Pattern::new(&self.pattern);
        let grants: Vec<(String, Key)> = self
            .kit
            .shared
            .state()
            .grants
            .iter()
            .filter(|(_, grant)| {
                // A lock kept for hold_at_least has no lease left to lose.
                grant.phantom.is_none() && !grant.kept && pattern.matches(&grant.key)
            })
            .map(|(token, grant)| (token.clone(), grant.stored.clone()))
            .collect();
        for (token, stored) in &grants {
            let lease = self
                .kit
                .managers()
                .iter()
                .find_map(|manager| manager.client().watchdog.lease_by_token(token));
            match lease {
                Some(lease) => {
                    lease.mark_lost(reason);
                    self.kit.layer.lose_on_deployment(&lease, reason).await;
                }
                None => self.kit.layer.drop_from_deployment(stored, token).await,
            }
            self.kit.shared.ended(token, Some(reason));
        }
        if grants.is_empty() {
            self.lose_lease_at_next_renewal(reason);
        }
        tracing::debug!(
            pattern = pattern.text(),
            lost = grants.len(),
            "scripted lease loss"
        );
        grants.len()
    }

    /// Every release of these keys waits `delay` before it is sent.
    pub fn slow_releases(&self, delay: Duration) -> &Self {
        self.add(Action::SlowReleases(delay))
    }

    /// The next `times` releases fail with `fault` (`u32::MAX`: every one), leaving the lock
    /// on the deployment. A guard whose release failed sends it again when dropped, and goes on
    /// retrying a transient failure in the background until its lease would end: with
    /// `u32::MAX` the lock stays until its lease runs out.
    pub fn fail_releases(&self, times: u32, fault: Fault) -> &Self {
        self.add(Action::FailReleases { left: times, fault })
    }

    /// The next acquire of these keys stops before it reaches the deployment until the
    /// returned gate is opened, however long that takes: the test can act while the code under
    /// test is at that point. The wait counts against neither the request timeout nor the
    /// lease (both start once the gate is passed), and a retry of that acquire (in the same
    /// task) waits at the gate too, while acquires of other tasks go through. The acquire that
    /// passes it open uses it up.
    pub fn pause_next_acquire(&self) -> Arc<Gate> {
        let gate = Arc::new(Gate::default());
        self.add(Action::Pause(gate.clone()));
        gate
    }

    /// Forgets the faults scripted for this pattern.
    pub fn clear(&self) {
        self.kit
            .shared
            .state()
            .rules
            .retain(|rule| rule.pattern.text() != self.pattern);
    }
}

/// Another instance's hold of a lock ([`TestLocks::phantom_holder`]): held until its ttl runs
/// out or [`Phantom::release`]. Dropping it leaves the lock held.
pub struct Phantom {
    key: String,
    stored: Key,
    token: String,
    fencing_token: u64,
    holder: Holder,
    layer: Arc<FaultLayer>,
}

impl fmt::Debug for Phantom {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Phantom")
            .field("key", &self.key)
            .field("fencing_token", &self.fencing_token)
            .field("holder", &self.holder)
            .finish_non_exhaustive()
    }
}

impl Phantom {
    /// The lock key it holds.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The fencing token it holds the lock with.
    pub fn fencing_token(&self) -> u64 {
        self.fencing_token
    }

    /// Who it says it is.
    pub fn holder(&self) -> &Holder {
        &self.holder
    }

    /// Releases the lock, waking its waiters, as the other instance would.
    pub async fn release(self) -> Result<(), LockError> {
        let inner = self.layer.inner();
        match inner
            .release(&self.stored, &self.token, Duration::ZERO)
            .await
        {
            Ok(_) => {
                self.layer.shared.ended(&self.token, None);
                Ok(())
            }
            Err(failure) => Err(backend_error(
                "release",
                &self.key,
                inner.server(),
                failure,
                &self.token,
            )),
        }
    }
}

/// A phantom holder's failed request as the error a caller sees, never with its owner token.
fn backend_error(
    operation: &'static str,
    key: &str,
    server: &str,
    failure: crate::backend::StoreError,
    token: &str,
) -> LockError {
    let transient = failure.is_transient();
    let shown = failure.to_string();
    let source: crate::error::BoxError = if shown.contains(token) {
        crate::client::without_token(&shown, token).into()
    } else {
        failure.into_source()
    };
    LockError::backend_with(operation, Some(key), server, source, transient)
}
