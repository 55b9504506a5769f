//! The lock of the well-known blog posts, written by hand: `SET key token NX PX ttl` to take it,
//! a compare-and-delete script to give it back, a fixed retry interval while it is busy, and no
//! watchdog. Two round trips per pair with nothing else on the way: the floor the library is
//! measured against.

use std::time::Duration;

use async_trait::async_trait;
use redis::aio::ConnectionManager;
use redis::{Client, Script, Value};

use super::{Contender, LEASE, Work};
use crate::BenchError;

/// How long a waiter sleeps between attempts on a busy lock.
pub const RETRY_INTERVAL: Duration = Duration::from_millis(10);

const RELEASE: &str = r#"
if redis.call("GET", KEYS[1]) == ARGV[1] then
  return redis.call("DEL", KEYS[1])
else
  return 0
end
"#;

pub struct HandRolled {
    /// The same kind of connection the library uses: one multiplexed, auto-reconnecting.
    conn: ConnectionManager,
    release: Script,
}

impl HandRolled {
    pub const NAME: &'static str = "hand-rolled";

    pub async fn connect(url: &str) -> Result<Self, BenchError> {
        let client = Client::open(url)?;
        Ok(HandRolled {
            conn: ConnectionManager::new(client).await?,
            release: Script::new(RELEASE),
        })
    }
}

#[async_trait]
impl SetNx for HandRolled {
    const NAME: &'static str = HandRolled::NAME;

    fn conn(&self) -> ConnectionManager {
        self.conn.clone()
    }

    async fn take_waiting(&self, key: &str, token: &str) -> Result<(), BenchError> {
        while !self.try_take(key, token, LEASE).await? {
            tokio::time::sleep(RETRY_INTERVAL).await;
        }
        Ok(())
    }

    async fn give_back(&self, key: &str, token: &str) -> Result<(), BenchError> {
        let deleted: i64 = self
            .release
            .key(key)
            .arg(token)
            .invoke_async(&mut self.conn.clone())
            .await?;
        if deleted != 1 {
            return Err(BenchError::new(format!(
                "{}: `{key}` was no longer ours at release",
                Self::NAME
            )));
        }
        Ok(())
    }
}

fn token() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// A lock of the `SET NX PX` pattern: taken with one `SET NX PX`, given back with a
/// compare-and-delete script, no watchdog. The hand-rolled contenders differ only in how they
/// wait for a busy lock and what their release script announces; this is the rest of them.
#[async_trait]
pub trait SetNx: Send + Sync {
    const NAME: &'static str;

    /// The connection the lock is taken on.
    fn conn(&self) -> ConnectionManager;

    /// One `SET NX PX`: true if taken.
    async fn try_take(&self, key: &str, token: &str, lease: Duration) -> Result<bool, BenchError> {
        let answer: Value = redis::cmd("SET")
            .arg(key)
            .arg(token)
            .arg("NX")
            .arg("PX")
            .arg(lease.as_millis() as u64)
            .query_async(&mut self.conn())
            .await?;
        Ok(matches!(answer, Value::Okay))
    }

    /// Takes `key` with `token` and the default lease, waiting as long as it takes.
    async fn take_waiting(&self, key: &str, token: &str) -> Result<(), BenchError>;

    /// Gives `key` back if `token` still holds it; an error if it did not.
    async fn give_back(&self, key: &str, token: &str) -> Result<(), BenchError>;
}

#[async_trait]
impl<T: SetNx> Contender for T {
    fn name(&self) -> &'static str {
        T::NAME
    }

    async fn pair(&self, key: &str) -> Result<(), BenchError> {
        let token = token();
        if !self.try_take(key, &token, LEASE).await? {
            return Err(BenchError::new(format!("{}: `{key}` was busy", T::NAME)));
        }
        self.give_back(key, &token).await
    }

    async fn exclusive(&self, key: &str, section: Work<'_>) -> Result<(), BenchError> {
        let token = token();
        self.take_waiting(key, &token).await?;
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
            return Err(BenchError::new(format!("{}: `{key}` was busy", T::NAME)));
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
            "{}: the pattern has no watchdog to renew a lease",
            T::NAME
        )))
    }
}
