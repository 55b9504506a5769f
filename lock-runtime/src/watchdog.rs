//! The renewal driver: one task per manager renews every held lease at about a third of its ttl,
//! sending the renewals that fall due together as one pipelined round trip, and declares a lease
//! lost when renewal proves it gone or its local deadline passes without a successful renewal.
//!
//! Each lease waits for its own renewal's answer, and only for a third of its own ttl: answers
//! are booked as each node or slot group delivers them, so a stalled shard of a cluster delays
//! the leases it serves and no others. An unanswered renewal is sent again after that wait,
//! until the lease's local deadline.
//!
//! A lease is registered before its acquire is sent and unregistered synchronously when it is
//! released, so no renewal is ever sent for a lock that was already given back. Renewals check the
//! owner token on the server, so even one that crosses a release on the wire cannot extend anyone
//! else's lock. The driver holds leases and its own state weakly: it never keeps a manager alive.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::backend::{Renewal, Store, StoreError};
use crate::background::Background;
use crate::error::LostReason;
use crate::lease::{Lease, drift_margin};

mod entries;

use entries::Entries;

/// Retry a failed renewal this often (bounded by the lease's own deadline).
const RETRY_FLOOR: Duration = Duration::from_millis(20);

/// Renewals due within this long (and within a twelfth of their ttl) join the current batch.
const MAX_COALESCE: Duration = Duration::from_secs(1);

/// An idle driver (no lease tracked) still looks this often, so that registering a lease whose
/// first deadline is further away than this does not have to wake it.
const IDLE_LOOK: Duration = Duration::from_secs(1);

/// Renewals go out in pipelines of at most this many, all at once: still one round trip per
/// thousand leases, without building one huge request (and its answer) for ten thousand, and
/// without the last thousand waiting for the first nine to be answered.
const PIPELINE: usize = 1000;

/// Clones are handles on one watchdog (the deadlock detector keeps one, to see what each task
/// holds).
#[derive(Clone)]
pub(crate) struct Watchdog {
    shared: Arc<Shared>,
}

struct Shared {
    state: Mutex<State>,
    wake: Arc<Notify>,
    backend: Arc<dyn Store>,
    background: Background,
}

struct State {
    /// Where the watchdog's clock starts: the entries keep their moments as [`Tick`]s from here.
    epoch: Instant,
    entries: Entries<Entry>,
    /// (when, entry id): the next thing to do for each entry, earliest first.
    queue: BTreeSet<(Tick, u64)>,
    /// The driver task, started on first use and again if the runtime it ran on has shut down.
    driver: Option<tokio::task::JoinHandle<()>>,
    /// When the driver will look again by itself (None: not known, so wake it). Work due later
    /// than this needs no wake-up: most locks are released long before their first renewal.
    next_look: Option<Instant>,
    /// The entry last granted for each stored key, by a hash of the key: which lock this
    /// manager holds, without a copy of every key. (Two keys with one hash keep only the
    /// later: then the other is not found, which only costs a waiter an attempt.) A B-tree,
    /// whose nodes come and go one at a time, rather than a hash map, whose outgrown tables
    /// stay behind as free memory.
    held: BTreeMap<u64, u64>,
}

/// A moment on the watchdog's clock: nanoseconds from its epoch (before it, negative), 8 bytes
/// where an `Instant` takes 16. Ten thousand held leases keep five of them each.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Tick(i64);

impl Tick {
    /// Later than every moment: "not set" for the moments an entry may not have.
    const NEVER: Tick = Tick(i64::MAX);
    /// The latest moment the clock names: sums saturate here, below [`Tick::NEVER`].
    const LAST: i64 = i64::MAX - 1;

    fn since(epoch: Instant, at: Instant) -> Tick {
        let nanos = |span: Duration| i64::try_from(span.as_nanos()).unwrap_or(Tick::LAST);
        if at >= epoch {
            Tick(nanos(at - epoch).min(Tick::LAST))
        } else {
            Tick(-nanos(epoch - at))
        }
    }

