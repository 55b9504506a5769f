//! Redis as the store of locks: one layer of scripts, calls, steps and connection written once,
//! with one server, Sentinel, Cluster and Redlock as siblings over it.
//!
//! - [`scripts`]: the Lua scripts; [`calls`]: their calls and who makes them; [`steps`]: the
//!   steps of a lock over any connection; [`connection`]: one server's shared connection and
//!   the settings of every deployment; [`probe`]: what a connect checks; [`feed`]: release
//!   notifications over pub/sub; [`replicas`]: waiting for replica acknowledgements;
//!   [`inspect`]: the inspection side every deployment shares.
//! - The deployments: [`single`], [`sentinel`], [`cluster`], [`redlock`].

mod calls;
pub(crate) mod cluster;
pub(crate) mod connection;
mod feed;
mod inspect;
mod probe;
pub(crate) mod redlock;
pub(crate) mod replicas;
pub(crate) mod sentinel;
pub(crate) mod single;
mod steps;
