//! The PostgreSQL store's inspection side ([`Inspect`]): its locks read from the table in the
//! lock's own words, and force-released by the fencing token of the hold seen.

use sqlx::Row;
use sqlx::postgres::PgRow;

use super::PostgresStore;
use super::sql;
use crate::inspect::lock_name;
use crate::protocol::{self, holder_hex, waits};
use crate::store::{
    BoxFuture, Inspect, Key, Kind, LockInfo, LockState, Recorded, Shape, StoreError, Unlocked,
    WaitRecord, WaitsUpdate,
};

/// A live row as a tool sees it, if its name is a lock under `prefix`.
fn info(store: &PostgresStore, prefix: &str, row: &PgRow) -> Option<LockInfo> {
    let name: String = row.try_get("name").ok()?;
    let key = lock_name(prefix, &name)?;
    let mut info = LockInfo::new(key, Kind::Lock, name, &store.server);
    let fence: i64 = row.try_get("fence").ok()?;
    let holder: i64 = row.try_get("holder").ok()?;
    let kept: bool = row.try_get("kept").ok()?;
    info.state = if kept {
        LockState::Kept
    } else {
        LockState::Held
    };
    info.fence = u64::try_from(fence).ok();
    // The same 12 hex digits a busy answer and a Redis lock give for the owner token.
    info.holder_id = u64::try_from(holder).ok().filter(|_| !kept).map(holder_hex);
    info.host = row.try_get("host").ok().flatten();
    info.pid = optional(row, "pid").and_then(|pid| u64::try_from(pid).ok());
    info.app = row.try_get("app").ok().flatten();
    info.since_ms = optional(row, "since_ms").and_then(|ms| u64::try_from(ms).ok());
    info.age_ms = optional(row, "age_ms").and_then(|ms| u64::try_from(ms).ok());
    info.lease_ms = row.try_get("left_ms").ok();
    // The fencing token names one hold: a force-release removes that hold and no later one.
    info.unlock_id = Some(fence.to_string());
    Some(info)
}

/// A nullable number of `row`.
fn optional(row: &PgRow, column: &str) -> Option<i64> {
    row.try_get(column).ok().flatten()
}

impl PostgresStore {
    /// Every live lock under `prefix` whose key `matches`.
    async fn matching(
        &self,
        prefix: &str,
        matches: impl Fn(&str) -> bool,
    ) -> Result<Vec<LockInfo>, StoreError> {
        let rows = self.rows("inspect", None, &sql::live(prefix)).await?;
        Ok(rows
            .iter()
            .filter_map(|row| info(self, prefix, row))
            .filter(|info| matches(&info.key))
            .collect())
    }
}

/// One place, the server; no fair line. A lock shows what its holder
/// recorded (host, pid, app, since), unless the holder's manager was built with
/// [`holder_metadata(false)`](crate::LockManagerBuilder::holder_metadata).
impl Inspect for PostgresStore {
    fn places(&self) -> BoxFuture<'_, Result<Vec<String>, StoreError>> {
        Box::pin(std::future::ready(Ok(vec![self.server.clone()])))
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
                    &self.server,
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
            let Some(fence) = seen
                .unlock_id
                .as_deref()
                .and_then(|id| id.parse::<i64>().ok())
            else {
                return Ok(Unlocked::AlreadyFree);
            };
            let name = seen.stored_as.as_str();
            let rows = self
                .rows(
                    "force-release",
                    Some(name),
                    &sql::force_release(name, fence),
                )
                .await?;
            let read = |column: &str| {
                rows.first()
                    .and_then(|row| row.try_get::<bool, _>(column).ok())
                    .unwrap_or(false)
            };
            Ok(if read("removed") {
                if !self.listens() {
                    self.told.released(name);
                }
                Unlocked::Released {
                    removed: Some(Recorded::of(seen)),
                }
            } else if read("other") {
                Unlocked::Changed { now: None }
            } else {
                Unlocked::AlreadyFree
            })
        })
    }

    /// Read from the table of published records, as the deadlock detector reads them.
    fn waits<'a>(&'a self, prefix: &'a str) -> BoxFuture<'a, Result<Vec<WaitRecord>, StoreError>> {
        Box::pin(async move {
            let read = WaitsUpdate {
                read: true,
                ..WaitsUpdate::default()
            };
            let fields = self.db.records(&waits::waits_key(prefix), &read).await?;
            Ok(waits::standing(fields, protocol::now_ms()))
        })
    }
}
