//! The store's steps on the database, apart from the store so that a step can finish in a task
//! of its own after its caller stopped waiting for it.

use std::sync::Arc;
use std::time::Duration;

use sqlx::postgres::{PgPool, PgRow};

use super::errors::{self, failure};
use super::sql;
use crate::store::{Acquire, HolderId, Release, StoreError};

/// The pool, and how messages name the store (`postgres host:port`).
#[derive(Clone)]
pub(crate) struct Db {
    pub(crate) pool: PgPool,
    pub(crate) describe: Arc<str>,
}

impl Db {
    /// Runs `statement` and answers its rows; a failure named with `operation` and `key`.
    pub(crate) async fn rows(
        &self,
        operation: &str,
        key: Option<&str>,
        statement: &str,
    ) -> Result<Vec<PgRow>, StoreError> {
        sqlx::raw_sql(statement)
            .fetch_all(&self.pool)
            .await
            .map_err(|err| failure(&self.describe, operation, key, err))
    }

    /// Takes the lock `name` for `token` for `ttl`, or says who holds it for how long.
    pub(crate) async fn acquire(
        &self,
        name: &str,
        token: &str,
        ttl: Duration,
    ) -> Result<Acquire, StoreError> {
        let holder = i64::try_from(HolderId::of_token(token).get()).unwrap_or(i64::MAX);
        let rows = self
            .rows(
                "acquire",
                Some(name),
                &sql::acquire(name, token, holder, ttl),
            )
            .await?;
        let Some(row) = rows.first() else {
            // The holder's row was made while the statement ran: ask again soon.
            return Ok(Acquire::busy(Some(Duration::from_millis(5)), false));
        };
        let read = |column: &str| errors::column::<Option<i64>>(&self.describe, name, row, column);
        if let Some(fence) = read("fence")? {
            return Ok(Acquire::Acquired {
                fence: u64::try_from(fence).unwrap_or(0),
            });
        }
        let left = read("left_ms")?.unwrap_or(0);
        Ok(Acquire::Busy {
            remaining: Some(Duration::from_millis(u64::try_from(left).unwrap_or(0))),
            holder: read("holder")?
                .and_then(|holder| HolderId::from_raw(u64::try_from(holder).ok()?)),
            in_line: false,
            blocker: None,
        })
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
