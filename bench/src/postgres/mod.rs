//! The PostgreSQL rows: this library over a `postgres://` URL (through `#[distributed_lock]` and
//! `LockManager::lock`) against the store's lease written by hand (the floor), session advisory
//! locks by hand and sqlx's `PgAdvisoryLock`, all on the same server in the same run.
//!
//! Four scenarios: uncontended pairs per second, pairs per second of 64 tasks on keys of their
//! own, handover latency (one contender per task, as separate processes: a waiter of the
//! library is woken by `NOTIFY`), and expiry takeover for the lease-based contenders. Every
//! contender has a pool of [`DEFAULT_MAX_CONNECTIONS`], the library's default.

pub mod server;

use std::sync::Arc;
use std::time::Duration;

use lock_runtime::postgres::DEFAULT_MAX_CONNECTIONS;
use tokio::time::Instant;

use crate::contender::{self, Contender};
use crate::report::{self, Results};
use crate::scenario::{self, Metric, contended, expiry};
use crate::stats::{percentile, sorted_micros};
use crate::{BenchError, Plan, Report};
use server::{PgProbe, PgTarget, add_cpu};

/// The contender the throughput ratios are taken against.
pub const LEASE_FLOOR: &str = contender::LeaseFloor::NAME;

/// The pool of each contender of the handover scenario, one per task: a pair's statements
/// need one connection, a waiter of sqlx's `PgAdvisoryLock` holds one.
const HANDOVER_CONNECTIONS: u32 = 2;

/// Pairs before the clock starts (connections, allocator), or fewer if a slice is shorter.
const WARM_UP_PAIRS: usize = 200;

/// The PostgreSQL scenarios, in the order they run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PgScenario {
    Uncontended,
    Parallel,
    Handover,
    ExpiryTakeover,
}

impl PgScenario {
    pub const ALL: [PgScenario; 4] = [
        PgScenario::Uncontended,
        PgScenario::Parallel,
        PgScenario::Handover,
        PgScenario::ExpiryTakeover,
    ];

    /// The name in tables, JSON and `--only`.
    pub fn name(self) -> &'static str {
        match self {
            PgScenario::Uncontended => "postgres_uncontended",
            PgScenario::Parallel => "postgres_parallel",
            PgScenario::Handover => "postgres_handover",
            PgScenario::ExpiryTakeover => "postgres_expiry_takeover",
        }
    }

    pub fn from_name(name: &str) -> Option<PgScenario> {
        PgScenario::ALL.into_iter().find(|s| s.name() == name)
    }
}

/// What to run on PostgreSQL.
#[derive(Debug, Clone)]
pub struct PgOptions {
    /// The lengths, tasks and repetitions: those of the Redis scenarios of the same kind
    /// (`uncontended`, `parallel`, `contended` for the handover, `expiry_lease`).
    pub plan: Plan,
    pub scenarios: Vec<PgScenario>,
    /// See [`contender::POSTGRES_NAMES`].
    pub contenders: Vec<String>,
    /// Progress lines on stderr.
    pub verbose: bool,
}

