//! `chaos`: a fenced-resource chaos experiment for `lock-runtime`, on a single Redis server, a
//! Sentinel setup, a Redis Cluster or Redlock masters.
//!
//! Worker processes (this binary again, `chaos worker ...`) take one lock through
//! `#[distributed_lock]` over and over and write their fencing token to a resource on a separate
//! Redis server whose data is never faulted and which accepts only tokens higher than any it has
//! seen (a `partition` delays one worker's link to it).
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
//!   on its own.
//!
//! At the end the logs are checked: no stale token accepted, every overlap of two holders
//! explained by a fault and caught by fencing, the lock taken again promptly after each fault, no
//! panics, no section without the lock, no lock left behind. See `chaos/README.md`.
//!
//! ```text
//! chaos [--topology single|sentinel|cluster|redlock] [--masters N] [--faults KIND,...]
//!       --quick [--seconds N] ...                      (at most a minute)
//! chaos [--topology ...] [--minutes N] [--workers N] [--tasks N] [--seed N] [--json PATH]
//!       [--svg PATH] [--dir PATH] [--margin-ms N]      (the full run, 30 minutes by default)
//!       [--keys N]                                     (Cluster: N leases per worker on every shard)
//!       [--fair]                                       (every section waits in fair mode)
//! ```
//!
//! Exits 0 when every invariant holds, 1 when one fails, 2 on bad usage or a setup failure.

mod analyze;
mod deployment;
mod experiment;
mod lockserver;
mod rng;
mod svg;
mod worker;

use std::process::{Command, ExitCode};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use analyze::FaultKind;
use deployment::Topology;

/// The lock every worker takes (the stored key is `lock:{chaos:resource}`).
pub(crate) const LOCK_KEY: &str = "chaos:resource";
/// Where the lock lives in Redis: the default `lock:` prefix, the key in a hash tag.
pub(crate) fn stored_key() -> String {
    format!("lock:{{{LOCK_KEY}}}")
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
    /// Allowed on top of the ttl for the lock to be taken again after a fault.
    pub(crate) margin: Duration,
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

    /// How many of the lock store's nodes a lock is granted on: a majority of Redlock's
    /// masters, otherwise the one store.
    pub(crate) fn quorum(&self) -> usize {
        match self.topology {
            Topology::Redlock => self.masters / 2 + 1,
            Topology::Single | Topology::Sentinel | Topology::Cluster => 1,
        }
    }
}

const USAGE: &str = "usage: chaos [--topology single|sentinel|cluster|redlock] [--masters N] \
[--faults KIND,KIND,...] [--quick] [--seconds N | --minutes N] [--workers N] [--tasks N] \
[--seed N] [--json PATH] [--svg PATH] [--dir PATH] [--margin-ms N] [--keys N] [--fair]";

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
        topology: Topology::Single,
        masters: 3,
        faults: Vec::new(),
        keys: 0,
        fair: false,
    };
    let mut duration = None;
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
            "--topology" => config.topology = Topology::parse(value)?,
            "--masters" => config.masters = number()? as usize,
            "--keys" => config.keys = number()? as usize,
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
}
