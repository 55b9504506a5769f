//! Several tasks compete for one key as real code does: each takes the lock again right after
//! it released it. The body inside the lock is one Redis PING on a side connection.
//!
//! Unlike `contended` (which holds the releaser back to time the handover alone), the releaser
//! is free to barge in again, so this shows what a hot key costs and how fair it is: critical
//! sections per second, the handover from one holder's exit to the next holder's entry, the
//! share of sections won again by the task that had just released, the longest wait for the
//! lock (also as a multiple of the section period, the run's length over its sections), and
//! the Redis calls (top level and inside scripts) and server CPU per section (see
//! [`crate::server::Usage`]).
//!
//! The longest wait counts every section, those of the drain after the deadline included: a
//! task left waiting until the others stopped competing waited that long.
//!
//! The same scenario measures a lock's fair mode: the contender passed in is then the fair
//! variant (see [`crate::contender::FairMode`]).

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

use super::Metric;
use super::contended::Outcome;
use crate::BenchError;
use crate::contender::{Contender, Work};
use crate::server::{Per, Probe};
use crate::stats::{percentile, sorted_micros};

/// How long after the end of the run the tasks still waiting may take to get through.
const DRAIN: Duration = Duration::from_secs(30);

struct Sections {
    deadline: Instant,
    probe: Probe,
    inside: AtomicU32,
    overlaps: AtomicU64,
    counter: AtomicU64,
    entries: AtomicU64,
    /// PINGs that failed (the body still ran under the lock).
    failed_pings: AtomicU64,
    log: Mutex<Log>,
}

#[derive(Default)]
struct Log {
    last_holder: Option<usize>,
    left_at: Option<Instant>,
    handovers: Vec<Duration>,
    /// Counted sections (entered before the deadline) and those won by the last holder.
    counted: u64,
    won_again: u64,
    /// Over every section, the drain's included.
    longest_wait: Duration,
    /// Time inside the body, over the counted sections.
    section_time: Duration,
}

impl Sections {
    fn log(&self) -> std::sync::MutexGuard<'_, Log> {
        self.log.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn body(self: &Arc<Self>, task: usize, asked: Instant) -> Work<'static> {
        let this = self.clone();
        Box::pin(async move {
            let entered = Instant::now();
            if this.inside.fetch_add(1, Ordering::SeqCst) != 0 {
                this.overlaps.fetch_add(1, Ordering::SeqCst);
            }
            if entered < this.deadline {
                let mut log = this.log();
                if let Some(left) = log.left_at.take() {
                    log.handovers.push(entered - left);
                }
                log.counted += 1;
                if log.last_holder == Some(task) {
                    log.won_again += 1;
                }
                log.last_holder = Some(task);
            }
            {
                let mut log = this.log();
                log.longest_wait = log.longest_wait.max(entered - asked);
            }
            let seen = this.counter.load(Ordering::SeqCst);
            if this.probe.clone().ping().await.is_err() {
                this.failed_pings.fetch_add(1, Ordering::SeqCst);
            }
            this.counter.store(seen + 1, Ordering::SeqCst);
            this.entries.fetch_add(1, Ordering::SeqCst);
            this.inside.fetch_sub(1, Ordering::SeqCst);
            let left = Instant::now();
            let mut log = this.log();
            if entered < this.deadline {
                log.section_time += left - entered;
            }
            log.left_at = Some(left);
        })
    }
}

pub async fn measure(
    contender: &Arc<dyn Contender>,
    mut probe: Probe,
    key: &str,
    tasks: usize,
    duration: Duration,
) -> Result<Outcome, BenchError> {
    let before = probe.reading().await?;
    let sections = Arc::new(Sections {
        deadline: Instant::now() + duration,
        probe: probe.clone(),
        inside: AtomicU32::new(0),
        overlaps: AtomicU64::new(0),
        counter: AtomicU64::new(0),
        entries: AtomicU64::new(0),
        failed_pings: AtomicU64::new(0),
        log: Mutex::new(Log::default()),
    });
    let handles: Vec<_> = (0..tasks)
        .map(|task| {
            let contender = contender.clone();
            let sections = sections.clone();
            let key = key.to_owned();
            tokio::spawn(async move {
                while Instant::now() < sections.deadline {
                    let asked = Instant::now();
                    contender
                        .exclusive(&key, sections.body(task, asked))
                        .await?;
                }
                Ok::<_, BenchError>(())
            })
        })
        .collect();
    for handle in handles {
        tokio::time::timeout_at(sections.deadline + DRAIN, handle)
            .await
            .map_err(|_| BenchError::new("natural: tasks still waiting 30 s after the run"))?
            .map_err(|err| BenchError::new(format!("natural task: {err}")))??;
    }
    let usage = probe.reading().await?.since(&before);
    let failed = sections.failed_pings.load(Ordering::SeqCst);
    if failed > 0 {
        return Err(BenchError::new(format!(
            "natural: {failed} PINGs inside the lock failed"
        )));
    }
    let entries = sections.entries.load(Ordering::SeqCst);
    let lost_updates = entries - sections.counter.load(Ordering::SeqCst).min(entries);
    let violations = sections.overlaps.load(Ordering::SeqCst) + lost_updates;
    let log = sections.log();
    let handovers = sorted_micros(&log.handovers);
    let counted = log.counted.max(1) as f64;
    let period = duration.as_secs_f64() / counted;
    let longest_wait = log.longest_wait.as_secs_f64();
    let mut metrics = vec![
        Metric::new(
            "sections_per_s",
            "sections/s",
            log.counted as f64 / duration.as_secs_f64(),
        ),
        Metric::new(
            "handover_p50",
            "µs",
            percentile(&handovers, 0.50).unwrap_or(f64::NAN),
        ),
        Metric::new(
            "handover_p99",
            "µs",
            percentile(&handovers, 0.99).unwrap_or(f64::NAN),
        ),
        Metric::new("won_again", "%", 100.0 * log.won_again as f64 / counted),
        Metric::new("longest_wait", "ms", longest_wait * 1000.0),
        Metric::new(
            "mean_section",
            "µs",
            log.section_time.as_secs_f64() * 1e6 / counted,
        ),
        // The lock's time per section, handover included: a waiter behind the 7 other tasks of
        // a line served in turn waits about 7 of these.
        Metric::new("section_period", "µs", period * 1e6),
        Metric::new("longest_wait_vs_period", "x", longest_wait / period),
    ];
    // Over every section of the run, the drain included, as the counters are.
    metrics.extend(usage.metrics(Per::Section, entries));
    metrics.push(Metric::new("violations", "count", violations as f64));
    Ok(Outcome {
        metrics,
        violations,
    })
}
