//! Free loopback ports.

use std::net::{Ipv4Addr, TcpListener};

/// The port a system Redis listens on; the harness never uses it.
const SYSTEM_REDIS_PORT: u16 = 6379;

/// Returns a loopback port that was free a moment ago (never 6379).
///
/// The port is found by binding `127.0.0.1:0` and dropping the listener, so another process can
/// take it before the caller binds it; [`RedisServer`](crate::RedisServer) retries on a new port
/// when that happens.
pub fn free_port() -> u16 {
    loop {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .expect("binding 127.0.0.1:0 should always find a free port");
        let port = listener
            .local_addr()
            .expect("a bound listener has a local address")
            .port();
        if port != SYSTEM_REDIS_PORT {
            return port;
        }
    }
}
