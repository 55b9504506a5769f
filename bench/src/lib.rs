//! The load benchmark of `lock-runtime`: this library (through `#[distributed_lock]` and through
//! `LockManager::lock`) against the hand-rolled `SET NX PX` lock of the blog posts (the
//! round-trip floor) and the `rslock` crate, all on the same Redis in the same run; and on
//! PostgreSQL ([`postgres`]) against the store's lease written by hand and advisory locks.
//!
//! `cargo run --release -p lock-bench -- [--quick] [--json PATH]`; see `--help` and
//! `docs/BENCHMARKS.md`.

pub mod chart;
pub mod contender;
mod error;
pub mod postgres;
pub mod process;
pub mod report;
pub mod scenario;
pub mod server;
pub mod stats;
pub mod targets;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

pub use error::BenchError;

use contender::{Contender, FairMode};
use report::Results;
use scenario::hold_many::{Figures, Load};
use scenario::parallel::Throughput;
use scenario::uncontended::Pairs;
use scenario::{Metric, key};
use server::Target;

/// How much of each scenario to run.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Repetitions of every scenario but hold-many; tables show median, min and max over them.
    pub repetitions: usize,
    /// Repetitions of hold-many, which takes over a minute each in the full run.
    pub hold_repetitions: usize,
    /// Uncontended and parallel run in this many slices per contender and repetition,
    /// alternating between the contenders.
    pub slices: u32,
    /// Per contender and repetition, all slices together.
    pub uncontended: Duration,
    pub parallel: Duration,
    pub parallel_tasks: usize,
    pub contended: Duration,
    pub contended_tasks: usize,
    /// The natural contention scenario: its length and tasks.
    pub natural: Duration,
    pub natural_tasks: usize,
    /// The read-heavy scenario: the length of each lock's run and its tasks.
    pub read_heavy: Duration,
    pub read_heavy_tasks: usize,
    /// The semaphore scenario: its length and tasks (the permits are
    /// [`scenario::semaphore::PERMITS`]).
    pub semaphore: Duration,
    pub semaphore_tasks: usize,
    /// The hung holder's lease (one of [`contender::FIXED_LEASES`]).
    pub expiry_lease: Duration,
    pub hold_locks: usize,
    /// One of [`contender::RENEWED_LEASES`].
    pub hold_lease: Duration,
    pub hold_window: Duration,
    /// Requests per `redis-benchmark` run (one connection: a fifth).
    pub ceiling_requests: u64,
}

impl Plan {
    /// The full run: about 14 minutes on two cores, under the 15 the issue allows (4 s per
    /// contention run and a 50 s hold-many window make room for the pub/sub contender and the
    /// fair mode).
    pub fn full() -> Plan {
        Plan {
            repetitions: 5,
            hold_repetitions: 2,
            slices: 6,
            uncontended: Duration::from_secs(3),
            parallel: Duration::from_secs(3),
            parallel_tasks: 64,
            contended: Duration::from_secs(4),
            contended_tasks: 8,
            natural: Duration::from_secs(4),
            natural_tasks: 8,
            read_heavy: Duration::from_secs(2),
            read_heavy_tasks: 8,
            semaphore: Duration::from_secs(2),
            semaphore_tasks: 16,
            expiry_lease: Duration::from_secs(1),
            hold_locks: 10_000,
            hold_lease: Duration::from_secs(30),
            hold_window: Duration::from_secs(50),
            ceiling_requests: 100_000,
        }
    }

    /// Every scenario in reduced form, under a minute: for CI smoke runs.
    pub fn quick() -> Plan {
        Plan {
            repetitions: 1,
            hold_repetitions: 1,
            slices: 2,
            uncontended: Duration::from_millis(700),
            parallel: Duration::from_millis(700),
            parallel_tasks: 64,
            contended: Duration::from_millis(1500),
            contended_tasks: 8,
            natural: Duration::from_millis(1500),
            natural_tasks: 8,
            read_heavy: Duration::from_millis(1000),
            read_heavy_tasks: 8,
            semaphore: Duration::from_millis(1000),
            semaphore_tasks: 16,
            expiry_lease: Duration::from_millis(200),
            hold_locks: 1_000,
            hold_lease: Duration::from_secs(3),
            hold_window: Duration::from_secs(3),
            ceiling_requests: 20_000,
        }
    }

