//! Several tasks compete for one key; the body inside the lock is one Redis PING on a side
//! connection (about one round trip of work).
//!
//! A task that has just released does not compete again until another task has entered, and
//! the holder does not start its PING until every other task is competing. So at every release
//! all other tasks are already waiting, and none of them is timed by the release: the next
//! entry is a waiter noticing that the lock is free, by notification or by its next poll. The
//! figure is the handover latency, from the moment the holder leaves its body (and goes on to
//! release) to the moment the next holder enters its body. Without this rule the releaser
//! would barge back in a round trip after its release, and every contender would measure the
//! same: its own re-acquire.
//!
//! Mutual exclusion is checked two ways: a count of tasks inside the body (two at once is a
//! violation), and a counter incremented by read, PING, write, which loses updates when two
//! bodies overlap.
//!
//! Redis calls and server CPU are per section over the whole run, the drain included (see
//! [`crate::server::Usage`]).

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::watch;
use tokio::time::Instant;

use super::Metric;
use crate::BenchError;
use crate::contender::{Contender, Work};
use crate::server::{Per, Probe};
use crate::stats::{percentile, sorted_micros};

/// How long after the end of the run the tasks still waiting may take to get through.
const DRAIN: Duration = Duration::from_secs(30);

/// The work inside the lock: one round trip to the server on a side connection.
#[async_trait]
pub trait RoundTrip: Send + Sync {
    async fn round_trip(&self) -> Result<(), BenchError>;
}

#[async_trait]
impl RoundTrip for Probe {
    /// One `PING`.
    async fn round_trip(&self) -> Result<(), BenchError> {
        self.clone().ping().await
    }
}

struct Relay {
    tasks: usize,
    deadline: Instant,
    side: Arc<dyn RoundTrip>,
    inside: AtomicU32,
    overlaps: AtomicU64,
    /// Incremented by read, PING, write: exact only under mutual exclusion.
    counter: AtomicU64,
    entries: AtomicU64,
    /// Entries before the deadline.
    counted: AtomicU64,
    /// PINGs that failed (the body still ran under the lock).
    failed_pings: AtomicU64,
    last: Mutex<Last>,
    /// Who entered last.
    entered: watch::Sender<Option<usize>>,
    /// How many tasks are inside `exclusive` (waiting for the lock or holding it).
    competing: watch::Sender<usize>,
}

#[derive(Default)]
struct Last {
    holder: Option<usize>,
    /// When the last holder left its body and went on to release.
    released_at: Option<Instant>,
    handovers: Vec<Duration>,
}

impl Relay {
    fn last(&self) -> std::sync::MutexGuard<'_, Last> {
        self.last.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn body(self: &Arc<Self>, task: usize) -> Work<'static> {
        let relay = self.clone();
        Box::pin(async move {
            let entered = Instant::now();
            if relay.inside.fetch_add(1, Ordering::SeqCst) != 0 {
                relay.overlaps.fetch_add(1, Ordering::SeqCst);
            }
            {
                let mut last = relay.last();
                if let (Some(holder), Some(released)) = (last.holder, last.released_at)
                    && holder != task
                    && entered < relay.deadline
                {
                    last.handovers.push(entered - released);
                }
                last.holder = Some(task);
                last.released_at = None;
            }
            if entered < relay.deadline {
                relay.counted.fetch_add(1, Ordering::SeqCst);
            }
            relay.entered.send_replace(Some(task));
            // The previous holder is now free to compete again; give it the time to.
            let mut competing = relay.competing.subscribe();
            let all = relay.tasks;
            let _ =
                tokio::time::timeout_at(relay.deadline, competing.wait_for(|&n| n == all)).await;
            let seen = relay.counter.load(Ordering::SeqCst);
            if relay.side.round_trip().await.is_err() {
                relay.failed_pings.fetch_add(1, Ordering::SeqCst);
            }
            relay.counter.store(seen + 1, Ordering::SeqCst);
            relay.entries.fetch_add(1, Ordering::SeqCst);
            relay.inside.fetch_sub(1, Ordering::SeqCst);
            relay.last().released_at = Some(Instant::now());
        })
    }
}

