//! The locks compared, each in its own file behind one trait, all on the same Redis:
//!
//! - [`Attribute`]: this library through `#[distributed_lock]`,
//! - [`Manager`]: this library through `LockManager::lock`,
//! - [`HandRolled`]: `SET key token NX PX ttl` and a compare-and-delete script, retried at a fixed
//!   interval, no watchdog: the pattern of the well-known blog posts, and the round-trip floor,
//! - [`HandRolledPubSub`]: the same, but a waiter subscribes to the key's release channel and
//!   tries again on the release message or when the lease it saw runs out: the reference for
//!   waiting,
//! - [`Rslock`]: the `rslock` crate (Redlock) on one instance, at its defaults.
//!
//! And on PostgreSQL, beside the library's two ways over a `postgres://` URL:
//!
//! - [`LeaseFloor`]: the store's lease written by hand with sqlx, `INSERT ... ON CONFLICT ...
//!   RETURNING fence` and `DELETE ... WHERE token`, retried at a fixed interval: the floor; and
//!   the same with `pg_notify` in the release, what telling releases costs apart from the library,
//! - [`TryAdvisory`]: `pg_try_advisory_lock` and `pg_advisory_unlock` on one pooled connection
//!   per pair, retried at a fixed interval,
//! - [`SqlxAdvisory`]: sqlx's `PgAdvisoryLock` (`try_acquire`, `acquire`, `release_now`).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use crate::BenchError;

mod advisory;
mod attribute;
mod hand_rolled;
mod hand_rolled_pubsub;
mod lease_floor;
mod manager;
mod rslock;
mod sqlx_advisory;

pub use advisory::TryAdvisory;
pub use attribute::Attribute;
pub use hand_rolled::{HandRolled, RETRY_INTERVAL};
pub use hand_rolled_pubsub::HandRolledPubSub;
pub use lease_floor::LeaseFloor;
pub use manager::Manager;
pub use rslock::Rslock;
pub use sqlx_advisory::SqlxAdvisory;

/// Work done while a lock is held, or the signal to stop holding it.
pub type Work<'a> = Pin<Box<dyn Future<Output = ()> + Send + 'a>>;

/// The fixed leases the expiry scenario may use: the attribute needs its `ttl` at compile time.
pub const FIXED_LEASES: [Duration; 2] = [Duration::from_secs(1), Duration::from_millis(200)];

/// The renewed leases the hold-many scenario may use, for the same reason.
pub const RENEWED_LEASES: [Duration; 3] = [
    Duration::from_secs(30),
    Duration::from_secs(3),
    Duration::from_millis(300),
];

/// The lease of an uncontended or contended acquisition (the library's default).
pub const LEASE: Duration = Duration::from_secs(30);

/// One lock implementation under test.
#[async_trait]
pub trait Contender: Send + Sync {
    /// The name in tables and JSON.
    fn name(&self) -> &'static str;

    /// Takes `key`, which is free, without waiting, and gives it back: one uncontended pair.
    async fn pair(&self, key: &str) -> Result<(), BenchError>;

    /// Waits for `key` as long as it takes, runs `section` while holding it, gives it back.
    async fn exclusive(&self, key: &str, section: Work<'_>) -> Result<(), BenchError>;

    /// Takes `key` with a fixed lease (one of [`FIXED_LEASES`], never renewed), calls `entered`
    /// and never gives it back: the future stays pending until it is dropped, like a holder that
    /// hangs or died.
    async fn hold_without_release(
        &self,
        key: &str,
        lease: Duration,
        entered: &(dyn Fn() + Sync),
    ) -> Result<(), BenchError>;

    /// This lock in its fair mode (waiters served in the order they came), for the natural
    /// contention scenario; most locks have none.
    fn fair_mode(&self) -> FairMode {
        FairMode::None
    }

    /// Whether this lock keeps a held lease alive by itself.
    fn renews(&self) -> bool;

    /// Whether a holder that never gives the lock back loses it when a lease runs out; false
    /// for a session lock, held until its connection closes, which the expiry scenario skips.
    fn leased(&self) -> bool {
        true
    }

    /// Takes `key` with a lease (one of [`RENEWED_LEASES`]) renewed while held, calls `held`,
    /// keeps the lock until `until` resolves, then gives it back.
    async fn hold_renewed(
        &self,
        key: &str,
        lease: Duration,
        held: &(dyn Fn() + Sync),
        until: Work<'_>,
    ) -> Result<(), BenchError>;
}

/// Whether a contender has a fair mode to measure beside its default one.
pub enum FairMode {
    /// No such mode: no fair rows.
    None,
    /// The mode is planned but this build cannot run it: its rows say so, without figures.
    NotAvailable {
        name: &'static str,
        reason: &'static str,
    },
    /// The same lock in its fair mode, measured as a contender of its own.
    Available(Arc<dyn Contender>),
}

/// The contenders' names, in table order.
pub const NAMES: [&str; 5] = [
    Attribute::NAME,
    Manager::NAME,
    HandRolled::NAME,
    HandRolledPubSub::NAME,
    Rslock::NAME,
];

/// The PostgreSQL contenders' names, in table order.
pub const POSTGRES_NAMES: [&str; 6] = [
    Attribute::NAME,
    Manager::NAME,
    LeaseFloor::NAME,
    LeaseFloor::NOTIFY_NAME,
    TryAdvisory::NAME,
    SqlxAdvisory::NAME,
];

/// Connects the PostgreSQL contender called `name` (see [`POSTGRES_NAMES`]) to the database at
/// `url`, with a pool of at most `connections`.
pub async fn connect_postgres(
    name: &str,
    url: &str,
    connections: u32,
) -> Result<Arc<dyn Contender>, BenchError> {
    Ok(match name {
        Attribute::NAME | Manager::NAME => {
            let separator = if url.contains('?') { '&' } else { '?' };
            let url = format!("{url}{separator}max_connections={connections}");
            if name == Attribute::NAME {
                Arc::new(Attribute::connect(&url).await?)
            } else {
                Arc::new(Manager::connect(&url).await?)
            }
        }
        LeaseFloor::NAME => Arc::new(LeaseFloor::connect(url, connections, false).await?),
        LeaseFloor::NOTIFY_NAME => Arc::new(LeaseFloor::connect(url, connections, true).await?),
        TryAdvisory::NAME => Arc::new(TryAdvisory::connect(url, connections).await?),
        SqlxAdvisory::NAME => Arc::new(SqlxAdvisory::connect(url, connections).await?),
        other => {
            return Err(BenchError::new(format!(
                "no PostgreSQL contender `{other}`; they are {POSTGRES_NAMES:?}"
            )));
        }
    })
}

/// Connects the contender called `name` (see [`NAMES`]) to `url`.
pub async fn connect(name: &str, url: &str) -> Result<Arc<dyn Contender>, BenchError> {
    Ok(match name {
        Attribute::NAME => Arc::new(Attribute::connect(url).await?),
        Manager::NAME => Arc::new(Manager::connect(url).await?),
        HandRolled::NAME => Arc::new(HandRolled::connect(url).await?),
        HandRolledPubSub::NAME => Arc::new(HandRolledPubSub::connect(url).await?),
        Rslock::NAME => Arc::new(Rslock::connect(url)?),
        other => {
            return Err(BenchError::new(format!(
                "no contender `{other}`; the contenders are {NAMES:?}"
            )));
        }
    })
}
