//! Distributed locks on Redis (skeleton).
#![cfg_attr(docsrs, feature(doc_cfg))]

mod error;
mod options;
mod stub;

#[doc(hidden)]
#[path = "private.rs"]
pub mod __private;

pub use error::{BoxError, LockError, LostReason};
pub use lock_macro::distributed_lock;
pub use options::{LockOptions, OnLeaseLost};
pub use stub::*;