    /// A few seconds in all: for the test that checks the benchmark itself.
    pub fn tiny() -> Plan {
        Plan {
            repetitions: 1,
            hold_repetitions: 1,
            slices: 1,
            uncontended: Duration::from_millis(50),
            parallel: Duration::from_millis(50),
            parallel_tasks: 8,
            contended: Duration::from_millis(300),
            contended_tasks: 4,
            natural: Duration::from_millis(300),
            natural_tasks: 4,
            read_heavy: Duration::from_millis(300),
            read_heavy_tasks: 8,
            semaphore: Duration::from_millis(300),
            semaphore_tasks: 16,
            expiry_lease: Duration::from_millis(200),
            hold_locks: 50,
            hold_lease: Duration::from_millis(300),
            hold_window: Duration::from_millis(300),
            ceiling_requests: 2_000,
        }
    }
}

/// The scenarios, in the order they run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scenario {
    Uncontended,
    Parallel,
    Contended,
    Natural,
    ReadHeavy,
    Semaphore,
    ExpiryTakeover,
    HoldMany,
    Ceiling,
}

impl Scenario {
    pub const ALL: [Scenario; 9] = [
        Scenario::Uncontended,
        Scenario::Parallel,
        Scenario::Contended,
        Scenario::Natural,
        Scenario::ReadHeavy,
        Scenario::Semaphore,
        Scenario::ExpiryTakeover,
        Scenario::HoldMany,
        Scenario::Ceiling,
    ];

    /// The name in tables and JSON.
    pub fn name(self) -> &'static str {
        match self {
            Scenario::Uncontended => "uncontended",
            Scenario::Parallel => "parallel",
            Scenario::Contended => "contended",
            Scenario::Natural => "natural_contention",
            Scenario::ReadHeavy => "read_heavy",
            Scenario::Semaphore => "semaphore",
            Scenario::ExpiryTakeover => "expiry_takeover",
            Scenario::HoldMany => "hold_many",
            Scenario::Ceiling => "redis_benchmark",
        }
    }

    pub fn from_name(name: &str) -> Option<Scenario> {
        Scenario::ALL.into_iter().find(|s| s.name() == name)
    }
}

/// Where hold-many runs: in a fresh process of this binary (clean CPU and memory figures), or
/// in this one (for the smoke test, where only the shape of the output matters).
#[derive(Debug, Clone)]
pub enum HoldManyIn {
    ThisProcess,
    Child(PathBuf),
}

#[derive(Debug, Clone)]
pub struct Options {
    pub plan: Plan,
    pub scenarios: Vec<Scenario>,
    pub hold_many_in: HoldManyIn,
    /// The contenders to run (see [`contender::NAMES`]), in table order.
    pub contenders: Vec<String>,
    /// Progress lines on stderr.
    pub verbose: bool,
}

/// The outcome of a run.
pub struct Report {
    pub results: Results,
    /// Exclusion violations seen in the two contention scenarios (all contenders and fair
    /// modes together), in read-heavy (a writer not alone, a reader beside a writer) and in
    /// semaphore (more holders than permits).
    pub violations: u64,
}

/// The contender used as the round-trip floor in ratios.
pub const FLOOR: &str = contender::HandRolled::NAME;
/// The contender the handover latency is compared with.
pub const RSLOCK: &str = contender::Rslock::NAME;

