//! Locks in this process's memory, with the semantics of the Redis backend: leases that expire,
//! owner tokens, fencing tokens, hold_at_least, and release notifications to waiters.
//!
//! `memory://` names one lock table for the whole process and `memory://<name>` another one per
//! name, so that managers connected to the same URL exclude each other as they would on one
//! Redis. Named tables live as long as the process: their fencing tokens must never go back.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

mod inspect;

use super::{
    Acquire, Ask, Booking, BoxFuture, FAIR_TURN, Line, Release, Renewal, Store, StoreError,
    permits_differ, whole,
};
use crate::key::Key;
use crate::protocol::release_id;
use crate::protocol::waits::WaitsUpdate;
use crate::shape::{Mode, Shape};
use crate::store::{Changes, HolderId, Notice, NoticeKind, Stolen};
use crate::waiters::Waiters;

pub(crate) struct MemoryBackend {
    state: Mutex<State>,
    /// Every manager on this table shares these, so one release wakes one waiter in the
    /// process, whichever manager it waits through.
    waiters: Arc<Waiters>,
    /// The managers on this table, told every notice (see [`Store::announce`]).
    attached: Mutex<Vec<Changes>>,
    describe: String,
}

/// The process's named tables; `""` is the one `memory://` names.
static TABLES: LazyLock<Mutex<HashMap<String, Arc<MemoryBackend>>>> = LazyLock::new(Mutex::default);

#[derive(Default)]
struct State {
    locks: HashMap<String, Entry>,
    /// The lines of fair waiters, by key (as queue.lua keeps them on Redis).
    lines: HashMap<String, FairLine>,
    /// The semaphores, by stored name (as semaphore.lua keeps them on Redis).
    semaphores: HashMap<String, Semaphore>,
    /// The read-write locks, by stored name (as rw_acquire.lua keeps them on Redis).
    read_write: HashMap<String, ReadWrite>,
    /// One counter for all keys: strictly increasing per key, and never reset while the process
    /// lives.
    last_fence: u64,
    /// Expired entries are dropped when met, and in a sweep whenever the map doubles.
    sweep_at: usize,
    /// The hashes of published waits (see `protocol::waits`), by name: records by waiter id,
    /// and when the hash expires.
    waits: HashMap<String, (HashMap<String, String>, Instant)>,
}

struct Entry {
    /// Empty while kept only by hold_at_least.
    token: String,
    fence: u64,
    expires: Instant,
}

/// The holders of one semaphore.
struct Semaphore {
    /// The number its holders declared: a caller declaring another is refused while any
    /// holder is left.
    permits: u32,
    /// Owner token, and when its lease ends.
    holders: Vec<(String, Instant)>,
}

impl Semaphore {
    fn drop_ended(&mut self, now: Instant) {
        self.holders.retain(|(_, end)| *end > now);
    }

    /// The live holder `token`'s lease end, if it holds a permit.
    fn holder(&mut self, token: &str, now: Instant) -> Option<&mut Instant> {
        self.holders
            .iter_mut()
            .find(|(own, end)| own == token && *end > now)
            .map(|(_, end)| end)
    }
}

/// One read-write lock: its readers, its writer, and the writer waiting for its turn.
#[derive(Default)]
struct ReadWrite {
    /// Owner token, and when its share's lease ends.
    readers: Vec<(String, Instant)>,
    writer: Option<(String, Instant)>,
    /// While it lasts, new readers wait (see rw_acquire.lua's writer-waiting marker).
    writer_waiting: Option<(String, Instant)>,
}

impl ReadWrite {
    fn drop_ended(&mut self, now: Instant) {
        self.readers.retain(|(_, end)| *end > now);
        if self.writer.as_ref().is_some_and(|(_, end)| *end <= now) {
            self.writer = None;
        }
        if self
            .writer_waiting
            .as_ref()
            .is_some_and(|(_, end)| *end <= now)
        {
            self.writer_waiting = None;
        }
    }

    fn waiting_writer(&self) -> Option<&str> {
        self.writer_waiting.as_ref().map(|(own, _)| own.as_str())
    }

    fn is_empty(&self) -> bool {
        self.readers.is_empty() && self.writer.is_none() && self.writer_waiting.is_none()
    }

