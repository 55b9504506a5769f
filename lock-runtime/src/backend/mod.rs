//! The stores of this crate: memory, and Redis as a single server, Sentinel, Cluster and
//! Redlock. Each implements [`Store`](crate::store::Store) as a store of a user's would.

pub(crate) mod failure;
pub(crate) mod memory;
#[cfg(feature = "postgres")]
pub(crate) mod postgres;
pub(crate) mod redis;
mod replies;

pub(crate) use failure::{connect_error, is_transient};
pub(crate) use replies::{
    AcquireReply, acquire_answer, hand_off_answer, permits_differ, permits_mismatch, steal_answer,
};

pub(crate) use crate::protocol::FAIR_TURN;
pub(crate) use crate::store::{
    Acquire, Ask, Booking, BoxFuture, HandOff, Line, Release, Renewal, Store, StoreError, whole,
};

/// acquire.lua's ARGV[5]: whether a busy answer puts the caller in the line of fair waiters.
pub(crate) fn line_arg(line: Line) -> &'static str {
    match line {
        Line::No => "",
        Line::IfAny => "line",
        Line::Fair => "fair",
    }
}
