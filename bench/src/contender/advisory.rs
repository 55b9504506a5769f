//! PostgreSQL's session advisory locks as they are used by hand: a connection from the pool,
//! `SELECT pg_try_advisory_lock($1)` to take the lock, `SELECT pg_advisory_unlock($1)` on the
//! same connection to give it back, a fixed retry interval while it is busy (the connection
//! kept meanwhile). No lease: a holder that hangs keeps the lock until its connection closes.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::time::Duration;

use async_trait::async_trait;
use sqlx::PgConnection;
use sqlx::postgres::{PgPool, PgPoolOptions};

use super::{Contender, RETRY_INTERVAL, Work};
use crate::BenchError;

pub struct TryAdvisory {
    pool: PgPool,
}

/// The advisory lock's 64-bit id for `key`.
fn lock_id(key: &str) -> i64 {
    let mut hasher = DefaultHasher::new();
    key.hash(&mut hasher);
    hasher.finish() as i64
}

impl TryAdvisory {
    pub const NAME: &'static str = "pg_try_advisory_lock";

    /// A pool of at most `connections`, with sqlx's defaults (statements prepared and cached
    /// per connection) but for the ping before each use, which the store does not send either.
    pub async fn connect(url: &str, connections: u32) -> Result<Self, BenchError> {
        let pool = PgPoolOptions::new()
            .max_connections(connections)
            // As the store: no ping before each use of a connection.
            .test_before_acquire(false)
            .connect(url)
            .await?;
        Ok(TryAdvisory { pool })
    }

    async fn try_take(conn: &mut PgConnection, id: i64) -> Result<bool, BenchError> {
        Ok(sqlx::query_scalar("SELECT pg_try_advisory_lock($1)")
            .bind(id)
            .fetch_one(conn)
            .await?)
    }

    async fn give_back(conn: &mut PgConnection, key: &str, id: i64) -> Result<(), BenchError> {
        let released: bool = sqlx::query_scalar("SELECT pg_advisory_unlock($1)")
            .bind(id)
            .fetch_one(conn)
            .await?;
        if !released {
            return Err(BenchError::new(format!(
                "{}: `{key}` was not held by its connection at release",
                Self::NAME
            )));
        }
        Ok(())
    }
}

#[async_trait]
impl Contender for TryAdvisory {
    fn name(&self) -> &'static str {
        Self::NAME
    }

    async fn pair(&self, key: &str) -> Result<(), BenchError> {
        let id = lock_id(key);
        let mut conn = self.pool.acquire().await?;
        if !Self::try_take(&mut conn, id).await? {
            return Err(BenchError::new(format!("{}: `{key}` was busy", Self::NAME)));
        }
        Self::give_back(&mut conn, key, id).await
    }

    async fn exclusive(&self, key: &str, section: Work<'_>) -> Result<(), BenchError> {
        let id = lock_id(key);
        let mut conn = self.pool.acquire().await?;
        while !Self::try_take(&mut conn, id).await? {
            tokio::time::sleep(RETRY_INTERVAL).await;
        }
        section.await;
        Self::give_back(&mut conn, key, id).await
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
