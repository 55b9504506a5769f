//! This library through `LockManager::lock` and an explicit guard.

use std::time::Duration;

use async_trait::async_trait;
use lock_runtime::{LockManager, LockOptions};

use super::{Contender, LEASE, Work};
use crate::BenchError;

pub struct Manager {
    locks: LockManager,
}

impl Manager {
    pub const NAME: &'static str = "LockManager::lock";

    pub async fn connect(url: &str) -> Result<Self, BenchError> {
        Ok(Manager {
            locks: LockManager::connect(url).await?,
        })
    }
}

#[async_trait]
impl Contender for Manager {
    fn name(&self) -> &'static str {
        Self::NAME
    }

    async fn pair(&self, key: &str) -> Result<(), BenchError> {
        let guard = self.locks.lock(key, LockOptions::new().ttl(LEASE)).await?;
        guard.release().await?;
        Ok(())
    }

    async fn exclusive(&self, key: &str, section: Work<'_>) -> Result<(), BenchError> {
        // Waiting as long as it takes, woken by the release notification.
        let options = LockOptions::new().ttl(LEASE).wait(Duration::MAX);
        let guard = self.locks.lock(key, options).await?;
        section.await;
        guard.release().await?;
        Ok(())
    }

    async fn hold_without_release(
        &self,
        key: &str,
        lease: Duration,
        entered: &(dyn Fn() + Sync),
    ) -> Result<(), BenchError> {
        let options = LockOptions::new().ttl(lease).watchdog(false);
        let _guard = self.locks.lock(key, options).await?;
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
        // Boxed, so that while the lock is held this future keeps the guard and not the space
        // of the finished acquire: the figure is what holding a guard costs.
        let guard = Box::pin(self.locks.lock(key, LockOptions::new().ttl(lease))).await?;
        held();
        until.await;
        guard.release().await?;
        Ok(())
    }
}