    fn at(self, epoch: Instant) -> Instant {
        let span = Duration::from_nanos(self.0.unsigned_abs());
        if self.0 >= 0 {
            epoch.checked_add(span).unwrap_or(epoch + FAR)
        } else {
            epoch.checked_sub(span).unwrap_or(epoch)
        }
    }

    /// `Some(self)` unless it is [`Tick::NEVER`].
    fn set(self) -> Option<Tick> {
        (self != Tick::NEVER).then_some(self)
    }
}

impl std::ops::Add<Duration> for Tick {
    type Output = Tick;

    fn add(self, span: Duration) -> Tick {
        let nanos = i64::try_from(span.as_nanos()).unwrap_or(i64::MAX);
        Tick(self.0.saturating_add(nanos).min(Tick::LAST))
    }
}

impl std::ops::Sub<Duration> for Tick {
    type Output = Tick;

    fn sub(self, span: Duration) -> Tick {
        let nanos = i64::try_from(span.as_nanos()).unwrap_or(i64::MAX);
        Tick(self.0.saturating_sub(nanos))
    }
}

impl std::ops::Sub for Tick {
    type Output = Duration;

    /// How long from `earlier` to `self`; zero if `earlier` is later.
    fn sub(self, earlier: Tick) -> Duration {
        Duration::from_nanos(u64::try_from(self.0.saturating_sub(earlier.0)).unwrap_or(0))
    }
}

/// How far ahead a moment too far to name on the clock is put: further than any lease.
const FAR: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

fn key_hash(stored: &str) -> u64 {
    use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher};
    BuildHasherDefault::<DefaultHasher>::default().hash_one(stored)
}

/// What the driver keeps of one lease: kept small (56 bytes), as there is one per held lock.
struct Entry {
    lease: Weak<Lease>,
    due: Tick,
    /// The local end of the lease: past it without a successful renewal, the lease is lost.
    lost_at: Tick,
    /// The lease's ttl in nanoseconds (at most `MAX_TTL`).
    ttl_nanos: u64,
    /// A renewal is on the wire: its answer is waited for until then (or the deadline), and
    /// after that the renewal is sent again. [`Tick::NEVER`] when none is.
    awaiting: Tick,
    /// Where max_hold caps the lease ([`Tick::NEVER`]: nowhere).
    hold_until: Tick,
    /// The number of the latest renewal sent: only its answer moves the deadline (an earlier
    /// one's "renewed" may predate a renewal that shortened the lease for max_hold).
    request: u32,
    renew: bool,
    /// The acquire is on the wire: only the deadline is watched until it is answered.
    acquiring: bool,
    /// max_hold has shortened or stopped the renewals: the coming loss is its doing.
    capped: bool,
}

impl Entry {
    fn ttl(&self) -> Duration {
        Duration::from_nanos(self.ttl_nanos)
    }

    fn awaiting(&self) -> Option<Tick> {
        self.awaiting.set()
    }

    fn hold_until(&self) -> Option<Tick> {
        self.hold_until.set()
    }
}

/// One renewal of a batch on the wire.
struct Sent {
    id: u64,
    /// The entry's `request` when it was sent.
    request: u32,
    ttl: Duration,
    /// When the driver stops waiting for its answer.
    give_up: Instant,
}

impl Drop for Shared {
    fn drop(&mut self) {
        // Lets the driver see that its manager is gone and stop.
        self.wake.notify_one();
    }
}

impl Watchdog {
    pub(crate) fn new(backend: Arc<dyn Store>, background: Background) -> Self {
        Watchdog {
            shared: Arc::new(Shared {
                state: Mutex::new(State {
                    epoch: Instant::now(),
                    entries: Entries::new(),
                    queue: BTreeSet::new(),
                    driver: None,
                    next_look: None,
                    held: BTreeMap::new(),
                }),
                wake: Arc::new(Notify::new()),
                backend,
                background,
            }),
        }
    }