    /// The live lease end of `token`'s read share or write hold, as `shape` says.
    fn held(&mut self, shape: Shape, token: &str) -> Option<&mut Instant> {
        match shape {
            Shape::Read => self
                .readers
                .iter_mut()
                .find(|(own, _)| own == token)
                .map(|(_, end)| end),
            Shape::Write | Shape::Lock | Shape::Semaphore { .. } => self
                .writer
                .as_mut()
                .filter(|(own, _)| own == token)
                .map(|(_, end)| end),
        }
    }

    /// What stands in the way of `token` taking it as `shape` (a read share or the write
    /// hold), and until when: `None` if nothing. A writer that `waits` marks itself waiting.
    fn blocked(
        &mut self,
        shape: Shape,
        token: &str,
        ttl: Duration,
        waits: bool,
        now: Instant,
    ) -> Option<Instant> {
        let reads = shape.mode() == Mode::Read;
        if let Some((_, end)) = self.writer.as_ref().filter(|(holder, _)| holder != token) {
            let end = *end;
            if !reads && waits {
                self.writer_waiting = Some((token.to_owned(), end + ttl));
            }
            return Some(end);
        }
        if reads {
            let holds = self.readers.iter().any(|(own, _)| own == token);
            return self
                .writer_waiting
                .as_ref()
                .filter(|_| !holds)
                .map(|(_, end)| *end);
        }
        let first = self.readers.iter().map(|(_, end)| *end).min()?;
        if waits {
            self.writer_waiting = Some((token.to_owned(), first + ttl));
        }
        Some(first.max(now))
    }
}

/// The fair waiters of one key, in the order they came.
#[derive(Default)]
struct FairLine {
    /// Owner token, and when the entry ends unless the waiter asks again.
    waiting: Vec<(String, Instant)>,
    /// The lock is free for this waiter alone until then.
    turn: Option<(String, Instant)>,
}

impl FairLine {
    fn join(&mut self, token: &str, until: Instant) {
        match self.waiting.iter_mut().find(|(own, _)| own == token) {
            Some((_, end)) => *end = until,
            None => self.waiting.push((token.to_owned(), until)),
        }
    }

    fn leave(&mut self, token: &str) {
        self.waiting.retain(|(own, _)| own != token);
    }

    /// The first in line whose entry has not ended, dropping those that have.
    fn first(&mut self, now: Instant) -> Option<&str> {
        self.waiting.retain(|(_, end)| *end >= now);
        self.waiting.first().map(|(token, _)| token.as_str())
    }
}

impl MemoryBackend {
    /// A table of its own, shared only by the clones of the manager that uses it.
    pub(crate) fn new(waiters: Arc<Waiters>) -> Self {
        MemoryBackend {
            state: Mutex::new(State::default()),
            waiters,
            attached: Mutex::default(),
            describe: "memory (a table of its own)".into(),
        }
    }

    /// The process's table called `name` (`""`: the one of `memory://`), made on first use.
    pub(crate) fn named(name: &str) -> Arc<MemoryBackend> {
        let mut tables = TABLES.lock().unwrap_or_else(PoisonError::into_inner);
        tables
            .entry(name.to_owned())
            .or_insert_with(|| {
                Arc::new(MemoryBackend {
                    state: Mutex::new(State::default()),
                    waiters: Arc::default(),
                    attached: Mutex::default(),
                    describe: if name.is_empty() {
                        "memory (process-wide)".into()
                    } else {
                        format!("memory://{name}")
                    },
                })
            })
            .clone()
    }

