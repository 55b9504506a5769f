//! The store's steps on the database, apart from the store so that a step can finish in a task
//! of its own after its caller stopped waiting for it.

use std::sync::Arc;
use std::time::Duration;

use sqlx::postgres::{PgPool, PgRow};

use super::errors::{self, failure};
use super::holder::{Holder, Recorded};
use super::sql;
use crate::store::{Acquire, Ask, HolderId, Release, StoreError};

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
}
