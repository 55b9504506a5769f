//! This library through `#[distributed_lock]`, as applications use it: the lock is taken around
//! the body of an annotated method, its manager named with `manager = self.locks`.

use std::time::Duration;

use async_trait::async_trait;
use lock_runtime::{LockError, LockManager, distributed_lock};

use super::{Contender, FIXED_LEASES, RENEWED_LEASES, Work};
use crate::BenchError;

pub struct Attribute {
    locks: LockManager,
}

/// A locked method that takes its lock with a fixed lease of `$ttl`, calls `entered` and then
/// hangs: the lease is never renewed, and `on_lease_lost = "continue"` keeps the runtime from
/// giving the lock back early when the holder's local deadline passes, like a hung process.
macro_rules! hang_with_fixed_lease {
    ($name:ident, $ttl:tt) => {
        #[distributed_lock(key = "<key>", ttl = $ttl, watchdog = false, on_lease_lost = "continue", manager = self.locks)]
        async fn $name(&self, key: &str, entered: &(dyn Fn() + Sync)) -> Result<(), LockError> {
            entered();
            std::future::pending::<()>().await;
            Ok(())
        }
    };
}

/// A locked method with a renewed lease of `$ttl` that holds the lock until `until` resolves.
macro_rules! hold_with_renewal {
    ($name:ident, $ttl:tt) => {
        #[distributed_lock(key = "<key>", ttl = $ttl, manager = self.locks)]
        async fn $name(
            &self,
            key: &str,
            held: &(dyn Fn() + Sync),
            until: Work<'_>,
        ) -> Result<(), LockError> {
            held();
            until.await;
            Ok(())
        }
    };
}

impl Attribute {
    pub const NAME: &'static str = "distributed_lock";

    pub async fn connect(url: &str) -> Result<Self, BenchError> {
        Ok(Attribute {
            locks: LockManager::connect(url).await?,
        })
    }

    /// The defaults: ttl 30 s, try once, watchdog on.
    #[distributed_lock(key = "<key>", manager = self.locks)]
    async fn pair_locked(&self, key: &str) -> Result<(), LockError> {
        Ok(())
    }

    /// Waits for the lock by release notification.
    #[distributed_lock(key = "<key>", wait = "1h", manager = self.locks)]
    async fn section_locked(&self, key: &str, section: Work<'_>) -> Result<(), LockError> {
        section.await;
        Ok(())
    }

    hang_with_fixed_lease!(hang_1s, "1s");
    hang_with_fixed_lease!(hang_200ms, "200ms");
    hold_with_renewal!(hold_30s, "30s");
    hold_with_renewal!(hold_3s, "3s");
    hold_with_renewal!(hold_300ms, "300ms");
}

fn unsupported(lease: Duration, supported: &[Duration]) -> BenchError {
    BenchError::new(format!(
        "{}: no locked fn with a {lease:?} lease (the attribute fixes it at compile time); \
         there are {supported:?}",
        Attribute::NAME
    ))
}

#[async_trait]
impl Contender for Attribute {
    fn name(&self) -> &'static str {
        Self::NAME
    }

    async fn pair(&self, key: &str) -> Result<(), BenchError> {
        Ok(self.pair_locked(key).await?)
    }

    async fn exclusive(&self, key: &str, section: Work<'_>) -> Result<(), BenchError> {
        Ok(self.section_locked(key, section).await?)
    }

    async fn hold_without_release(
        &self,
        key: &str,
        lease: Duration,
        entered: &(dyn Fn() + Sync),
    ) -> Result<(), BenchError> {
        match lease.as_millis() {
            1000 => Ok(self.hang_1s(key, entered).await?),
            200 => Ok(self.hang_200ms(key, entered).await?),
            _ => Err(unsupported(lease, &FIXED_LEASES)),
        }
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
        match lease.as_millis() {
            30_000 => Ok(self.hold_30s(key, held, until).await?),
            3_000 => Ok(self.hold_3s(key, held, until).await?),
            300 => Ok(self.hold_300ms(key, held, until).await?),
            _ => Err(unsupported(lease, &RENEWED_LEASES)),
        }
    }
}
