//! The shop service example's shared parts: the database every instance writes to, and what the
//! service answers, so that the service (`shop_service`) and the runner that drives and audits it
//! (`shop_runner`) agree on both.
//!
//! The service sells one item ([`SKU`]) with two locks per order, always taken in the same order:
//! `order:<user_id>` (one request per user at a time) and then `stock:<sku>` (one buyer at a
//! time). Each lock's fencing token goes with the database write it protects, and the database
//! refuses a write whose token is not above the last one it accepted for that row: an instance
//! that lost its lock (paused past its lease, cut off from Redis) cannot overwrite the work of the
//! instance that took the lock over.

pub mod db;
pub mod wire;

pub use db::{Audit, Database, Fence, Purchase, ShopError};
pub use wire::{OrderAnswer, Outcome};

/// The one item on sale.
pub const SKU: &str = "sku-phone";
