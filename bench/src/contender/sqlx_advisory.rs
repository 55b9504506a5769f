//! sqlx's `PgAdvisoryLock`, a session advisory lock on a pooled connection: `try_acquire` for an
//! uncontended pair, `acquire` (`pg_advisory_lock`, the server queues the waiter) to wait, and
//! `release_now` on the guard to give it back at once (a dropped guard would only queue the
//! unlock for the connection's next use). No lease.

use std::time::Duration;

use async_trait::async_trait;
use sqlx::Either;
use sqlx::postgres::{PgAdvisoryLock, PgPool, PgPoolOptions};

use super::{Contender, Work};
use crate::BenchError;

pub struct SqlxAdvisory {
    pool: PgPool,
}

impl SqlxAdvisory {
    pub const NAME: &'static str = "sqlx PgAdvisoryLock";

    /// A pool of at most `connections`, with sqlx's defaults but for the ping before each use,
    /// which the store does not send either.
    pub async fn connect(url: &str, connections: u32) -> Result<Self, BenchError> {
        let pool = PgPoolOptions::new()
            .max_connections(connections)
            // As the store: no ping before each use of a connection.
            .test_before_acquire(false)
            .connect(url)
            .await?;
        Ok(SqlxAdvisory { pool })
    }
}

#[async_trait]
impl Contender for SqlxAdvisory {
    fn name(&self) -> &'static str {
        Self::NAME
    }

    async fn pair(&self, key: &str) -> Result<(), BenchError> {
        let lock = PgAdvisoryLock::new(key);
        let conn = self.pool.acquire().await?;
        match lock.try_acquire(conn).await? {
            Either::Left(guard) => {
                guard.release_now().await?;
                Ok(())
            }
            Either::Right(_) => Err(BenchError::new(format!("{}: `{key}` was busy", Self::NAME))),
        }
    }

    async fn exclusive(&self, key: &str, section: Work<'_>) -> Result<(), BenchError> {
        let lock = PgAdvisoryLock::new(key);
        let conn = self.pool.acquire().await?;
        let guard = lock.acquire(conn).await?;
        section.await;
        guard.release_now().await?;
        Ok(())
    }

    async fn hold_without_release(
        &self,
        _key: &str,
        _lease: Duration,
        _entered: &(dyn Fn() + Sync),
    ) -> Result<(), BenchError> {
        Err(BenchError::new(format!(
            "{}: a session lock has no lease to run out",
            Self::NAME
        )))
    }

    fn renews(&self) -> bool {
        false
    }

    fn leased(&self) -> bool {
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
            "{}: a session lock has no lease to renew",
            Self::NAME
        )))
    }
}
