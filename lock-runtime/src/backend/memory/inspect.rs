//! The inspection side of the memory store: its table read in the lock's own words.

use std::future::Future;
use std::pin::Pin;

use tokio::time::Instant;

use super::{MemoryBackend, ReadWrite, Semaphore, State};
use crate::inspect::lock_name;
use crate::key::Key;
use crate::protocol::{self, token_id};
use crate::shape::Shape;
use crate::store::{
    HolderInfo, Holds, InLine, Inspect, Kind, LockInfo, LockState, Recorded, StoreError, Unlocked,
    WaitRecord,
};

type Answer<'a, T> = Pin<Box<dyn Future<Output = Result<T, StoreError>> + Send + 'a>>;

fn answer<'a, T: Send + 'a>(value: Result<T, StoreError>) -> Answer<'a, T> {
    Box::pin(std::future::ready(value))
}

/// The one place a memory table is.
const PLACE: &str = "memory";

/// The name and kind a stored name of the table stands for.
fn named(prefix: &str, stored: &str) -> Option<(String, Kind)> {
    if let Some(name) = lock_name(prefix, stored) {
        return Some((name, Kind::Lock));
    }
    [(":sem", Kind::Semaphore), (":rw", Kind::ReadWrite)]
        .iter()
        .find_map(|&(suffix, kind)| Some((lock_name(prefix, stored.strip_suffix(suffix)?)?, kind)))
}

fn key_of(prefix: &str, key: &str, shape: Shape) -> Result<Key, StoreError> {
    Key::new(prefix, key, shape).map_err(|err| StoreError::config(err.to_string()))
}

fn millis_until(end: Instant, now: Instant) -> i64 {
    end.saturating_duration_since(now).as_millis() as i64
}

/// What names the holder of a lock entry to [`Inspect::unlock`]: its owner token's id, or for
/// a kept lock (no token) its fencing token.
fn unlock_id(token: &str, fence: u64) -> String {
    if token.is_empty() {
        format!("kept:{fence}")
    } else {
        token_id(token)
    }
}

impl State {
    /// The lock stored as `stored`, if an entry is live.
    fn lock_info(
        &mut self,
        name: &str,
        stored: &str,
        now: Instant,
        with_line: bool,
    ) -> Option<LockInfo> {
        let (token, fence, expires) = {
            let entry = self.live(stored, now)?;
            (entry.token.clone(), entry.fence, entry.expires)
        };
        let mut info = LockInfo::new(name, Kind::Lock, stored, PLACE);
        info.state = if token.is_empty() {
            LockState::Kept
        } else {
            LockState::Held
        };
        info.fence = Some(fence);
        info.holder_id = (!token.is_empty()).then(|| token_id(&token));
        info.lease_ms = Some(millis_until(expires, now));
        info.unlock_id = Some(unlock_id(&token, fence));
        if let Some(line) = self.lines.get_mut(stored) {
            line.first(now);
            info.line_length = line.waiting.len() as u64;
            info.announced = info.line_length > 0;
            if with_line && !line.waiting.is_empty() {
                let entries = line.waiting.iter().enumerate();
                info.line = Some(
                    entries
                        .map(|(at, (token, end))| InLine {
                            position: at + 1,
                            waiter_id: token_id(token),
                            expires_in_ms: Some(millis_until(*end, now)),
                        })
                        .collect(),
                );
            }
        }
        Some(info)
    }

    /// A lock freed for the first fair waiter alone, if `stored` is one.
    fn reserved_info(&mut self, name: &str, stored: &str, now: Instant) -> Option<LockInfo> {
        let line = self.lines.get(stored)?;
        let (next, until) = line.turn.as_ref().filter(|(_, until)| *until > now)?;
        let mut info = LockInfo::new(name, Kind::Lock, stored, PLACE);
        info.state = LockState::Reserved;
        info.reserved_for = Some(token_id(next));
        info.reserved_ms = Some(millis_until(*until, now));
        info.line_length = line.waiting.len() as u64;
        Some(info)
    }

    fn semaphore_info(&mut self, name: &str, stored: &str, now: Instant) -> Option<LockInfo> {
        let semaphore: &mut Semaphore = self.semaphores.get_mut(stored)?;
        semaphore.drop_ended(now);
        let holders: Vec<HolderInfo> = semaphore
            .holders
            .iter()
            .map(|(token, end)| HolderInfo {
                holder_id: token_id(token),
                holds: Holds::Permit,
                lease_ms: millis_until(*end, now),
            })
            .collect();
        if holders.is_empty() {
            return None;
        }
        let mut info = LockInfo::new(name, Kind::Semaphore, stored, PLACE);
        info.permits = Some(semaphore.permits);
        Some(info.with_holders(holders))
    }

    fn read_write_info(&mut self, name: &str, stored: &str, now: Instant) -> Option<LockInfo> {
        let rw: &mut ReadWrite = self.read_write.get_mut(stored)?;
        rw.drop_ended(now);
        let holder = |(token, end): &(String, Instant), holds| HolderInfo {
            holder_id: token_id(token),
            holds,
            lease_ms: millis_until(*end, now),
        };
        let mut holders: Vec<HolderInfo> = rw
            .writer
            .iter()
            .map(|writer| holder(writer, Holds::Write))
            .collect();
        holders.extend(rw.readers.iter().map(|reader| holder(reader, Holds::Read)));
        if holders.is_empty() {
            return None;
        }
        let mut info = LockInfo::new(name, Kind::ReadWrite, stored, PLACE);
        info.writer_waiting = Some(rw.writer_waiting.is_some());
        Some(info.with_holders(holders))
    }

