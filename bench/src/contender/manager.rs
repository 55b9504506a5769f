//! This library through `LockManager::lock` and an explicit guard, by default or in its fair
//! mode (a variant sharing the same manager, measured as a contender of its own).

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use lock_runtime::{LockManager, LockOptions};

use super::{Contender, FairMode, LEASE, Work};
use crate::BenchError;

pub struct Manager {
    locks: LockManager,
    /// Every acquire in the fair mode.
    fair: bool,
}

impl Manager {
    pub const NAME: &'static str = "LockManager::lock";
    /// The fair variant's name in tables and JSON.
    pub const FAIR_NAME: &'static str = "LockManager::lock fair";

    pub async fn connect(url: &str) -> Result<Self, BenchError> {
        Ok(Manager {
            locks: LockManager::connect(url).await?,
            fair: false,
        })
    }

    /// `options` in this variant's mode.
    fn options(&self, options: LockOptions) -> Result<LockOptions, BenchError> {
        Ok(options.fair(self.fair))
    }
}

#[async_trait]
impl Contender for Manager {
    fn name(&self) -> &'static str {
        if self.fair {
            Self::FAIR_NAME
        } else {
            Self::NAME
        }
    }

    fn fair_mode(&self) -> FairMode {
        if self.fair {
            return FairMode::None;
        }
        FairMode::Available(Arc::new(Manager {
            locks: self.locks.clone(),
            fair: true,
        }))
    }

    async fn pair(&self, key: &str) -> Result<(), BenchError> {
        let options = self.options(LockOptions::new().ttl(LEASE))?;
        let guard = self.locks.lock(key, options).await?;
        guard.release().await?;
        Ok(())
    }

    async fn exclusive(&self, key: &str, section: Work<'_>) -> Result<(), BenchError> {
        // Waiting as long as it takes, woken by the release notification.
        let options = self.options(LockOptions::new().ttl(LEASE).wait(Duration::MAX))?;
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
        let options = self.options(LockOptions::new().ttl(lease).watchdog(false))?;
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
        let options = self.options(LockOptions::new().ttl(lease))?;
        let guard = Box::pin(self.locks.lock(key, options)).await?;
        held();
        until.await;
        guard.release().await?;
        Ok(())
    }
}
