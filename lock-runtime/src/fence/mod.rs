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
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! # let locks = lock_runtime::LockManager::connect("memory://").await?;
//! # let guard = locks.lock("cart:7", lock_runtime::LockOptions::default()).await?;
//! # guard.scope(async {
//! let fence = Fence::current()?; // the resource `cart:7`, this section's token
//! assert_eq!(fence.resource(), "cart:7");
//! let fence = fence.on("carts/7"); // or a resource of another name
//! # assert_eq!(fence.resource(), "carts/7");
//! # Ok::<(), lock_runtime::fence::FenceError>(())
//! # }).await?;
//! # Ok(())
//! # }
//! ```

mod error;
#[cfg(feature = "fence-postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "fence-postgres")))]
pub mod postgres;
pub mod redis;
#[cfg(feature = "fence-sqlite")]
#[cfg_attr(docsrs, doc(cfg(feature = "fence-sqlite")))]
pub mod sqlite;
#[cfg(any(feature = "fence-postgres", feature = "fence-sqlite"))]
pub(crate) mod table;

pub use error::FenceError;

use crate::guard::LockGuard;

/// A holder's fencing token and the resource it fences: what a claim raises the resource's
/// fence to, and what a fenced write must still find there.
///
/// A fence taken from a held lock ([`current`](Fence::current), [`of`](Fence::of)) also
/// carries a holder id, derived from the acquisition's owner token (a one-way hash: the token
/// itself is never stored or shown). It tells this holder's own claims apart from another
/// holder's claim with the *same* token, which happens when a lock store loses its counter's
/// last writes (a Redis restart without persistence, a failover) and hands a token out again:
/// a claim at the resource's current token is accepted only from the holder that made it.
/// A fence built with [`new`](Fence::new) has no holder id (give it one with
/// [`held_by`](Fence::held_by)), and then a claim at the resource's current token is accepted
/// from anyone.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Fence {
    resource: String,
    token: u64,
    holder: Option<String>,
}

impl Fence {
    /// The fence of `resource` at `token`, a fencing token of a lock held on it (from
    /// [`LockGuard::fencing_token`], [`CurrentLock::fencing_token`](crate::CurrentLock), or a
    /// store's own transaction lock).
    pub fn new(resource: impl Into<String>, token: u64) -> Fence {
        Fence {
            resource: resource.into(),
            token,
            holder: None,
        }
    }

    /// The same fence with `holder` as its holder id: a name of this acquisition that no other
    /// holder of the lock uses (an id the application's own lock gives, for instance).
    pub fn held_by(self, holder: impl Into<String>) -> Fence {
        Fence {
            holder: Some(holder.into()),
            ..self
        }
    }

    /// The fence of the lock the running task holds (the innermost, inside nested sections):
    /// its key names the resource, its token is the section's. [`FenceError::NoLock`] outside
    /// a locked section. Rename the resource with [`on`](Fence::on).
    pub fn current() -> Result<Fence, FenceError> {
        match crate::current::current() {
            Some(lock) => {
                Ok(Fence::new(lock.key(), lock.fencing_token())
                    .held_by(holder_id(lock.owner_token())))
            }
            None => Err(FenceError::NoLock {
                resource: String::new(),
            }),
        }
    }

    /// The fence of the lock `guard` holds: its key names the resource.
    pub fn of(guard: &LockGuard) -> Fence {
        Fence::new(guard.key(), guard.fencing_token()).held_by(holder_id(guard.lease().token()))
    }

    /// The same token (and holder id) on another resource: one lock may protect several
    /// resources, each with a fence of its own.
    pub fn on(self, resource: impl Into<String>) -> Fence {
        Fence {
            resource: resource.into(),
            ..self
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

    /// The holder id (see [`Fence`]), if the fence has one.
    pub fn holder(&self) -> Option<&str> {
        self.holder.as_deref()
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

/// A holder id from an owner token: 16 hex digits of a one-way hash under a label of its own,
/// so it is neither the token nor the id a release announces.
fn holder_id(owner_token: &str) -> String {
    let mut hash = sha1_smol::Sha1::new();
    hash.update(b"lock-runtime fence holder\0");
    hash.update(owner_token.as_bytes());
    hash.digest().to_string()[..16].to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_above_bigint_is_refused_for_sql_with_the_limit() {
        let err = Fence::new("r", u64::MAX)
            .sql_token()
            .expect_err("a refusal");
        assert!(
            matches!(err, FenceError::TokenRange { offered, limit, .. }
                if offered == u64::MAX && limit == i64::MAX as u64),
            "{err}"
        );
        assert_eq!(
            Fence::new("r", 7)
                .sql_token()
                .expect("as the test set it up"),
            7
        );
    }

    #[tokio::test]
    async fn a_held_lock_gives_its_key_token_and_a_holder_id_that_is_not_its_owner_token() {
        let locks = crate::LockManager::connect("memory://")
            .await
            .expect("as the test set it up");
        let guard = locks
            .lock("cart:7", crate::LockOptions::default())
            .await
            .expect("as the test set it up");
        let fence = Fence::of(&guard);
        assert_eq!(fence.resource(), "cart:7");
        assert_eq!(fence.token(), guard.fencing_token());
        let holder = fence.holder().expect("as the test set it up").to_owned();
        assert_eq!(holder.len(), 16);
        assert!(!guard.lease().token().contains(&holder));
        let inside = guard
            .scope(async { Fence::current().expect("as the test set it up") })
            .await;
        assert_eq!(inside, fence, "the body sees the guard's fence");
        let other = locks
            .lock("cart:8", crate::LockOptions::default())
            .await
            .expect("as the test set it up");
        assert_ne!(Fence::of(&other).holder(), Some(holder.as_str()));
        assert_eq!(fence.clone().on("carts/7").holder(), Some(holder.as_str()));
        guard.release().await.expect("as the test set it up");
        other.release().await.expect("as the test set it up");
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