    /// The `kind` of `name`, stored as `stored`, if anything of it is live.
    fn info(
        &mut self,
        name: &str,
        kind: Kind,
        stored: &str,
        now: Instant,
        with_line: bool,
    ) -> Option<LockInfo> {
        match kind {
            Kind::Semaphore => self.semaphore_info(name, stored, now),
            Kind::ReadWrite => self.read_write_info(name, stored, now),
            _ => self
                .lock_info(name, stored, now, with_line)
                .or_else(|| self.reserved_info(name, stored, now)),
        }
    }
}

impl MemoryBackend {
    fn list_now(&self, prefix: &str, pattern: &str) -> Result<Vec<LockInfo>, StoreError> {
        let glob = glob::Pattern::new(pattern).map_err(|err| {
            StoreError::config(format!("`{pattern}` is not a glob on lock names: {err}"))
        })?;
        let now = Instant::now();
        let mut state = self.state();
        let stored: Vec<String> = (state.locks.keys())
            .chain(state.lines.keys())
            .chain(state.semaphores.keys())
            .chain(state.read_write.keys())
            .cloned()
            .collect();
        let mut found: Vec<(String, Kind, String)> = stored
            .into_iter()
            .filter_map(|stored| {
                let (name, kind) = named(prefix, &stored)?;
                glob.matches(&name).then_some((name, kind, stored))
            })
            .collect();
        found.sort();
        found.dedup();
        Ok(found
            .into_iter()
            .filter_map(|(name, kind, stored)| state.info(&name, kind, &stored, now, false))
            .collect())
    }

    fn show_now(&self, prefix: &str, key: &str) -> Result<Vec<LockInfo>, StoreError> {
        let lock = key_of(prefix, key, Shape::Lock)?;
        let semaphore = key_of(prefix, key, Shape::Semaphore { permits: 1 })?;
        let read_write = key_of(prefix, key, Shape::Read)?;
        let now = Instant::now();
        let mut state = self.state();
        let shared: Vec<LockInfo> = [
            state.info(key, Kind::Semaphore, semaphore.name(), now, true),
            state.info(key, Kind::ReadWrite, read_write.name(), now, true),
        ]
        .into_iter()
        .flatten()
        .collect();
        let mut shown = Vec::new();
        match state.info(key, Kind::Lock, lock.name(), now, true) {
            Some(info) => shown.push(info),
            None if shared.is_empty() => {
                shown.push(LockInfo::new(key, Kind::Lock, lock.name(), PLACE));
            }
            None => {}
        }
        shown.extend(shared);
        Ok(shown)
    }

    fn unlock_now(&self, seen: &LockInfo) -> Result<Unlocked, StoreError> {
        if seen.kind != Kind::Lock {
            return Ok(Unlocked::NotALock);
        }
        let now = Instant::now();
        let mut state = self.state();
        let stored = seen.stored_as.as_str();
        let Some(entry) = state.live(stored, now) else {
            return Ok(Unlocked::AlreadyFree);
        };
        let holder = unlock_id(&entry.token, entry.fence);
        let found = state
            .lock_info(&seen.key, stored, now, false)
            .map(|info| Recorded::of(&info));
        if seen.unlock_id.as_deref().is_some_and(|id| id != holder) {
            return Ok(Unlocked::Changed { now: found });
        }
        state.locks.remove(stored);
        let served = state
            .lines
            .get_mut(stored)
            .is_some_and(|line| line.first(now).is_some());
        self.give_turn(&mut state, stored, now);
        Ok(if served {
            Unlocked::ServedNext { removed: found }
        } else {
            Unlocked::Released { removed: found }
        })
    }

    fn waits_now(&self, prefix: &str) -> Vec<WaitRecord> {
        let now = Instant::now();
        let key = protocol::waits::waits_key(prefix);
        let mut state = self.state();
        state.waits.retain(|_, (_, expires)| *expires > now);
        let fields = state
            .waits
            .get(&key)
            .map(|(records, _)| records.clone())
            .unwrap_or_default();
        protocol::waits::standing(fields, protocol::now_ms())
    }
}

/// The table as it is now: the lock of a name is its entry, its semaphore and read-write lock
/// their holders. The table keeps no holder records (host, pid, app): those are unknown here.
impl Inspect for MemoryBackend {
    fn places(&self) -> Answer<'_, Vec<String>> {
        answer(Ok(vec![PLACE.to_owned()]))
    }

    fn list<'a>(&'a self, prefix: &'a str, pattern: &'a str) -> Answer<'a, Vec<LockInfo>> {
        answer(self.list_now(prefix, pattern))
    }

    fn show<'a>(&'a self, prefix: &'a str, key: &'a str) -> Answer<'a, Vec<LockInfo>> {
        answer(self.show_now(prefix, key))
    }

    fn unlock<'a>(&'a self, _prefix: &'a str, seen: &'a LockInfo) -> Answer<'a, Unlocked> {
        answer(self.unlock_now(seen))
    }

    fn waits<'a>(&'a self, prefix: &'a str) -> Answer<'a, Vec<WaitRecord>> {
        answer(Ok(self.waits_now(prefix)))
    }
}
