//! The renewal driver: one task per manager renews every held lease at about a third of its ttl,
//! sending the renewals that fall due together as one pipelined round trip, and declares a lease
//! lost when renewal proves it gone or its local deadline passes without a successful renewal.
//!
//! A lease is registered before its acquire is sent and unregistered synchronously when it is
//! released, so no renewal is ever sent for a lock that was already given back. Renewals check the
//! owner token on the server, so even one that crosses a release on the wire cannot extend anyone
//! else's lock. The driver holds leases and its own state weakly: it never keeps a manager alive.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::LostReason;
use crate::backend::{Backend, Renewal};
use crate::background::Background;
use crate::lease::{Lease, drift_margin};

/// Retry a failed renewal this often (bounded by the lease's own deadline).
const RETRY_FLOOR: Duration = Duration::from_millis(20);

/// Renewals due within this long (and within a twelfth of their ttl) join the current batch.
const MAX_COALESCE: Duration = Duration::from_secs(1);

/// An idle driver (no lease tracked) still looks this often, so that registering a lease whose
/// first deadline is further away than this does not have to wake it.
const IDLE_LOOK: Duration = Duration::from_secs(1);

/// Renewals go out in pipelines of at most this many, one after the other: still one round trip
/// per thousand leases, without building one huge request (and its answer) for ten thousand.
const PIPELINE: usize = 1000;

pub(crate) struct Watchdog {
    shared: Arc<Shared>,
}

struct Shared {
    state: Mutex<State>,
    wake: Arc<Notify>,
    backend: Arc<dyn Backend>,
    background: Background,
}

#[derive(Default)]
struct State {
    next_id: u64,
    entries: HashMap<u64, Entry>,
    /// (when, entry id): the next thing to do for each entry, earliest first.
    queue: BTreeSet<(Instant, u64)>,
    /// The driver task, started on first use and again if the runtime it ran on has shut down.
    driver: Option<tokio::task::JoinHandle<()>>,
    /// When the driver will look again by itself (None: not known, so wake it). Work due later
    /// than this needs no wake-up: most locks are released long before their first renewal.
    next_look: Option<Instant>,
}

struct Entry {
    lease: Weak<Lease>,
    due: Instant,
    /// The local end of the lease: past it without a successful renewal, the lease is lost.
    lost_at: Instant,
    ttl: Duration,
    renew: bool,
    /// The acquire is on the wire: only the deadline is watched until it is answered.
    acquiring: bool,
    /// A renewal is on the wire: wait for its answer (or the deadline).
    in_flight: bool,
    hold_until: Option<Instant>,
    /// max_hold has shortened or stopped the renewals: the coming loss is its doing.
    capped: bool,
}

impl Drop for Shared {
    fn drop(&mut self) {
        // Lets the driver see that its manager is gone and stop.
        self.wake.notify_one();
    }
}

