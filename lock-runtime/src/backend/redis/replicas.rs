//! Waiting for replicas to acknowledge a fresh lock (`WAIT`), for single, Sentinel and Cluster.
//!
//! `WAIT` blocks the client connection it is sent on until the replicas caught up with that
//! connection's writes, so it never goes on the manager's shared connection (renewals and
//! every other lock would queue behind it): a granted acquire and its `WAIT` run on a
//! connection of their own, taken from a small pool. It is sent only after a grant, bounded by
//! half the lease, and a shortfall is a transient failure (the grant is given back and the
//! acquire retries within its wait budget).

use std::sync::Mutex;
use std::sync::PoisonError;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use redis::aio::ConnectionLike;

use crate::backend::StoreError;
use crate::protocol::{Announce, millis};

/// What to do when fewer replicas are connected to the master than
/// [`wait_for_replicas`](crate::LockManagerBuilder::wait_for_replicas) asks for (after a
/// failover, the promoted replica has none until the others follow it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum ReplicaShortage {
    /// Refuse the lock: an acquire gives its grant back and retries within its wait budget,
    /// then fails with [`LockError::Backend`](crate::LockError::Backend). Nothing is held
    /// with fewer acknowledgements than asked for. The default.
    #[default]
    Fail,
    /// Accept the lock once every replica that is connected acknowledged it (none, if none
    /// is), with a warning when this starts and a note when enough replicas are back. Locks
    /// stay available through a failover, with less protection against the next one.
    UseConnected,
}

/// The replica settings of a manager.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ReplicaAcks {
    pub(crate) count: u32,
    pub(crate) timeout: Duration,
    pub(crate) shortage: ReplicaShortage,
}

/// The longest `WAIT` accepted: a replica that needs longer to acknowledge is down.
pub(crate) const MAX_REPLICA_TIMEOUT: Duration = Duration::from_secs(60);

impl ReplicaAcks {
    /// How long a connection that waits for these acknowledgements waits for an answer: a
    /// request's time and the `WAIT`'s own. A connection that gave up sooner would fail an
    /// acquire the replicas are still answering, and not with their answer.
    pub(crate) fn response_timeout(&self, request_timeout: Duration) -> Duration {
        request_timeout + self.timeout
    }

    /// Checks the settings at build time, with the reason when they cannot work.
    pub(crate) fn validate(&self) -> Result<(), String> {
        if self.timeout.is_zero() {
            return Err(
                "wait_for_replicas timeout is zero, which WAIT reads as \"wait forever\": \
                 give it a bound, e.g. 100ms"
                    .into(),
            );
        }
        if self.timeout > MAX_REPLICA_TIMEOUT {
            return Err(format!(
                "wait_for_replicas timeout {} is longer than {}: a replica that needs longer to \
                 acknowledge is down",
                crate::shown::Exact(self.timeout),
                crate::shown::Exact(MAX_REPLICA_TIMEOUT)
            ));
        }
        Ok(())
    }
}

/// A backend's replica settings, with what it last found.
pub(super) struct Replication {
    pub(super) acks: ReplicaAcks,
    /// The deployment, for the log.
    server: String,
    /// How a grant given back is announced.
    pub(super) announce: Announce,
    /// Locks are being accepted with fewer acknowledgements than asked for (`UseConnected`).
    degraded: AtomicBool,
}

impl Replication {
    pub(super) fn new(acks: ReplicaAcks, server: &str, announce: Announce) -> Self {
        Replication {
            acks,
            server: server.to_owned(),
            announce,
            degraded: AtomicBool::new(false),
        }
    }

    /// Waits until the replicas acknowledged the writes sent on `conn` (a granted lock with a
    /// lease of `ttl`), for at most the configured timeout and half the lease. `Ok` when enough
    /// acknowledged (by the shortage policy); the caller gives the grant back otherwise.
    pub(super) async fn confirm<C: ConnectionLike>(
        &self,
        conn: &mut C,
        ttl: Duration,
    ) -> Result<(), StoreError> {
        let server = self.server.as_str();
        let wanted = self.acks.count;
        let limit = self.acks.timeout.min(ttl / 2);
        let acked: u32 = redis::cmd("WAIT")
            .arg(wanted)
            .arg(millis(limit))
            .query_async(conn)
            .await?;
        if acked >= wanted {
            if self.degraded.swap(false, Ordering::AcqRel) {
                tracing::info!(
                    server,
                    replicas = acked,
                    "enough replicas acknowledge locks again"
                );
            }
            return Ok(());
        }
        if self.acks.shortage == ReplicaShortage::UseConnected {
            let connected = connected_replicas(conn).await?;
            if acked >= connected {
                if !self.degraded.swap(true, Ordering::AcqRel) {
                    tracing::warn!(
                        server,
                        wanted,
                        connected,
                        "fewer replicas connected than wait_for_replicas asks for; locks are \
                         taken with the acknowledgements of those connected"
                    );
                }
                return Ok(());
            }
        }
        Err(StoreError::transient(format!(
            "only {acked} of {wanted} replicas acknowledged the lock within {}; it was given \
             back",
            crate::shown::Shown(limit)
        )))
    }
}

/// `connected_slaves` from `INFO replication`.
async fn connected_replicas<C: ConnectionLike>(conn: &mut C) -> Result<u32, StoreError> {
    let info: String = redis::cmd("INFO")
        .arg("replication")
        .query_async(conn)
        .await?;
    info.lines()
        .find_map(|line| line.strip_prefix("connected_slaves:"))
        .and_then(|count| count.trim().parse().ok())
        .ok_or_else(|| StoreError::permanent("INFO replication names no connected_slaves"))
}

/// Idle connections kept for acquires that wait for replicas: each such acquire has one to
/// itself while its `WAIT` blocks it.
pub(super) struct Pool<C> {
    idle: Mutex<Vec<C>>,
}

/// Idle connections kept at most; more are opened while more acquires wait at once.
const IDLE: usize = 4;

impl<C> Default for Pool<C> {
    fn default() -> Self {
        Pool {
            idle: Mutex::new(Vec::new()),
        }
    }
}

impl<C> Pool<C> {
    /// An idle connection, if any.
    pub(super) fn take(&self) -> Option<C> {
        self.idle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop()
    }

    /// Gives back a connection whose last request succeeded.
    pub(super) fn put(&self, conn: C) {
        let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
        if idle.len() < IDLE {
            idle.push(conn);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_zero_or_huge_replica_timeout_is_refused_with_the_reason() {
        let acks = |timeout| ReplicaAcks {
            count: 1,
            timeout,
            shortage: ReplicaShortage::Fail,
        };
        let zero = acks(Duration::ZERO).validate().expect_err("zero");
        assert!(zero.contains("wait forever"), "{zero}");
        let huge = acks(Duration::MAX).validate().expect_err("MAX");
        assert!(huge.contains("longer than"), "{huge}");
        assert!(acks(Duration::from_millis(100)).validate().is_ok());
    }

    #[test]
    fn the_pool_keeps_a_few_idle_connections() {
        let pool = Pool::default();
        for i in 0..10 {
            pool.put(i);
        }
        let mut kept = 0;
        while pool.take().is_some() {
            kept += 1;
        }
        assert_eq!(kept, IDLE);
    }
}
