//! Free loopback ports for the servers the tests start.

use std::net::{Ipv4Addr, TcpListener};
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// The port a system Redis listens on; the harness never uses it.
const SYSTEM_REDIS_PORT: u16 = 6379;
/// The lowest port chosen; below it sit ports that services are configured with.
const LOWEST_PORT: u16 = 20_000;

/// Returns a loopback port nobody listens on now (never 6379), for a server to bind.
///
/// The port is chosen at random below the range the system takes the local ports of outgoing
/// connections and of binds to port 0 from (`ip_local_port_range`): a server that is killed and
/// restarted on its port (as [`RedisServer::restart`](crate::RedisServer::restart) does) would
/// otherwise find it taken meanwhile by one of the many connections the tests open, or by
/// another process's bind to port 0. Another process may still take it first:
/// [`RedisServer`](crate::RedisServer) then retries on a new port. Where that range is unknown,
/// the system picks the port (bind to port 0, then drop the listener).
pub fn free_port() -> u16 {
    let Some(range) = below_ephemeral() else {
        return system_port();
    };
    loop {
        let span = u64::from(range.end - range.start);
        let port = range.start + u16::try_from(next_random() % span).unwrap_or(0);
        if port != SYSTEM_REDIS_PORT && TcpListener::bind((Ipv4Addr::LOCALHOST, port)).is_ok() {
            return port;
        }
    }
}

/// `LOWEST_PORT` up to the first port of `ip_local_port_range`, if that is known and above it.
fn below_ephemeral() -> Option<Range<u16>> {
    let text = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").ok()?;
    let start: u16 = text.split_whitespace().next()?.parse().ok()?;
    (start > LOWEST_PORT).then_some(LOWEST_PORT..start)
}

/// A port the system picks from its ephemeral range.
fn system_port() -> u16 {
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

/// A pseudo-random number (SplitMix64), seeded per process by the clock and the pid, so that
/// test processes started together choose different ports.
fn next_random() -> u64 {
    static STATE: AtomicU64 = AtomicU64::new(0);
    let seed = || {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |since| since.as_nanos() as u64);
        nanos ^ u64::from(std::process::id()).rotate_left(32)
    };
    let _ = STATE.compare_exchange(0, seed() | 1, Ordering::Relaxed, Ordering::Relaxed);
    let mut z = STATE
        .fetch_add(0x9E37_79B9_7F4A_7C15, Ordering::Relaxed)
        .wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}