    /// The waiters of every manager on this table.
    pub(crate) fn waiters(&self) -> Arc<Waiters> {
        self.waiters.clone()
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Tells `notice` to every manager on this table that is still there.
    fn tell(&self, notice: &Notice) {
        let attached = {
            let mut attached = self.attached.lock().unwrap_or_else(PoisonError::into_inner);
            attached.retain(|changes| !changes.is_gone());
            attached.clone()
        };
        for changes in attached {
            changes.heard(notice);
        }
    }

    /// The plain lock `key` for `token` whoever holds it, with a new fencing token; the owner
    /// token it was taken from, if a holder had it.
    fn take_from_holder(&self, key: &Key, token: &str, ttl: Duration) -> (u64, Option<String>) {
        let now = Instant::now();
        let mut state = self.state();
        let victim = state
            .live(&key.lock, now)
            .map(|entry| std::mem::take(&mut entry.token))
            .filter(|victim| !victim.is_empty() && victim != token);
        state.last_fence += 1;
        let fence = state.last_fence;
        state.locks.insert(
            key.lock.clone(),
            Entry {
                token: token.to_owned(),
                fence,
                expires: now + ttl,
            },
        );
        (fence, victim)
    }

    /// The free lock `key` is the first fair waiter's in line, for a while; with nobody in line,
    /// anyone's: wake whoever's turn it is.
    fn give_turn(&self, state: &mut State, key: &str, now: Instant) {
        let head = state.lines.get_mut(key).and_then(|line| {
            let head = line.first(now)?.to_owned();
            line.turn = Some((head.clone(), now + FAIR_TURN));
            Some(head)
        });
        match head {
            Some(head) => self.waiters.wake_named(key, &release_id(&head)),
            None => {
                state.lines.remove(key);
                self.waiters.wake_one(key, None);
            }
        }
    }
}

/// The live entry at `key`, dropping it if it expired.
fn live<'a>(
    locks: &'a mut HashMap<String, Entry>,
    key: &str,
    now: Instant,
) -> Option<&'a mut Entry> {
    if locks.get(key).is_some_and(|entry| entry.expires <= now) {
        locks.remove(key);
    }
    locks.get_mut(key)
}

impl State {
    fn live(&mut self, key: &str, now: Instant) -> Option<&mut Entry> {
        live(&mut self.locks, key, now)
    }

    fn sweep(&mut self, now: Instant) {
        if self.locks.len() < self.sweep_at {
            return;
        }
        self.locks.retain(|_, entry| entry.expires > now);
        self.read_write.retain(|_, rw| {
            rw.drop_ended(now);
            !rw.is_empty()
        });
        self.semaphores.retain(|_, semaphore| {
            semaphore.drop_ended(now);
            !semaphore.holders.is_empty()
        });
        self.lines.retain(|_, line| {
            line.first(now);
            !line.waiting.is_empty() || line.turn.as_ref().is_some_and(|(_, until)| *until > now)
        });
        self.sweep_at = (self.locks.len() * 2).max(1024);
    }

    /// One permit of the semaphore `key` for `token` (see semaphore.lua).
    fn take_permit(
        &mut self,
        key: &Key,
        permits: u32,
        token: &str,
        ttl: Duration,
        now: Instant,
    ) -> Result<Acquire, StoreError> {
        let semaphore = self
            .semaphores
            .entry(key.lock.clone())
            .or_insert_with(|| Semaphore {
                permits,
                holders: Vec::new(),
            });
        semaphore.drop_ended(now);
        if semaphore.holders.is_empty() {
            semaphore.permits = permits;
        }
        if semaphore.permits != permits {
            return Err(permits_differ(key, i64::from(semaphore.permits)));
        }
        if let Some(end) = semaphore.holder(token, now) {
            *end = now + ttl;
        } else if semaphore.holders.len() >= permits as usize {
            let first = semaphore.holders.iter().map(|(_, end)| *end).min();
            return Ok(Acquire::busy(first.map(|end| end - now), false));
        } else {
            semaphore.holders.push((token.to_owned(), now + ttl));
        }
        self.last_fence += 1;
        Ok(Acquire::Acquired {
            fence: self.last_fence,
        })
    }

    /// A read share or the write hold of the read-write lock `key` for `token` (see
    /// rw_acquire.lua).
    fn take_read_write(
        &mut self,
        key: &Key,
        token: &str,
        ttl: Duration,
        waits: bool,
        now: Instant,
    ) -> Acquire {
        let rw = self.read_write.entry(key.lock.clone()).or_default();
        rw.drop_ended(now);
        if let Some(until) = rw.blocked(key.shape, token, ttl, waits, now) {
            return Acquire::busy(
                Some(until.saturating_duration_since(now)),
                // A writer that marked itself waiting takes the mark away when it stops.
                rw.waiting_writer() == Some(token),
            );
        }
        match rw.held(key.shape, token) {
            Some(end) => *end = now + ttl,
            None if key.shape.mode() == Mode::Read => {
                rw.readers.push((token.to_owned(), now + ttl))
            }
            None => {
                rw.writer = Some((token.to_owned(), now + ttl));
                if rw
                    .writer_waiting
                    .as_ref()
                    .is_some_and(|(own, _)| own == token)
                {
                    rw.writer_waiting = None;
                }
            }
        }
        self.last_fence += 1;
        Acquire::Acquired {
            fence: self.last_fence,
        }
    }