    /// Tracks a lease whose acquire is about to be sent. Until [`Watchdog::activate`], only its
    /// deadline is watched.
    pub(crate) fn register(&self, lease: &Arc<Lease>) -> u64 {
        let ttl = lease.options.ttl;
        let deadline = lease.deadline();
        let hold_until = lease
            .options
            .max_hold
            .and_then(|max| lease.started().checked_add(max));
        let mut state = self.shared.lock();
        let lost_at = state.tick(deadline);
        let hold_until = hold_until.map_or(Tick::NEVER, |until| state.tick(until));
        let id = state.entries.insert(Entry {
            lease: Arc::downgrade(lease),
            due: lost_at,
            lost_at,
            ttl_nanos: u64::try_from(ttl.as_nanos()).unwrap_or(u64::MAX),
            renew: lease.options.watchdog,
            acquiring: true,
            awaiting: Tick::NEVER,
            request: 0,
            capped: false,
            hold_until,
        });
        state.queue.insert((lost_at, id));
        self.shared.start_driver(&mut state, deadline);
        id
    }

    /// The acquire succeeded: schedule the first renewal at a third of the ttl.
    pub(crate) fn activate(&self, id: u64) {
        let mut state = self.shared.lock();
        let Some(entry) = state.entries.get_mut(&id) else {
            return;
        };
        entry.acquiring = false;
        let Some(lease) = entry.lease.upgrade() else {
            return;
        };
        let renew = entry.renew;
        state.held.insert(key_hash(&lease.stored.lock), id);
        if !renew {
            return;
        }
        let Some(entry) = state.entries.get(&id) else {
            return;
        };
        let first = (state.tick(lease.started()) + entry.ttl() / 3).min(entry.lost_at);
        state.reschedule(id, first);
        let first = first.at(state.epoch);
        // Also starts the driver again if the runtime it ran on has shut down since the acquire
        // was registered (another test's runtime, say): this lease must be renewed.
        self.shared.start_driver(&mut state, first);
    }

    /// Stops all work for a lease. Synchronous: once it returns, no renewal of it will be sent.
    pub(crate) fn unregister(&self, id: u64) {
        let mut state = self.shared.lock();
        if let Some(entry) = state.entries.remove(&id) {
            state.queue.remove(&(entry.due, id));
            if let Some(lease) = entry.lease.upgrade() {
                let hash = key_hash(&lease.stored.lock);
                if state.held.get(&hash) == Some(&id) {
                    state.held.remove(&hash);
                }
            }
        }
    }

    /// The lease under which this manager holds the stored key `stored`, if it does.
    pub(crate) fn held_lease(&self, stored: &str) -> Option<Arc<Lease>> {
        let mut state = self.shared.lock();
        let hash = key_hash(stored);
        let id = *state.held.get(&hash)?;
        let Some(lease) = state
            .entries
            .get(&id)
            .and_then(|entry| entry.lease.upgrade())
        else {
            // Its lease was lost (and so no longer tracked) or dropped.
            state.held.remove(&hash);
            return None;
        };
        (lease.stored.lock == stored && lease.status() == crate::lease::Status::Held)
            .then_some(lease)
    }

    /// Every held lease of this manager on the stored key `stored` (several for a semaphore's
    /// permits or a read-write lock's shares), and with `acquiring` those whose acquire is
    /// still on its way (the store may have granted it already). Looks at every tracked lease:
    /// for notices only, which are rare.
    pub(crate) fn live_leases(&self, stored: &str, acquiring: bool) -> Vec<Arc<Lease>> {
        use crate::lease::Status;
        let state = self.shared.lock();
        state
            .entries
            .values()
            .filter_map(|entry| entry.lease.upgrade())
            .filter(|lease| {
                lease.stored.lock == stored
                    && match lease.status() {
                        Status::Held => true,
                        Status::Acquiring => acquiring,
                        Status::Lost(_) | Status::Released => false,
                    }
            })
            .collect()
    }

