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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::manager::LockManager;
    use crate::options::LockOptions;
    use crate::store::{Holds, Inspect, Kind, LockState, Unlocked};

    fn inspect(locks: &LockManager) -> &dyn Inspect {
        locks.inspect().expect("memory can be inspected")
    }

    #[tokio::test]
    async fn a_held_lock_is_listed_shown_and_unlocked() {
        let locks = LockManager::memory();
        let guard = locks
            .lock("order:42", LockOptions::new())
            .await
            .expect("free");
        let _other = locks.lock("job", LockOptions::new()).await.expect("free");
        let listed = inspect(&locks)
            .list("lock:", "order:*")
            .await
            .expect("read");
        assert_eq!(listed.len(), 1, "the pattern keeps `job` out: {listed:?}");
        let lock = &listed[0];
        assert_eq!((lock.key.as_str(), lock.kind), ("order:42", Kind::Lock));
        assert_eq!(lock.state, LockState::Held);
        assert_eq!(lock.stored_as, "lock:{order:42}");
        assert_eq!(lock.fence, Some(guard.fencing_token()));
        assert!(lock.lease_ms.is_some_and(|lease| lease > 0), "{lock:?}");
        assert_eq!(inspect(&locks).places().await.expect("one"), ["memory"]);

        let shown = inspect(&locks)
            .show("lock:", "order:42")
            .await
            .expect("read");
        assert_eq!(shown, listed, "one lock, no line");
        let unlocked = inspect(&locks).unlock("lock:", &shown[0]).await;
        let Ok(Unlocked::Released {
            removed: Some(removed),
        }) = unlocked
        else {
            panic!("released: {unlocked:?}");
        };
        assert_eq!(removed.holder_id, lock.holder_id);
        let after = inspect(&locks)
            .show("lock:", "order:42")
            .await
            .expect("read");
        assert_eq!(after[0].state, LockState::Absent, "{after:?}");
        let again = inspect(&locks).unlock("lock:", &shown[0]).await;
        assert_eq!(again.expect("answered"), Unlocked::AlreadyFree);
        let again = locks.lock("order:42", LockOptions::new()).await;
        assert!(again.expect("free again").is_held());
    }

    #[tokio::test]
    async fn a_holder_that_took_the_lock_meanwhile_is_left_alone() {
        let locks = LockManager::memory();
        let first = locks.lock("hot", LockOptions::new()).await.expect("free");
        let seen = inspect(&locks).show("lock:", "hot").await.expect("read");
        first.release().await.expect("released");
        let second = locks.lock("hot", LockOptions::new()).await.expect("free");
        let unlocked = inspect(&locks).unlock("lock:", &seen[0]).await;
        assert!(
            matches!(unlocked, Ok(Unlocked::Changed { now: Some(_) })),
            "{unlocked:?}"
        );
        assert!(second.is_held());
        let now = inspect(&locks).show("lock:", "hot").await.expect("read");
        assert_eq!(now[0].state, LockState::Held, "{now:?}");
    }

    #[tokio::test]
    async fn semaphores_and_read_write_locks_show_their_holders_and_are_not_unlocked() {
        let locks = LockManager::memory();
        let mut held = Vec::new();
        for _ in 0..2 {
            held.push(
                locks
                    .semaphore("exports", 3, LockOptions::new())
                    .await
                    .expect("a permit"),
            );
            held.push(
                locks
                    .read_lock("catalog", LockOptions::new())
                    .await
                    .expect("a share"),
            );
        }
        let listed = inspect(&locks).list("lock:", "*").await.expect("read");
        let kinds: Vec<(&str, Kind)> = listed
            .iter()
            .map(|info| (info.key.as_str(), info.kind))
            .collect();
        assert_eq!(
            kinds,
            [("catalog", Kind::ReadWrite), ("exports", Kind::Semaphore)]
        );
        let (catalog, exports) = (&listed[0], &listed[1]);
        assert_eq!(catalog.mode(), Some(Holds::Read));
        assert_eq!(catalog.holders.as_ref().map(Vec::len), Some(2));
        assert_eq!(catalog.writer_waiting, Some(false));
        assert_eq!(exports.permits, Some(3));
        assert_eq!(exports.mode(), Some(Holds::Permit));
        assert_eq!(exports.state, LockState::Held);
        let shown = inspect(&locks)
            .show("lock:", "exports")
            .await
            .expect("read");
        assert_eq!(
            shown.len(),
            1,
            "the semaphore alone, no absent lock: {shown:?}"
        );
        let refused = inspect(&locks).unlock("lock:", &shown[0]).await;
        assert_eq!(refused.expect("answered"), Unlocked::NotALock);
        assert!(held.iter().all(|guard| guard.is_held()));
    }

    #[tokio::test]
    async fn unlock_serves_the_first_fair_waiter_in_line() {
        let locks = LockManager::memory();
        let _holder = locks.lock("line", LockOptions::new()).await.expect("free");
        let waiter = {
            let locks = locks.clone();
            tokio::spawn(async move {
                let options = LockOptions::new().fair(true).wait(Duration::from_secs(30));
                locks.lock("line", options).await
            })
        };
        // Until the waiter stands in line, as the table shows it.
        let in_line = async {
            loop {
                let shown = inspect(&locks).show("lock:", "line").await.expect("read");
                if shown[0].line_length == 1 {
                    break shown;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        };
        let shown = tokio::time::timeout(Duration::from_secs(10), in_line)
            .await
            .expect("the waiter stands in line");
        let line = shown[0].line.as_ref().expect("the line, in show");
        assert_eq!(line[0].position, 1);
        let unlocked = inspect(&locks).unlock("lock:", &shown[0]).await;
        assert!(
            matches!(unlocked, Ok(Unlocked::ServedNext { .. })),
            "{unlocked:?}"
        );
        let served = tokio::time::timeout(Duration::from_secs(10), waiter).await;
        let guard = served
            .expect("served in time")
            .expect("ran")
            .expect("took it");
        assert!(guard.is_held());
    }
}
