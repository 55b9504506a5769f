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

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use crate::BenchError;

mod attribute;
mod hand_rolled;
mod hand_rolled_pubsub;
mod manager;
mod rslock;

pub use attribute::Attribute;
pub use hand_rolled::{HandRolled, RETRY_INTERVAL};
pub use hand_rolled_pubsub::HandRolledPubSub;
pub use manager::Manager;
pub use rslock::Rslock;

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
