//! One task takes and gives back a free lock, again and again: the cost of one pair (acquire +
//! release) when nobody else wants the lock. Measured in slices that alternate between the
//! contenders, so a change in the machine's load falls on all of them alike.

use std::time::Duration;

use tokio::time::Instant;

use super::Metric;
use crate::BenchError;
use crate::contender::Contender;
use crate::server::Probe;
use crate::stats::{percentile, sorted_micros};

/// Commands the measurement itself sends, left out of the Redis calls per pair.
const NOT_THE_LOCKS: [&str; 3] = ["ping", "info", "config"];

/// Pairs before the clock starts: connections, script loading, allocator.
const WARM_UP_PAIRS: usize = 200;

/// The pairs of one contender in one repetition, over all its slices.
#[derive(Default)]
pub struct Pairs {
    latencies: Vec<Duration>,
    elapsed: Duration,
    /// Redis calls (top level and inside scripts) and server CPU seconds over the timed pairs.
    calls: u64,
    server_cpu: f64,
}

impl Pairs {
    /// Runs pairs on `key` for `duration` and adds them; the first slice warms up first.
    pub async fn run_slice(
        &mut self,
        contender: &dyn Contender,
        probe: &mut Probe,
        key: &str,
        duration: Duration,
    ) -> Result<(), BenchError> {
        if self.latencies.is_empty() {
            for _ in 0..WARM_UP_PAIRS {
                contender.pair(key).await?;
            }
        }
        let calls_before = probe.info("commandstats").await?;
        let cpu_before = probe.info("cpu").await?;
        let start = Instant::now();
        let mut last = start;
        while last - start < duration {
            contender.pair(key).await?;
            let now = Instant::now();
            self.latencies.push(now - last);
            last = now;
        }
        self.elapsed += last - start;
        let calls_after = probe.info("commandstats").await?;
        let cpu_after = probe.info("cpu").await?;
        self.calls += calls_after
            .total_calls(&NOT_THE_LOCKS)
            .saturating_sub(calls_before.total_calls(&NOT_THE_LOCKS));
        let cpu = |info: &crate::server::Info| {
            info.seconds("used_cpu_user") + info.seconds("used_cpu_sys")
        };
        self.server_cpu += cpu(&cpu_after) - cpu(&cpu_before);
        Ok(())
    }

    pub fn metrics(&self) -> Vec<Metric> {
        let micros = sorted_micros(&self.latencies);
        vec![
            Metric::new(
                "pairs_per_s",
                "pairs/s",
                self.latencies.len() as f64 / self.elapsed.as_secs_f64(),
            ),
            Metric::new(
                "pair_p50",
                "µs",
                percentile(&micros, 0.50).unwrap_or(f64::NAN),
            ),
            Metric::new(
                "pair_p99",
                "µs",
                percentile(&micros, 0.99).unwrap_or(f64::NAN),
            ),
            Metric::new(
                "redis_calls_per_pair",
                "calls",
                self.calls as f64 / self.latencies.len().max(1) as f64,
            ),
            Metric::new(
                "redis_cpu_per_pair",
                "µs",
                self.server_cpu * 1e6 / self.latencies.len().max(1) as f64,
            ),
        ]
    }
}
