//! The store's steps on the database, apart from the store so that a step can finish in a task
//! of its own after its caller stopped waiting for it.

use std::sync::Arc;
use std::time::Duration;

use sqlx::postgres::{PgPool, PgRow};

use super::errors::{self, failure};
use super::holder::{Holder, Recorded};
use super::sql;
use crate::store::{
    Acquire, Ask, HolderId, Notice, NoticeKind, Release, Stolen, StoreError, WaitsUpdate,
};

/// How long a waiter for a lock that a transaction holds waits before it asks again.
pub(crate) const IN_TRANSACTION_RETRY: Duration = Duration::from_millis(100);

/// The pool, how messages name the store (`postgres host:port`), and who its rows say holds
/// a lock (`None`: holder metadata off).
#[derive(Clone)]
pub(crate) struct Db {
    pub(crate) pool: PgPool,
    pub(crate) describe: Arc<str>,
    pub(crate) holder: Option<Arc<Holder>>,
}

impl Db {
    /// Runs `statement` and answers its rows; a failure named with `operation` and `key`.
    pub(crate) async fn rows(
        &self,
        operation: &str,
        key: Option<&str>,
        statement: &str,
    ) -> Result<Vec<PgRow>, StoreError> {
        // A connection the server closed (a restart, a terminated backend, a pooler's
        // restart) fails the statement sent on it and is dropped from the pool; the statement
        // goes again on another one, until every connection the pool held was tried. Sending
        // a step again is safe: an acquire with the same token takes its own lock again, a
        // renewal renews again, and a release whose first answer was lost answers `Gone`.
        let most = self.pool.options().get_max_connections().saturating_add(1);
        let mut tried = 0;
        loop {
            tried += 1;
            match sqlx::raw_sql(statement).fetch_all(&self.pool).await {
                Err(err) if tried < most && errors::connection_gone(&err) => {}
                done => return done.map_err(|err| failure(&self.describe, operation, key, err)),
            }
        }
    }

    /// Takes the lock `name` for `token` for `ttl`, recording the holder as it began its
    /// attempt at `ask.since_ms` (see [`sql::acquire`]), or says who holds it for how long.
    pub(crate) async fn acquire(
        &self,
        name: &str,
        token: &str,
        ttl: Duration,
        ask: Ask,
    ) -> Result<Acquire, StoreError> {
        let holder = i64::try_from(HolderId::of_token(token).get()).unwrap_or(i64::MAX);
        let statement = sql::acquire(name, token, holder, ttl, self.holder.as_deref(), ask);
        let rows = self.rows("acquire", Some(name), &statement).await?;
        let mut busy = None;
        for row in &rows {
            let read =
                |column: &str| errors::column::<Option<i64>>(&self.describe, name, row, column);
            if let Some(fence) = read("fence")? {
                return Ok(Acquire::Acquired {
                    fence: u64::try_from(fence).unwrap_or(0),
                });
            }
            let left = read("left_ms")?.unwrap_or(0);
            if left < 0 {
                // A transaction holds it: it is told free at that transaction's COMMIT, not at
                // its ROLLBACK, so a waiter asks again every little while.
                return Ok(Acquire::busy(Some(IN_TRANSACTION_RETRY), false));
            }
            let holder = read("holder")?.unwrap_or(0);
            let recorded = Recorded {
                holder,
                fence: read("held_fence")?,
                host: errors::column(&self.describe, name, row, "host")?,
                pid: read("pid")?,
                app: errors::column(&self.describe, name, row, "app")?,
                since_ms: read("since_ms")?,
            };
            busy = Some(Acquire::Busy {
                remaining: Some(Duration::from_millis(u64::try_from(left).unwrap_or(0))),
                holder: u64::try_from(holder).ok().and_then(HolderId::from_raw),
                in_line: false,
                blocker: recorded.blocker().map(Box::new),
            });
        }
        // No row (a busy row is locked until the function ends, so this is not expected):
        // ask again soon.
        Ok(busy.unwrap_or_else(|| Acquire::busy(Some(Duration::from_millis(5)), false)))
    }

    /// Releases the lock `name` if `token` holds it (see [`sql::release`]).
    pub(crate) async fn release(
        &self,
        name: &str,
        token: &str,
        keep: Duration,
    ) -> Result<Release, StoreError> {
        let rows = self
            .rows("release", Some(name), &sql::release(name, token, keep))
            .await?;
        let row = rows.first().ok_or_else(|| {
            StoreError::permanent(format!(
                "{}: release of `{name}`: no answer row",
                self.describe
            ))
        })?;
        let mine = errors::column::<Option<bool>>(&self.describe, name, row, "mine")?;
        let other = errors::column::<bool>(&self.describe, name, row, "other")?;
        Ok(match mine {
            Some(true) => Release::Released,
            Some(false) => Release::Gone,
            None if other => Release::NotOwner,
            None => Release::Gone,
        })
    }