    /// The tracked lease under owner token `token`, if any: how the `testing` kit loses a held
    /// lease on purpose.
    #[cfg(feature = "testing")]
    pub(crate) fn lease_by_token(&self, token: &str) -> Option<Arc<Lease>> {
        let state = self.shared.lock();
        state
            .entries
            .values()
            .filter_map(|entry| entry.lease.upgrade())
            .find(|lease| *lease.token == *token)
    }

    /// Whether task `task` holds the lock (or a permit of the semaphore) stored as `stored`
    /// through this manager with a lease the watchdog
    /// renews: waiting for it could only end with the wait budget. (A fixed lease runs out,
    /// and then the wait ends too.) Looks at every tracked lease: for the slow path of a busy
    /// answer only.
    /// A semaphore's task holds every permit exactly when it holds as many as the semaphore has
    /// (see [`Watchdog::held_by_task_count`]).
    pub(crate) fn held_by_task(&self, stored: &str, task: crate::lease::Owner) -> bool {
        self.held_by_task_count(stored, task) > 0
    }

    /// Whether task `task` holds a renewed lease of `stored` taken as `shape` (see
    /// [`Watchdog::held_by_task`]): a read share, before it asks for the write hold.
    pub(crate) fn held_by_task_in(
        &self,
        stored: &str,
        task: crate::lease::Owner,
        shape: crate::shape::Shape,
    ) -> bool {
        let state = self.shared.lock();
        state.entries.values().any(|entry| {
            entry.lease.upgrade().is_some_and(|lease| {
                lease.task == task
                    && lease.stored.lock == stored
                    && lease.stored.shape == shape
                    && lease.status() == crate::lease::Status::Held
            })
        })
    }

    /// How many leases of `stored` task `task` holds as [`Watchdog::held_by_task`] counts them:
    /// one at most for a lock, up to its permits for a semaphore.
    pub(crate) fn held_by_task_count(&self, stored: &str, task: crate::lease::Owner) -> usize {
        let state = self.shared.lock();
        state
            .entries
            .values()
            .filter(|entry| {
                entry.lease.upgrade().is_some_and(|lease| {
                    lease.task == task
                        && lease.options.watchdog
                        && lease.stored.lock == stored
                        && lease.status() == crate::lease::Status::Held
                })
            })
            .count()
    }

    /// The plain locks each of `tasks` holds through this manager: stored key and the token id
    /// of its lease (see `deadlock`). One pass over the tracked leases.
    pub(crate) fn locks_held_by(
        &self,
        tasks: &std::collections::HashSet<crate::lease::Owner>,
    ) -> HashMap<crate::lease::Owner, Vec<(String, String)>> {
        let leases: Vec<Arc<Lease>> = {
            let state = self.shared.lock();
            state
                .entries
                .values()
                .filter_map(|entry| entry.lease.upgrade())
                .filter(|lease| {
                    tasks.contains(&lease.task)
                        && lease.stored.shape.waits_for_one_holder()
                        && lease.status() == crate::lease::Status::Held
                })
                .collect()
        };
        let mut held: HashMap<crate::lease::Owner, Vec<(String, String)>> = HashMap::new();
        for lease in leases {
            held.entry(lease.task).or_default().push((
                lease.stored.lock.clone(),
                crate::protocol::token_id(&lease.token),
            ));
        }
        held
    }

    /// Stops all work for every lease and returns those still alive: for shutdown, which
    /// releases them. Synchronous, as [`Watchdog::unregister`].
    pub(crate) fn drain(&self) -> Vec<Arc<Lease>> {
        let mut state = self.shared.lock();
        state.queue.clear();
        state.held.clear();
        state
            .entries
            .drain()
            .into_iter()
            .filter_map(|entry| entry.lease.upgrade())
            .collect()
    }
}

impl State {
    fn tick(&self, at: Instant) -> Tick {
        Tick::since(self.epoch, at)
    }

