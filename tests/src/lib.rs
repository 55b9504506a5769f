//! Test harness for the integration suites: real `redis-server` processes on free loopback ports.
//!
//! ```no_run
//! use lock_tests::RedisServer;
//!
//! let server = RedisServer::start();
//! assert_eq!(server.cmd(&["PING"]), "PONG", "{}", server.log());
//! ```
//!
//! The servers never use port 6379, so a system Redis is neither needed nor touched. If
//! `redis-server` is not installed, starting one panics with a line that says how to install it:
//! tests never pass silently without a server.

mod port;
pub mod resp;
mod server;
mod tempdir;
mod wait;

pub use port::free_port;
pub use resp::Reply;
pub use server::RedisServer;
pub use wait::{wait_until, wait_until_async};