impl Watchdog {
    pub(crate) fn new(backend: Arc<dyn Backend>, background: Background) -> Self {
        Watchdog {
            shared: Arc::new(Shared {
                state: Mutex::new(State::default()),
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
        let lost_at = lease.deadline();
        let mut state = self.shared.lock();
        state.next_id += 1;
        let id = state.next_id;
        state.entries.insert(
            id,
            Entry {
                lease: Arc::downgrade(lease),
                due: lost_at,
                lost_at,
                ttl,
                renew: lease.options.watchdog,
                acquiring: true,
                in_flight: false,
                capped: false,
                hold_until: lease
                    .options
                    .max_hold
                    .and_then(|max| lease.started().checked_add(max)),
            },
        );
        state.queue.insert((lost_at, id));
        self.shared.start_driver(&mut state, lost_at);
        id
    }

    /// The acquire succeeded: schedule the first renewal at a third of the ttl.
    pub(crate) fn activate(&self, id: u64) {
        let mut state = self.shared.lock();
        let Some(entry) = state.entries.get_mut(&id) else {
            return;
        };
        entry.acquiring = false;
        if !entry.renew {
            return;
        }
        let Some(lease) = entry.lease.upgrade() else {
            return;
        };
        let first = (lease.started() + entry.ttl / 3).min(entry.lost_at);
        state.reschedule(id, first);
        if state.next_look.is_none_or(|look| first < look) {
            drop(state);
            self.shared.wake.notify_one();
        }
    }

    /// Stops all work for a lease. Synchronous: once it returns, no renewal of it will be sent.
    pub(crate) fn unregister(&self, id: u64) {
        let mut state = self.shared.lock();
        if let Some(entry) = state.entries.remove(&id) {
            state.queue.remove(&(entry.due, id));
        }
    }

    /// Whether task `task` holds the lock `key` through this manager with a lease the watchdog
    /// renews: waiting for it could only end with the wait budget. (A fixed lease runs out,
    /// and then the wait ends too.) Looks at every tracked lease: for the slow path of a busy
    /// answer only.
    pub(crate) fn held_by_task(&self, key: &str, task: crate::lease::Owner) -> bool {
        let state = self.shared.lock();
        state.entries.values().any(|entry| {
            entry.lease.upgrade().is_some_and(|lease| {
                lease.task == task
                    && lease.options.watchdog
                    && lease.key == key
                    && lease.status() == crate::lease::Status::Held
            })
        })
    }

    /// Stops all work for every lease and returns those still alive: for shutdown, which
    /// releases them. Synchronous, as [`Watchdog::unregister`].
    pub(crate) fn drain(&self) -> Vec<Arc<Lease>> {
        let mut state = self.shared.lock();
        state.queue.clear();
        state
            .entries
            .drain()
            .filter_map(|(_, entry)| entry.lease.upgrade())
            .collect()
    }
}

impl State {
    fn reschedule(&mut self, id: u64, due: Instant) {
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
                entry.in_flight = false;
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
        let next = {
            let mut guard = self.lock();
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
                let capped = entry.hold_until.is_some_and(|until| now >= until);
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
                // Whatever happens next, the deadline is watched.
                entry.due = entry.lost_at;
                queue.insert((entry.lost_at, id));
                if entry.acquiring || entry.in_flight || !entry.renew || capped {
                    continue;
                }
                let ttl = match entry.hold_until {
                    Some(until) => entry.ttl.min(until - now),
                    None => entry.ttl,
                };
                if ttl < entry.ttl {
                    // This renewal shortens the server's lease. If its answer is lost, the
                    // server may expire the lock at `now + ttl`: the holder must not believe
                    // in more than that.
                    entry.capped = true;
                    entry.lost_at = entry.lost_at.min(now + ttl - drift_margin(ttl));
                    lease.set_deadline(entry.lost_at);
                    queue.remove(&(entry.due, id));
                    entry.due = entry.lost_at;
                    queue.insert((entry.due, id));
                }
                entry.in_flight = true;
                batch.push(Renewal { lease, ttl });
                ids.push((id, ttl));
            }
            let next = queue.first().map_or(now + IDLE_LOOK, |&(due, _)| due);
            guard.next_look = Some(next);
            next
        };
        for (lease, reason) in lost {
            if lease.mark_lost(reason) {
                tracing::warn!(key = %lease.key, %reason, "lease lost");
            }
        }
        if !batch.is_empty() {
            let shared = self.clone();
            tokio::spawn(async move {
                let mut ids = ids.as_slice();
                for batch in batch.chunks(PIPELINE) {
                    let (these, rest) = ids.split_at(batch.len());
                    ids = rest;
                    shared.clone().send(batch, these, Instant::now()).await;
                }
            });
        }
        next
    }

    /// Sends one batch of renewals and books the answers.
    async fn send(self: Arc<Self>, batch: &[Renewal], ids: &[(u64, Duration)], sent: Instant) {
        let shortest = ids.iter().map(|&(_, ttl)| ttl).min().unwrap_or_default();
        let answer =
            match tokio::time::timeout((shortest / 3).max(RETRY_FLOOR), self.backend.renew(batch))
                .await
            {
                Ok(Ok(renewed)) if renewed.len() == ids.len() => Ok(renewed),
                Ok(Ok(renewed)) => Err(format!(
                    "{} answers to {} renewals",
                    renewed.len(),
                    ids.len()
                )),
                Ok(Err(err)) => Err(err.to_string()),
                Err(_) => Err(format!(
                    "no answer within {:?}",
                    (shortest / 3).max(RETRY_FLOOR)
                )),
            };
        let now = Instant::now();
        let mut lost = Vec::new();
        {
            let mut state = self.lock();
            for (i, &(id, ttl)) in ids.iter().enumerate() {
                let Some(entry) = state.entries.get_mut(&id) else {
                    continue;
                };
                entry.in_flight = false;
                let next = match &answer {
                    Ok(renewed) if renewed[i] == Some(true) => {
                        entry.lost_at = sent + ttl - drift_margin(ttl);
                        if let Some(lease) = entry.lease.upgrade() {
                            lease.set_deadline(entry.lost_at);
                        }
                        Some(sent + entry.ttl / 3)
                    }
                    Ok(renewed) if renewed[i] == Some(false) => None,
                    // No answer for this lease (its node or shard failed): try again soon.
                    _ => Some(now + (entry.ttl / 10).max(RETRY_FLOOR)),
                };
                match next {
                    Some(next) => {
                        let due = next.min(entry.lost_at);
                        state.reschedule(id, due);
                    }
                    None => {
                        if let Some(entry) = state.entries.remove(&id) {
                            state.queue.remove(&(entry.due, id));
                            lost.extend(entry.lease.upgrade());
                        }
                    }
                }
            }
        }
        if let Err(err) = &answer {
            tracing::warn!(
                server = self.backend.server(),
                leases = ids.len(),
                error = %err,
                "lease renewal failed; retrying until the leases run out"
            );
        }
        for lease in lost {
            if lease.mark_lost(LostReason::NotOwner) {
                tracing::warn!(key = %lease.key, reason = %LostReason::NotOwner, "lease lost");
            }
        }
        self.wake.notify_one();
    }
}

/// The entries to handle at `now`: those due, and those whose renewal falls due soon (within a
/// twelfth of their ttl), so that renewals taken at different moments still share round trips.
fn due_now(
    queue: &BTreeSet<(Instant, u64)>,
    entries: &HashMap<u64, Entry>,
    now: Instant,
) -> Vec<(Instant, u64)> {
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
                && !entry.in_flight
                && when < entry.lost_at
                && when <= now + entry.ttl / 12
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