    fn reschedule(&mut self, id: u64, due: Tick) {
        let Some(entry) = self.entries.get_mut(&id) else {
            return;
        };
        self.queue.remove(&(entry.due, id));
        entry.due = due;
        self.queue.insert((due, id));
    }
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Makes sure a driver runs, and wakes it if it would otherwise look later than `due`.
    fn start_driver(self: &Arc<Self>, state: &mut State, due: Instant) {
        if state
            .driver
            .as_ref()
            .is_some_and(|driver| !driver.is_finished())
        {
            if state.next_look.is_none_or(|look| due < look) {
                self.wake.notify_one();
            }
            return;
        }
        state.next_look = None;
        if state.driver.is_some() {
            // The runtime the driver ran on shut down, and the renewals it had sent went with
            // it: their answers will never be booked, so send them again.
            for entry in state.entries.values_mut() {
                entry.awaiting = Tick::NEVER;
            }
        }
        let driver = drive(Arc::downgrade(self), self.wake.clone());
        state.driver = Some(self.background.spawn(driver));
    }

    /// Does what is due at `now`; returns when to look again.
    fn step(self: &Arc<Self>, now: Instant) -> Instant {
        let mut lost = Vec::new();
        let mut batch = Vec::new();
        let mut ids = Vec::new();
        let mut unanswered = 0;
        let next = {
            let mut guard = self.lock();
            let epoch = guard.epoch;
            let instant = now;
            let now = Tick::since(epoch, instant);
            let State { entries, queue, .. } = &mut *guard;
            for (due, id) in due_now(queue, entries, now) {
                queue.remove(&(due, id));
                let Some(entry) = entries.get_mut(&id) else {
                    continue;
                };
                let Some(lease) = entry.lease.upgrade() else {
                    entries.remove(&id);
                    continue;
                };
                let capped = entry.hold_until().is_some_and(|until| now >= until);
                entry.capped |= capped;
                if now >= entry.lost_at {
                    let reason = if entry.capped {
                        LostReason::MaxHoldExceeded
                    } else {
                        LostReason::Expired
                    };
                    entries.remove(&id);
                    lost.push((lease, reason));
                    continue;
                }
                let waiting = entry.awaiting().filter(|&until| now < until);
                if entry.awaiting().is_some() && waiting.is_none() {
                    // No answer within a third of the ttl: sent again below.
                    entry.awaiting = Tick::NEVER;
                    unanswered += 1;
                }
                // Whatever happens next, the deadline is watched, and the wait for an answer.
                entry.due = waiting.map_or(entry.lost_at, |until| until.min(entry.lost_at));
                queue.insert((entry.due, id));
                if entry.acquiring || waiting.is_some() || !entry.renew || capped {
                    continue;
                }
                let ttl = match entry.hold_until() {
                    Some(until) => entry.ttl().min(until - now),
                    None => entry.ttl(),
                };
                if ttl < entry.ttl() {
                    // This renewal shortens the server's lease. If its answer is lost, the
                    // server may expire the lock at `now + ttl`: the holder must not believe
                    // in more than that.
                    entry.capped = true;
                    entry.lost_at = entry.lost_at.min(now + ttl - drift_margin(ttl));
                    lease.set_deadline(entry.lost_at.at(epoch));
                }
                let give_up = (now + answer_wait(entry.ttl())).min(entry.lost_at);
                entry.awaiting = give_up;
                entry.request = entry.request.wrapping_add(1);
                queue.remove(&(entry.due, id));
                entry.due = give_up;
                queue.insert((give_up, id));
                batch.push(Renewal { lease, ttl });
                ids.push(Sent {
                    id,
                    request: entry.request,
                    ttl,
                    give_up: give_up.at(epoch),
                });
            }
            let next = queue
                .first()
                .map_or(instant + IDLE_LOOK, |&(due, _)| due.at(epoch));
            guard.next_look = Some(next);
            next
        };
        for (lease, reason) in lost {
            if lease.mark_lost(reason) {
                tracing::warn!(key = %lease.key(), %reason, "lease lost");
            }
        }
        if unanswered > 0 {
            tracing::warn!(
                server = self.backend.server(),
                leases = unanswered,
                "no answer to lease renewals within a third of their ttl; retrying until the \
                 leases run out"
            );
        }
        let mut ids = ids.into_iter();
        for batch in batch.chunks(PIPELINE) {
            let these: Vec<Sent> = ids.by_ref().take(batch.len()).collect();
            // On the driver's runtime (the pinned one, when pinned): step runs there.
            self.background
                .spawn(self.clone().send(batch.to_vec(), these));
        }
        next
    }

