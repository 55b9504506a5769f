//! The small interface every deployment implements: acquire, renew, release, and being told of
//! releases.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use crate::key::StoredKey;

pub(crate) mod cluster;
mod failure;
pub(crate) mod memory;
pub(crate) mod redis;
pub(crate) mod redlock;
pub(crate) mod replicas;
pub(crate) mod sentinel;

pub(crate) use failure::{Failure, is_transient};

pub(crate) type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// The answer to an acquire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Acquire {
    /// Ours, with this fencing token.
    Acquired { fence: u64 },
    /// Held by someone else for about this long (`None`: the lock has no expiry). `holder`
    /// tells owners apart across servers (see acquire.lua) where the backend knows it.
    Busy {
        remaining: Option<Duration>,
        holder: Option<u64>,
    },
}

/// What acquire.lua answered, `{status, value, holder}`, as an [`Acquire`].
pub(crate) fn acquire_answer(
    key: &StoredKey,
    (status, value, holder): (i64, i64, i64),
) -> Result<Acquire, Failure> {
    match status {
        1 => Ok(Acquire::Acquired {
            fence: u64::try_from(value).map_err(|_| {
                Failure::permanent(format!("the server handed out fencing token {value}"))
            })?,
        }),
        0 => Ok(Acquire::Busy {
            remaining: u64::try_from(value).ok().map(Duration::from_millis),
            holder: u64::try_from(holder).ok(),
        }),
        -2 => Err(Failure::permanent(format!(
            "the fence counter `{}` holds a value fencing tokens cannot continue from (not a \
             number, or 2^53 and above); the lock was not taken and nothing was written. Delete \
             the counter only once no storage still checks tokens of this lock",
            key.fence().escape_debug()
        ))),
        _ => Err(Failure::permanent(format!(
            "key `{}` holds data that is not a lock; it was left untouched",
            key.lock.escape_debug()
        ))),
    }
}

/// The answer to a release.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Release {
    Released,
    /// Someone else holds the lock now (or the key holds other data): it was left untouched.
    NotOwner,
    /// Nothing at the key: the lease had run out.
    Gone,
}

/// One lease to renew. It shares the lease rather than copying its key and token: a batch may
/// hold ten thousand of these at once.
#[derive(Clone)]
pub(crate) struct Renewal {
    pub(crate) lease: std::sync::Arc<crate::lease::Lease>,
    pub(crate) ttl: Duration,
}

impl Renewal {
    /// The stored lock key.
    pub(crate) fn key(&self) -> &str {
        &self.lease.stored.lock
    }

    pub(crate) fn token(&self) -> &str {
        &self.lease.token
    }
}

/// A deployment that can hold locks. Implementations never block and never panic on I/O.
pub(crate) trait Backend: Send + Sync + 'static {
    /// What this is, for the startup log: `redis 127.0.0.1:6379`, `memory`.
    fn describe(&self) -> &str;

    /// The server named in error messages (host and port, never credentials).
    fn server(&self) -> &str;

    /// One round trip: take the lock with `token` for `ttl`, or report the holder's remaining lease.
    fn acquire<'a>(
        &'a self,
        key: &'a StoredKey,
        token: &'a str,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<Acquire, Failure>>;

    /// One round trip for the whole batch (per node or slot where the deployment has several):
    /// per lease, `Some(true)` if renewed, `Some(false)` if not ours, `None` if its part of the
    /// batch got no answer (the lease is tried again; the others are not held back by it).
    fn renew<'a>(
        &'a self,
        batch: &'a [Renewal],
    ) -> BoxFuture<'a, Result<Vec<Option<bool>>, Failure>>;

    /// One round trip: release the lock if `token` owns it; with `keep > 0` leave it to expire then.
    fn release<'a>(
        &'a self,
        key: &'a StoredKey,
        token: &'a str,
        keep: Duration,
    ) -> BoxFuture<'a, Result<Release, Failure>>;

    /// Start delivering release notifications for `key` to the manager's waiters; resolves once
    /// notifications are flowing, so a retry after it cannot miss a release.
    fn watch<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<(), Failure>>;

    /// Stop delivering notifications for `key`. Never blocks.
    fn unwatch(&self, key: &str);

    /// Whether releases are announced to [`watch`](Backend::watch)ers at all (a user without
    /// rights on the lock channels cannot publish or subscribe): if not, every waiter watches
    /// the lease's expiry itself.
    fn notifies(&self) -> bool {
        true
    }

    /// Whether the next attempt of an acquire that was busy or failed may send the same owner
    /// token. Where it may, a retry confirms a grant whose answer was lost. A deployment that
    /// gives back what a failed attempt took, possibly after that attempt returned, says no:
    /// a give-back that lands after the next attempt's grant under the same token would remove
    /// that grant, and the holder would go on without a majority.
    fn retry_with_same_token(&self) -> bool {
        true
    }
}