    /// Renews `token`'s read share or write hold of `key`: whether it was still held.
    fn renew_read_write(&mut self, key: &Key, token: &str, ttl: Duration, now: Instant) -> bool {
        let Some(rw) = self.read_write.get_mut(&key.lock) else {
            return false;
        };
        rw.drop_ended(now);
        match rw.held(key.shape, token) {
            Some(end) => {
                *end = now + ttl;
                true
            }
            None => false,
        }
    }

    /// Gives `token`'s read share or write hold of `key` back, or keeps it `keep` longer.
    fn release_read_write(
        &mut self,
        key: &Key,
        token: &str,
        keep: Duration,
        now: Instant,
    ) -> Release {
        let Some(rw) = self.read_write.get_mut(&key.lock) else {
            return Release::Gone;
        };
        rw.drop_ended(now);
        let answer = match rw.held(key.shape, token) {
            None => Release::Gone,
            Some(end) if !keep.is_zero() => {
                *end = now + keep;
                Release::Released
            }
            Some(_) if key.shape.mode() == Mode::Read => {
                rw.readers.retain(|(own, _)| own != token);
                Release::Released
            }
            Some(_) => {
                rw.writer = None;
                Release::Released
            }
        };
        if rw.is_empty() {
            self.read_write.remove(&key.lock);
        }
        answer
    }

    /// Renews the permit of `token`: whether it was still held.
    fn renew_permit(&mut self, key: &str, token: &str, ttl: Duration, now: Instant) -> bool {
        let held = self
            .semaphores
            .get_mut(key)
            .and_then(|semaphore| semaphore.holder(token, now));
        match held {
            Some(end) => {
                *end = now + ttl;
                true
            }
            None => false,
        }
    }

    /// Gives the permit of `token` back, or keeps it `keep` longer (hold_at_least).
    fn release_permit(&mut self, key: &str, token: &str, keep: Duration, now: Instant) -> Release {
        let Some(semaphore) = self.semaphores.get_mut(key) else {
            return Release::Gone;
        };
        let answer = match semaphore.holder(token, now) {
            None => Release::Gone,
            Some(end) if !keep.is_zero() => {
                *end = now + keep;
                Release::Released
            }
            Some(_) => {
                semaphore.holders.retain(|(own, _)| own != token);
                Release::Released
            }
        };
        semaphore.drop_ended(now);
        if semaphore.holders.is_empty() {
            self.semaphores.remove(key);
        }
        answer
    }
}

fn ready<'a, T: Send + 'a>(value: T) -> BoxFuture<'a, T> {
    Box::pin(std::future::ready(value))
}