/// Runs the chosen scenarios for every contender against `target`.
pub async fn run(target: &PgTarget, options: &PgOptions) -> Result<Report, BenchError> {
    let mut contenders = Vec::new();
    for name in &options.contenders {
        contenders
            .push(contender::connect_postgres(name, target.url(), DEFAULT_MAX_CONNECTIONS).await?);
    }
    let probe = target.probe().await?;
    let run_id = crate::run_id();
    let plan = &options.plan;
    let mut results = Results::default();
    let mut violations = 0;
    for &scenario in &options.scenarios {
        for rep in 0..plan.repetitions {
            // Each repetition starts with another contender.
            let order: Vec<&Arc<dyn Contender>> = (0..contenders.len())
                .map(|i| &contenders[(i + rep) % contenders.len()])
                .collect();
            let key = |contender: &dyn Contender, index| {
                scenario::key(&run_id, scenario.name(), contender.name(), rep, index)
            };
            let measured: Vec<(&str, Vec<Metric>)> = match scenario {
                PgScenario::Uncontended => {
                    let mut pairs: Vec<Pairs> = order.iter().map(|_| Pairs::default()).collect();
                    for _ in 0..plan.slices {
                        for (contender, pairs) in order.iter().zip(&mut pairs) {
                            let (key, slice) = (key(contender.as_ref(), 0), plan.uncontended);
                            pairs
                                .run_slice(contender.as_ref(), &probe, &key, slice / plan.slices)
                                .await?;
                        }
                    }
                    order
                        .iter()
                        .map(|c| c.name())
                        .zip(pairs.iter().map(Pairs::metrics))
                        .collect()
                }
                PgScenario::Parallel => {
                    let mut rates: Vec<Throughput> =
                        order.iter().map(|_| Throughput::default()).collect();
                    for _ in 0..plan.slices {
                        for (contender, rate) in order.iter().zip(&mut rates) {
                            let keys: Vec<String> = (0..plan.parallel_tasks)
                                .map(|i| key(contender.as_ref(), i))
                                .collect();
                            let slice = plan.parallel / plan.slices;
                            rate.run_slice(contender, &probe, &keys, slice).await?;
                        }
                    }
                    let metrics = rates.iter().map(Throughput::metrics);
                    order.iter().map(|c| c.name()).zip(metrics).collect()
                }
                PgScenario::Handover => {
                    let mut measured = Vec::new();
                    for contender in &order {
                        let key = key(contender.as_ref(), 0);
                        let (metrics, seen) =
                            handover(target, &probe, contender, &key, plan).await?;
                        if seen > 0 {
                            eprintln!(
                                "MUTUAL EXCLUSION VIOLATED: {} let {seen} sections overlap",
                                contender.name()
                            );
                        }
                        violations += seen;
                        measured.push((contender.name(), metrics));
                    }
                    measured
                }
                PgScenario::ExpiryTakeover => {
                    let mut measured = Vec::new();
                    for contender in order.iter().filter(|c| c.leased()) {
                        let key = key(contender.as_ref(), 0);
                        let metrics = takeover(&probe, contender, &key, plan.expiry_lease).await?;
                        measured.push((contender.name(), metrics));
                    }
                    measured
                }
            };
            for (name, metrics) in measured {
                if options.verbose {
                    progress(scenario, rep, plan.repetitions, name, &metrics);
                }
                for metric in &metrics {
                    results.record(scenario.name(), name, metric);
                }
            }
        }
    }
    add_ratios(&mut results);
    Ok(Report {
        results,
        violations,
    })
}

fn progress(scenario: PgScenario, rep: usize, repetitions: usize, name: &str, metrics: &[Metric]) {
    let shown: Vec<String> = metrics
        .iter()
        .map(|m| format!("{} {} {}", m.name, report::number(m.value), m.unit))
        .collect();
    eprintln!(
        "{} {}/{repetitions} {name}: {}",
        scenario.name(),
        rep + 1,
        shown.join(", ")
    );
}

/// Throughput relative to the lease floor, repetition by repetition.
fn add_ratios(results: &mut Results) {
    for scenario in [PgScenario::Uncontended, PgScenario::Parallel] {
        results.add_ratio(
            scenario.name(),
            "pairs_per_s",
            LEASE_FLOOR,
            "pairs_per_s_vs_lease_floor",
            |this, floor| this / floor,
        );
    }
}

/// The server's CPU per unit of work, in µs; `None` when it was not read.
fn cpu_metric(name: &'static str, cpu_s: Option<f64>, units: u64) -> Option<Metric> {
    cpu_s.map(|cpu| Metric::new(name, "µs", cpu * 1e6 / units.max(1) as f64))
}

/// One task's uncontended pairs of one contender in one repetition, over all its slices.
#[derive(Default)]
struct Pairs {
    latencies: Vec<Duration>,
    elapsed: Duration,
    /// The server's CPU over the timed pairs.
    cpu_s: Option<f64>,
}