/// Runs the chosen scenarios for every contender against `target`.
pub async fn run(target: &Target, options: &Options) -> Result<Report, BenchError> {
    let mut contenders = Vec::new();
    for name in &options.contenders {
        contenders.push(contender::connect(name, target.url()).await?);
    }
    let probe = target.probe().await?;
    let run_id = run_id();
    let plan = &options.plan;
    let mut results = Results::default();
    let mut violations = 0;
    let progress = |scenario: Scenario,
                    rep: usize,
                    repetitions: usize,
                    contender: &str,
                    metrics: &[Metric]| {
        if !options.verbose {
            return;
        }
        let shown: Vec<String> = metrics
            .iter()
            .map(|m| format!("{} {} {}", m.name, report::number(m.value), m.unit))
            .collect();
        eprintln!(
            "{} {}/{} {contender}: {}",
            scenario.name(),
            rep + 1,
            repetitions,
            shown.join(", ")
        );
    };

    for &scenario in &options.scenarios {
        let repetitions = match scenario {
            Scenario::HoldMany => plan.hold_repetitions,
            _ => plan.repetitions,
        };
        for rep in 0..repetitions {
            // Each repetition starts with another contender, so slow drifts of the machine
            // do not always favour the same one.
            let order: Vec<&Arc<dyn Contender>> = (0..contenders.len())
                .map(|i| &contenders[(i + rep) % contenders.len()])
                .collect();
            let key = |contender: &dyn Contender, index| {
                key(&run_id, scenario.name(), contender.name(), rep, index)
            };
            let mut measured: Vec<(&str, Vec<Metric>)> = Vec::new();
            match scenario {
                Scenario::Ceiling => {
                    let sha = scenario::ceiling::load_script(target).await?;
                    let metrics =
                        scenario::ceiling::measure(target, &sha, plan.ceiling_requests).await?;
                    measured.push(("redis-benchmark", metrics));
                }
                Scenario::ReadHeavy => {
                    // The library's own primitives, whatever the contenders; each repetition
                    // starts with the other one.
                    let (tasks, length) = (plan.read_heavy_tasks, plan.read_heavy);
                    let lockings = scenario::read_heavy::Locking::ALL;
                    for i in 0..lockings.len() {
                        let locking = lockings[(i + rep) % lockings.len()];
                        let key = scenario::key(&run_id, scenario.name(), locking.name(), rep, 0);
                        let outcome = scenario::read_heavy::measure(
                            locking,
                            target.url(),
                            probe.clone(),
                            &key,
                            tasks,
                            length,
                        )
                        .await?;
                        violations += reported(locking.name(), &outcome);
                        measured.push((locking.name(), outcome.metrics));
                    }
                }
                Scenario::Semaphore => {
                    let name = scenario::semaphore::NAME;
                    let key = scenario::key(&run_id, scenario.name(), name, rep, 0);
                    let (tasks, length) = (plan.semaphore_tasks, plan.semaphore);
                    let outcome = scenario::semaphore::measure(
                        target.url(),
                        probe.clone(),
                        &key,
                        tasks,
                        length,
                    )
                    .await?;
                    violations += reported(name, &outcome);
                    measured.push((name, outcome.metrics));
                }
                Scenario::Uncontended => {
                    let mut pairs: Vec<Pairs> = order.iter().map(|_| Pairs::default()).collect();
                    for _ in 0..plan.slices {
                        for (contender, pairs) in order.iter().zip(&mut pairs) {
                            let slice = plan.uncontended / plan.slices;
                            pairs
                                .run_slice(
                                    contender.as_ref(),
                                    &mut probe.clone(),
                                    &key(contender.as_ref(), 0),
                                    slice,
                                )
                                .await?;
                        }
                    }
                    for (contender, pairs) in order.iter().zip(&pairs) {
                        measured.push((contender.name(), pairs.metrics()));
                    }
                }
                Scenario::Parallel => {
                    let mut rates: Vec<Throughput> =
                        order.iter().map(|_| Throughput::default()).collect();
                    let keys: Vec<Vec<String>> = order
                        .iter()
                        .map(|c| {
                            (0..plan.parallel_tasks)
                                .map(|i| key(c.as_ref(), i))
                                .collect()
                        })
                        .collect();
                    for _ in 0..plan.slices {
                        for ((contender, rate), keys) in order.iter().zip(&mut rates).zip(&keys) {
                            let slice = plan.parallel / plan.slices;
                            rate.run_slice(contender, &mut probe.clone(), keys, slice)
                                .await?;
                        }
                    }
                    for (contender, rate) in order.iter().zip(&rates) {
                        measured.push((contender.name(), rate.metrics()));
                    }
                }
                Scenario::Contended
                | Scenario::Natural
                | Scenario::ExpiryTakeover
                | Scenario::HoldMany => {
                    let variants = variants(&order, scenario, &mut results);
                    for contender in &variants {
                        let keys = |count| (0..count).map(|i| key(contender.as_ref(), i));
                        let metrics = match scenario {
                            Scenario::Contended | Scenario::Natural => {
                                let key = key(contender.as_ref(), 0);
                                let outcome = if scenario == Scenario::Contended {
                                    let (tasks, length) = (plan.contended_tasks, plan.contended);
                                    scenario::contended::measure(
                                        contender,
                                        probe.clone(),
                                        &key,
                                        tasks,
                                        length,
                                    )
                                    .await?
                                } else {
                                    let (tasks, length) = (plan.natural_tasks, plan.natural);
                                    scenario::natural::measure(
                                        contender,
                                        probe.clone(),
                                        &key,
                                        tasks,
                                        length,
                                    )
                                    .await?
                                };
                                violations += reported(contender.name(), &outcome);
                                outcome.metrics
                            }
                            Scenario::ExpiryTakeover => {
                                let key = key(contender.as_ref(), 0);
                                let lease = plan.expiry_lease;
                                scenario::expiry::measure(contender, probe.clone(), &key, lease)
                                    .await?
                            }
                            _ => {
                                if !contender.renews() {
                                    continue;
                                }
                                let load = Load {
                                    locks: plan.hold_locks,
                                    lease: plan.hold_lease,
                                    window: plan.hold_window,
                                };
                                let figures = match &options.hold_many_in {
                                    HoldManyIn::ThisProcess => {
                                        let keys = keys(load.locks).collect();
                                        scenario::hold_many::measure(contender, target, keys, load)
                                            .await?
                                    }
                                    HoldManyIn::Child(exe) => {
                                        let name = contender.name();
                                        hold_many_in_child(exe, target, name, &run_id, rep, load)
                                            .await?
                                    }
                                };
                                figures.metrics()
                            }
                        };
                        measured.push((contender.name(), metrics));
                    }
                }
            }
            for (name, metrics) in measured {
                progress(scenario, rep, repetitions, name, &metrics);
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

/// The violations of `outcome`, printed when there are any.
fn reported(contender: &str, outcome: &scenario::contended::Outcome) -> u64 {
    if outcome.violations > 0 {
        eprintln!(
            "MUTUAL EXCLUSION VIOLATED: {contender} let {} sections overlap",
            outcome.violations
        );
    }
    outcome.violations
}

/// The contenders a scenario measures, in `order`: in the natural scenario each followed by
/// its fair mode where it has one; a fair mode this build cannot run is noted in `results`.
fn variants(
    order: &[&Arc<dyn Contender>],
    scenario: Scenario,
    results: &mut Results,
) -> Vec<Arc<dyn Contender>> {
    let mut variants = Vec::new();
    for &contender in order {
        variants.push(contender.clone());
        if scenario != Scenario::Natural {
            continue;
        }
        match contender.fair_mode() {
            FairMode::None => {}
            FairMode::NotAvailable { name, reason } => {
                results.record_unavailable(scenario.name(), name, reason);
            }
            FairMode::Available(fair) => variants.push(fair),
        }
    }
    variants
}

/// Figures relative to the floor (throughput) and to rslock (handover), repetition by
/// repetition; the fair mode's throughput relative to the default mode's; the read-write
/// lock's throughput relative to the exclusive lock's.
fn add_ratios(results: &mut Results) {
    for scenario in [Scenario::Uncontended, Scenario::Parallel] {
        results.add_ratio(
            scenario.name(),
            "pairs_per_s",
            FLOOR,
            "pairs_per_s_vs_floor",
            |this, floor| this / floor,
        );
    }
    results.add_ratio(
        Scenario::Contended.name(),
        "handover_p50",
        RSLOCK,
        "handover_p50_times_faster_than_rslock",
        |this, rslock| rslock / this,
    );
    results.add_ratio_of(
        Scenario::Natural.name(),
        "sections_per_s",
        contender::Manager::FAIR_NAME,
        contender::Manager::NAME,
        "sections_per_s_vs_default",
        |fair, default| fair / default,
    );
    results.add_ratio_of(
        Scenario::ReadHeavy.name(),
        "ops_per_s",
        scenario::read_heavy::RWLOCK,
        scenario::read_heavy::EXCLUSIVE,
        "ops_per_s_vs_exclusive",
        |rwlock, exclusive| rwlock / exclusive,
    );
}

/// Arguments of the hidden `--hold-many-child` mode: contender, run id, repetition, locks,
/// lease in ms, window in ms. The server comes in `REDIS_URL`.
pub const CHILD_FLAG: &str = "--hold-many-child";

/// Runs one hold-many measurement in a fresh process of `exe` and reads its figures.
async fn hold_many_in_child(
    exe: &std::path::Path,
    target: &Target,
    contender: &str,
    run_id: &str,
    rep: usize,
    load: Load,
) -> Result<Figures, BenchError> {
    let mut command = tokio::process::Command::new(exe);
    command
        .arg(CHILD_FLAG)
        .args([
            contender.to_owned(),
            run_id.to_owned(),
            rep.to_string(),
            load.locks.to_string(),
            load.lease.as_millis().to_string(),
            load.window.as_millis().to_string(),
        ])
        .env("REDIS_URL", target.url())
        .kill_on_drop(true);
    let output = command
        .output()
        .await
        .map_err(|err| BenchError::new(format!("cannot start {}: {err}", exe.display())))?;
    if !output.status.success() {
        return Err(BenchError::new(format!(
            "hold many for {contender} failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        )));
    }
    serde_json::from_slice(&output.stdout).map_err(|err| {
        BenchError::new(format!(
            "hold many for {contender}: unreadable figures ({err}): {}",
            String::from_utf8_lossy(&output.stdout)
        ))
    })
}

/// The body of `--hold-many-child`: measures and returns the figures as JSON.
pub async fn hold_many_child(args: &[String]) -> Result<String, BenchError> {
    let [contender, run_id, rep, locks, lease_ms, window_ms] = args else {
        return Err(BenchError::new(format!(
            "{CHILD_FLAG} takes contender, run id, repetition, locks, lease ms, window ms"
        )));
    };
    let number = |text: &String| {
        text.parse::<u64>()
            .map_err(|_| BenchError::new(format!("{CHILD_FLAG}: `{text}` is not a number")))
    };
    let load = Load {
        locks: number(locks)? as usize,
        lease: Duration::from_millis(number(lease_ms)?),
        window: Duration::from_millis(number(window_ms)?),
    };
    let rep = number(rep)? as usize;
    let target = Target::from_env(None)?;
    let contender: Arc<dyn Contender> = contender::connect(contender, target.url()).await?;
    let keys = (0..load.locks)
        .map(|i| key(run_id, Scenario::HoldMany.name(), contender.name(), rep, i))
        .collect();
    let figures = scenario::hold_many::measure(&contender, &target, keys, load).await?;
    serde_json::to_string(&figures).map_err(|err| BenchError::new(err.to_string()))
}

pub(crate) fn run_id() -> String {
    let since_epoch = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    format!(
        "{}-{}",
        std::process::id(),
        since_epoch.as_millis() % 1_000_000
    )
}

/// The machine, for the report: cores, CPU model, load.
pub fn machine() -> Vec<String> {
    let cores = std::thread::available_parallelism().map_or(0, usize::from);
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|line| line.strip_prefix("model name"))
        .and_then(|rest| rest.split_once(':'))
        .map_or("unknown", |(_, model)| model.trim())
        .to_owned();
    vec![
        format!("cores (nproc): {cores}"),
        format!("CPU: {model}"),
        format!("load average: {}", load_average()),
    ]
}

/// `/proc/loadavg`'s first three fields.
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|text| {
            text.split_whitespace()
                .take(3)
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_else(|_| "unknown".into())
}
