//! Sixteen tasks share a semaphore of [`PERMITS`] permits: each takes a permit, holds it for
//! [`HOLD`], gives it back, and asks again at once, so there are always more tasks asking than
//! permits. Through `LockManager::semaphore`, every task with a manager of its own, as separate
//! processes would: every permit that changes hands goes through the server.
//!
//! Reported: acquires per second (those entered before the deadline), against the ideal of
//! `permits / hold` (every permit busy all the time, handed over in no time); the acquire
//! latency (from asking to holding), p50/p99, over every acquire, the drain's included; the
//! time a permit is held (the timer's, so above [`HOLD`]), and the share of the permits' time
//! they were held, which is the ratio to the ideal with that hold; the most holders seen at
//! once, which must never pass the permits (counted inside every section: a holder that makes
//! it more is a violation); and the Redis calls and server CPU per permit taken and given back.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use lock_runtime::{LockManager, LockOptions};
use tokio::time::Instant;

use super::Metric;
use super::contended::Outcome;
use crate::BenchError;
use crate::contender::LEASE;
use crate::server::{Per, Probe};
use crate::stats::{percentile, sorted_micros};

/// The semaphore's permits.
pub const PERMITS: u32 = 4;

/// How long a permit is held: a sleep, so the time is the timer's (tokio's resolution is
/// 1 ms: a hold of 5 ms lasts 5 to 6 ms).
pub const HOLD: Duration = Duration::from_millis(5);

/// The contender's name in tables and JSON.
pub const NAME: &str = "LockManager::semaphore";

/// How long after the end of the run the tasks still waiting may take to get through.
const DRAIN: Duration = Duration::from_secs(30);

/// Holders inside their section now, the most seen at once, and the sections that made them
/// more than the permits.
#[derive(Default)]
struct Holders {
    now: AtomicU32,
    most: AtomicU32,
    violations: AtomicU64,
}

/// One task's figures.
#[derive(Default)]
struct Tally {
    acquires: Vec<Duration>,
    /// Acquires entered before the deadline.
    counted: u64,
    /// Time holding a permit, over the counted acquires.
    held: Duration,
}

pub async fn measure(
    url: &str,
    mut probe: Probe,
    key: &str,
    tasks: usize,
    duration: Duration,
) -> Result<Outcome, BenchError> {
    let managers = super::managers(url, tasks).await?;
    let holders = Arc::new(Holders::default());
    let before = probe.reading().await?;
    let deadline = Instant::now() + duration;
    let handles: Vec<_> = managers
        .into_iter()
        .map(|locks| {
            let holders = holders.clone();
            let key = key.to_owned();
            tokio::spawn(async move { run_task(&locks, &key, deadline, &holders).await })
        })
        .collect();
    let mut tally = Tally::default();
    for handle in handles {
        let one = tokio::time::timeout_at(deadline + DRAIN, handle)
            .await
            .map_err(|_| BenchError::new("semaphore: tasks still waiting 30 s after the run"))?
            .map_err(|err| BenchError::new(format!("semaphore task: {err}")))??;
        tally.acquires.extend(one.acquires);
        tally.counted += one.counted;
        tally.held += one.held;
    }
    let usage = probe.reading().await?.since(&before);
    let acquires = sorted_micros(&tally.acquires);
    let per_s = tally.counted as f64 / duration.as_secs_f64();
    let ideal = f64::from(PERMITS) / HOLD.as_secs_f64();
    let violations = holders.violations.load(Ordering::SeqCst);
    let mut metrics = vec![
        Metric::new("acquires_per_s", "acquires/s", per_s),
        Metric::new("ideal_per_s", "acquires/s", ideal),
        Metric::new("acquires_per_s_vs_ideal", "x", per_s / ideal),
        Metric::new(
            "acquire_p50",
            "µs",
            percentile(&acquires, 0.50).unwrap_or(f64::NAN),
        ),
        Metric::new(
            "acquire_p99",
            "µs",
            percentile(&acquires, 0.99).unwrap_or(f64::NAN),
        ),
        Metric::new(
            "mean_hold",
            "µs",
            tally.held.as_secs_f64() * 1e6 / tally.counted.max(1) as f64,
        ),
        // The ideal again, with the hold the timer gave instead of the nominal one.
        Metric::new(
            "permits_busy",
            "%",
            100.0 * tally.held.as_secs_f64() / (f64::from(PERMITS) * duration.as_secs_f64()),
        ),
        Metric::new("permits", "permits", f64::from(PERMITS)),
        Metric::new(
            "most_holders",
            "holders",
            f64::from(holders.most.load(Ordering::SeqCst)),
        ),
    ];
    // Over every permit of the run, the drain included, as the counters are.
    metrics.extend(usage.metrics(Per::Permit, tally.acquires.len() as u64));
    metrics.push(Metric::new("violations", "count", violations as f64));
    Ok(Outcome {
        metrics,
        violations,
    })
}

async fn run_task(
    locks: &LockManager,
    key: &str,
    deadline: Instant,
    holders: &Holders,
) -> Result<Tally, BenchError> {
    let mut tally = Tally::default();
    while Instant::now() < deadline {
        let asked = Instant::now();
        // Waiting as long as it takes, woken by the release notification.
        let options = LockOptions::new().ttl(LEASE).wait(Duration::MAX);
        let permit = locks
            .semaphore(key, PERMITS, options)
            .await
            .map_err(|err| BenchError::new(format!("{NAME}: permit of `{key}`: {err}")))?;
        let entered = Instant::now();
        let now = holders.now.fetch_add(1, Ordering::SeqCst) + 1;
        holders.most.fetch_max(now, Ordering::SeqCst);
        if now > PERMITS {
            holders.violations.fetch_add(1, Ordering::SeqCst);
        }
        tokio::time::sleep(HOLD).await;
        holders.now.fetch_sub(1, Ordering::SeqCst);
        let left = Instant::now();
        permit.release().await?;
        tally.acquires.push(entered - asked);
        if entered < deadline {
            tally.counted += 1;
            tally.held += left - entered;
        }
    }
    Ok(tally)
}