impl Pairs {
    async fn run_slice(
        &mut self,
        contender: &dyn Contender,
        probe: &PgProbe,
        key: &str,
        duration: Duration,
    ) -> Result<(), BenchError> {
        if self.latencies.is_empty() {
            // A short slice (the smoke test's) warms up for as long as it lasts at most.
            let until = Instant::now() + duration;
            for _ in 0..WARM_UP_PAIRS {
                contender.pair(key).await?;
                if Instant::now() > until {
                    break;
                }
            }
        }
        let before = probe.cpu().await?;
        let start = Instant::now();
        let mut last = start;
        while last - start < duration {
            contender.pair(key).await?;
            let now = Instant::now();
            self.latencies.push(now - last);
            last = now;
        }
        self.elapsed += last - start;
        add_cpu(&mut self.cpu_s, before, probe.cpu().await?);
        Ok(())
    }

    fn metrics(&self) -> Vec<Metric> {
        let micros = sorted_micros(&self.latencies);
        let pairs = self.latencies.len() as u64;
        let mut metrics = vec![
            Metric::new(
                "pairs_per_s",
                "pairs/s",
                pairs as f64 / self.elapsed.as_secs_f64(),
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
        metrics.extend(cpu_metric("server_cpu_per_pair", self.cpu_s, pairs));
        metrics
    }
}

/// The pairs of many tasks, each on a key of its own, sharing one contender (one pool).
#[derive(Default)]
struct Throughput {
    pairs: u64,
    measured: Duration,
    /// Every pair sent, counted or not, and the server's CPU for them.
    sent: u64,
    cpu_s: Option<f64>,
}

impl Throughput {
    /// One task per key, all starting on the same instant after a warm-up pair each, for
    /// `duration`; pairs that end after it are not counted.
    async fn run_slice(
        &mut self,
        contender: &Arc<dyn Contender>,
        probe: &PgProbe,
        keys: &[String],
        duration: Duration,
    ) -> Result<(), BenchError> {
        let before = probe.cpu().await?;
        let pairs = scenario::parallel::run_slice(contender, keys, duration).await?;
        self.pairs += pairs;
        self.sent += pairs + 2 * keys.len() as u64;
        self.measured += duration;
        add_cpu(&mut self.cpu_s, before, probe.cpu().await?);
        Ok(())
    }

    fn metrics(&self) -> Vec<Metric> {
        let mut metrics = vec![Metric::new(
            "pairs_per_s",
            "pairs/s",
            self.pairs as f64 / self.measured.as_secs_f64(),
        )];
        metrics.extend(cpu_metric("server_cpu_per_pair", self.cpu_s, self.sent));
        metrics
    }
}

/// The contended relay with one contender of this kind per task (its own pool, and for the
/// library its own listening connection), so that every handover goes through the server.
async fn handover(
    target: &PgTarget,
    probe: &PgProbe,
    contender: &Arc<dyn Contender>,
    key: &str,
    plan: &Plan,
) -> Result<(Vec<Metric>, u64), BenchError> {
    let mut tasks = Vec::with_capacity(plan.contended_tasks);
    for _ in 0..plan.contended_tasks {
        let name = contender.name();
        tasks.push(contender::connect_postgres(name, target.url(), HANDOVER_CONNECTIONS).await?);
    }
    let before = probe.cpu().await?;
    let side = Arc::new(probe.clone());
    let relayed = contended::relay(&tasks, side, key, plan.contended).await?;
    let mut cpu_s = None;
    add_cpu(&mut cpu_s, before, probe.cpu().await?);
    let mut metrics = relayed.metrics;
    metrics.extend(cpu_metric("server_cpu_per_section", cpu_s, relayed.entries));
    metrics.push(Metric::new(
        "violations",
        "count",
        relayed.violations as f64,
    ));
    Ok((metrics, relayed.violations))
}

/// One expiry takeover, with the server's CPU from the hung holder's acquire to the waiter's
/// release.
async fn takeover(
    probe: &PgProbe,
    contender: &Arc<dyn Contender>,
    key: &str,
    lease: Duration,
) -> Result<Vec<Metric>, BenchError> {
    let before = probe.cpu().await?;
    let late_ms = expiry::takeover(contender, key, lease).await?;
    let mut cpu_s = None;
    add_cpu(&mut cpu_s, before, probe.cpu().await?);
    let mut metrics = vec![Metric::new("takeover_after_expiry", "ms", late_ms)];
    metrics.extend(cpu_metric("server_cpu_per_takeover", cpu_s, 1));
    Ok(metrics)
}
