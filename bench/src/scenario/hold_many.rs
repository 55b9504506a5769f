//! Many locks held at once, for a while, with their leases renewed: what keeping them costs in
//! Redis commands, round trips, client CPU and memory.
//!
//! One future per lock (all in one task) takes it and holds it until told to stop. The locks are taken one after
//! the other, evenly spread over one renewal period (lease / 3), as locks taken at different
//! moments by an application are: a renewer then cannot get away with one batch per period
//! because everything happened to be acquired together. The measuring window starts half a
//! period after the last acquisition and lasts whole periods. Server-side counts are INFO
//! deltas (our own INFO requests subtracted), Redis calls and CPU as in
//! [`crate::server::Usage`]; client CPU is utime + stime of this process over
//! the window; memory per lock is the growth of the resident set from before the locks were
//! taken to the end of the window, divided by the locks held.
//!
//! Run in a process of its own (see `--hold-many-child`), so that neither CPU time nor memory
//! freed by earlier scenarios blurs the figures.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use serde::{Deserialize, Serialize};
use tokio::sync::{Notify, watch};
use tokio::time::Instant;

use super::Metric;
use crate::BenchError;
use crate::contender::Contender;
use crate::process;
use crate::server::{Counters, Target};

/// What one run is asked to do.
#[derive(Debug, Clone, Copy)]
pub struct Load {
    pub locks: usize,
    pub lease: Duration,
    /// Length of the measuring window; best a whole number of renewal periods (lease / 3).
    pub window: Duration,
}

/// Raw figures of one run; the metrics are derived from them.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Figures {
    pub locks: usize,
    pub lease_ms: u64,
    pub window_s: f64,
    pub renewals: u64,
    pub reads: u64,
    pub cpu_s: f64,
    /// Redis calls (top level and inside scripts) and server CPU over the window.
    pub redis_calls: u64,
    pub redis_cpu_s: f64,
    pub rss_growth_bytes: i64,
    pub server_memory_growth_bytes: i64,
}

impl Figures {
    pub fn metrics(&self) -> Vec<Metric> {
        let locks = self.locks.max(1) as f64;
        let period_s = self.lease_ms as f64 / 3000.0;
        let expected = locks / period_s;
        let renewals_per_s = self.renewals as f64 / self.window_s;
        vec![
            Metric::new("locks_held", "locks", self.locks as f64),
            Metric::new("renewals_per_s", "cmd/s", renewals_per_s),
            Metric::new("renewals_vs_expected", "x", renewals_per_s / expected),
            Metric::new(
                "server_reads_per_s",
                "reads/s",
                self.reads as f64 / self.window_s,
            ),
            Metric::new(
                "client_cpu",
                "% of a core",
                self.cpu_s / self.window_s * 100.0,
            ),
            Metric::new(
                "redis_calls_per_s",
                "calls/s",
                self.redis_calls as f64 / self.window_s,
            ),
            Metric::new(
                "redis_cpu",
                "% of a core",
                self.redis_cpu_s / self.window_s * 100.0,
            ),
            Metric::new(
                "client_memory_per_lock",
                "B/lock",
                self.rss_growth_bytes as f64 / locks,
            ),
            Metric::new(
                "server_memory_per_lock",
                "B/lock",
                self.server_memory_growth_bytes as f64 / locks,
            ),
        ]
    }
}

pub async fn measure(
    contender: &Arc<dyn Contender>,
    target: &Target,
    keys: Vec<String>,
    load: Load,
) -> Result<Figures, BenchError> {
    if keys.len() != load.locks {
        return Err(BenchError::new("hold many: one key per lock is needed"));
    }
    let mut probe = target.probe().await?;
    let before = probe.counters().await?;
    let rss_before = process::resident_bytes()?;

    let held = Arc::new(AtomicUsize::new(0));
    let all_held = Arc::new(Notify::new());
    let (stop, stopped) = watch::channel(false);
    let period = load.lease / 3;
    let spacing = period / load.locks.max(1) as u32;
    // One future per lock, all driven by one task: no task per lock to blur the memory figure.
    let holder = {
        let (contender, held, all_held) = (contender.clone(), held.clone(), all_held.clone());
        tokio::spawn(async move {
            let count_in = || {
                if held.fetch_add(1, Ordering::SeqCst) + 1 == load.locks {
                    all_held.notify_one();
                }
            };
            let hold = |key: String| {
                let (contender, count_in, mut stopped) = (&contender, &count_in, stopped.clone());
                async move {
                    let until = Box::pin(async move {
                        let _ = stopped.wait_for(|&stop| stop).await;
                    });
                    contender
                        .hold_renewed(&key, load.lease, count_in, until)
                        .await
                }
            };
            // Paced by one timer rather than one per lock, for the same reason.
            let mut holds = FuturesUnordered::new();
            let mut keys = keys.into_iter().peekable();
            let mut next_at = Instant::now();
            let mut outcome = Ok(());
            loop {
                tokio::select! {
                    () = tokio::time::sleep_until(next_at), if keys.peek().is_some() => {
                        let now = Instant::now();
                        while next_at <= now && let Some(key) = keys.next() {
                            holds.push(hold(key));
                            next_at += spacing;
                        }
                    }
                    Some(finished) = holds.next(), if !holds.is_empty() => {
                        if let Err(err) = finished && outcome.is_ok() {
                            outcome = Err(err);
                        }
                    }
                    else => break,
                }
            }
            outcome
        })
    };

    let outcome = async {
        let patience = period + Duration::from_secs(120);
        tokio::time::timeout(patience, all_held.notified())
            .await
            .map_err(|_| {
                BenchError::new(format!(
                    "hold many: only {} of {} locks held after {patience:?}",
                    held.load(Ordering::SeqCst),
                    load.locks
                ))
            })?;
        let start = Instant::now() + period / 2;
        tokio::time::sleep_until(start).await;
        let first = probe.counters().await?;
        let cpu_first = process::cpu_time()?;
        let began = Instant::now();
        tokio::time::sleep_until(start + load.window).await;
        let last = probe.counters().await?;
        let cpu_last = process::cpu_time()?;
        let window = began.elapsed();
        let rss_end = process::resident_bytes()?;
        let usage = last.usage.since(&first.usage);
        Ok::<_, BenchError>(Figures {
            locks: held.load(Ordering::SeqCst),
            lease_ms: load.lease.as_millis() as u64,
            window_s: window.as_secs_f64(),
            renewals: last.script_calls - first.script_calls,
            reads: (last.reads - first.reads).saturating_sub(Counters::OWN_COST),
            cpu_s: (cpu_last - cpu_first).as_secs_f64(),
            redis_calls: usage.calls,
            redis_cpu_s: usage.cpu_s,
            rss_growth_bytes: rss_end as i64 - rss_before as i64,
            server_memory_growth_bytes: first.used_memory as i64 - before.used_memory as i64,
        })
    }
    .await;

    let _ = stop.send(true);
    holder
        .await
        .map_err(|err| BenchError::new(format!("hold many: {err}")))??;
    outcome
}
