//! The PostgreSQL store's lease written by hand with sqlx, without the library: the floor the
//! library is measured against on PostgreSQL. The same table, columns, sequence and clock as the
//! store (`lock_runtime::postgres::SCHEMA_SQL`), the same simple query protocol (one `Query`
//! message per statement, literals in the text, as the store sends them so a pooler can carry
//! them), and nothing else: one `INSERT ... ON CONFLICT ... RETURNING fence` to take a lock
//! (a free or expired one), one `DELETE ... WHERE token` to give it back, a fixed retry interval
//! while it is busy, no watchdog, no notification, no answer about the holder when busy.
//!
//! Its variant [`LeaseFloor::NOTIFY_NAME`] adds to the release what the store's release adds
//! for waiters, and nothing else: `pg_notify` on the store's channel in the same statement. The
//! two rows side by side show what telling releases costs, apart from the library.

use std::str::FromStr;
use std::time::Duration;

use async_trait::async_trait;
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};

use super::{Contender, LEASE, RETRY_INTERVAL, Work};
use crate::BenchError;

pub struct LeaseFloor {
    pool: PgPool,
    /// The `holder` column: one id per contender, as the store has one per manager.
    holder: i64,
    /// Whether a release is told with `pg_notify`.
    notify: bool,
}

/// `text` as a quoted SQL literal.
fn literal(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

/// Takes `name` for `token` for `lease` if it is free or its lease ran out, by the database's
/// clock; one row (the fencing token) when taken, none when busy.
fn acquire(name: &str, token: &str, holder: i64, lease: Duration) -> String {
    format!(
        "INSERT INTO lock_runtime_locks AS l (name, token, holder, fence, expires_at)
VALUES ({}, {}, {holder}, nextval('lock_runtime_fences'),
        clock_timestamp() + {} * interval '1 millisecond')
ON CONFLICT (name) DO UPDATE
    SET token = excluded.token, holder = excluded.holder, fence = excluded.fence,
        expires_at = excluded.expires_at
    WHERE l.expires_at <= clock_timestamp()
RETURNING l.fence",
        literal(name),
        literal(token),
        lease.as_millis().max(1)
    )
}

/// Gives `name` back if `token` holds it; one row when it did.
fn release(name: &str, token: &str) -> String {
    format!(
        "DELETE FROM lock_runtime_locks WHERE name = {} AND token = {} RETURNING fence",
        literal(name),
        literal(token)
    )
}

/// [`release`], and the release told on the store's channel with the name as payload.
fn release_told(name: &str, token: &str) -> String {
    format!(
        "WITH gone AS ({})
SELECT pg_notify('lock_runtime_released', {}) FROM gone",
        release(name, token),
        literal(name)
    )
}

impl LeaseFloor {
    pub const NAME: &'static str = "lease floor";
    /// The variant that tells releases by `pg_notify`.
    pub const NOTIFY_NAME: &'static str = "lease floor + NOTIFY";

    /// A pool of at most `connections`, connected as the store connects (no statement cache,
    /// no `extra_float_digits`), and the store's tables, made if missing; releases told by
    /// `pg_notify` if `notify`.
    pub async fn connect(url: &str, connections: u32, notify: bool) -> Result<Self, BenchError> {
        let options = PgConnectOptions::from_str(url)?
            .statement_cache_capacity(0)
            .extra_float_digits(None);
        let pool = PgPoolOptions::new()
            .max_connections(connections)
            // As the store: no ping before each use of a connection.
            .test_before_acquire(false)
            .connect_with(options)
            .await?;
        sqlx::raw_sql(lock_runtime::postgres::SCHEMA_SQL)
            .execute(&pool)
            .await?;
        Ok(LeaseFloor {
            pool,
            holder: i64::from(uuid::Uuid::new_v4().as_fields().0),
            notify,
        })
    }

    /// One acquire statement: true if taken.
    async fn try_take(&self, key: &str, token: &str, lease: Duration) -> Result<bool, BenchError> {
        let rows = sqlx::raw_sql(&acquire(key, token, self.holder, lease))
            .fetch_all(&self.pool)
            .await?;
        Ok(!rows.is_empty())
    }

    async fn give_back(&self, key: &str, token: &str) -> Result<(), BenchError> {
        let statement = match self.notify {
            true => release_told(key, token),
            false => release(key, token),
        };
        let rows = sqlx::raw_sql(&statement).fetch_all(&self.pool).await?;
        if rows.is_empty() {
            return Err(BenchError::new(format!(
                "{}: `{key}` was no longer ours at release",
                self.name()
            )));
        }
        Ok(())
    }
}

fn token() -> String {
    uuid::Uuid::new_v4().to_string()
}

#[async_trait]
impl Contender for LeaseFloor {
    fn name(&self) -> &'static str {
        match self.notify {
            true => Self::NOTIFY_NAME,
            false => Self::NAME,
        }
    }

    async fn pair(&self, key: &str) -> Result<(), BenchError> {
        let token = token();
        if !self.try_take(key, &token, LEASE).await? {
            return Err(BenchError::new(format!(
                "{}: `{key}` was busy",
                self.name()
            )));
        }
        self.give_back(key, &token).await
    }

    async fn exclusive(&self, key: &str, section: Work<'_>) -> Result<(), BenchError> {
        let token = token();
        while !self.try_take(key, &token, LEASE).await? {
            tokio::time::sleep(RETRY_INTERVAL).await;
        }
        section.await;
        self.give_back(key, &token).await
    }

    async fn hold_without_release(
        &self,
        key: &str,
        lease: Duration,
        entered: &(dyn Fn() + Sync),
    ) -> Result<(), BenchError> {
        if !self.try_take(key, &token(), lease).await? {
            return Err(BenchError::new(format!(
                "{}: `{key}` was busy",
                self.name()
            )));
        }
        entered();
        std::future::pending::<()>().await;
        Ok(())
    }

    fn renews(&self) -> bool {
        false
    }

    async fn hold_renewed(
        &self,
        _key: &str,
        _lease: Duration,
        _held: &(dyn Fn() + Sync),
        _until: Work<'_>,
    ) -> Result<(), BenchError> {
        Err(BenchError::new(format!(
            "{}: the hand-written lease has no watchdog to renew it",
            self.name()
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_quote_in_a_key_stays_inside_its_literal() {
        assert_eq!(literal("a'b"), "'a''b'");
        assert!(release("k'); DROP TABLE x; --", "t").contains("'k''); DROP TABLE x; --'"));
    }
}
