//! The store's inspection side ([`Inspect`]): what `lockctl` lists, shows and force-releases
//! through, read from the `holders` table in the lock's own words.

use lock_runtime::inspect::lock_name;
use lock_runtime::store::{
    BoxFuture, HolderInfo, Holds, Inspect, Key, Kind, LockInfo, LockState, Recorded, Shape,
    StoreError, Unlocked, WaitRecord,
};

use crate::SqliteStore;
use crate::db::{self, Forced, Held};

/// The lock name and kind a key name of the table stands for, under `prefix`.
fn named(prefix: &str, name: &str) -> Option<(String, Kind)> {
    match name.strip_suffix(":sem") {
        Some(lock) => Some((lock_name(prefix, lock)?, Kind::Semaphore)),
        None => Some((lock_name(prefix, name)?, Kind::Lock)),
    }
}

/// `rows` (the live holds of one key name) as a tool sees them.
fn info(store: &SqliteStore, key: &str, kind: Kind, name: &str, rows: &[&Held]) -> LockInfo {
    let mut info = LockInfo::new(key, kind, name, &store.path);
    let lease = |held: &Held| i64::try_from(held.left.as_millis()).unwrap_or(i64::MAX);
    if kind == Kind::Semaphore {
        let holders = rows
            .iter()
            .map(|held| HolderInfo {
                holder_id: db::holder_name(&held.token, held.fence),
                holds: Holds::Permit,
                lease_ms: lease(held),
            })
            .collect();
        info.permits = rows.first().and_then(|held| held.permits);
        return info.with_holders(holders);
    }
    let Some(held) = rows.first() else {
        return info;
    };
    let holder = db::holder_name(&held.token, held.fence);
    info.state = if held.token.is_empty() {
        LockState::Kept
    } else {
        LockState::Held
    };
    info.fence = Some(held.fence);
    info.holder_id = (!held.token.is_empty()).then(|| holder.clone());
    info.lease_ms = Some(lease(held));
    info.unlock_id = Some(holder);
    info
}

impl SqliteStore {
    async fn held(&self) -> Result<Vec<Held>, StoreError> {
        self.run("inspect", None, db::held).await
    }

    /// Every live lock and semaphore under `prefix` whose name `matches`.
    async fn matching(
        &self,
        prefix: &str,
        matches: impl Fn(&str) -> bool,
    ) -> Result<Vec<LockInfo>, StoreError> {
        let rows = self.held().await?;
        let mut found: Vec<(String, Kind, &str)> = rows
            .iter()
            .filter_map(|held| {
                let (key, kind) = named(prefix, &held.name)?;
                matches(&key).then_some((key, kind, held.name.as_str()))
            })
            .collect();
        found.sort();
        found.dedup();
        Ok(found
            .into_iter()
            .map(|(key, kind, name)| {
                let of_key: Vec<&Held> = rows.iter().filter(|held| held.name == name).collect();
                info(self, &key, kind, name, &of_key)
            })
            .collect())
    }
}

/// One place, the file; no fair line, no holder records (host, pid, app), no published waits.
impl Inspect for SqliteStore {
    fn places(&self) -> BoxFuture<'_, Result<Vec<String>, StoreError>> {
        Box::pin(std::future::ready(Ok(vec![self.path.clone()])))
    }

    fn list<'a>(
        &'a self,
        prefix: &'a str,
        pattern: &'a str,
    ) -> BoxFuture<'a, Result<Vec<LockInfo>, StoreError>> {
        Box::pin(async move {
            let glob = glob::Pattern::new(pattern).map_err(|err| {
                StoreError::config(format!("`{pattern}` is not a glob on lock names: {err}"))
            })?;
            self.matching(prefix, |key| glob.matches(key)).await
        })
    }

    fn show<'a>(
        &'a self,
        prefix: &'a str,
        key: &'a str,
    ) -> BoxFuture<'a, Result<Vec<LockInfo>, StoreError>> {
        Box::pin(async move {
            let lock = Key::new(prefix, key, Shape::Lock)
                .map_err(|err| StoreError::config(err.to_string()))?;
            let shown = self.matching(prefix, |name| name == key).await?;
            if shown.is_empty() {
                return Ok(vec![LockInfo::new(
                    key,
                    Kind::Lock,
                    lock.name(),
                    &self.path,
                )]);
            }
            Ok(shown)
        })
    }

    fn unlock<'a>(
        &'a self,
        _prefix: &'a str,
        seen: &'a LockInfo,
    ) -> BoxFuture<'a, Result<Unlocked, StoreError>> {
        Box::pin(async move {
            if seen.kind != Kind::Lock {
                return Ok(Unlocked::NotALock);
            }
            let name = seen.stored_as.clone();
            let holder = seen.unlock_id.clone().unwrap_or_default();
            let me = self.told.me().to_owned();
            let forced = self
                .run("force-release", Some(&seen.stored_as), move |conn| {
                    db::force_release(conn, &name, &holder, &me)
                })
                .await?;
            Ok(match forced {
                Forced::Removed => {
                    self.told.released(&seen.stored_as);
                    Unlocked::Released {
                        removed: Some(Recorded::of(seen)),
                    }
                }
                Forced::Free => Unlocked::AlreadyFree,
                Forced::Other => Unlocked::Changed { now: None },
            })
        })
    }

    fn waits<'a>(&'a self, _prefix: &'a str) -> BoxFuture<'a, Result<Vec<WaitRecord>, StoreError>> {
        let path = &self.path;
        Box::pin(std::future::ready(Err(StoreError::permanent(format!(
            "sqlite {path}: the SQLite store keeps no published waits"
        )))))
    }
}
