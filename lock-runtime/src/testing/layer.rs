//! The fault layer: a [`Store`] around another one that answers as the kit's script says and
//! records what passes through it. Faults are injected here, at the interface every deployment
//! implements, so a script behaves the same over memory and over a real server.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use super::{Event, Fault, Gate, Holder};
use crate::error::LostReason;
use crate::store::forward::forward;
use crate::store::{
    Acquire, Ask, Booking, BoxFuture, HandOff, Key, Release, Renewal, Store, StoreError,
};

/// A key pattern: an exact key, a glob (`order:*`), or an attribute's template
/// (`order:<user_id>`), whose placeholders match any text as `*` does.
#[derive(Clone, Debug)]
pub(crate) struct Pattern {
    text: String,
    parts: Vec<Part>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Part {
    Literal(char),
    Any,
}

impl Pattern {
    pub(crate) fn new(text: &str) -> Pattern {
        let mut parts = Vec::with_capacity(text.len());
        let mut rest = text;
        while let Some(c) = rest.chars().next() {
            match c {
                '*' => {
                    parts.push(Part::Any);
                    rest = &rest[1..];
                }
                '<' => match rest.find('>') {
                    Some(end) if end > 1 => {
                        parts.push(Part::Any);
                        rest = &rest[end + 1..];
                    }
                    _ => {
                        parts.push(Part::Literal('<'));
                        rest = &rest[1..];
                    }
                },
                other => {
                    parts.push(Part::Literal(other));
                    rest = &rest[other.len_utf8()..];
                }
            }
        }
        Pattern {
            text: text.to_owned(),
            parts,
        }
    }

    pub(crate) fn text(&self) -> &str {
        &self.text
    }

    /// Whether `key` matches: `*` (and a placeholder) any run of characters, empty too.
    pub(crate) fn matches(&self, key: &str) -> bool {
        let key: Vec<char> = key.chars().collect();
        let (mut p, mut k) = (0, 0);
        // Where the last `*` was, and the key position it is tried from.
        let mut star: Option<(usize, usize)> = None;
        while k < key.len() {
            match self.parts.get(p) {
                Some(Part::Literal(c)) if *c == key[k] => {
                    p += 1;
                    k += 1;
                }
                Some(Part::Any) => {
                    star = Some((p, k));
                    p += 1;
                }
                _ => match star {
                    Some((sp, sk)) => {
                        p = sp + 1;
                        k = sk + 1;
                        star = Some((sp, sk + 1));
                    }
                    None => return false,
                },
            }
        }
        self.parts[p..].iter().all(|part| *part == Part::Any)
    }
}

/// One scripted fault, in the order it was scripted.
pub(crate) struct Rule {
    pub(crate) pattern: Pattern,
    pub(crate) action: Action,
}

pub(crate) enum Action {
    /// The next acquire stops here until the gate opens.
    Pause(Arc<Gate>),
    /// The next `left` acquires answer busy (`u32::MAX`: every one).
    Busy {
        left: u32,
        remaining: Option<Duration>,
    },
    /// The next `left` acquires fail.
    FailAcquires { left: u32, fault: Fault },
    /// The next renewal of a held lease loses it.
    LoseAtRenewal(LostReason),
    /// Every release waits this long first.
    SlowReleases(Duration),
    /// The next `left` releases fail.
    FailReleases { left: u32, fault: Fault },
}

/// Spends one use of a counted fault: false if none is left.
fn spend(left: &mut u32) -> bool {
    match *left {
        0 => false,
        u32::MAX => true,
        _ => {
            *left -= 1;
            true
        }
    }
}

/// A lease this deployment granted and has not seen end, by owner token.
pub(crate) struct Grant {
    pub(crate) key: String,
    pub(crate) stored: Key,
    pub(crate) fence: u64,
    pub(crate) expires: Instant,
    pub(crate) phantom: Option<Holder>,
    /// When it was granted, in the order of the history.
    pub(crate) seq: usize,
    /// Released into a keep (`hold_at_least`): held by nobody's section, busy until `expires`.
    pub(crate) kept: bool,
}

#[derive(Default)]
pub(crate) struct State {
    pub(crate) rules: Vec<Rule>,
    pub(crate) history: Vec<Event>,
    pub(crate) grants: HashMap<String, Grant>,
}

/// What the kit and its layer share.
#[derive(Default)]
pub(crate) struct Shared {
    state: Mutex<State>,
    /// Woken on every new event.
    pub(crate) changed: Notify,
}

impl Shared {
    pub(crate) fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn record(&self, event: Event) {
        self.state().history.push(event);
        self.changed.notify_waiters();
    }

