//! Test harness for the integration suites: real `redis-server` processes on free loopback ports,
//! the deployments a lock runs on built from them, and a fault-injecting TCP proxy to put between a
//! client and a server.
//!
//! ```no_run
//! use lock_tests::{FaultProxy, RedisServer};
//! use std::time::Duration;
//!
//! let server = RedisServer::start();
//! assert_eq!(server.cmd(&["PING"]), "PONG", "{}", server.log());
//!
//! let proxy = FaultProxy::start(server.addr());
//! proxy.set_delay(Duration::from_millis(50));
//! // connect the client under test to proxy.url() instead of server.url()
//! ```
//!
//! The deployments:
//!
//! - [`RedisServer`]: one server.
//! - [`Masters`]: independent servers, for Redlock.
//! - [`RedisCluster`]: a Redis Cluster formed with `redis-cli --cluster create`, with failover on
//!   demand.
//! - [`RedisServer::start_tls`]: one server that also speaks TLS, with the certificates of a
//!   [`TestCerts`] (a private CA, a server and a client certificate made at test time).
//! - [`SentinelSetup`]: a master with replicas, watched by Redis Sentinels, with failover on
//!   demand.
//!
//! For Postgres:
//!
//! - [`PostgresServer`]: a PostgreSQL cluster made with `initdb` in a temp dir, with a role and
//!   database `lock`; [`PostgresServer::start_standby`] adds a streaming read-only standby.
//! - [`PgBouncer`]: a `pgbouncer` in transaction pool mode (or session mode) in front of one.
//!
//! Every node of a deployment is a [`RedisServer`] of its own, so it can be killed, paused and
//! resumed one at a time, and each deployment's `log()` gathers the logs of all its nodes.
//!
//! The servers never use port 6379 (nor 5432 and 6432 for Postgres and PgBouncer), so a system
//! server is neither needed nor touched. If `redis-server` (or `postgres`, `pgbouncer`) is not
//! installed, starting one panics with a line that says how to install it: tests never pass
//! silently without a server.

mod cluster;
pub mod deadlocks;
mod deployment;
pub mod fair;
pub mod logs;
mod masters;
mod pgbouncer;
mod port;
mod postgres;
pub mod prelude;
mod probe;
mod proxy;
pub mod resp;
mod sentinel;
mod server;
mod stored;
mod tempdir;
mod tls;
mod topology;
mod wait;
mod waiting;

pub use cluster::{RedisCluster, SLOT_COUNT, key_slot};
pub use deployment::Deployment;
pub use masters::Masters;
pub use pgbouncer::{PGBOUNCER_BINARY_VAR, PgBouncer, pgbouncer_binary};
pub use port::free_port;
pub use postgres::{
    PG_BIN_VAR, POSTGRES_PASSWORD, POSTGRES_ROLE, PostgresServer, encoded, pg_bin_dir,
    pg_major_version,
};
pub use probe::{busy_elsewhere, is_free};
pub use proxy::FaultProxy;
pub use resp::Reply;
pub use sentinel::{MASTER_NAME, SentinelSetup};
pub use server::{ProcessState, RedisServer, SERVER_BINARY_VAR, server_binary, server_version};
pub use stored::StoredLock;
pub use tls::TestCerts;
pub use wait::{wait_until, wait_until_async};