    /// Takes the lock `name` for `token` for `ttl` whoever holds it, and tells the victim on
    /// `channel` in the same statement (see [`sql::steal`]). Refused before anything is
    /// taken where the notice could not be told (longer than a notification carries), and
    /// where a transaction holds the lock ([`lock_in_transaction`](super::transaction)).
    pub(crate) async fn steal(
        &self,
        name: &str,
        token: &str,
        ttl: Duration,
        channel: &str,
        from: &str,
    ) -> Result<Stolen, StoreError> {
        // The notice as long as it can be: the longest holder id, and the text cut as a
        // notice cuts it.
        let longest = Notice::new(NoticeKind::Stolen, name, HolderId::from_raw(MAX_ID), from);
        fits(&self.describe, "steal", name, &longest)?;
        let holder = i64::try_from(HolderId::of_token(token).get()).unwrap_or(i64::MAX);
        let since_ms = crate::protocol::now_ms();
        let statement = sql::steal(
            name,
            token,
            holder,
            ttl,
            self.holder.as_deref(),
            since_ms,
            channel,
            &longest.text,
        );
        let rows = self.rows("steal", Some(name), &statement).await?;
        let row = rows.first().ok_or_else(|| {
            StoreError::permanent(format!(
                "{}: steal of `{name}`: no answer row",
                self.describe
            ))
        })?;
        if errors::column::<Option<bool>>(&self.describe, name, row, "in_transaction")?
            .unwrap_or(false)
        {
            return Err(StoreError::permanent(format!(
                "{}: steal of `{name}`: a transaction holds it (lock_in_transaction), and a \
                 transaction's lock cannot be stolen: it is released when that transaction \
                 commits or rolls back",
                self.describe
            )));
        }
        let fence = errors::column::<Option<i64>>(&self.describe, name, row, "fence")?;
        let victim = errors::column::<Option<i64>>(&self.describe, name, row, "victim")?;
        Ok(Stolen {
            fence: fence
                .and_then(|fence| u64::try_from(fence).ok())
                .unwrap_or(0),
            victim: victim
                .and_then(|id| u64::try_from(id).ok())
                .and_then(HolderId::from_raw),
        })
    }

    /// One step on the published records under `name` (see [`sql::records_update`]): the
    /// records read, by id (none unless `update` reads).
    pub(crate) async fn records(
        &self,
        name: &str,
        update: &WaitsUpdate,
    ) -> Result<Vec<(String, String)>, StoreError> {
        if update.is_empty() {
            return Ok(Vec::new());
        }
        let statement = sql::records_update(
            name,
            update.set(),
            update.remove(),
            update.keep(),
            update.read(),
        );
        let rows = self
            .rows("published records", Some(name), &statement)
            .await?;
        rows.iter()
            .map(|row| {
                Ok((
                    errors::column::<String>(&self.describe, name, row, "id")?,
                    errors::column::<String>(&self.describe, name, row, "record")?,
                ))
            })
            .collect()
    }

    /// Tells `notice` on `channel` (one `pg_notify`, delivered to every listener at once).
    pub(crate) async fn announce(&self, channel: &str, notice: &Notice) -> Result<(), StoreError> {
        fits(&self.describe, "announce", &notice.key, notice)?;
        let statement = sql::notify_on(channel, &notice.encode());
        self.rows("announce", Some(&notice.key), &statement)
            .await
            .map(drop)
    }
}

/// The largest holder id: 48 bits.
const MAX_ID: u64 = (1 << 48) - 1;

/// Refuses a notice longer than a notification carries: its key is too long.
fn fits(describe: &str, operation: &str, name: &str, notice: &Notice) -> Result<(), StoreError> {
    let length = notice.encode().len();
    if length <= sql::NOTIFY_LIMIT {
        return Ok(());
    }
    Err(StoreError::permanent(format!(
        "{describe}: {operation} of `{}`: its notice would be {length} bytes, longer than the \
         {} bytes a PostgreSQL notification carries: use a shorter key (or a shorter reason)",
        name.chars().take(64).collect::<String>(),
        sql::NOTIFY_LIMIT
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_notice_longer_than_a_notification_is_refused_naming_the_limit() {
        let short = Notice::new(NoticeKind::ReleaseRequested, "lock:{a}", None, "ops");
        assert!(fits("postgres db:5432", "announce", "lock:{a}", &short).is_ok());
        let name = "k".repeat(sql::NOTIFY_LIMIT);
        let long = Notice::new(
            NoticeKind::Stolen,
            name.as_str(),
            HolderId::from_raw(MAX_ID),
            "",
        );
        let refused = fits("postgres db:5432", "steal", &name, &long).expect_err("too long");
        let said = refused.to_string();
        assert!(
            said.contains("7999 bytes") && said.contains("steal of `kkk"),
            "{said}"
        );
        assert!(said.len() < 400, "the key is not repeated whole: {said}");
    }

    #[test]
    fn the_longest_holder_id_is_48_bits_as_every_store_computes_it() {
        let id = HolderId::of_token("any token").get();
        assert!(id <= MAX_ID);
        assert_eq!(format!("{MAX_ID:x}").len(), 12);
    }
}
