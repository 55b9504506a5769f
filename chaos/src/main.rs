//! `chaos`: a fenced-resource chaos experiment for `lock-runtime`, on a single Redis server, a
//! Sentinel setup, a Redis Cluster, Redlock masters, or PostgreSQL (directly or through
//! PgBouncer in transaction mode).
//!
//! Worker processes (this binary again, `chaos worker ...`) take one lock through
//! `#[distributed_lock]` over and over and write their fencing token to a resource on a separate
//! Redis server whose data is never faulted and which accepts only tokens higher than any it has
//! seen (a `partition` delays one worker's link to it). With `--mode rw` they take the read-write
//! lock of that name instead (readers read the resource, writers write it, both fenced), with
//! `--mode semaphore` one of the semaphore's permits (capacity is checked, not fencing).
//! Meanwhile a seeded fault injector kills and pauses workers and, depending on the topology:
//!
//! - `single`: restarts the lock server with and without persistence, and stalls, delays and
//!   cuts each worker's connection through a fault proxy;
//! - `redlock`: the same, each restart (or a SIGSTOP) hitting one master, each connection fault
//!   all of one worker's proxies (one per master);
//! - `sentinel`, `cluster`: kills or pauses the master that serves the lock, waits for a replica
//!   to take over, and brings the old master back as a replica; or freezes that master for less
//!   than the failure detection, so every client stalls and no failover follows (clients follow
//!   the addresses the servers announce, so no proxy sits in their path and there are no
//!   per-worker connection faults); a watch thread also records failovers the deployment does
//!   on its own;
//! - `postgres`, `pgbouncer`: kills the PostgreSQL server with SIGKILL and starts it again
//!   through crash recovery, freezes it, ends a worker's backends (`pg_terminate_backend`;
//!   behind the pooler every backend), restarts PgBouncer, and stalls, delays and cuts each
//!   worker's connections through fault proxies (behind the pooler: its link to the pooler and
//!   its direct listening connection at once).
//!
//! At the end the logs are checked: no stale token accepted, every overlap of two holders
//! explained by a fault and caught by fencing, the lock taken again promptly after each fault, no
//! panics, no section without the lock, no lock left behind. See `chaos/README.md`.
//!
//! ```text
//! chaos [--topology single|sentinel|cluster|redlock|postgres|pgbouncer] [--masters N] [--faults KIND,...]
//!       --quick [--seconds N] ...                      (at most a minute)
//! chaos [--topology ...] [--minutes N] [--workers N] [--tasks N] [--seed N] [--json PATH]
//!       [--svg PATH] [--dir PATH] [--margin-ms N]      (the full run, 30 minutes by default)
//!       [--takeover-margin-ms N]                       (the takeover's margin alone)
//!       [--keys N]                                     (Cluster: N leases per worker on every shard)
//!       [--fair]                                       (every section waits in fair mode)
//!       [--lock-delay-ms N]                            (every lock with this lock-delay)
//!       [--mode exclusive|rw|semaphore] [--reads PCT] [--permits N]
//!                                                      (the primitive the sections take)
//! ```
//!
//! Exits 0 when every invariant holds, 1 when one fails, 2 on bad usage or a setup failure.

// The report's JSON is one `json!` of many fields.
#![recursion_limit = "256"]

mod analyze;
mod deployment;
mod experiment;
mod lockserver;
mod postgres;
mod rng;
mod svg;
mod worker;

use std::process::{Command, ExitCode};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use analyze::FaultKind;
use deployment::Topology;

/// The lock every worker takes (the stored key is `lock:{chaos:resource}`).
pub(crate) const LOCK_KEY: &str = "chaos:resource";
/// Where the lock lives in Redis: the default `lock:` prefix, the key in a hash tag. The
/// semaphore and the read-write lock of that name share its hash tag, so its slot.
pub(crate) fn stored_key() -> String {
    format!("lock:{{{LOCK_KEY}}}")
}

/// The permits of the semaphore in `--mode semaphore` when `--permits` does not say.
pub(crate) const DEFAULT_PERMITS: u32 = 3;
/// The share of read sections in `--mode rw` when `--reads` does not say, in percent.
pub(crate) const DEFAULT_READS_PCT: u64 = 80;

/// Which primitive the workers' sections take on `chaos:resource` (`--mode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    /// The lock: one holder at a time.
    Exclusive,
    /// The read-write lock: a writer alone, readers together.
    ReadWrite,
    /// The semaphore of `--permits` permits: at most that many holders at once.
    Semaphore,
}

