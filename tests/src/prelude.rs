//! What every suite starts with: `use lock_tests::prelude::*;`.
//!
//! The helpers here are the ones the suites used to copy: durations in milliseconds, a manager
//! connected to a test server, waiting on observable state with a patience that holds on a loaded
//! machine, and the per-backend fixture.
//!
//! ```no_run
//! use lock_tests::prelude::*;
//!
//! # async fn example() {
//! let server = RedisServer::start();
//! let locks = connect(&server).await;
//! let guard = locks.lock("k", LockOptions::new().ttl(ms(500))).await.expect("free");
//! assert!(eventually(|| async { guard.is_held() }).await, "{}", server.log());
//! # }
//! ```

use std::future::Future;
use std::time::Duration;

pub use lock_runtime::{LockError, LockGuard, LockManager, LockOptions};

pub use crate::{Deployment, FaultProxy, RedisCluster, RedisServer, wait_until, wait_until_async};

/// How long a test waits for something that must happen eventually before it fails: the test's
/// patience, not a promise of the library. Generous, because a loaded machine (a CI runner beside
/// other builds) can delay any step by seconds; a passing test returns as soon as the state holds.
pub const PATIENCE: Duration = Duration::from_secs(20);

/// `n` milliseconds.
pub const fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// A manager connected to `server`.
///
/// # Panics
///
/// If it cannot connect; the message carries the server's log.
pub async fn connect(server: &RedisServer) -> LockManager {
    LockManager::connect(&server.url())
        .await
        .unwrap_or_else(|err| panic!("connect: {err}\n{}", server.log()))
}

/// Checks the async `condition` every few milliseconds until it holds (true) or [`PATIENCE`] has
/// passed (false). For state that only an `.await` can read: a lock being free, a server's answer.
pub async fn eventually<F, Fut>(condition: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    eventually_within(PATIENCE, condition).await
}

/// [`eventually`] with a patience of the caller's choosing.
pub async fn eventually_within<F, Fut>(patience: Duration, mut condition: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + patience;
    loop {
        if condition().await {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(ms(10)).await;
    }
}

/// Waits until a renewal has moved a lease's end past where it was when called, reading the
/// lease through `remaining` (a guard's or `current()`'s `remaining()`): true once one has,
/// false if none did within [`PATIENCE`] (or the lease was lost). What a test that needs "held
/// past its ttl" can wait on instead of sleeping past the ttl.
pub async fn renewed(remaining: impl Fn() -> Duration) -> bool {
    // Read before the clock, so `end` is never earlier than the lease's end now; a later
    // reading of the clock before `remaining` is never later than the lease's end then.
    let left = remaining();
    let end = tokio::time::Instant::now() + left;
    eventually(|| {
        let now = tokio::time::Instant::now();
        let left = remaining();
        std::future::ready(!left.is_zero() && now + left > end)
    })
    .await
}
