//! Deadlocks between waiters: a task that waits for a lock while it holds others, and another
//! task (of this process or another) that holds what the first waits for while waiting, itself
//! or through others, for what the first holds.
//!
//! Each manager keeps the calls of its process that wait ([`Deadlocks::enter`]), and while any
//! do, a detector runs every [`TICK`]:
//! - It reads what each waiting task holds from the watchdog, and finds the cycles among this
//!   process's waiters without the server.
//! - It publishes the waits of tasks that hold other locks at once, and the others once they
//!   have waited [`PUBLISH_AFTER`], and again every [`REFRESH_IDLE`] (for `lockctl` to show
//!   who waits), to the hash of
//!   [`protocol::waits`](crate::protocol::waits), in the same round trip that reads the other
//!   processes' records when one of its waiters holds something. A call that never waits
//!   costs nothing; one that waits without holding costs one write per process every two
//!   seconds after its first quarter second.
//! - A cycle with members in other processes is acted on once it has been seen twice, and each
//!   of those members' records was written again in between (their processes are alive and
//!   still wait): a record left by a process that died, or by a wait that just ended, cannot
//!   fail anyone.
//! - A cycle is logged once at `WARN`, and its victim (the youngest wait among the members that
//!   chose [`Deadlock::Fail`]) is told, if it waits here: it gives up with
//!   [`LockError::Deadlock`](crate::LockError::Deadlock).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::{Duration, UNIX_EPOCH};

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::backend::Store;
use crate::background::Background;
use crate::cycle::{CycleMember, DeadlockCycle};
use crate::lease::{Lease, Owner};
use crate::options::Deadlock;
use crate::protocol::waits::{
    WaitRecord, WaitsUpdate, cycle_id, find_cycles, victim, waits_key, written_at,
};
use crate::watchdog::Watchdog;

/// How often a manager with waiters looks for deadlocks and refreshes its published waits.
pub(crate) const TICK: Duration = Duration::from_millis(200);

/// How long a call that holds nothing else waits before its wait is published.
pub(crate) const PUBLISH_AFTER: Duration = Duration::from_millis(250);

/// How long a published record stands unless written again.
const KEEP: Duration = Duration::from_secs(5);

/// How often the record of a call whose task holds nothing else is written again: it cannot be
/// part of a cycle, and is published only for `lockctl` to show who waits (a candidate of an
/// election waits for as long as the leader leads).
const REFRESH_IDLE: Duration = Duration::from_secs(2);

/// Ticks without waiters before the detector stops (it starts again with the next waiter).
const IDLE_TICKS: u32 = 5;

/// Named by the records of its members, as the detector finds it.
impl DeadlockCycle {
    /// The cycle of `records` named with the lock names under `prefix`, starting at `first`.
    pub(crate) fn of(records: &[WaitRecord], prefix: &str, first: &str) -> DeadlockCycle {
        let start = records
            .iter()
            .position(|record| record.waiter == first)
            .unwrap_or(0);
        let name = |stored: &str| {
            crate::inspect::lock_name(prefix, stored).unwrap_or_else(|| stored.to_owned())
        };
        let members = records[start..]
            .iter()
            .chain(&records[..start])
            .map(|record| CycleMember {
                waits_for: name(&record.waits_for),
                holds: record.holds.iter().map(|(key, _)| name(key)).collect(),
                host: record.host.clone(),
                pid: record.pid,
                app: record.app.clone(),
                waiting_since: UNIX_EPOCH + Duration::from_millis(record.since_ms),
            })
            .collect();
        DeadlockCycle { members }
    }
}

/// One waiting call, while it waits.
pub(crate) struct Wait {
    /// Its waiter id: 16 hex digits.
    id: String,
    /// The stored key it waits for.
    key: String,
    task: Owner,
    since_ms: u64,
    started: Instant,
    fail: bool,
    /// The holder the last busy answer named (its token id).
    blocked_by: Mutex<Option<String>>,
    /// The cycle it gives up in, once it is the victim of one.
    verdict: Mutex<Option<DeadlockCycle>>,
    /// The last cycle it was found part of, starting with it, whether or not it gives up: what
    /// its `Busy` names when no member chose to give up.
    part_of: Mutex<Option<Box<DeadlockCycle>>>,
    doomed: Notify,
    /// Written to the server at least once: its end is removed there too.
    published: AtomicBool,
    /// When its record was last written.
    written: Mutex<Option<Instant>>,
}