    /// Records a grant to `token`, unless it is the same grant confirmed again.
    pub(crate) fn granted(
        &self,
        key: &str,
        stored: &Key,
        token: &str,
        fence: u64,
        ttl: Duration,
        phantom: Option<Holder>,
    ) {
        let now = Instant::now();
        {
            let mut state = self.state();
            if let Some(grant) = state.grants.get_mut(token) {
                grant.expires = now + ttl;
                return;
            }
            let seq = state.history.len();
            state.grants.insert(
                token.to_owned(),
                Grant {
                    key: key.to_owned(),
                    stored: stored.clone(),
                    fence,
                    expires: now + ttl,
                    phantom: phantom.clone(),
                    seq,
                    kept: false,
                },
            );
            state.history.push(Event::Acquired {
                key: key.to_owned(),
                fencing_token: fence,
                phantom,
            });
        }
        self.changed.notify_waiters();
    }

    /// The grant to `token` ended: released, or found lost (`lost`).
    pub(crate) fn ended(&self, token: &str, lost: Option<LostReason>) {
        {
            let mut state = self.state();
            let Some(grant) = state.grants.remove(token) else {
                return;
            };
            if grant.kept {
                // Its release was recorded when the keep began.
                return;
            }
            let (key, fencing_token) = (grant.key, grant.fence);
            state.history.push(match lost {
                Some(reason) => Event::Lost {
                    key,
                    fencing_token,
                    reason,
                },
                None => Event::Released { key, fencing_token },
            });
        }
        self.changed.notify_waiters();
    }

    /// The grant to `token` was released into a keep of `keep` (`hold_at_least`): its section
    /// ended, so the history says released, but the deployment keeps the lock busy for others
    /// until the keep ends, and so it stays held until then.
    pub(crate) fn kept(&self, token: &str, keep: Duration) {
        {
            let mut state = self.state();
            let Some(grant) = state.grants.get_mut(token) else {
                return;
            };
            grant.expires = Instant::now() + keep;
            grant.kept = true;
            let (key, fencing_token) = (grant.key.clone(), grant.fence);
            state.history.push(Event::Released { key, fencing_token });
        }
        self.changed.notify_waiters();
    }

    pub(crate) fn push_rule(&self, pattern: &str, action: Action) {
        self.state().rules.push(Rule {
            pattern: Pattern::new(pattern),
            action,
        });
    }
}

/// The name a caller gave the lock stored as `stored` under `prefix`.
pub(crate) fn key_of(prefix: &str, stored: &Key) -> String {
    let lock = stored.lock.as_str();
    let lock = lock.strip_suffix(stored.shape.suffix()).unwrap_or(lock);
    crate::inspect::lock_name(prefix, lock).unwrap_or_else(|| stored.lock.clone())
}

/// A scripted failure, as the backend's own would be.
fn failure(fault: Fault, operation: &str) -> StoreError {
    match fault {
        Fault::Transient => StoreError::transient(format!(
            "connection reset during {operation} (a transient fault scripted by \
             lock_runtime::testing)"
        )),
        Fault::Permanent => StoreError::permanent(format!(
            "the server refused the {operation} (a permanent fault scripted by \
             lock_runtime::testing)"
        )),
    }
}

pub(crate) struct FaultLayer {
    inner: Arc<dyn Store>,
    pub(crate) shared: Arc<Shared>,
    prefix: String,
    describe: String,
}

/// What the script says an acquire gets before it reaches the deployment.
enum Before {
    Pass,
    Busy(Option<Duration>),
    Fail(Fault),
}

impl FaultLayer {
    pub(crate) fn new(inner: Arc<dyn Store>, shared: Arc<Shared>, prefix: String) -> Self {
        let describe = format!("{} (lock_runtime::testing faults)", inner.describe());
        FaultLayer {
            inner,
            shared,
            prefix,
            describe,
        }
    }

    pub(crate) fn inner(&self) -> &Arc<dyn Store> {
        &self.inner
    }

