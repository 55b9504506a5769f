//! Many tasks of one process, each on a key of its own, share one manager (one connection):
//! how many pairs per second the contender gets through when the lock is never the bottleneck.
//! Measured in slices that alternate between the contenders, as for `uncontended`. Redis calls
//! and CPU are per pair sent in the slice, the warm-up and the pairs past its end included.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::Metric;
use crate::BenchError;
use crate::contender::Contender;
use crate::server::{Per, Probe, Usage};

/// The pairs of one contender in one repetition, over all its slices.
#[derive(Default)]
pub struct Throughput {
    pairs: u64,
    measured: Duration,
    /// Every pair sent, counted or not, and what the server did for them.
    sent: u64,
    usage: Usage,
}

impl Throughput {
    /// One task per key, all starting on the same instant after a warm-up pair each, for
    /// `duration`; pairs that end after it are not counted.
    pub async fn run_slice(
        &mut self,
        contender: &Arc<dyn Contender>,
        probe: &mut Probe,
        keys: &[String],
        duration: Duration,
    ) -> Result<(), BenchError> {
        let before = probe.reading().await?;
        let pairs = run_slice(contender, keys, duration).await?;
        self.pairs += pairs;
        // The warm-up pair and the one that ended past the slice, per key.
        self.sent += pairs + 2 * keys.len() as u64;
        self.measured += duration;
        self.usage += probe.reading().await?.since(&before);
        Ok(())
    }

    pub fn metrics(&self) -> Vec<Metric> {
        let mut metrics = vec![Metric::new(
            "pairs_per_s",
            "pairs/s",
            self.pairs as f64 / self.measured.as_secs_f64(),
        )];
        metrics.extend(self.usage.metrics(Per::Pair, self.sent));
        metrics
    }
}

/// One slice of the parallel scenario: one task per key, each a warm-up pair, then pairs on
/// its key back to back from a common start until `duration` has passed. The pairs that
/// completed within the slice, summed over the tasks (each task also sent its warm-up pair and
/// one that ended past the slice).
pub(crate) async fn run_slice(
    contender: &Arc<dyn Contender>,
    keys: &[String],
    duration: Duration,
) -> Result<u64, BenchError> {
    let start = Instant::now() + Duration::from_millis(50);
    let end = start + duration;
    let tasks: Vec<_> = keys
        .iter()
        .map(|key| {
            let contender = contender.clone();
            let key = key.clone();
            tokio::spawn(async move {
                contender.pair(&key).await?;
                tokio::time::sleep_until(start).await;
                let mut pairs = 0u64;
                loop {
                    contender.pair(&key).await?;
                    if Instant::now() > end {
                        return Ok::<_, BenchError>(pairs);
                    }
                    pairs += 1;
                }
            })
        })
        .collect();
    let mut total = 0;
    for task in tasks {
        total += task
            .await
            .map_err(|err| BenchError::new(format!("parallel task: {err}")))??;
    }
    Ok(total)
}
