//! Many tasks of one process, each on a key of its own, share one manager (one connection):
//! how many pairs per second the contender gets through when the lock is never the bottleneck.
//! Measured in slices that alternate between the contenders, as for `uncontended`.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::Metric;
use crate::BenchError;
use crate::contender::Contender;

/// The pairs of one contender in one repetition, over all its slices.
#[derive(Default)]
pub struct Throughput {
    pairs: u64,
    measured: Duration,
}

impl Throughput {
    /// One task per key, all starting on the same instant after a warm-up pair each, for
    /// `duration`; pairs that end after it are not counted.
    pub async fn run_slice(
        &mut self,
        contender: &Arc<dyn Contender>,
        keys: &[String],
        duration: Duration,
    ) -> Result<(), BenchError> {
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
        for task in tasks {
            self.pairs += task
                .await
                .map_err(|err| BenchError::new(format!("parallel task: {err}")))??;
        }
        self.measured += duration;
        Ok(())
    }

    pub fn metrics(&self) -> Vec<Metric> {
        vec![Metric::new(
            "pairs_per_s",
            "pairs/s",
            self.pairs as f64 / self.measured.as_secs_f64(),
        )]
    }
}
