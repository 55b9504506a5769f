//! A regression test for what the chaos runs on PostgreSQL found (docs/RELIABILITY.md,
//! "Store faults alone (5-minute runs), and what the runs found"): every request of the store
//! cost two round trips, not one. The pool a `postgres://` URL made kept sqlx's default
//! `test_before_acquire`, which pings an idle connection before lending it, so an acquire, a
//! renewal and a release each waited for a ping's answer and then for the statement's. An
//! acquire gets at most its ttl (and the request timeout) for all of it: at a round trip of
//! more than half that budget no acquire succeeded, although the statement alone would have
//! been answered in time, and the grants whose answers came after their caller gave up held the
//! lock for a ttl each. In the 5-minute chaos runs it was the machine (load average up to 17 on
//! two cores): after a server crash or pause the lock went untaken for up to 9.9 s (limit
//! ttl + 1 s), every worker's acquires answered after their callers gave up.
//!
//! Here a fault proxy delays every packet 300 ms each way: a 600 ms round trip, well within the
//! 1 s an acquire of a 1 s lease gets. At `4c5c092` every acquire failed with "no answer within
//! 1s" for the 10 s the test tries, while a pool of the user's own built with
//! `test_before_acquire(false)` (`LockManagerBuilder::postgres_with`) took the lock at once,
//! which is how the ping was found to be the cause. The store's `80a111a` builds its pool
//! without the ping (a statement that fails on a connection the server closed goes again on
//! another instead); the test passes from there on.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use lock_runtime::{LockManager, LockOptions};
use lock_tests::{FaultProxy, POSTGRES_PASSWORD, POSTGRES_ROLE, PostgresServer};

const TTL: Duration = Duration::from_secs(1);
/// Each way: a round trip of 600 ms, more than half of an acquire's 1 s.
const DELAY: Duration = Duration::from_millis(300);

fn url_through(proxy: &FaultProxy) -> String {
    format!(
        "postgres://{POSTGRES_ROLE}:{POSTGRES_PASSWORD}@{}/{POSTGRES_ROLE}",
        proxy.addr()
    )
}

/// Tries to take and release `key` for `patience`; the last error if it never could.
async fn lock_within(locks: &LockManager, key: &str, patience: Duration) -> Result<(), String> {
    let until = Instant::now() + patience;
    let mut last = String::from("(no attempt)");
    while Instant::now() < until {
        match locks.lock(key, LockOptions::new().ttl(TTL)).await {
            Ok(guard) => {
                drop(guard);
                return Ok(());
            }
            Err(err) => last = err.to_string(),
        }
    }
    Err(last)
}

/// A server behind a proxy, the manager built while the proxy adds no delay (the connection is
/// opened then), the delay turned on, and 10 s to take the lock once.
async fn acquire_at_600_ms_a_round_trip() -> Result<(), String> {
    let server = PostgresServer::start();
    let proxy = FaultProxy::start(SocketAddr::from(([127, 0, 0, 1], server.port())));
    let locks = LockManager::builder()
        .url(format!("{}?listen=poll", url_through(&proxy)))
        .build()
        .await
        .expect("the manager connects");
    lock_within(&locks, "round-trips", Duration::from_secs(5))
        .await
        .expect("taken while the proxy adds no delay");
    proxy.set_delay(DELAY);
    lock_within(&locks, "round-trips", Duration::from_secs(10)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acquire_through_the_urls_pool_succeeds_when_a_round_trip_takes_600_ms() {
    if let Err(last) = acquire_at_600_ms_a_round_trip().await {
        panic!("no acquire in 10 s at 600 ms a round trip: {last}");
    }
}