impl Store for MemoryBackend {
    /// Every shape: one server counts a semaphore's holders and sees a read-write lock's.
    fn supports(&self, shape: Shape) -> Result<(), &'static str> {
        match shape {
            Shape::Lock | Shape::Semaphore { .. } | Shape::Read | Shape::Write => Ok(()),
        }
    }

    /// One server orders the line of fair waiters.
    fn fair(&self) -> bool {
        true
    }

    /// Every release is told to this process's waiters.
    fn notifies(&self) -> bool {
        true
    }

    /// Published waits are kept beside the locks.
    fn keeps_waits(&self) -> bool {
        true
    }

    /// Every manager on the table is told, in the call itself.
    fn announces(&self) -> bool {
        true
    }

    fn attach(&self, changes: &Changes) {
        self.attached
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(changes.clone());
    }

    fn announce<'a>(&'a self, notice: &'a Notice) -> BoxFuture<'a, Result<(), StoreError>> {
        self.tell(notice);
        ready(Ok(()))
    }

    fn steals(&self) -> bool {
        true
    }

    fn steal<'a>(
        &'a self,
        key: &'a Key,
        token: &'a str,
        ttl: Duration,
        from: &'a str,
    ) -> BoxFuture<'a, Result<Stolen, StoreError>> {
        let (fence, victim) = self.take_from_holder(key, token, ttl);
        let victim = victim.map(|victim| HolderId::of_token(&victim));
        if let Some(holder) = victim {
            self.tell(&Notice::new(
                NoticeKind::Stolen,
                key.name(),
                Some(holder),
                from,
            ));
        }
        ready(Ok(Stolen { fence, victim }))
    }

    fn describe(&self) -> &str {
        &self.describe
    }

    fn server(&self) -> &str {
        "memory"
    }

    /// The table read as it is now ([`Inspect`](crate::store::Inspect)).
    fn inspect(&self) -> Option<&dyn crate::store::Inspect> {
        Some(self)
    }

    fn acquire<'a>(
        &'a self,
        key: &'a Key,
        token: &'a str,
        ttl: Duration,
        ask: Ask,
    ) -> BoxFuture<'a, Result<Acquire, StoreError>> {
        let now = Instant::now();
        let mut state = self.state();
        state.sweep(now);
        match key.shape {
            Shape::Semaphore { permits } => {
                return ready(state.take_permit(key, permits, token, ttl, now));
            }
            Shape::Read | Shape::Write => {
                let waits = ask.line != Line::No;
                return ready(Ok(state.take_read_write(key, token, ttl, waits, now)));
            }
            Shape::Lock => {}
        }
        let State { locks, lines, .. } = &mut *state;
        let joins = match ask.line {
            Line::No => false,
            Line::IfAny => lines.contains_key(&key.lock),
            Line::Fair => true,
        };
        let busy = |remaining: Duration,
                    holder: Option<crate::store::HolderId>,
                    lines: &mut HashMap<String, FairLine>| {
            if joins {
                lines
                    .entry(key.lock.clone())
                    .or_default()
                    .join(token, now + ttl);
            }
            // No holder metadata in memory: only the holder's id to name.
            ready(Ok(Acquire::Busy {
                remaining: Some(remaining),
                holder,
                in_line: joins,
                blocker: None,
            }))
        };
        if let Some(entry) = live(locks, &key.lock, now) {
            if entry.token == token {
                entry.expires = now + ttl;
                return ready(Ok(Acquire::Acquired { fence: entry.fence }));
            }
            let remaining = entry.expires - now;
            let holder =
                (!entry.token.is_empty()).then(|| crate::store::HolderId::of_token(&entry.token));
            return busy(remaining, holder, lines);
        }
        if let Some(line) = lines.get_mut(&key.lock) {
            // Free, but maybe not for this caller: the first in line has it (see queue.lua).
            match line.turn.take() {
                Some((own, _)) if own == token => {}
                Some((own, until)) if until > now => {
                    line.turn = Some((own, until));
                    return busy(until - now, None, lines);
                }
                // Its turn passed unused: out of line, the next one's turn.
                Some((own, _)) => line.leave(&own),
                None => {}
            }
            match line.first(now).map(str::to_owned) {
                Some(head) if head != token => {
                    self.waiters.wake_named(&key.lock, &release_id(&head));
                    line.turn = Some((head, now + FAIR_TURN));
                    return busy(FAIR_TURN, None, lines);
                }
                _ => {
                    line.leave(token);
                    if line.waiting.is_empty() {
                        lines.remove(&key.lock);
                    }
                }
            }
        }
        state.last_fence += 1;
        let fence = state.last_fence;
        state.locks.insert(
            key.lock.clone(),
            Entry {
                token: token.to_owned(),
                fence,
                expires: now + ttl,
            },
        );
        ready(Ok(Acquire::Acquired { fence }))
    }

    fn leave<'a>(&'a self, key: &'a Key, token: &'a str) -> BoxFuture<'a, Result<(), StoreError>> {
        let now = Instant::now();
        let mut state = self.state();
        match key.shape {
            // A writer that waited takes its mark away.
            Shape::Read | Shape::Write => {
                let rw = state.read_write.get_mut(&key.lock);
                let Some(rw) = rw.filter(|rw| rw.waiting_writer() == Some(token)) else {
                    return ready(Ok(()));
                };
                rw.writer_waiting = None;
                drop(state);
                self.waiters.wake_one(&key.lock, None);
                return ready(Ok(()));
            }
            // The lock's line of fair waiters, if it has one (a semaphore has none).
            Shape::Lock | Shape::Semaphore { .. } => {}
        }
        if let Some(line) = state.lines.get_mut(&key.lock) {
            line.leave(token);
            if line.turn.as_ref().is_some_and(|(own, _)| own == token) {
                line.turn = None;
                self.give_turn(&mut state, &key.lock, now);
            } else if line.waiting.is_empty() {
                state.lines.remove(&key.lock);
            }
        }
        ready(Ok(()))
    }

    fn renew<'a>(&'a self, batch: &'a [Renewal], book: Booking<'a>) -> BoxFuture<'a, ()> {
        let now = Instant::now();
        let renewed = {
            let mut state = self.state();
            batch
                .iter()
                .map(|renewal| {
                    let stored = &renewal.lease.stored;
                    let (key, token, ttl) = (renewal.key(), renewal.token(), renewal.ttl);
                    Some(match stored.shape {
                        Shape::Read | Shape::Write => {
                            state.renew_read_write(stored, token, ttl, now)
                        }
                        Shape::Semaphore { .. } => state.renew_permit(key, token, ttl, now),
                        Shape::Lock => match state.live(key, now) {
                            Some(entry) if entry.token == token => {
                                entry.expires = now + ttl;
                                true
                            }
                            _ => false,
                        },
                    })
                })
                .collect()
        };
        // Booked after the table's lock is let go: booking takes the watchdog's.
        book(&whole(batch), Ok(renewed));
        ready(())
    }

    fn release<'a>(
        &'a self,
        key: &'a Key,
        token: &'a str,
        keep: Duration,
    ) -> BoxFuture<'a, Result<Release, StoreError>> {
        let now = Instant::now();
        let mut state = self.state();
        let given_back = match key.shape {
            Shape::Read | Shape::Write => Some(state.release_read_write(key, token, keep, now)),
            Shape::Semaphore { .. } => Some(state.release_permit(&key.lock, token, keep, now)),
            Shape::Lock => None,
        };
        if let Some(answer) = given_back {
            drop(state);
            if answer == Release::Released {
                // Every waiter of a read-write lock or a semaphore looks again (see
                // `Waiters::wake_one`).
                self.waiters.wake_one(&key.lock, None);
            }
            return ready(Ok(answer));
        }
        let answer = match state.live(&key.lock, now) {
            None => Release::Gone,
            Some(entry) if entry.token != token => Release::NotOwner,
            Some(entry) if !keep.is_zero() => {
                entry.token.clear();
                entry.expires = now + keep;
                drop(state);
                // Waiters look again and learn the shorter remaining lease.
                self.waiters.wake_one(&key.lock, None);
                return ready(Ok(Release::Released));
            }
            Some(_) => {
                state.locks.remove(&key.lock);
                self.give_turn(&mut state, &key.lock, now);
                return ready(Ok(Release::Released));
            }
        };
        ready(Ok(answer))
    }

    fn waits<'a>(
        &'a self,
        key: &'a str,
        update: &'a WaitsUpdate,
    ) -> BoxFuture<'a, Result<Vec<(String, String)>, StoreError>> {
        let now = Instant::now();
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.waits.retain(|_, (_, expires)| *expires > now);
        if !update.set.is_empty() {
            let (records, expires) = state
                .waits
                .entry(key.to_owned())
                .or_insert_with(|| (HashMap::new(), now));
            records.extend(update.set.iter().cloned());
            *expires = now + update.keep;
        }
        let read = match state.waits.get_mut(key) {
            Some((records, _)) => {
                for waiter in &update.remove {
                    records.remove(waiter);
                }
                let read = update.read.then(|| {
                    records
                        .iter()
                        .map(|(waiter, text)| (waiter.clone(), text.clone()))
                        .collect()
                });
                if records.is_empty() {
                    state.waits.remove(key);
                }
                read
            }
            None => None,
        };
        ready(Ok(read.unwrap_or_default()))
    }

    fn watch<'a>(&'a self, _key: &'a str) -> BoxFuture<'a, Result<(), StoreError>> {
        // Releases reach the waiters directly.
        ready(Ok(()))
    }

    fn unwatch(&self, _key: &str) {}
}

#[cfg(test)]
mod properties;

#[cfg(test)]
mod attached {
    use super::*;
    use crate::manager::LockManager;

    /// Managers come and go over a process-wide table: the table keeps the `Changes` of those
    /// still there, not one more per manager ever made.
    #[tokio::test]
    async fn a_dropped_managers_changes_leave_the_table() {
        let url = "memory://attached-pruned";
        let table = MemoryBackend::named("attached-pruned");
        let kept = LockManager::connect(url).await.expect("memory manager");
        for _ in 0..10 {
            drop(LockManager::connect(url).await.expect("memory manager"));
        }
        let notice = Notice::new(NoticeKind::ReleaseRequested, "lock:{k}", None, "");
        table.announce(&notice).await.expect("told");
        let attached = table
            .attached
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        assert_eq!(attached.len(), 1);
        drop(attached);
        drop(kept);
    }
}
