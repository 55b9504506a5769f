//! The shop service example's shared parts: the database every instance writes to, and what the
//! service answers, so that the service (`shop_service`) and the runner that drives and audits it
//! (`shop_runner`) agree on both.
//!
//! The service sells one item ([`SKU`]) with two locks per order, always taken in the same order:
//! `order:<user_id>` (one request per user at a time) and then `stock:<sku>` (one buyer at a
//! time). Each lock's fencing token claims the database row it protects before the holder reads
//! it, and the row refuses a write whose token is below one it has seen: an instance that lost
//! its lock (stalled past its lease, cut off from Redis) cannot overwrite the work of the instance
//! that took the lock over.

pub mod db;
pub mod service;
pub mod wire;

pub use db::{Audit, Database, Fence, Purchase, Row, ShopError};
pub use wire::{OrderAnswer, Outcome};

/// The one item on sale.
pub const SKU: &str = "sku-phone";

/// What the service's locked sections do when their lease is lost, as the attribute's
/// `on_lease_lost` says: the service's `--on-lease-lost`, which the runner passes on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum OnLeaseLost {
    /// Stop the request at its next `.await` (the attribute's default): most stale holders never
    /// reach the database.
    #[default]
    Abort,
    /// Let it run on: only the database's fences stop a stale holder's writes.
    Continue,
}

impl OnLeaseLost {
    /// The command-line value: `abort` or `continue`.
    pub fn as_arg(self) -> &'static str {
        match self {
            OnLeaseLost::Abort => "abort",
            OnLeaseLost::Continue => "continue",
        }
    }
}
