//! The `rslock` crate (Redlock), on one Redis instance, at its defaults: `lock` tries 3 times
//! with a random 0-200 ms delay between tries, `acquire` loops over `lock` until it succeeds,
//! `using` extends the lease shortly (500 ms) before it runs out.

use std::time::Duration;

use async_trait::async_trait;

use super::{Contender, LEASE, Work};
use crate::BenchError;

pub struct Rslock {
    locks: rslock::LockManager,
}

impl Rslock {
    pub const NAME: &'static str = "rslock";

    /// `url` must be valid: rslock panics on one it cannot parse.
    pub fn connect(url: &str) -> Result<Self, BenchError> {
        redis::Client::open(url)?;
        Ok(Rslock {
            locks: rslock::LockManager::new(vec![url.to_owned()]),
        })
    }
}

#[async_trait]
impl Contender for Rslock {
    fn name(&self) -> &'static str {
        Self::NAME
    }

    async fn pair(&self, key: &str) -> Result<(), BenchError> {
        let lock = self.locks.lock(key, LEASE).await?;
        self.locks.unlock(&lock).await;
        Ok(())
    }

    async fn exclusive(&self, key: &str, section: Work<'_>) -> Result<(), BenchError> {
        let guard = self.locks.acquire(key, LEASE).await?;
        section.await;
        guard.release().await;
        Ok(())
    }

    async fn hold_without_release(
        &self,
        key: &str,
        lease: Duration,
        entered: &(dyn Fn() + Sync),
    ) -> Result<(), BenchError> {
        let _lock = self.locks.lock(key, lease).await?;
        entered();
        std::future::pending::<()>().await;
        Ok(())
    }

    fn renews(&self) -> bool {
        true
    }

    async fn hold_renewed(
        &self,
        key: &str,
        lease: Duration,
        held: &(dyn Fn() + Sync),
        until: Work<'_>,
    ) -> Result<(), BenchError> {
        self.locks
            .using(key.as_bytes(), lease, async move || {
                held();
                until.await;
            })
            .await?;
        Ok(())
    }
}
