//! The load benchmark of `lock-runtime`: this library (through `#[distributed_lock]` and through
//! `LockManager::lock`) against the hand-rolled `SET NX PX` lock of the blog posts (the
//! round-trip floor) and the `rslock` crate, all on the same Redis in the same run.

pub mod contender;
mod error;
pub mod process;
pub mod server;
pub mod stats;

pub use error::BenchError;
