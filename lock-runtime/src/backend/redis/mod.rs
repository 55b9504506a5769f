//! Redis as the store of locks: one server, Sentinel, Cluster and Redlock, side by side over
//! the same scripts, calls and steps.

pub(crate) mod cluster;
mod feed;
pub(crate) mod redlock;
pub(crate) mod replicas;
pub(crate) mod sentinel;
pub(crate) mod single;
