//! Fencing enforced where the data lives: a held lock's token turned into a claim on the
//! resource the lock protects, and writes made conditional on that claim.
//!
//! A lock's lease can be lost while its holder runs on: a pause (GC, a stopped VM, a swap
//! storm) longer than the lease, a partition from the lock's store. Another process then takes
//! the lock, with a higher fencing token, and both believe they hold it. Only the resource can
//! tell them apart, and only if it checks tokens. Checking writes alone is not enough: a paused
//! holder can read, be overtaken, and write back what it read. The rule here is a **claim**:
//!
//! 1. Before its first read of a resource, a holder *claims* it: the resource's fence is raised
//!    to the holder's token, and the claim is refused ([`FenceError::Stale`]) if the fence is
//!    already higher.
//! 2. Every write is conditional on the fence still being the holder's token, *in the same
//!    transaction as the write*. A claim in that transaction is such a condition (it keeps the
//!    fence at the token, or refuses); so is a check, which refuses unless the fence is the
//!    token.
//!
//! A holder that was overtaken is refused at its next claim or write, so nothing it read after
//! being overtaken, and nothing it wrote, reaches the resource.
//!
//! [`Fence`] is the token and the resource's name. The stores that keep the resource:
//!
//! * Redis-held data ([`fence::redis`](crate::fence::redis)): a claim, and a claim with a write (`SET`, `HSET`,
//!   `DEL`, any command on the key) as one server-side step.
//! * PostgreSQL through sqlx (`fence::postgres`, feature `fence-postgres`), and SQLite
//!   (`fence::sqlite`, feature `fence-sqlite`): claims and checks inside the application's own
//!   transaction, with the table's SQL given for the application's migrations.
//! * The lock's own PostgreSQL store: a lock bound to a transaction that claims a resource in
//!   the same round trip (`lock_runtime::postgres::lock_and_claim_in_transaction`).
//!
//! What it cannot protect: effects outside the resource's transaction (an email sent, an HTTP
//! call made). Write them to an outbox table in the same transaction, and send them from there.
//!
//! Inside a `#[distributed_lock]` body, [`Fence::current`] names the held lock's key and token:
//!
//! ```
//! use lock_runtime::fence::Fence;
//!
//! # async fn run() -> Result<(), lock_runtime::LockError> {
//! # let locks = lock_runtime::LockManager::connect("memory://").await?;
//! # let guard = locks.lock("cart:7").await?;
//! # guard.scope(async {
//! let fence = Fence::current()?; // the resource `cart:7`, this section's token
//! assert_eq!(fence.resource(), "cart:7");
//! let fence = fence.on("carts/7"); // or a resource of another name
//! # assert_eq!(fence.resource(), "carts/7");
//! # Ok::<(), lock_runtime::LockError>(())
//! # }).await?;
//! # Ok(())
//! # }
//! ```

mod error;
pub mod redis;

pub use error::FenceError;

use crate::guard::LockGuard;

/// A holder's fencing token and the resource it fences: what a claim raises the resource's
/// fence to, and what a fenced write must still find there.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Fence {
    resource: String,
    token: u64,
}

impl Fence {
    /// The fence of `resource` at `token`, a fencing token of a lock held on it (from
    /// [`LockGuard::fencing_token`], [`CurrentLock::fencing_token`](crate::CurrentLock), or a
    /// store's own transaction lock).
    pub fn new(resource: impl Into<String>, token: u64) -> Fence {
        Fence {
            resource: resource.into(),
            token,
        }
    }

    /// The fence of the lock the running task holds (the innermost, inside nested sections):
    /// its key names the resource, its token is the section's. [`FenceError::NoLock`] outside
    /// a locked section. Rename the resource with [`on`](Fence::on).
    pub fn current() -> Result<Fence, FenceError> {
        match crate::current::current() {
            Some(lock) => Ok(Fence::new(lock.key(), lock.fencing_token())),
            None => Err(FenceError::NoLock {
                resource: String::new(),
            }),
        }
    }

    /// The fence of the lock `guard` holds: its key names the resource.
    pub fn of(guard: &LockGuard) -> Fence {
        Fence::new(guard.key(), guard.fencing_token())
    }

    /// The same token on another resource: one lock may protect several resources, each with a
    /// fence of its own.
    pub fn on(self, resource: impl Into<String>) -> Fence {
        Fence {
            resource: resource.into(),
            token: self.token,
        }
    }

    /// The resource's name, as the fence's store keeps it.
    pub fn resource(&self) -> &str {
        &self.resource
    }

    /// The fencing token.
    pub fn token(&self) -> u64 {
        self.token
    }

    /// The token as SQL's `BIGINT`, or [`FenceError::TokenRange`] above `i64::MAX`.
    #[cfg_attr(
        not(any(feature = "fence-postgres", feature = "fence-sqlite")),
        allow(dead_code)
    )]
    pub(crate) fn sql_token(&self) -> Result<i64, FenceError> {
        i64::try_from(self.token).map_err(|_| FenceError::TokenRange {
            resource: self.resource.clone(),
            offered: self.token,
            limit: i64::MAX as u64,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_above_bigint_is_refused_for_sql_with_the_limit() {
        let err = Fence::new("r", u64::MAX).sql_token().unwrap_err();
        assert!(
            matches!(err, FenceError::TokenRange { offered, limit, .. }
                if offered == u64::MAX && limit == i64::MAX as u64),
            "{err}"
        );
        assert_eq!(Fence::new("r", 7).sql_token().unwrap(), 7);
    }

    #[test]
    fn outside_a_section_there_is_no_fence() {
        assert!(matches!(Fence::current(), Err(FenceError::NoLock { .. })));
    }

    #[test]
    fn a_refusal_says_who_overtook_and_what_to_do() {
        let err = FenceError::Stale {
            resource: "cart:7".into(),
            current: 9,
            offered: 4,
        };
        let shown = err.to_string();
        assert!(
            shown.contains("token 4") && shown.contains("token 9"),
            "{shown}"
        );
        assert!(shown.contains("roll back"), "{shown}");
        assert!(err.is_refusal());
    }
}