impl Wait {
    /// The holder of the key this call waits for, as the last busy answer named it.
    pub(crate) fn blocked_by(&self, holder: Option<String>) {
        *self
            .blocked_by
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = holder;
    }

    /// The cycle this call is the victim of, if it is one.
    pub(crate) fn verdict(&self) -> Option<DeadlockCycle> {
        self.verdict
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Ends when this call is the victim of a deadlock.
    pub(crate) async fn doomed(&self) {
        let notified = self.doomed.notified();
        if self.verdict().is_some() {
            return;
        }
        notified.await;
    }

    /// The last deadlock this call was found part of, starting with it.
    pub(crate) fn part_of(&self) -> Option<Box<DeadlockCycle>> {
        self.part_of
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn doom(&self, cycle: DeadlockCycle) {
        let mut verdict = self.verdict.lock().unwrap_or_else(PoisonError::into_inner);
        if verdict.is_none() {
            *verdict = Some(cycle);
            self.doomed.notify_waiters();
        }
    }
}

/// A call's place among its manager's waiters; leaves it when dropped.
pub(crate) struct Entered {
    deadlocks: Weak<Deadlocks>,
    pub(crate) wait: Arc<Wait>,
}

impl Drop for Entered {
    fn drop(&mut self) {
        if let Some(deadlocks) = self.deadlocks.upgrade() {
            deadlocks.leave(&self.wait);
        }
    }
}

/// What the detector reaches of its manager, and no more: the deployment it publishes waits to
/// and reads them from, the watchdog that knows what each task holds, where its task runs, how
/// long a request may take, and whether the manager is closed. Handed over when the manager is
/// put together: the manager's state holds the detector, never the other way round.
pub(crate) struct Reach {
    pub(crate) backend: Arc<dyn Store>,
    pub(crate) watchdog: Watchdog,
    pub(crate) background: Background,
    pub(crate) request_timeout: Duration,
    /// The manager's own flag (see [`LockManager::shutdown`](crate::LockManager::shutdown)).
    pub(crate) closed: Arc<AtomicBool>,
}

/// What a manager knows of its waiters for deadlock detection.
pub(crate) struct Deadlocks {
    /// The default of calls that set no [`Deadlock`].
    default: Deadlock,
    /// The hash of published waits.
    key: String,
    prefix: String,
    host: Option<String>,
    pid: u32,
    app: Option<String>,
    state: Mutex<State>,
    /// Held while the published waits are written: shutdown's withdrawal of them waits for a
    /// write under way, which could otherwise put a record back after it.
    writing: tokio::sync::Mutex<()>,
    reach: Reach,
    /// Whether the log said that the store keeps no published waits.
    said_local: std::sync::atomic::AtomicBool,
}

#[derive(Default)]
struct State {
    waits: HashMap<String, Arc<Wait>>,
    /// Published waits that ended, or records found past their deadline: removed at the next
    /// tick.
    ended: Vec<String>,
    /// The detector, while one runs: it stops when idle, and dies with the runtime it was
    /// spawned on (the caller's, unless the manager is pinned), to be started again then.
    detector: Option<tokio::task::JoinHandle<()>>,
    /// Cycles with members elsewhere, by their members' ids: when each member's record was
    /// written when the cycle was first seen.
    seen: HashMap<Vec<String>, BTreeMap<String, u64>>,
    /// Cycles logged already (while they last).
    reported: HashSet<Vec<String>>,
}

impl Deadlocks {
    pub(crate) fn new(
        default: Deadlock,
        prefix: &str,
        app: Option<&str>,
        reach: Reach,
    ) -> Deadlocks {
        Deadlocks {
            default,
            key: waits_key(prefix),
            prefix: prefix.to_owned(),
            host: gethostname::gethostname().into_string().ok(),
            pid: std::process::id(),
            app: app.map(str::to_owned),
            state: Mutex::default(),
            writing: tokio::sync::Mutex::default(),
            said_local: Default::default(),
            reach,
        }
    }

    /// The detector of another manager, reached through `reach`, with this one's settings (the
    /// `testing` kit's).
    #[cfg(feature = "testing")]
    pub(crate) fn alike(&self, reach: Reach) -> Deadlocks {
        Deadlocks {
            default: self.default,
            key: self.key.clone(),
            prefix: self.prefix.clone(),
            host: self.host.clone(),
            pid: self.pid,
            app: self.app.clone(),
            state: Mutex::default(),
            writing: tokio::sync::Mutex::default(),
            said_local: Default::default(),
            reach,
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The call of `lease` begins to wait for its plain lock, held by `blocked_by` (a token id)
    /// if known: it is followed until the returned place is dropped. Starts the detector if
    /// none runs.
    pub(crate) fn enter(
        this: &Arc<Deadlocks>,
        lease: &Lease,
        blocked_by: Option<String>,
    ) -> Entered {
        let fail = lease.options.deadlock.unwrap_or(this.default) == Deadlock::Fail;
        let wait = Arc::new(Wait {
            id: format!("{:016x}", rand_u64()),
            key: lease.stored.lock.clone(),
            task: lease.task,
            since_ms: crate::protocol::now_ms(),
            started: Instant::now(),
            fail,
            blocked_by: Mutex::new(blocked_by),
            verdict: Mutex::new(None),
            part_of: Mutex::new(None),
            doomed: Notify::new(),
            published: AtomicBool::new(false),
            written: Mutex::new(None),
        });
        {
            let mut state = this.state();
            state.waits.insert(wait.id.clone(), wait.clone());
            if state
                .detector
                .as_ref()
                .is_none_or(tokio::task::JoinHandle::is_finished)
            {
                state.detector = this
                    .reach
                    .background
                    .try_spawn(detect(Arc::downgrade(this)));
            }
        }
        Entered {
            deadlocks: Arc::downgrade(this),
            wait,
        }
    }

    fn leave(&self, wait: &Wait) {
        let mut state = self.state();
        state.waits.remove(&wait.id);
        if wait.published.load(Ordering::Acquire) {
            state.ended.push(wait.id.clone());
        }
    }

    /// The record of `wait` now, its task holding `holds`.
    fn record(&self, wait: &Wait, holds: Vec<(String, String)>, now_ms: u64) -> WaitRecord {
        WaitRecord {
            waiter: wait.id.clone(),
            waits_for: wait.key.clone(),
            blocked_by: wait
                .blocked_by
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone(),
            holds,
            since_ms: wait.since_ms,
            at_ms: now_ms,
            until_ms: now_ms + crate::protocol::millis(KEEP),
            fail: wait.fail,
            host: self.host.clone(),
            pid: Some(self.pid),
            app: self.app.clone(),
        }
    }

    /// Takes every wait this process published off the server, for shutdown (after its calls
    /// stopped waiting): once the manager is closed nothing is published again, so nothing of
    /// the process is left in the hash when this returns (unless the server did not answer
    /// within a request timeout: then the records end with their [`KEEP`]).
    pub(crate) async fn withdraw(&self) {
        if !self.reach.backend.keeps_waits() {
            return;
        }
        let _writing = self.writing.lock().await;
        let remove = {
            let mut state = self.state();
            let mut remove = std::mem::take(&mut state.ended);
            remove.extend(
                state
                    .waits
                    .values()
                    .filter(|wait| wait.published.load(Ordering::Acquire))
                    .map(|wait| wait.id.clone()),
            );
            remove
        };
        if remove.is_empty() {
            return;
        }
        let reach = &self.reach;
        let update = WaitsUpdate {
            set: Vec::new(),
            remove,
            keep: KEEP,
            read: false,
        };
        let answer = tokio::time::timeout(
            reach.request_timeout,
            reach.backend.waits(&self.key, &update),
        )
        .await;
        if !matches!(answer, Ok(Ok(_))) {
            tracing::debug!(
                server = reach.backend.server(),
                "could not take the published waits of this process off the server; they end within {KEEP:?}"
            );
        }
    }

    /// Whether waits are published to the store: where it keeps none, detection sees this
    /// process only, as the log says once.
    fn publishes(&self) -> bool {
        let keeps = self.reach.backend.keeps_waits();
        if !keeps && !self.said_local.swap(true, Ordering::Relaxed) {
            tracing::info!(
                store = self.reach.backend.describe(),
                "the store keeps no published waits: deadlock detection sees the waits of this \
                 process only"
            );
        }
        keeps
    }

    /// One round of detection; whether anything is left to follow.
    async fn tick(&self) -> bool {
        let reach = &self.reach;
        // A closed manager publishes nothing more (see `withdraw`).
        let _writing = self.writing.lock().await;
        let closed = reach.closed.load(Ordering::Acquire);
        let now = Instant::now();
        let now_ms = crate::protocol::now_ms();
        let (waits, ended) = {
            let mut state = self.state();
            let waits: Vec<Arc<Wait>> = state.waits.values().cloned().collect();
            (waits, std::mem::take(&mut state.ended))
        };
        let tasks: HashSet<Owner> = waits.iter().map(|wait| wait.task).collect();
        let mut held = reach.watchdog.locks_held_by(&tasks);
        let local: Vec<(Arc<Wait>, WaitRecord)> = waits
            .into_iter()
            .map(|wait| {
                let holds = held
                    .get_mut(&wait.task)
                    .map(|holds| {
                        holds
                            .iter()
                            .filter(|(key, _)| *key != wait.key)
                            .cloned()
                            .collect()
                    })
                    .unwrap_or_default();
                let record = self.record(&wait, holds, now_ms);
                (wait, record)
            })
            .collect();
        let records: Vec<WaitRecord> = local.iter().map(|(_, record)| record.clone()).collect();
        // Within this process: what the watchdog says is held now.
        for cycle in find_cycles(&records) {
            self.found(&cycle, &local);
        }
        if !self.publishes() {
            let mut state = self.state();
            state.ended.clear();
            return !state.waits.is_empty();
        }
        let holding = records.iter().any(|record| !record.holds.is_empty());
        let set: Vec<(String, String)> = local
            .iter()
            .filter(|(wait, record)| {
                if closed {
                    return false;
                }
                let mut written = wait.written.lock().unwrap_or_else(PoisonError::into_inner);
                let due = if record.holds.is_empty() {
                    now.duration_since(wait.started) >= PUBLISH_AFTER
                        && written.is_none_or(|at| now.duration_since(at) >= REFRESH_IDLE)
                } else {
                    true
                };
                if due {
                    *written = Some(now);
                }
                due
            })
            .map(|(wait, record)| {
                wait.published.store(true, Ordering::Release);
                (record.waiter.clone(), record.format())
            })
            .collect();
        let update = WaitsUpdate {
            set,
            remove: ended,
            keep: KEEP,
            read: holding && !closed,
        };
        if !update.is_empty() {
            let answer = tokio::time::timeout(
                reach.request_timeout,
                reach.backend.waits(&self.key, &update),
            )
            .await;
            match answer {
                Ok(Ok(read)) => self.across(read, &local, records, now_ms),
                _ => {
                    tracing::debug!(
                        server = reach.backend.server(),
                        "could not publish or read the waits of this process; trying again"
                    );
                    self.state().ended.extend(update.remove);
                }
            }
            // A call that stopped waiting after this round read its wait, but before its record
            // was marked published, did not leave it to be removed: it is removed next.
            let mut state = self.state();
            for (id, _) in update.set {
                if !state.waits.contains_key(&id) && !state.ended.contains(&id) {
                    state.ended.push(id);
                }
            }
        }
        let state = self.state();
        !state.waits.is_empty() || !state.ended.is_empty()
    }

    /// Looks for cycles across processes in the records `read`, beside this process's `local`
    /// ones.
    fn across(
        &self,
        read: Vec<(String, String)>,
        local: &[(Arc<Wait>, WaitRecord)],
        mut records: Vec<WaitRecord>,
        now_ms: u64,
    ) {
        let ours: HashSet<&str> = local
            .iter()
            .map(|(_, record)| record.waiter.as_str())
            .collect();
        let mut stale = Vec::new();
        let mut others = 0;
        for (waiter, text) in read {
            if ours.contains(waiter.as_str()) {
                continue;
            }
            match WaitRecord::parse(&waiter, &text) {
                Some(record) if record.stands_at(now_ms) => {
                    records.push(record);
                    others += 1;
                }
                // Left by a process that stopped writing it, or unreadable.
                _ => stale.push(waiter),
            }
        }
        let mut seen = HashMap::new();
        if others > 0 {
            for cycle in find_cycles(&records) {
                let members = cycle
                    .iter()
                    .filter(|member| ours.contains(member.waiter.as_str()));
                let mine = members.count();
                if mine == 0 || mine == cycle.len() {
                    continue;
                }
                let id = cycle_id(&cycle);
                let now_written = written_at(&cycle);
                let first = self.state().seen.get(&id).cloned();
                match first {
                    // Every member elsewhere wrote its record again since: alive, and waiting.
                    Some(first)
                        if cycle.iter().all(|member| {
                            ours.contains(member.waiter.as_str())
                                || first
                                    .get(&member.waiter)
                                    .is_some_and(|&at| member.at_ms > at)
                        }) =>
                    {
                        self.found(&cycle, local);
                        seen.insert(id, first);
                    }
                    Some(first) => {
                        seen.insert(id, first);
                    }
                    None => {
                        seen.insert(id, now_written);
                    }
                }
            }
        }
        let mut state = self.state();
        state.seen = seen;
        state.ended.extend(stale);
    }

    /// A deadlock `cycle` stands: logged once, and its victim told if it waits here.
    fn found(&self, cycle: &[WaitRecord], local: &[(Arc<Wait>, WaitRecord)]) {
        let id = cycle_id(cycle);
        let chosen = victim(cycle);
        let first = chosen.map_or(cycle[0].waiter.as_str(), |chosen| chosen.waiter.as_str());
        let named = DeadlockCycle::of(cycle, &self.prefix, first);
        if self.state().reported.insert(id) {
            tracing::warn!(
                cycle = %named,
                gives_up = chosen.is_some(),
                "deadlock among lock waiters"
            );
        }
        // Every member here learns the cycle it is part of: a wait that nobody fails ends
        // `Busy`, and says why it waited so long.
        for member in cycle {
            if let Some((wait, _)) = local.iter().find(|(wait, _)| wait.id == member.waiter) {
                let from_it = DeadlockCycle::of(cycle, &self.prefix, &member.waiter);
                *wait.part_of.lock().unwrap_or_else(PoisonError::into_inner) =
                    Some(Box::new(from_it));
            }
        }
        let Some(chosen) = chosen else { return };
        if let Some((wait, _)) = local.iter().find(|(wait, _)| wait.id == chosen.waiter) {
            wait.doom(named);
        }
    }

    /// Stops the detector if nothing is left to follow; whether it stopped.
    fn stop_if_idle(&self) -> bool {
        let mut state = self.state();
        if state.waits.is_empty() && state.ended.is_empty() {
            state.detector = None;
            state.seen.clear();
            state.reported.clear();
            true
        } else {
            false
        }
    }
}

/// The detector of one manager: a tick every [`TICK`] while it has waiters.
async fn detect(deadlocks: Weak<Deadlocks>) {
    let mut ticks = tokio::time::interval(TICK);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut idle = 0;
    loop {
        ticks.tick().await;
        let Some(deadlocks) = deadlocks.upgrade() else {
            return;
        };
        let busy = deadlocks.tick().await;
        if busy {
            idle = 0;
            continue;
        }
        idle += 1;
        if idle >= IDLE_TICKS && deadlocks.stop_if_idle() {
            return;
        }
    }
}

/// 64 random bits, for a waiter id.
fn rand_u64() -> u64 {
    let bytes = uuid::Uuid::new_v4().into_bytes();
    u64::from_le_bytes([
        bytes[0], bytes[1], bytes[2], bytes[3], bytes[4], bytes[5], bytes[6], bytes[7],
    ])
}