impl Mode {
    pub(crate) fn parse(name: &str) -> Result<Self, String> {
        match name {
            "exclusive" => Ok(Mode::Exclusive),
            "rw" => Ok(Mode::ReadWrite),
            "semaphore" => Ok(Mode::Semaphore),
            other => Err(format!(
                "unknown mode {other}: choose exclusive, rw or semaphore"
            )),
        }
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            Mode::Exclusive => "exclusive",
            Mode::ReadWrite => "rw",
            Mode::Semaphore => "semaphore",
        }
    }

    /// The Redis keys that hold the primitive's grants (`lock:{chaos:resource}` and its
    /// siblings, see lock-runtime's `key.rs`): none of them may be left once every worker
    /// stopped.
    pub(crate) fn held_keys(self) -> Vec<String> {
        let lock = stored_key();
        match self {
            Mode::Exclusive => vec![lock],
            Mode::ReadWrite => vec![format!("{lock}:rw:readers"), format!("{lock}:rw:writer")],
            Mode::Semaphore => vec![format!("{lock}:sem")],
        }
    }
}
/// The lease the workers' attribute asks for (`ttl = "1s"` in worker.rs).
pub(crate) const TTL: Duration = Duration::from_secs(1);

pub(crate) fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// Sends signal `name` (`STOP`, `CONT`, ...) to process `pid`.
pub(crate) fn signal(pid: u32, name: &str) -> Result<(), String> {
    // `unsafe` is forbidden in the workspace, so no kill(2): the shell's builtin sends it.
    let status = Command::new("sh")
        .args(["-c", r#"kill -s "$0" "$1""#, name, &pid.to_string()])
        .status()
        .map_err(|e| format!("kill -{name} {pid}: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("kill -{name} {pid}: {status}"))
    }
}

/// The experiment's settings, from the command line.
#[derive(Clone, Debug)]
pub(crate) struct Config {
    pub(crate) quick: bool,
    pub(crate) duration: Duration,
    pub(crate) workers: usize,
    pub(crate) tasks: usize,
    pub(crate) seed: u64,
    pub(crate) json: Option<String>,
    pub(crate) svg: Option<String>,
    pub(crate) dir: Option<String>,
    /// Allowed on top of the ttl after a fault's end for the fault to explain a lost lease or
    /// an overlap.
    pub(crate) margin: Duration,
    /// Allowed on top of the ttl for the lock to be taken again after a fault
    /// (`--takeover-margin-ms`; the margin above unless given).
    pub(crate) takeover_margin: Option<Duration>,
    /// What the lock runs on.
    pub(crate) topology: Topology,
    /// Redlock's masters (used by `--topology redlock` only).
    pub(crate) masters: usize,
    /// The kinds the injector may pick (`--faults`); empty: every kind of the topology.
    pub(crate) faults: Vec<FaultKind>,
    /// Many-keys mode (`--keys N`, Cluster only): each worker also holds N leases of its own,
    /// spread over every shard, and `shard-stall` joins the faults.
    pub(crate) keys: usize,
    /// Every section waits for the lock in fair mode (`--fair`): first come, first served.
    pub(crate) fair: bool,
    /// Every worker's manager gives its locks this lock-delay (`--lock-delay-ms`): a lock whose
    /// lease was lost without a release is granted to nobody for this long more.
    pub(crate) lock_delay: Duration,
    /// The primitive the sections take (`--mode`).
    pub(crate) mode: Mode,
    /// The semaphore's permits (`--permits`, semaphore mode).
    pub(crate) permits: u32,
    /// The share of read sections in percent (`--reads`, rw mode).
    pub(crate) reads_pct: u64,
}

impl Config {
    /// The kinds the injector picks from, in the order a round starts from before the shuffle.
    pub(crate) fn fault_kinds(&self) -> Vec<FaultKind> {
        let all = self.available_kinds();
        if self.faults.is_empty() {
            return all;
        }
        all.into_iter()
            .filter(|kind| self.faults.contains(kind))
            .collect()
    }

    /// The topology's kinds, and `shard-stall` in many-keys mode (only then is there anything
    /// on the other shards for it to threaten; without `--keys` the schedule of a seed stays
    /// what it was).
    fn available_kinds(&self) -> Vec<FaultKind> {
        let mut kinds = self.topology.fault_kinds().to_vec();
        if self.keys > 0 {
            kinds.push(FaultKind::ShardStall);
        }
        kinds
    }

    /// The faults a report counts: those the injector may pick, and failovers the deployment
    /// did on its own.
    pub(crate) fn reported_kinds(&self) -> Vec<FaultKind> {
        let mut kinds = self.topology.reported_kinds();
        if self.keys > 0 {
            kinds.push(FaultKind::ShardStall);
        }
        kinds
    }

    /// How soon after a fault the primitive must be taken again: a lease (what a dead holder
    /// leaves behind) and the margin. In rw mode a lease more: a writer killed while it waits
    /// leaves its mark, which keeps new readers out for up to a lease after what it waited for
    /// (lock-runtime's rw_acquire.lua), so readers may wait out two leases.
    ///
    /// A lock-delay holds a lock whose holder vanished for that much more.
    pub(crate) fn takeover_limit(&self) -> Duration {
        let margin = self.takeover_margin.unwrap_or(self.margin) + self.lock_delay;
        match self.mode {
            Mode::ReadWrite => 2 * TTL + margin,
            Mode::Exclusive | Mode::Semaphore => TTL + margin,
        }
    }

    /// How many of the lock store's nodes a lock is granted on: a majority of Redlock's
    /// masters, otherwise the one store.
    pub(crate) fn quorum(&self) -> usize {
        match self.topology {
            Topology::Redlock => self.masters / 2 + 1,
            Topology::Single
            | Topology::Sentinel
            | Topology::Cluster
            | Topology::Postgres
            | Topology::PgBouncer => 1,
        }
    }
}

const USAGE: &str = "usage: chaos [--topology single|sentinel|cluster|redlock|postgres|pgbouncer] [--masters N] \
[--faults KIND,KIND,...] [--quick] [--seconds N | --minutes N] [--workers N] [--tasks N] \
[--seed N] [--json PATH] [--svg PATH] [--dir PATH] [--margin-ms N] [--takeover-margin-ms N] [--keys N] [--fair] \
[--mode exclusive|rw|semaphore] [--reads PCT] [--permits N] [--lock-delay-ms N]";

fn parse(args: &[String]) -> Result<Config, String> {
    let mut config = Config {
        quick: false,
        duration: Duration::from_secs(30 * 60),
        workers: 4,
        tasks: 3,
        seed: now_ns() % 1_000_000,
        json: None,
        svg: None,
        dir: None,
        margin: Duration::from_millis(1000),
        takeover_margin: None,
        topology: Topology::Single,
        masters: 3,
        faults: Vec::new(),
        keys: 0,
        fair: false,
        lock_delay: Duration::ZERO,
        mode: Mode::Exclusive,
        permits: DEFAULT_PERMITS,
        reads_pct: DEFAULT_READS_PCT,
    };
    let mut duration = None;
    let (mut permits, mut reads) = (None, None);
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        if flag == "--quick" {
            config.quick = true;
            continue;
        }
        if flag == "--fair" {
            config.fair = true;
            continue;
        }
        if flag == "--help" || flag == "-h" {
            return Err(USAGE.into());
        }
        let value = it
            .next()
            .ok_or_else(|| format!("{flag} needs a value\n{USAGE}"))?;
        let number = || {
            value
                .parse::<u64>()
                .map_err(|e| format!("{flag} {value}: {e}"))
        };
        match flag.as_str() {
            "--seconds" => duration = Some(Duration::from_secs(number()?)),
            "--minutes" => duration = Some(Duration::from_secs(60 * number()?)),
            "--workers" => config.workers = number()? as usize,
            "--tasks" => config.tasks = number()? as usize,
            "--seed" => config.seed = number()?,
            "--margin-ms" => config.margin = Duration::from_millis(number()?),
            "--takeover-margin-ms" => {
                config.takeover_margin = Some(Duration::from_millis(number()?));
            }
            "--topology" => config.topology = Topology::parse(value)?,
            "--masters" => config.masters = number()? as usize,
            "--keys" => config.keys = number()? as usize,
            "--lock-delay-ms" => config.lock_delay = Duration::from_millis(number()?),
            "--mode" => config.mode = Mode::parse(value)?,
            "--permits" => permits = Some(number()?),
            "--reads" => reads = Some(number()?),
            "--faults" => {
                config.faults = value
                    .split(',')
                    .map(FaultKind::parse)
                    .collect::<Result<_, _>>()?;
            }
            "--json" => config.json = Some(value.clone()),
            "--svg" => config.svg = Some(value.clone()),
            "--dir" => config.dir = Some(value.clone()),
            other => return Err(format!("unknown option {other}\n{USAGE}")),
        }
    }
    config.duration = match (duration, config.quick) {
        (Some(d), true) => d.min(Duration::from_secs(60)),
        (Some(d), false) => d,
        (None, true) => Duration::from_secs(60),
        (None, false) => config.duration,
    };
    if config.workers < 2 || config.tasks == 0 {
        return Err(format!("at least 2 workers and 1 task each\n{USAGE}"));
    }
    if config.keys > 0 && config.topology != Topology::Cluster {
        return Err(format!(
            "--keys spreads leases over the shards of a cluster: use it with --topology cluster\n{USAGE}"
        ));
    }
    check_mode(&mut config, permits, reads)?;
    let kinds = config.available_kinds();
    if let Some(kind) = config.faults.iter().find(|kind| !kinds.contains(kind)) {
        let names: Vec<&str> = kinds.iter().map(|kind| kind.name()).collect();
        return Err(format!(
            "--faults: {} is not a fault of the {} topology{}, which has {}",
            kind.name(),
            config.topology.name(),
            if config.keys > 0 { " with --keys" } else { "" },
            names.join(", ")
        ));
    }
    if config.masters < 3 || config.masters.is_multiple_of(2) {
        return Err(format!(
            "--masters must be odd and at least 3 (an even count tolerates no more faults than one fewer)\n{USAGE}"
        ));
    }
    if config.duration < Duration::from_secs(8) {
        return Err("a run needs at least 8 seconds".into());
    }
    Ok(config)
}

/// The rules of `--mode` and its options: what each mode can be combined with.
fn check_mode(config: &mut Config, permits: Option<u64>, reads: Option<u64>) -> Result<(), String> {
    let mode = config.mode;
    if config.topology.is_postgres() && (mode != Mode::Exclusive || config.fair) {
        return Err(format!(
            "--topology {}: the PostgreSQL store keeps the plain lock only (no semaphore, no \
             read-write lock, no fair line yet): use --mode exclusive without --fair",
            config.topology.name()
        ));
    }
    if permits.is_some() && mode != Mode::Semaphore {
        return Err(format!(
            "--permits is the semaphore's: use it with --mode semaphore\n{USAGE}"
        ));
    }
    if reads.is_some() && mode != Mode::ReadWrite {
        return Err(format!(
            "--reads is the share of read sections: use it with --mode rw\n{USAGE}"
        ));
    }
    if let Some(permits) = permits {
        config.permits = u32::try_from(permits)
            .ok()
            .filter(|&n| n >= 1)
            .ok_or_else(|| {
                format!(
                    "--permits {permits}: a semaphore needs 1 or more permits, up to {}",
                    u32::MAX
                )
            })?;
    }
    if let Some(reads) = reads {
        if reads > 100 {
            return Err(format!("--reads {reads}: a share in percent, 0 to 100"));
        }
        config.reads_pct = reads;
    }
    if mode == Mode::Exclusive {
        return Ok(());
    }
    if config.topology == Topology::Redlock {
        return Err(format!(
            "--mode {} is not supported on Redlock: lock-runtime refuses semaphores and read-write \
             locks there, since independent masters could each admit different holders (more than \
             the permits, or a writer beside readers); use --topology single, sentinel or cluster",
            mode.name()
        ));
    }
    if config.keys > 0 {
        return Err(format!(
            "--keys runs the many-keys leases beside the lock: use it with --mode exclusive\n{USAGE}"
        ));
    }
    let holders = config.workers.saturating_mul(config.tasks) as u64;
    if mode == Mode::Semaphore && holders <= u64::from(config.permits) {
        return Err(format!(
            "--permits {}: with {} workers x {} tasks nobody ever waits for a permit; the \
             takeover check needs every permit wanted, so give more tasks than permits",
            config.permits, config.workers, config.tasks
        ));
    }
    if config.fair {
        return Err(format!(
            "--fair is a lock's fair line: lock-runtime has none for semaphores and read-write \
             locks, use it with --mode exclusive\n{USAGE}"
        ));
    }
    Ok(())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("worker") {
        return match worker::WorkerArgs::parse(&args[1..]).and_then(worker::run) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("chaos worker: {e}");
                ExitCode::from(2)
            }
        };
    }
    let config = match parse(&args) {
        Ok(config) => config,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    match experiment::run(&config) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("chaos: {e}");
            ExitCode::from(2)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(line: &str) -> Vec<String> {
        line.split_whitespace().map(str::to_owned).collect()
    }

    #[test]
    fn many_keys_add_the_shard_stall_to_the_clusters_faults_and_only_there() {
        let plain = parse(&args("--topology cluster")).expect("valid");
        assert!(!plain.fault_kinds().contains(&FaultKind::ShardStall));
        let many = parse(&args("--topology cluster --keys 12")).expect("valid");
        assert_eq!(many.keys, 12);
        assert!(many.fault_kinds().contains(&FaultKind::ShardStall));
        assert!(many.reported_kinds().contains(&FaultKind::ShardStall));
        let only = parse(&args("--topology cluster --faults shard-stall --keys 3")).expect("valid");
        assert_eq!(only.fault_kinds(), [FaultKind::ShardStall]);
    }

    #[test]
    fn many_keys_need_a_cluster_and_the_shard_stall_needs_many_keys() {
        let err = parse(&args("--topology single --keys 4")).expect_err("not a cluster");
        assert!(err.contains("--topology cluster"), "{err}");
        let err = parse(&args("--topology cluster --faults shard-stall")).expect_err("no keys");
        assert!(err.contains("shard-stall is not a fault"), "{err}");
    }

    #[test]
    fn the_mode_is_exclusive_unless_told_and_its_options_have_defaults() {
        let plain = parse(&args("--quick")).expect("valid");
        assert_eq!(plain.mode, Mode::Exclusive);
        let rw = parse(&args("--mode rw --topology cluster")).expect("valid");
        assert_eq!(
            (rw.mode, rw.reads_pct),
            (Mode::ReadWrite, DEFAULT_READS_PCT)
        );
        let sem = parse(&args("--mode semaphore --permits 5 --topology sentinel")).expect("valid");
        assert_eq!((sem.mode, sem.permits), (Mode::Semaphore, 5));
        assert_eq!(
            parse(&args("--mode semaphore")).expect("valid").permits,
            DEFAULT_PERMITS
        );
    }

    #[test]
    fn postgres_topologies_take_their_own_faults_and_only_the_plain_lock() {
        let direct = parse(&args("--topology postgres")).expect("valid");
        assert!(direct.fault_kinds().contains(&FaultKind::ServerCrash));
        assert!(!direct.fault_kinds().contains(&FaultKind::PoolerRestart));
        let pooled = parse(&args("--topology pgbouncer --faults pooler-restart")).expect("valid");
        assert_eq!(pooled.fault_kinds(), [FaultKind::PoolerRestart]);
        let err =
            parse(&args("--topology postgres --faults pooler-restart")).expect_err("no pooler");
        assert!(
            err.contains("not a fault of the postgres topology"),
            "{err}"
        );
        for extra in ["--mode rw", "--mode semaphore", "--fair"] {
            let err = parse(&args(&format!("--topology pgbouncer {extra}"))).expect_err(extra);
            assert!(err.contains("plain lock only"), "{err}");
        }
    }

    #[test]
    fn redlock_refuses_the_rw_and_semaphore_modes_and_says_why() {
        for mode in ["rw", "semaphore"] {
            let err =
                parse(&args(&format!("--topology redlock --mode {mode}"))).expect_err("redlock");
            assert!(err.contains("not supported on Redlock"), "{err}");
            assert!(err.contains("independent masters"), "{err}");
        }
        assert!(parse(&args("--topology redlock")).is_ok());
    }

    #[test]
    fn mode_options_need_their_mode_and_the_new_modes_refuse_keys_and_fair() {
        let err = parse(&args("--permits 2")).expect_err("not a semaphore");
        assert!(err.contains("--mode semaphore"), "{err}");
        let err = parse(&args("--mode semaphore --reads 50")).expect_err("not rw");
        assert!(err.contains("--mode rw"), "{err}");
        let err = parse(&args("--mode semaphore --permits 0")).expect_err("no permits");
        assert!(err.contains("1 or more permits"), "{err}");
        let err = parse(&args("--mode semaphore --permits 12")).expect_err("uncontended");
        assert!(err.contains("more tasks than permits"), "{err}");
        let err = parse(&args("--mode rw --reads 101")).expect_err("over 100");
        assert!(err.contains("0 to 100"), "{err}");
        let err = parse(&args("--mode rw --topology cluster --keys 3")).expect_err("keys");
        assert!(err.contains("--mode exclusive"), "{err}");
        let err = parse(&args("--mode semaphore --fair")).expect_err("fair");
        assert!(err.contains("--mode exclusive"), "{err}");
        assert!(
            parse(&args("--mode bogus"))
                .expect_err("unknown")
                .contains("exclusive, rw or semaphore")
        );
    }
}