    pub(crate) fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The first scripted acquire fault for `key` with a use left, spent.
    fn before_acquire(&self, key: &str) -> Before {
        let mut state = self.shared.state();
        for rule in state.rules.iter_mut() {
            if !rule.pattern.matches(key) {
                continue;
            }
            let (left, answer) = match &mut rule.action {
                Action::Busy { left, remaining } => (left, Before::Busy(*remaining)),
                Action::FailAcquires { left, fault } => (left, Before::Fail(*fault)),
                _ => continue,
            };
            if spend(left) {
                return answer;
            }
        }
        Before::Pass
    }

    /// The first gate scripted for `key` that no acquire has passed yet, and that holds the
    /// current task's (see `Gate::claim`).
    fn gate_for(&self, key: &str) -> Option<Arc<Gate>> {
        self.shared
            .state()
            .rules
            .iter()
            .find_map(|rule| match &rule.action {
                Action::Pause(gate) if rule.pattern.matches(key) && gate.claim() => {
                    Some(gate.clone())
                }
                _ => None,
            })
    }

    /// Waits at `gate` until it opens; the acquire that passes it uses it up. An attempt
    /// dropped while it waits (by its request timeout, or a cancelled call) leaves the gate as
    /// it was, so that the retry waits at it too.
    async fn pass(&self, gate: Arc<Gate>) {
        gate.arrive().await;
        self.shared.state().rules.retain(
            |rule| !matches!(&rule.action, Action::Pause(scripted) if Arc::ptr_eq(scripted, &gate)),
        );
    }

    /// Whether the next renewal of a lease of `key` is to be lost, and why (spent).
    fn lose_at_renewal(&self, key: &str) -> Option<LostReason> {
        let mut state = self.shared.state();
        let i = state.rules.iter().position(|rule| {
            matches!(rule.action, Action::LoseAtRenewal(_)) && rule.pattern.matches(key)
        })?;
        match state.rules.remove(i).action {
            Action::LoseAtRenewal(reason) => Some(reason),
            _ => None,
        }
    }

    /// The scripted faults of a release of `key`: how long it waits first, and whether it fails.
    fn before_release(&self, key: &str) -> (Duration, Option<Fault>) {
        let mut state = self.shared.state();
        let mut delay = Duration::ZERO;
        let mut fail = None;
        for rule in state.rules.iter_mut() {
            if !rule.pattern.matches(key) {
                continue;
            }
            let (left, fault) = match &mut rule.action {
                Action::SlowReleases(slow) => {
                    delay = delay.max(*slow);
                    continue;
                }
                Action::FailReleases { left, fault } => (left, *fault),
                _ => continue,
            };
            if fail.is_none() && spend(left) {
                fail = Some(fault);
            }
        }
        (delay, fail)
    }

    /// Takes the lease of `token` off the deployment, as its expiry or another owner would:
    /// what a scripted loss leaves behind.
    pub(crate) async fn drop_from_deployment(&self, stored: &Key, token: &str) {
        let _ = self.inner.release(stored, token, Duration::ZERO).await;
    }

    /// Ends `lease` on the deployment for `reason`, as a scripted loss: an expiry of a lease
    /// with a lock-delay leaves its lock kept from everyone for the delay, as a real expiry
    /// would (the layer of lock-delay below adds the delay to the renewal's zero ttl); any
    /// other loss takes it off the deployment.
    pub(crate) async fn lose_on_deployment(
        &self,
        lease: &Arc<crate::lease::Lease>,
        reason: LostReason,
    ) {
        if reason == LostReason::Expired && !lease.options.delay().is_zero() {
            let kept = [Renewal {
                lease: lease.clone(),
                ttl: Duration::ZERO,
            }];
            self.inner.renew(&kept, &|_, _| {}).await;
            return;
        }
        self.drop_from_deployment(&lease.stored, &lease.token).await;
    }

    /// A release answer for `token`'s grant, kept for `keep` (`hold_at_least`), recorded.
    fn released(&self, token: &str, keep: Duration, answer: &Result<Release, StoreError>) {
        match answer {
            Ok(Release::Released) if !keep.is_zero() => self.shared.kept(token, keep),
            Ok(Release::Released) => self.shared.ended(token, None),
            // The holder learns only now that the lock was not its own any more.
            Ok(Release::NotOwner) => self.shared.ended(token, Some(LostReason::NotOwner)),
            Ok(Release::Gone) => self.shared.ended(token, Some(LostReason::Expired)),
            Err(_) => {}
        }
    }