/// The outcome of one run, with the violations apart for the caller to report.
pub struct Outcome {
    pub metrics: Vec<Metric>,
    pub violations: u64,
}

pub async fn measure(
    contender: &Arc<dyn Contender>,
    mut probe: Probe,
    key: &str,
    tasks: usize,
    duration: Duration,
) -> Result<Outcome, BenchError> {
    let before = probe.reading().await?;
    let contenders = vec![contender.clone(); tasks];
    let relayed = relay(&contenders, Arc::new(probe.clone()), key, duration).await?;
    let usage = probe.reading().await?.since(&before);
    let mut metrics = relayed.metrics;
    metrics.extend(usage.metrics(Per::Section, relayed.entries));
    metrics.push(Metric::new(
        "violations",
        "count",
        relayed.violations as f64,
    ));
    Ok(Outcome {
        metrics,
        violations: relayed.violations,
    })
}

/// What [`relay`] measured: sections per second and handover latency, without the server's
/// counters, which the caller reads around it.
pub struct Relayed {
    pub metrics: Vec<Metric>,
    /// Every section entered, the drain included.
    pub entries: u64,
    pub violations: u64,
}

/// The relay itself: one task per entry of `contenders` (the same lock shared, or one per task
/// as separate processes would have), each competing for `key` with a body of one
/// [`RoundTrip`] on `side`, for `duration`.
pub async fn relay(
    contenders: &[Arc<dyn Contender>],
    side: Arc<dyn RoundTrip>,
    key: &str,
    duration: Duration,
) -> Result<Relayed, BenchError> {
    let tasks = contenders.len();
    let relay = Arc::new(Relay {
        tasks,
        deadline: Instant::now() + duration,
        side,
        inside: AtomicU32::new(0),
        overlaps: AtomicU64::new(0),
        counter: AtomicU64::new(0),
        entries: AtomicU64::new(0),
        counted: AtomicU64::new(0),
        failed_pings: AtomicU64::new(0),
        last: Mutex::new(Last::default()),
        entered: watch::Sender::new(None),
        competing: watch::Sender::new(0),
    });
    let handles: Vec<_> = contenders
        .iter()
        .enumerate()
        .map(|(task, contender)| {
            let contender = contender.clone();
            let relay = relay.clone();
            let key = key.to_owned();
            tokio::spawn(async move {
                let mut entered = relay.entered.subscribe();
                while Instant::now() < relay.deadline {
                    relay.competing.send_modify(|n| *n += 1);
                    let outcome = contender.exclusive(&key, relay.body(task)).await;
                    relay.competing.send_modify(|n| *n -= 1);
                    outcome?;
                    // Compete again only once someone else has had the lock.
                    let _ = tokio::time::timeout_at(
                        relay.deadline,
                        entered.wait_for(|&who| who.is_some_and(|who| who != task)),
                    )
                    .await;
                }
                Ok::<_, BenchError>(())
            })
        })
        .collect();
    for handle in handles {
        tokio::time::timeout_at(relay.deadline + DRAIN, handle)
            .await
            .map_err(|_| BenchError::new("contended: tasks still waiting 30 s after the run"))?
            .map_err(|err| BenchError::new(format!("contended task: {err}")))??;
    }
    let failed = relay.failed_pings.load(Ordering::SeqCst);
    if failed > 0 {
        return Err(BenchError::new(format!(
            "contended: {failed} round trips inside the lock failed"
        )));
    }
    let entries = relay.entries.load(Ordering::SeqCst);
    let lost_updates = entries - relay.counter.load(Ordering::SeqCst).min(entries);
    let violations = relay.overlaps.load(Ordering::SeqCst) + lost_updates;
    let handovers = sorted_micros(&relay.last().handovers);
    let metrics = vec![
        Metric::new(
            "sections_per_s",
            "sections/s",
            relay.counted.load(Ordering::SeqCst) as f64 / duration.as_secs_f64(),
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
        Metric::new("handovers", "count", handovers.len() as f64),
    ];
    Ok(Relayed {
        metrics,
        entries,
        violations,
    })
}