    /// Sends one batch of renewals and books each part's answers as they arrive. Gives up
    /// when no lease of the batch waits for an answer any more: by then each has been sent
    /// again or lost, and only the latest renewal of a lease is booked.
    async fn send(self: Arc<Self>, batch: Vec<Renewal>, ids: Vec<Sent>) {
        let sent = Instant::now();
        let Some(last) = ids.iter().map(|sent| sent.give_up).max() else {
            return;
        };
        let book = |indices: &[usize], answer: Result<Vec<Option<bool>>, StoreError>| {
            self.book(&ids, indices, answer, sent);
        };
        let _ = tokio::time::timeout_at(last, self.backend.renew(&batch, &book)).await;
    }

    /// Books the answers to the renewals `indices` of a batch sent at `sent` (`answer` holds one
    /// per index, in the same order, or why that part of the batch got none).
    fn book(
        &self,
        ids: &[Sent],
        indices: &[usize],
        answer: Result<Vec<Option<bool>>, StoreError>,
        sent: Instant,
    ) {
        let mut lost = Vec::new();
        let mut wake = false;
        {
            let mut state = self.lock();
            let epoch = state.epoch;
            let now = Tick::since(epoch, Instant::now());
            let sent = Tick::since(epoch, sent);
            for (k, &i) in indices.iter().enumerate() {
                let Some(this) = ids.get(i) else {
                    continue;
                };
                let Some(entry) = state.entries.get_mut(&this.id) else {
                    continue;
                };
                let verdict = match &answer {
                    Ok(renewed) => renewed.get(k).copied().flatten(),
                    Err(_) => None,
                };
                // "Not ours" is final whichever renewal says it: a token is never granted
                // again once the lock was activated.
                if verdict == Some(false) {
                    if let Some(entry) = state.entries.remove(&this.id) {
                        state.queue.remove(&(entry.due, this.id));
                        lost.extend(entry.lease.upgrade());
                    }
                    continue;
                }
                if entry.request != this.request {
                    // A later renewal is on the wire; its answer is the one that counts.
                    continue;
                }
                entry.awaiting = Tick::NEVER;
                let next = if verdict == Some(true) {
                    entry.lost_at = sent + this.ttl - drift_margin(this.ttl);
                    if let Some(lease) = entry.lease.upgrade() {
                        lease.set_deadline(entry.lost_at.at(epoch));
                    }
                    sent + entry.ttl() / 3
                } else {
                    // No answer for this lease (its node or shard failed): try again soon.
                    now + (entry.ttl() / 10).max(RETRY_FLOOR)
                };
                let due = next.min(entry.lost_at);
                wake |= state
                    .next_look
                    .is_none_or(|look| due < Tick::since(epoch, look));
                state.reschedule(this.id, due);
            }
        }
        if let Err(err) = &answer {
            tracing::warn!(
                server = self.backend.server(),
                leases = indices.len(),
                error = %err,
                "lease renewal failed; retrying until the leases run out"
            );
        }
        for lease in lost {
            if lease.mark_lost(LostReason::NotOwner) {
                tracing::warn!(key = %lease.key(), reason = %LostReason::NotOwner, "lease lost");
            }
        }
        if wake {
            self.wake.notify_one();
        }
    }
}

/// How long a renewal's answer is waited for before it is sent again: a third of the lease's
/// own ttl, so that a lease still gets two tries before its deadline, whatever the other
/// leases of its batch.
fn answer_wait(ttl: Duration) -> Duration {
    (ttl / 3).max(RETRY_FLOOR)
}