    /// A release of `token`'s lease with the script's faults: `send` makes the request only
    /// if the script lets it through (a backend may do its work when the request is made).
    async fn release_with<'a>(
        &'a self,
        stored: &'a Key,
        token: &'a str,
        keep: Duration,
        send: impl FnOnce() -> BoxFuture<'a, Result<Release, StoreError>>,
    ) -> Result<Release, StoreError> {
        let key = key_of(&self.prefix, stored);
        let (delay, fail) = self.before_release(&key);
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        if let Some(fault) = fail {
            self.shared.record(Event::Failed {
                key,
                operation: "release",
                retryable: fault == Fault::Transient,
                scripted: true,
            });
            return Err(failure(fault, "release"));
        }
        let answer = send().await;
        if let Err(err) = &answer {
            self.shared.record(Event::Failed {
                key,
                operation: "release",
                retryable: err.is_transient(),
                scripted: false,
            });
        }
        self.released(token, keep, &answer);
        answer
    }
}

impl Store for FaultLayer {
    forward!(inner; announces, announce, steals, steal, server, inspect, fair, supports, leave, hands_off, waits, watch, unwatch,
        notifies, keeps_waits, attach, retry_with_same_token);

    fn describe(&self) -> &str {
        &self.describe
    }

    fn acquire<'a>(
        &'a self,
        key: &'a Key,
        token: &'a str,
        ttl: Duration,
        ask: Ask,
    ) -> BoxFuture<'a, Result<Acquire, StoreError>> {
        Box::pin(async move {
            let name = key_of(&self.prefix, key);
            // Where the acquire was not held at the gate before its request (see `gate`).
            if let Some(gate) = self.gate_for(&name) {
                self.pass(gate).await;
            }
            match self.before_acquire(&name) {
                Before::Busy(remaining) => {
                    self.shared.record(Event::Busy {
                        key: name,
                        remaining,
                        scripted: true,
                    });
                    return Ok(Acquire::busy(remaining, false));
                }
                Before::Fail(fault) => {
                    self.shared.record(Event::Failed {
                        key: name,
                        operation: "acquire",
                        retryable: fault == Fault::Transient,
                        scripted: true,
                    });
                    return Err(failure(fault, "acquire"));
                }
                Before::Pass => {}
            }
            let answer = self.inner.acquire(key, token, ttl, ask).await;
            match &answer {
                Ok(Acquire::Acquired { fence }) => {
                    self.shared.granted(&name, key, token, *fence, ttl, None);
                }
                Ok(Acquire::Busy { remaining, .. }) => self.shared.record(Event::Busy {
                    key: name,
                    remaining: *remaining,
                    scripted: false,
                }),
                Err(err) => self.shared.record(Event::Failed {
                    key: name,
                    operation: "acquire",
                    retryable: err.is_transient(),
                    scripted: false,
                }),
            }
            answer
        })
    }

    fn gate<'a>(&'a self, key: &'a Key) -> Option<BoxFuture<'a, ()>> {
        let gate = self.gate_for(&key_of(&self.prefix, key))?;
        Some(Box::pin(self.pass(gate)))
    }

    fn renew<'a>(&'a self, batch: &'a [Renewal], book: Booking<'a>) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            let mut lose = Vec::new();
            let mut pass = Vec::new();
            let mut passed = Vec::new();
            for (i, renewal) in batch.iter().enumerate() {
                let stored = &renewal.lease.stored;
                match self.lose_at_renewal(&key_of(&self.prefix, stored)) {
                    Some(reason) => lose.push((i, reason)),
                    None => {
                        pass.push(renewal.clone());
                        passed.push(i);
                    }
                }
            }
            for &(i, reason) in &lose {
                let lease = &batch[i].lease;
                // Lost with the scripted reason before the answer says "not ours": the
                // watchdog then finds it lost already and keeps the reason.
                lease.mark_lost(reason);
                self.lose_on_deployment(lease, reason).await;
                self.shared.ended(&lease.token, Some(reason));
            }
            if !lose.is_empty() {
                let indices: Vec<usize> = lose.iter().map(|&(i, _)| i).collect();
                book(&indices, Ok(vec![Some(false); indices.len()]));
            }
            if pass.is_empty() {
                return;
            }
            let relay = |indices: &[usize], answer: Result<Vec<Option<bool>>, StoreError>| {
                if let Ok(renewed) = &answer {
                    for (&j, verdict) in indices.iter().zip(renewed) {
                        let renewal = &pass[j];
                        match verdict {
                            Some(true) => {
                                let mut state = self.shared.state();
                                if let Some(grant) = state.grants.get_mut(renewal.token()) {
                                    grant.expires = Instant::now() + renewal.ttl;
                                }
                            }
                            Some(false) => {
                                self.shared
                                    .ended(renewal.token(), Some(LostReason::NotOwner));
                            }
                            None => {}
                        }
                    }
                }
                let mapped: Vec<usize> = indices.iter().map(|&j| passed[j]).collect();
                book(&mapped, answer);
            };
            self.inner.renew(&pass, &relay).await;
        })
    }

    fn release<'a>(
        &'a self,
        key: &'a Key,
        token: &'a str,
        keep: Duration,
    ) -> BoxFuture<'a, Result<Release, StoreError>> {
        Box::pin(self.release_with(key, token, keep, move || {
            self.inner.release(key, token, keep)
        }))
    }

    fn release_lease<'a>(
        &'a self,
        lease: &'a crate::lease::Lease,
        keep: Duration,
    ) -> BoxFuture<'a, Result<Release, StoreError>> {
        Box::pin(
            self.release_with(&lease.stored, &lease.token, keep, move || {
                self.inner.release_lease(lease, keep)
            }),
        )
    }

    fn hand_off<'a>(
        &'a self,
        from_lease: &'a crate::lease::Lease,
        to_lease: &'a crate::lease::Lease,
    ) -> BoxFuture<'a, Result<HandOff, StoreError>> {
        Box::pin(async move {
            let key = &from_lease.stored;
            let (from, to) = (from_lease.token.as_str(), to_lease.token.as_str());
            let ttl = to_lease.options.ttl;
            let name = key_of(&self.prefix, key);
            let (delay, fail) = self.before_release(&name);
            if !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
            if let Some(fault) = fail {
                self.shared.record(Event::Failed {
                    key: name,
                    operation: "release",
                    retryable: fault == Fault::Transient,
                    scripted: true,
                });
                return Err(failure(fault, "release"));
            }
            let answer = self.inner.hand_off(from_lease, to_lease).await;
            match &answer {
                Ok(HandOff::Handed { fence }) => {
                    self.shared.ended(from, None);
                    self.shared.granted(&name, key, to, *fence, ttl, None);
                }
                Ok(HandOff::Released) => self.shared.ended(from, None),
                Ok(HandOff::NotOwner) => self.shared.ended(from, Some(LostReason::NotOwner)),
                Ok(HandOff::Gone) => self.shared.ended(from, Some(LostReason::Expired)),
                Err(err) => self.shared.record(Event::Failed {
                    key: name,
                    operation: "release",
                    retryable: err.is_transient(),
                    scripted: false,
                }),
            }
            answer
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Shape;

    #[test]
    fn patterns_match_keys_globs_and_templates() {
        let exact = Pattern::new("order:7");
        assert!(exact.matches("order:7"));
        assert!(!exact.matches("order:70"));
        let glob = Pattern::new("order:*");
        assert!(glob.matches("order:7") && glob.matches("order:") && !glob.matches("stock:1"));
        let template = Pattern::new("order:<shop.sale>:<user_id>");
        assert!(template.matches("order:ab12:7"));
        assert!(!template.matches("stock:ab12:7"));
        let middle = Pattern::new("a*c*e");
        assert!(middle.matches("abcde") && middle.matches("ace") && !middle.matches("abcd"));
        assert!(Pattern::new("<").matches("<") && Pattern::new("a<>").matches("a<>"));
        assert!(Pattern::new("*").matches(""));
    }

    #[test]
    fn a_stored_key_gives_back_the_callers_name() {
        for key in ["order:7", "}odd", "\\odd", "a}b"] {
            let lock = Key::lock("p:", key).expect("valid key");
            assert_eq!(key_of("p:", &lock), key);
            let sem = Key::new("p:", key, Shape::Semaphore { permits: 3 }).expect("valid key");
            assert_eq!(key_of("p:", &sem), key);
            let rw = Key::new("p:", key, Shape::Read).expect("valid key");
            assert_eq!(key_of("p:", &rw), key);
        }
    }
}
