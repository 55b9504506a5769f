//! One task takes and gives back a free lock, again and again: the cost of one pair (acquire +
//! release) when nobody else wants the lock. Measured in slices that alternate between the
//! contenders, so a change in the machine's load falls on all of them alike.

use std::time::Duration;

use tokio::time::Instant;

use super::Metric;
use crate::BenchError;
use crate::contender::Contender;
use crate::server::{Per, Probe, Usage};
use crate::stats::{percentile, sorted_micros};

/// Pairs before the clock starts: connections, script loading, allocator.
const WARM_UP_PAIRS: usize = 200;

/// The pairs of one contender in one repetition, over all its slices.
#[derive(Default)]
pub struct Pairs {
    latencies: Vec<Duration>,
    elapsed: Duration,
    /// Redis calls (top level and inside scripts) and server CPU over the timed pairs.
    usage: Usage,
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
        let before = probe.reading().await?;
        let start = Instant::now();
        let mut last = start;
        while last - start < duration {
            contender.pair(key).await?;
            let now = Instant::now();
            self.latencies.push(now - last);
            last = now;
        }
        self.elapsed += last - start;
        self.usage += probe.reading().await?.since(&before);
        Ok(())
    }

    pub fn metrics(&self) -> Vec<Metric> {
        let micros = sorted_micros(&self.latencies);
        let mut metrics = vec![
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
        ];
        metrics.extend(self.usage.metrics(Per::Pair, self.latencies.len() as u64));
        metrics
    }
}