/// The entries to handle at `now`: those due, and those whose renewal falls due soon (within a
/// twelfth of their ttl), so that renewals taken at different moments still share round trips.
fn due_now(queue: &BTreeSet<(Tick, u64)>, entries: &Entries<Entry>, now: Tick) -> Vec<(Tick, u64)> {
    let mut due = Vec::new();
    for &(when, id) in queue {
        if when <= now {
            due.push((when, id));
            continue;
        }
        if when > now + MAX_COALESCE {
            break;
        }
        let renewal_soon = entries.get(&id).is_some_and(|entry| {
            entry.renew
                && !entry.acquiring
                && entry.awaiting().is_none()
                && when < entry.lost_at
                && when <= now + entry.ttl() / 12
        });
        if renewal_soon {
            due.push((when, id));
        }
    }
    due
}

async fn drive(shared: Weak<Shared>, wake: Arc<Notify>) {
    loop {
        let notified = wake.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        let next = match shared.upgrade() {
            Some(shared) => shared.step(Instant::now()),
            None => return,
        };
        tokio::select! {
            () = tokio::time::sleep_until(next) => {}
            () = &mut notified => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;
    use crate::backend::{Acquire, Booking, BoxFuture, Release};
    use crate::key::Key;
    use crate::lease::Status;
    use crate::options::LockOptions;

    /// Two shards, as a cluster would have: renewals of `healthy:` keys are answered at once,
    /// those of `stalled:` keys only at `resumes` (a frozen master), each shard booked apart.
    struct OneShardStalled {
        resumes: Instant,
        healthy_rounds: AtomicUsize,
    }

    impl Store for OneShardStalled {
        fn describe(&self) -> &str {
            "two fake shards"
        }

        fn server(&self) -> &str {
            "fake"
        }

        fn acquire<'a>(
            &'a self,
            _key: &'a Key,
            _token: &'a str,
            _ttl: Duration,
            _ask: crate::backend::Ask,
        ) -> BoxFuture<'a, Result<Acquire, StoreError>> {
            Box::pin(async { Ok(Acquire::Acquired { fence: 1 }) })
        }

        fn renew<'a>(&'a self, batch: &'a [Renewal], book: Booking<'a>) -> BoxFuture<'a, ()> {
            Box::pin(async move {
                let (stalled, healthy): (Vec<usize>, Vec<usize>) =
                    (0..batch.len()).partition(|&i| batch[i].key().contains("stalled"));
                if !healthy.is_empty() {
                    self.healthy_rounds.fetch_add(1, Ordering::SeqCst);
                    book(&healthy, Ok(vec![Some(true); healthy.len()]));
                }
                if !stalled.is_empty() {
                    tokio::time::sleep_until(self.resumes).await;
                    book(&stalled, Ok(vec![Some(true); stalled.len()]));
                }
            })
        }

        fn release<'a>(
            &'a self,
            _key: &'a Key,
            _token: &'a str,
            _keep: Duration,
        ) -> BoxFuture<'a, Result<Release, StoreError>> {
            Box::pin(async { Ok(Release::Released) })
        }

        fn waits<'a>(
            &'a self,
            _key: &'a str,
            _update: &'a crate::protocol::waits::WaitsUpdate,
        ) -> BoxFuture<'a, Result<Vec<(String, String)>, StoreError>> {
            Box::pin(async { Ok(Vec::new()) })
        }

        fn watch<'a>(&'a self, _key: &'a str) -> BoxFuture<'a, Result<(), StoreError>> {
            Box::pin(async { Ok(()) })
        }

        fn unwatch(&self, _key: &str) {}
    }

    /// Holds `healthy:0..4` and `stalled:0..4` at `ttl` under a watchdog over `backend`.
    fn hold_eight(watchdog: &Watchdog, ttl: Duration) -> Vec<Arc<Lease>> {
        let mut leases = Vec::new();
        for shard in ["healthy", "stalled"] {
            for i in 0..4 {
                let key = format!("{shard}:{i}");
                let stored = Key::lock("lock:", &key).expect("a valid key");
                let options = LockOptions::new().ttl(ttl);
                let lease = Arc::new(Lease::new(
                    stored,
                    crate::lease::Token::from_text(&format!("token-{shard}-{i}"))
                        .expect("a short token"),
                    0,
                    options,
                    Instant::now(),
                ));
                let id = watchdog.register(&lease);
                lease.mark_held(1);
                watchdog.activate(id);
                leases.push(lease);
            }
        }
        leases
    }

    fn watchdog_over(backend: &Arc<OneShardStalled>) -> Watchdog {
        Watchdog::new(
            backend.clone(),
            crate::background::Background::pinned_to(None),
        )
    }

    #[test]
    fn an_entry_stays_small() {
        // One per held lease: ten thousand held locks keep ten thousand of them.
        assert!(
            std::mem::size_of::<Entry>() <= 64,
            "{}",
            std::mem::size_of::<Entry>()
        );
    }

    #[test]
    fn moments_come_back_from_the_clock_as_they_went_in() {
        let epoch = Instant::now();
        for at in [
            epoch,
            epoch + Duration::from_nanos(1),
            epoch + Duration::from_secs(3600),
            epoch - Duration::from_millis(5),
        ] {
            assert_eq!(Tick::since(epoch, at).at(epoch), at);
        }
        let tick = Tick::since(epoch, epoch + Duration::from_secs(10));
        assert_eq!(tick + Duration::from_secs(5) - tick, Duration::from_secs(5));
        assert_eq!(tick - (tick + Duration::from_secs(5)), Duration::ZERO);
        // A sum too far to name stays short of "never".
        assert!(tick + Duration::MAX < Tick::NEVER);
        assert_eq!(Tick::NEVER.set(), None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_shard_that_never_answers_costs_only_its_own_leases() {
        let backend = Arc::new(OneShardStalled {
            resumes: Instant::now() + Duration::from_secs(3600),
            healthy_rounds: AtomicUsize::new(0),
        });
        let watchdog = watchdog_over(&backend);
        let ttl = Duration::from_millis(900);
        let leases = hold_eight(&watchdog, ttl);
        let started = Instant::now();
        tokio::time::sleep(Duration::from_secs(3)).await;
        for lease in &leases {
            if lease.key().starts_with("healthy") {
                assert!(
                    lease.is_held(),
                    "{} lost with its shard healthy",
                    lease.key()
                );
            } else {
                assert_eq!(
                    lease.status(),
                    Status::Lost(LostReason::Expired),
                    "{}",
                    lease.key()
                );
                // Never renewed: its deadline is the first one, a ttl after the start.
                assert_eq!(lease.deadline(), started + ttl - drift_margin(ttl));
            }
        }
        // Renewed about every ttl / 3 all along, never held up by the silent shard.
        let rounds = backend.healthy_rounds.load(Ordering::SeqCst);
        assert!((8..=12).contains(&rounds), "{rounds} rounds in 3 s");
    }

    #[tokio::test(start_paused = true)]
    async fn a_shard_that_answers_before_the_deadline_keeps_its_leases() {
        let ttl = Duration::from_millis(900);
        let backend = Arc::new(OneShardStalled {
            // The first renewal goes out at 300 ms and waits until 700 ms for an answer: it
            // is sent again at 600 ms, and that second renewal's answer is booked.
            resumes: Instant::now() + Duration::from_millis(700),
            healthy_rounds: AtomicUsize::new(0),
        });
        let watchdog = watchdog_over(&backend);
        let leases = hold_eight(&watchdog, ttl);
        tokio::time::sleep(Duration::from_secs(3)).await;
        for lease in &leases {
            assert!(lease.is_held(), "{} lost", lease.key());
            assert!(lease.remaining() > ttl / 2, "{}", lease.key());
        }
    }
}
