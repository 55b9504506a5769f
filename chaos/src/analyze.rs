//! Reads the workers' logs and the fault log back and checks the invariants.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs;
use std::path::PathBuf;

use serde_json::{Value, json};

use crate::deployment::Topology;
use crate::{Config, TTL};

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum FaultKind {
    Kill,
    Pause,
    RestartPersist,
    RestartNoPersist,
    Stall,
    Delay,
    Cut,
    /// Every connection of one worker blackholed, its link to the resource too.
    Partition,
    NodePause,
    FailoverKill,
    FailoverPause,
    /// A failover the deployment did on its own, seen by the failover watch.
    FailoverObserved,
    /// One Cluster master, any of them, frozen for less than the failure detection (many-keys
    /// mode): only the leases in its slots may be lost.
    ShardStall,
}

impl FaultKind {
    pub(crate) const ALL: [FaultKind; 13] = [
        FaultKind::Kill,
        FaultKind::Pause,
        FaultKind::RestartPersist,
        FaultKind::RestartNoPersist,
        FaultKind::Stall,
        FaultKind::Delay,
        FaultKind::Cut,
        FaultKind::Partition,
        FaultKind::NodePause,
        FaultKind::FailoverKill,
        FaultKind::FailoverPause,
        FaultKind::FailoverObserved,
        FaultKind::ShardStall,
    ];

    pub(crate) fn parse(name: &str) -> Result<Self, String> {
        FaultKind::ALL
            .into_iter()
            .find(|kind| kind.name() == name)
            .ok_or_else(|| format!("unknown fault kind {name}"))
    }

    /// A replica promoted in place of a master: for a moment two masters may grant the lock.
    pub(crate) fn is_failover(self) -> bool {
        matches!(
            self,
            FaultKind::FailoverKill | FaultKind::FailoverPause | FaultKind::FailoverObserved
        )
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            FaultKind::Kill => "kill",
            FaultKind::Pause => "pause",
            FaultKind::RestartPersist => "restart-persist",
            FaultKind::RestartNoPersist => "restart-nopersist",
            FaultKind::Stall => "stall",
            FaultKind::Delay => "delay",
            FaultKind::Cut => "cut",
            FaultKind::Partition => "partition",
            FaultKind::NodePause => "node-pause",
            FaultKind::FailoverKill => "failover-kill",
            FaultKind::FailoverPause => "failover-pause",
            FaultKind::FailoverObserved => "failover-observed",
            FaultKind::ShardStall => "shard-stall",
        }
    }
}

/// What a fault hit, which decides which overlaps it can explain.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Hit {
    /// One worker process or its connection: only that worker's holds can go stale.
    Worker(usize),
    /// The whole lock store: the single server restarted, or the master that Sentinel or Cluster
    /// failed over. Any holder may lose its lock.
    Store,
    /// One of Redlock's masters. Alone it takes no lock away (the others are a majority); only
    /// faults on a majority of the masters at once explain an overlap.
    Master(usize),
    /// A Cluster master that does not serve the lock: it explains no overlap of the lock's
    /// holders, only the loss of the many-keys leases in its slots (`Fault::slots`).
    Shard,
}

impl Hit {
    pub(crate) fn worker(self) -> Option<usize> {
        match self {
            Hit::Worker(slot) => Some(slot),
            Hit::Store | Hit::Master(_) | Hit::Shard => None,
        }
    }

    /// `worker 1: `, `master 2: ` or nothing, to put before a fault's description.
    pub(crate) fn label(self) -> String {
        match self {
            Hit::Worker(slot) => format!("worker {slot}: "),
            Hit::Master(node) => format!("master {node}: "),
            Hit::Store | Hit::Shard => String::new(),
        }
    }
}

/// One injected fault, with wall-clock times (ns).
#[derive(Clone, Debug)]
pub(crate) struct Fault {
    pub(crate) kind: FaultKind,
    pub(crate) hit: Hit,
    /// The worker process it hit, if it hit one.
    pub(crate) pid: Option<u32>,
    pub(crate) start: u64,
    /// When the injector was done with it: the process resumed, the server back, the replaced
    /// master back as a replica.
    pub(crate) end: u64,
    /// From when on the lock must be free to take again, the reference of the takeover check: a
    /// killed, paused or cut-off holder leaves its lease behind at the start; a restarted
    /// server serves again once it is back; a failed-over store once the replica is promoted;
    /// Redlock's other masters serve all along.
    pub(crate) serving: u64,
    pub(crate) detail: String,
    /// The hash slots (inclusive ranges) of the Cluster master a `node-pause` or `shard-stall`
    /// froze: the many-keys leases it may take. Empty for every other fault.
    pub(crate) slots: Vec<(u16, u16)>,
}

/// One worker process, from spawn to exit.
#[derive(Clone, Debug)]
pub(crate) struct Incarnation {
    pub(crate) slot: usize,
    pub(crate) incarnation: usize,
    pub(crate) pid: u32,
    pub(crate) log: PathBuf,
    pub(crate) stderr: PathBuf,
    pub(crate) started: u64,
    pub(crate) ended: u64,
    pub(crate) killed: bool,
    pub(crate) exit: String,
    pub(crate) clean_exit: bool,
}

#[derive(Clone, Copy, Debug)]
pub(crate) struct Write {
    pub(crate) at: u64,
    pub(crate) accepted: bool,
    pub(crate) seq: u64,
    pub(crate) held: bool,
}

/// One write as the resource saw it, from its journal (the `n`th entry is write `seq` n + 1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Delivery {
    pub(crate) token: u64,
    pub(crate) accepted: bool,
    /// The resource server's clock when the write arrived (wall-clock ns, comparable with the
    /// workers' logs: every process runs on this machine).
    pub(crate) at: u64,
}

/// Reads the resource's journal: one `<token> <accepted 0|1> <ns>` entry per write, in order.
pub(crate) fn parse_journal(entries: &[String]) -> Result<Vec<Delivery>, String> {
    entries
        .iter()
        .map(|entry| {
            let parts: Vec<&str> = entry.split_whitespace().collect();
            let bad = || format!("bad resource journal entry: {entry}");
            match parts[..] {
                [token, accepted, at] => Ok(Delivery {
                    token: token.parse().map_err(|_| bad())?,
                    accepted: accepted == "1",
                    at: at.parse().map_err(|_| bad())?,
                }),
                _ => Err(bad()),
            }
        })
        .collect()
}

/// One locked section: [enter, exit] by one task of one worker process.
#[derive(Clone, Debug)]
pub(crate) struct Hold {
    pub(crate) slot: usize,
    pub(crate) incarnation: usize,
    pub(crate) task: usize,
    pub(crate) enter: u64,
    pub(crate) exit: u64,
    /// False when the process died inside the section (exit = its death).
    pub(crate) exit_logged: bool,
    pub(crate) token: u64,
    pub(crate) continues: bool,
    pub(crate) write: Option<Write>,
}

/// One lease of the many-keys mode (`--keys`): a key of its worker's own, held for a few
/// seconds while the watchdog renews it, on whichever shard its slot lives.
#[derive(Clone, Debug)]
pub(crate) struct ShardLease {
    pub(crate) slot: usize,
    pub(crate) key: usize,
    /// The hash slot of the stored key.
    pub(crate) hash_slot: u16,
    pub(crate) ttl: u64,
    pub(crate) start: u64,
    /// Released, or reported lost.
    pub(crate) end: u64,
    /// `Some(reason)` when the holder was told the lease was lost.
    pub(crate) lost: Option<String>,
    /// The fault that explains the loss (index into `faults`).
    pub(crate) explained_by: Option<usize>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// The stale holder wrote after the newer one and the resource refused it.
    Caught,
    /// The stale holder's write reached the resource before the newer holder's.
    InOrder,
    /// One of the two never wrote: nothing to order.
    NoConflict,
    /// The stale holder wrote after the newer one and was accepted: fencing failed.
    StaleAccepted,
}

#[derive(Clone, Debug)]
pub(crate) struct Overlap {
    /// Indices into `holds`: the one with the lower token, and the one with the higher. The
    /// stale one is usually there first and the newer one comes in while it holds, but see
    /// `out_of_order`.
    pub(crate) stale: usize,
    pub(crate) newer: usize,
    /// The one that came in second has the lower token: possible only while a failover leaves
    /// two masters granting at once.
    pub(crate) out_of_order: bool,
    pub(crate) start: u64,
    pub(crate) end: u64,
    pub(crate) outcome: Outcome,
    /// The fault that explains it (index into `faults`).
    pub(crate) explained_by: Option<usize>,
    /// Explained by a fault on a minority of Redlock masters, which takes the lock only from a
    /// holder that had it on a bare majority (see `explanation`).
    pub(crate) bare_majority: bool,
}

#[derive(Clone, Debug)]
pub(crate) struct Takeover {
    pub(crate) fault: usize,
    /// ns from the fault's reference point to the next section entered; `None`: never.
    pub(crate) after: Option<u64>,
    /// A later fault took the store away before the lock was taken again within the limit:
    /// the wait is that fault's, judged by its own takeover.
    pub(crate) superseded: bool,
}

pub(crate) struct Input<'a> {
    pub(crate) config: &'a Config,
    pub(crate) incarnations: &'a [Incarnation],
    pub(crate) faults: &'a [Fault],
    pub(crate) problems: Vec<String>,
    pub(crate) t0: u64,
    pub(crate) t1: u64,
    pub(crate) final_token: Option<u64>,
    /// The resource's journal, in the order it saw the writes.
    pub(crate) journal: Vec<Delivery>,
}

pub(crate) struct Report {
    pub(crate) config: Config,
    pub(crate) t0: u64,
    pub(crate) t1: u64,
    pub(crate) incarnations: Vec<Incarnation>,
    pub(crate) faults: Vec<Fault>,
    pub(crate) holds: Vec<Hold>,
    pub(crate) overlaps: Vec<Overlap>,
    pub(crate) takeovers: Vec<Takeover>,
    pub(crate) errors: BTreeMap<String, u64>,
    pub(crate) violations: u64,
    pub(crate) stale_accepted: u64,
    pub(crate) journal: Vec<Delivery>,
    /// Journal entries no worker logged: the writer died or gave up before the answer came.
    pub(crate) unlogged: Vec<usize>,
    /// Of those, the ones that arrived after the section that sent them had ended.
    pub(crate) late: Vec<usize>,
    /// The many-keys leases, ended in the workers' logs.
    pub(crate) leases: Vec<ShardLease>,
    pub(crate) failures: Vec<String>,
}

fn field<T: std::str::FromStr>(parts: &[&str], i: usize, line: &str) -> Result<T, String> {
    parts
        .get(i)
        .and_then(|p| p.parse().ok())
        .ok_or_else(|| format!("bad worker log line: {line}"))
}

/// Reads one worker log into sections; returns (holds, errors by kind, violations).
fn read_log(
    inc: &Incarnation,
    holds: &mut Vec<Hold>,
    leases: &mut Vec<ShardLease>,
    errors: &mut BTreeMap<String, u64>,
) -> Result<u64, String> {
    let text = fs::read_to_string(&inc.log).unwrap_or_default();
    let mut open: HashMap<(usize, u64), usize> = HashMap::new();
    let mut violations = 0;
    for line in text.lines() {
        let parts: Vec<&str> = line.split_whitespace().collect();
        match parts.first().copied() {
            Some("enter") => {
                let key = (field(&parts, 1, line)?, field(&parts, 2, line)?);
                open.insert(key, holds.len());
                holds.push(Hold {
                    slot: inc.slot,
                    incarnation: inc.incarnation,
                    task: key.0,
                    enter: field(&parts, 3, line)?,
                    exit: inc.ended,
                    exit_logged: false,
                    token: field(&parts, 4, line)?,
                    continues: parts.get(5) == Some(&"continue"),
                    write: None,
                });
            }
            Some("write") => {
                let key = (field(&parts, 1, line)?, field(&parts, 2, line)?);
                if let Some(&i) = open.get(&key) {
                    holds[i].write = Some(Write {
                        at: field(&parts, 3, line)?,
                        accepted: field::<u8>(&parts, 5, line)? == 1,
                        seq: field(&parts, 6, line)?,
                        held: field::<u8>(&parts, 7, line)? == 1,
                    });
                }
            }
            Some("exit") => {
                let key = (field(&parts, 1, line)?, field(&parts, 2, line)?);
                if let Some(i) = open.remove(&key) {
                    holds[i].exit = field(&parts, 3, line)?;
                    holds[i].exit_logged = true;
                }
            }
            // `lease <key> <hash slot> <ttl ns> <start> <end> kept|lost [reason]`
            Some("lease") => leases.push(ShardLease {
                slot: inc.slot,
                key: field(&parts, 1, line)?,
                hash_slot: field(&parts, 2, line)?,
                ttl: field(&parts, 3, line)?,
                start: field(&parts, 4, line)?,
                end: field(&parts, 5, line)?,
                lost: match parts.get(6).copied() {
                    Some("kept") => None,
                    Some("lost") => Some(parts.get(7).copied().unwrap_or("?").to_owned()),
                    _ => return Err(format!("bad worker log line: {line}")),
                },
                explained_by: None,
            }),
            Some("violation") => violations += 1,
            Some("error") => {
                let kind = parts.get(3).copied().unwrap_or("?").to_owned();
                *errors.entry(kind).or_default() += 1;
            }
            // A line cut short by SIGKILL, `start`, `stop`.
            _ => {}
        }
    }
    Ok(violations)
}

/// The fault that explains an overlap of `[start, end]` in which `stale`'s hold went stale, if
/// any, and whether the explanation needs the stale holder to have held a bare majority of the
/// Redlock masters. A fault explains it when it was active around it (from its start until
/// `grace` — a lease and the margin — after its end) and could have taken that hold's lock away:
///
/// - a fault on the stale holder's own worker, but not a kill (a killed holder's section ends
///   when it dies, so it overlaps nothing);
/// - a fault on the whole lock store (a restart, a failover);
/// - faults on at least `quorum` distinct Redlock masters, active together: those can take the
///   lock from a holder that has it on every master.
///
/// Failing that, one fault on a Redlock master explains it if it struck while the stale holder
/// held the lock and before the newer holder came in (`bare_majority`): a master that restarts
/// empty, or that was paused past the lease, forgets the holder's lock, and a holder that had
/// it on a bare majority is then left with a minority. Under contention that is common: the
/// winner of a race took a majority while a loser briefly held the remaining master. (Redlock
/// asks a crashed master to stay down for a ttl before it rejoins; these faults do not wait.)
///
/// Of several, the latest that started before the overlap is named.
fn explanation(
    faults: &[Fault],
    stale: &Hold,
    (start, end): (u64, u64),
    grace: u64,
    quorum: usize,
) -> Option<(usize, bool)> {
    let active = |f: &Fault| f.start <= end && start <= f.end + grace;
    let mut masters: Vec<usize> = faults
        .iter()
        .filter(|f| active(f))
        .filter_map(|f| match f.hit {
            Hit::Master(node) => Some(node),
            Hit::Worker(_) | Hit::Store | Hit::Shard => None,
        })
        .collect();
    masters.sort_unstable();
    masters.dedup();
    let latest = |explains: &dyn Fn(&Fault) -> bool| {
        (0..faults.len())
            .filter(|&k| explains(&faults[k]))
            .max_by_key(|&k| (faults[k].start <= start, faults[k].start))
    };
    let certain = latest(&|f| {
        active(f)
            && match f.hit {
                Hit::Worker(slot) => f.kind != FaultKind::Kill && slot == stale.slot,
                Hit::Store => true,
                Hit::Master(_) => masters.len() >= quorum,
                Hit::Shard => false,
            }
    });
    if let Some(k) = certain {
        return Some((k, false));
    }
    latest(&|f| matches!(f.hit, Hit::Master(_)) && (stale.enter..=start).contains(&f.start))
        .map(|k| (k, true))
}

pub(crate) fn analyze(input: &Input<'_>) -> Result<Report, String> {
    let ttl = TTL.as_nanos() as u64;
    let margin = input.config.margin.as_nanos() as u64;
    let mut failures = input.problems.clone();
    let mut holds = Vec::new();
    let mut leases = Vec::new();
    let mut errors = BTreeMap::new();
    let mut violations = 0;
    for inc in input.incarnations {
        violations += read_log(inc, &mut holds, &mut leases, &mut errors)?;
        if !inc.killed && !inc.clean_exit {
            failures.push(format!(
                "worker {} (pid {}) exited badly: {}",
                inc.slot, inc.pid, inc.exit
            ));
        }
        let stderr = fs::read_to_string(&inc.stderr).unwrap_or_default();
        if stderr.contains("panicked") {
            failures.push(format!(
                "worker {} (pid {}) panicked: {}",
                inc.slot,
                inc.pid,
                stderr
                    .lines()
                    .find(|l| l.contains("panicked"))
                    .unwrap_or("")
            ));
        }
        // A worker that lived a while must have had its turn (a respawn just before the end
        // may not have).
        let lived = inc.ended.saturating_sub(inc.started) >= 10_000_000_000;
        if !inc.killed
            && lived
            && !holds
                .iter()
                .any(|h| h.slot == inc.slot && h.incarnation == inc.incarnation)
        {
            failures.push(format!(
                "worker {} (pid {}) never held the lock",
                inc.slot, inc.pid
            ));
        }
    }
    if violations > 0 {
        failures.push(format!(
            "{violations} sections ran without current() reporting a lock"
        ));
    }
    if holds.is_empty() {
        failures.push("no section ran at all".into());
    }
    holds.sort_by_key(|h| (h.enter, h.slot, h.task));

    // The resource, in the order it saw the writes (its own journal, which also has the writes
    // nobody lived or waited to log): accepted tokens must rise strictly.
    let journal = &input.journal;
    let mut highest = 0;
    let mut stale_accepted = 0;
    for d in journal {
        if d.accepted {
            if d.token <= highest {
                stale_accepted += 1;
            }
            highest = highest.max(d.token);
        }
    }
    let disagree = holds
        .iter()
        .filter_map(|h| h.write.map(|w| (w, h.token)))
        .filter(|(w, token)| {
            let entry = (w.seq as usize).checked_sub(1).and_then(|i| journal.get(i));
            entry.is_none_or(|d| d.token != *token || d.accepted != w.accepted)
        })
        .count();
    if disagree > 0 {
        failures.push(format!(
            "{disagree} writes logged by workers are not in the resource's journal as logged"
        ));
    }
    let delivered = deliveries(&holds, journal);
    if stale_accepted > 0 {
        failures.push(format!(
            "the resource accepted {stale_accepted} stale tokens"
        ));
    }
    if let Some(last) = input.final_token
        && last < highest
    {
        failures.push(format!(
            "the resource ends at token {last}, below the accepted {highest}"
        ));
    }

    // Every pair of sections of different tasks that intersect.
    let mut overlaps = Vec::new();
    for i in 0..holds.len() {
        for j in i + 1..holds.len() {
            if holds[j].enter >= holds[i].exit {
                // Sorted by enter: every later section starts after this one ended.
                break;
            }
            let (first, second) = (&holds[i], &holds[j]);
            if (first.slot, first.incarnation, first.task)
                == (second.slot, second.incarnation, second.task)
            {
                continue;
            }
            let (start, end) = (second.enter, first.exit.min(second.exit));
            // Who could have lost the lock is asked of the holder that was there first.
            let explained = explanation(
                input.faults,
                first,
                (start, end),
                ttl + margin,
                input.config.quorum(),
            );
            let explained_by = explained.map(|(fault, _)| fault);
            // One lock store grants in token order, so a holder that comes in while another
            // holds has the higher token. A failover can leave two masters granting at once
            // for a moment (the old one serving what it had queued before it learns it was
            // replaced), and then the grants' order need not be the order in which their
            // holders come in; only the resource's check keeps them apart.
            let out_of_order = second.token <= first.token;
            if out_of_order && !explained_by.is_some_and(|f| input.faults[f].kind.is_failover()) {
                failures.push(format!(
                    "fencing order: worker {} task {} entered at {} with token {} while worker {} task {} held token {}, and no failover explains it",
                    second.slot,
                    second.task,
                    second.enter,
                    second.token,
                    first.slot,
                    first.task,
                    first.token
                ));
            }
            // The stale holder is the one with the lower token, whichever came in first.
            let (stale, newer) = if out_of_order { (j, i) } else { (i, j) };
            // By the writes as the resource saw them, also those their writers never logged.
            let outcome = match (delivered.by_hold[stale], delivered.by_hold[newer]) {
                (Some(sw), Some(nw)) if sw > nw => {
                    if journal[sw].accepted {
                        Outcome::StaleAccepted
                    } else {
                        Outcome::Caught
                    }
                }
                (Some(_), Some(_)) => Outcome::InOrder,
                _ => Outcome::NoConflict,
            };
            overlaps.push(Overlap {
                stale,
                newer,
                start,
                end,
                outcome,
                out_of_order,
                explained_by,
                bare_majority: explained.is_some_and(|(_, bare)| bare),
            });
        }
    }
    let unexplained = overlaps.iter().filter(|o| o.explained_by.is_none()).count();
    if unexplained > 0 {
        failures.push(format!(
            "{unexplained} overlaps with no fault to explain them"
        ));
    }
    let uncaught = overlaps
        .iter()
        .filter(|o| o.outcome == Outcome::StaleAccepted)
        .count();
    if uncaught > 0 {
        failures.push(format!(
            "{uncaught} overlaps where the stale holder's later write was accepted"
        ));
    }

    // After each fault someone holds the lock again within ttl + margin.
    let enters: Vec<u64> = holds.iter().map(|h| h.enter).collect();
    let mut takeovers = Vec::new();
    for (k, f) in input.faults.iter().enumerate() {
        // A holder that kept its lease through the fault rightly keeps everyone out until it is
        // done (one section in eight outlives the ttl): count from the last moment such a
        // section is known to have held the lease, its write made with the lease held.
        let from = holds
            .iter()
            .filter(|h| h.enter <= f.serving && f.serving < h.exit)
            .filter_map(|h| h.write.filter(|w| w.held).map(|w| w.at))
            .fold(f.serving, u64::max);
        let next = enters.partition_point(|&e| e <= from);
        let after = enters.get(next).map(|e| e - from);
        // A later fault that made the store unavailable (a failover, a restart) before the lock
        // was taken again within the limit holds everyone out itself: the wait is then judged
        // by that fault's own takeover, counted from when the store served again.
        let deadline = from + ttl + margin;
        let superseded = input.faults[k + 1..].iter().any(|later| {
            later.pid.is_none()
                && later.serving > later.start
                && later.start < deadline
                && enters
                    .get(next)
                    .is_none_or(|&entered| later.start < entered)
        });
        if superseded {
            takeovers.push(Takeover {
                fault: k,
                after,
                superseded,
            });
            continue;
        }
        match after {
            Some(after) if after <= ttl + margin => {}
            Some(after) => failures.push(format!(
                "after {} at {:.2}s the lock was taken again only after {} ms, counted from {:.2}s (limit {} ms)",
                f.kind.name(),
                (f.start.saturating_sub(input.t0)) as f64 / 1e9,
                after / 1_000_000,
                (from.saturating_sub(input.t0)) as f64 / 1e9,
                (ttl + margin) / 1_000_000
            )),
            None => failures.push(format!(
                "after {} at {:.2}s the lock was never taken again",
                f.kind.name(),
                (f.start.saturating_sub(input.t0)) as f64 / 1e9
            )),
        }
        takeovers.push(Takeover {
            fault: k,
            after,
            superseded,
        });
    }

    // Many keys: a lease is lost only to a fault that could take it.
    for lease in &mut leases {
        if lease.lost.is_some() {
            lease.explained_by = lease_loss_explanation(input.faults, lease, margin);
        }
    }
    let healthy = leases
        .iter()
        .filter(|l| l.lost.is_some() && l.explained_by.is_none())
        .count();
    if healthy > 0 {
        failures.push(format!(
            "{healthy} leases on a healthy shard were reported lost (no fault on their shard, \
             their worker or the whole cluster explains it)"
        ));
    }

    Ok(Report {
        config: input.config.clone(),
        t0: input.t0,
        t1: input.t1,
        incarnations: input.incarnations.to_vec(),
        faults: input.faults.to_vec(),
        holds,
        overlaps,
        takeovers,
        errors,
        violations,
        stale_accepted,
        journal: journal.clone(),
        unlogged: delivered.unlogged,
        late: delivered.late,
        leases,
        failures,
    })
}

/// The fault that explains why a many-keys lease was reported lost, if any: one active between
/// the last moment the lease could have been renewed and its loss (from the fault's start to a
/// lease and the margin after its end) that could have stopped its renewals:
///
/// - a fault on its own worker (a kill reports nothing, so it is a pause);
/// - a failover, injected or observed: between the failure detection and the promotion the
///   whole cluster refuses requests (`CLUSTERDOWN`), every shard's leases with it;
/// - a freeze of the master serving its slot (`node-pause`, `shard-stall`).
///
/// A freeze of another master explains nothing: that is the invariant "a lease on a healthy
/// shard is never reported lost". Of several, the latest that started before the loss is named.
fn lease_loss_explanation(faults: &[Fault], lease: &ShardLease, margin: u64) -> Option<usize> {
    let lost = lease.end;
    let active = |f: &Fault| f.start <= lost && lost <= f.end + lease.ttl + margin;
    let takes = |f: &Fault| match f.hit {
        Hit::Worker(slot) => slot == lease.slot && f.kind != FaultKind::Kill,
        _ if f.kind.is_failover() => true,
        Hit::Store | Hit::Shard | Hit::Master(_) => f
            .slots
            .iter()
            .any(|&(first, last)| (first..=last).contains(&lease.hash_slot)),
    };
    (0..faults.len())
        .filter(|&k| active(&faults[k]) && takes(&faults[k]))
        .max_by_key(|&k| faults[k].start)
}

/// Which write of the journal each section made: the one it logged, or else an entry no worker
/// logged with its token that arrived after it came in (the latest such section takes it).
/// Also the entries no worker logged, and of those the ones that reached the resource after the
/// section that sent them had ended: held up in the network, or sent by a body dropped when
/// its lease was lost, or by a process killed while the write was on its way.
struct Deliveries {
    by_hold: Vec<Option<usize>>,
    unlogged: Vec<usize>,
    late: Vec<usize>,
}

fn deliveries(holds: &[Hold], journal: &[Delivery]) -> Deliveries {
    let mut by_hold: Vec<Option<usize>> = holds
        .iter()
        .map(|h| h.write.and_then(|w| (w.seq as usize).checked_sub(1)))
        .collect();
    let logged: HashSet<usize> = by_hold.iter().flatten().copied().collect();
    let mut by_token: HashMap<u64, Vec<usize>> = HashMap::new();
    for (k, h) in holds.iter().enumerate() {
        by_token.entry(h.token).or_default().push(k);
    }
    let unlogged: Vec<usize> = (0..journal.len()).filter(|i| !logged.contains(i)).collect();
    let mut late = Vec::new();
    for &i in &unlogged {
        let d = journal[i];
        let sender = by_token.get(&d.token).and_then(|ks| {
            ks.iter()
                .copied()
                .filter(|&k| holds[k].enter <= d.at && by_hold[k].is_none())
                .max_by_key(|&k| holds[k].enter)
        });
        if let Some(k) = sender {
            by_hold[k] = Some(i);
            if holds[k].exit < d.at {
                late.push(i);
            }
        }
    }
    Deliveries {
        by_hold,
        unlogged,
        late,
    }
}

impl Report {
    pub(crate) fn ok(&self) -> bool {
        self.failures.is_empty()
    }

    fn count(&self, outcome: Outcome) -> usize {
        self.overlaps
            .iter()
            .filter(|o| o.outcome == outcome)
            .count()
    }

    fn bare_majority_overlaps(&self) -> usize {
        self.overlaps.iter().filter(|o| o.bare_majority).count()
    }

    fn worst_takeover(&self) -> Option<&Takeover> {
        self.takeovers
            .iter()
            .filter(|t| t.after.is_some() && !t.superseded)
            .max_by_key(|t| t.after)
    }

    fn faults_by_kind(&self) -> Vec<(FaultKind, usize)> {
        self.config
            .reported_kinds()
            .iter()
            .map(|&k| (k, self.faults.iter().filter(|f| f.kind == k).count()))
            .collect()
    }

    /// Many-keys leases reported lost, and of those the ones no fault explains.
    fn leases_lost(&self) -> (usize, usize) {
        let lost = self.leases.iter().filter(|l| l.lost.is_some());
        let unexplained = lost.clone().filter(|l| l.explained_by.is_none()).count();
        (lost.count(), unexplained)
    }

    fn lease_slots(&self) -> usize {
        let slots: HashSet<u16> = self.leases.iter().map(|l| l.hash_slot).collect();
        slots.len()
    }

    fn refused(&self, entries: impl IntoIterator<Item = usize>) -> usize {
        entries
            .into_iter()
            .filter(|&i| !self.journal[i].accepted)
            .count()
    }

    pub(crate) fn print(&self) {
        let writes = self.journal.len();
        let refused = self.refused(0..writes);
        let lost_writes = self
            .holds
            .iter()
            .filter(|h| h.write.is_some_and(|w| !w.held))
            .count();
        println!("summary");
        println!(
            "  runs: {} worker processes ({} killed and respawned)",
            self.incarnations.len(),
            self.incarnations.iter().filter(|i| i.killed).count()
        );
        println!(
            "  holds: {} sections, {} writes ({} refused by fencing, {} written after the lease was lost)",
            self.holds.len(),
            writes,
            refused,
            lost_writes
        );
        println!(
            "  writes no worker logged: {} (arrived after their section had ended: {}, of them refused by fencing {})",
            self.unlogged.len(),
            self.late.len(),
            self.refused(self.late.iter().copied())
        );
        let faults: Vec<String> = self
            .faults_by_kind()
            .iter()
            .map(|(k, n)| format!("{} {n}", k.name()))
            .collect();
        println!("  faults: {} ({})", self.faults.len(), faults.join(", "));
        let errors: Vec<String> = self
            .errors
            .iter()
            .map(|(k, n)| format!("{k} {n}"))
            .collect();
        println!(
            "  errors seen by workers: {}",
            if errors.is_empty() {
                "none".into()
            } else {
                errors.join(", ")
            }
        );
        println!(
            "  overlaps: {} (caught by fencing {}, writes in order {}, no conflicting write {}, stale accepted {})",
            self.overlaps.len(),
            self.count(Outcome::Caught),
            self.count(Outcome::InOrder),
            self.count(Outcome::NoConflict),
            self.count(Outcome::StaleAccepted)
        );
        let mut by_fault: BTreeMap<&str, usize> = BTreeMap::new();
        for o in &self.overlaps {
            let name = o
                .explained_by
                .map_or("unexplained", |f| self.faults[f].kind.name());
            *by_fault.entry(name).or_default() += 1;
        }
        let by_fault: Vec<String> = by_fault.iter().map(|(k, n)| format!("{k} {n}")).collect();
        if !by_fault.is_empty() {
            println!("  overlaps explained by: {}", by_fault.join(", "));
        }
        let out_of_order = self.overlaps.iter().filter(|o| o.out_of_order).count();
        if out_of_order > 0 {
            println!(
                "  of them with the second holder's token the lower (two masters during a failover): {out_of_order}"
            );
        }
        let bare = self.bare_majority_overlaps();
        if bare > 0 {
            println!(
                "  of them by a fault on one Redlock master, the holder having a bare majority: {bare}"
            );
        }
        println!(
            "  unexplained overlaps: {}",
            self.overlaps
                .iter()
                .filter(|o| o.explained_by.is_none())
                .count()
        );
        println!("  stale tokens accepted: {}", self.stale_accepted);
        println!("  sections without the lock: {}", self.violations);
        if !self.leases.is_empty() {
            let (lost, healthy) = self.leases_lost();
            let mut by_fault: BTreeMap<&str, usize> = BTreeMap::new();
            for l in self.leases.iter().filter(|l| l.lost.is_some()) {
                let name = l
                    .explained_by
                    .map_or("nothing", |f| self.faults[f].kind.name());
                *by_fault.entry(name).or_default() += 1;
            }
            let by_fault: Vec<String> = by_fault.iter().map(|(k, n)| format!("{k} {n}")).collect();
            println!(
                "  many keys: {} leases over {} hash slots, {lost} reported lost{}",
                self.leases.len(),
                self.lease_slots(),
                if by_fault.is_empty() {
                    String::new()
                } else {
                    format!(" (explained by: {})", by_fault.join(", "))
                }
            );
            println!("  leases lost on a healthy shard: {healthy}");
        }
        match self.worst_takeover() {
            Some(t) => println!(
                "  worst takeover: {} ms after {} (limit {} ms = ttl + margin)",
                t.after.unwrap_or(0) / 1_000_000,
                self.faults[t.fault].kind.name(),
                (TTL + self.config.margin).as_millis()
            ),
            None => println!("  worst takeover: no faults"),
        }
        if self.ok() {
            println!("invariants: all held");
        } else {
            println!("invariants: FAILED");
            for failure in &self.failures {
                println!("  - {failure}");
            }
        }
    }

    pub(crate) fn json(&self) -> Value {
        let rel = |t: u64| t.saturating_sub(self.t0) as f64 / 1e9;
        json!({
            "ok": self.ok(),
            "seed": self.config.seed,
            "topology": self.config.topology.name(),
            "redlock_masters": (self.config.topology == Topology::Redlock).then_some(self.config.masters),
            "quick": self.config.quick,
            "duration_s": self.config.duration.as_secs_f64(),
            "workers": self.config.workers,
            "tasks_per_worker": self.config.tasks,
            "ttl_ms": TTL.as_millis() as u64,
            "keys_per_worker": self.config.keys,
            "fair": self.config.fair,
            "takeover_margin_ms": self.config.margin.as_millis() as u64,
            "start_unix_ns": self.t0,
            "end_unix_ns": self.t1,
            "summary": {
                "worker_processes": self.incarnations.len(),
                "holds": self.holds.len(),
                "writes": self.journal.len(),
                "writes_refused": self.refused(0..self.journal.len()),
                "writes_logged": self.holds.iter().filter(|h| h.write.is_some()).count(),
                "writes_unlogged": self.unlogged.len(),
                "writes_late": self.late.len(),
                "writes_late_refused": self.refused(self.late.iter().copied()),
                "faults": self.faults_by_kind().iter().map(|(k, n)| (k.name().to_owned(), json!(n))).collect::<serde_json::Map<_, _>>(),
                "worker_errors": self.errors,
                "overlaps": self.overlaps.len(),
                "overlaps_caught_by_fencing": self.count(Outcome::Caught),
                "overlaps_in_order": self.count(Outcome::InOrder),
                "overlaps_no_conflicting_write": self.count(Outcome::NoConflict),
                "overlaps_stale_accepted": self.count(Outcome::StaleAccepted),
                "unexplained_overlaps": self.overlaps.iter().filter(|o| o.explained_by.is_none()).count(),
                "overlaps_on_a_bare_redlock_majority": self.bare_majority_overlaps(),
                "overlaps_out_of_token_order": self.overlaps.iter().filter(|o| o.out_of_order).count(),
                "stale_tokens_accepted": self.stale_accepted,
                "sections_without_lock": self.violations,
                "worst_takeover_ms": self.worst_takeover().and_then(|t| t.after).map(|a| a as f64 / 1e6),
                "shard_leases": self.leases.len(),
                "shard_lease_slots": self.lease_slots(),
                "shard_leases_lost": self.leases_lost().0,
                "shard_leases_lost_on_healthy_shards": self.leases_lost().1,
            },
            "failures": self.failures,
            "faults": self.faults.iter().zip(&self.takeovers).map(|(f, t)| json!({
                "kind": f.kind.name(),
                "worker": f.hit.worker(),
                "master": match f.hit { Hit::Master(node) => Some(node), _ => None },
                "whole_store": f.hit == Hit::Store,
                "pid": f.pid,
                "start_s": rel(f.start),
                "end_s": rel(f.end),
                "serving_s": rel(f.serving),
                "start_unix_ns": f.start,
                "end_unix_ns": f.end,
                "detail": f.detail,
                "slots": f.slots,
                "takeover_ms": t.after.map(|a| a as f64 / 1e6),
                "takeover_superseded": t.superseded,
            })).collect::<Vec<_>>(),
            "overlaps": self.overlaps.iter().map(|o| {
                let (a, b) = (&self.holds[o.stale], &self.holds[o.newer]);
                json!({
                    "start_s": rel(o.start),
                    "end_s": rel(o.end),
                    "stale": {"worker": a.slot, "task": a.task, "token": a.token, "on_lease_lost": if a.continues { "continue" } else { "abort" }, "write_s": a.write.map(|w| rel(w.at)), "write_accepted": a.write.map(|w| w.accepted)},
                    "newer": {"worker": b.slot, "task": b.task, "token": b.token, "on_lease_lost": if b.continues { "continue" } else { "abort" }, "write_s": b.write.map(|w| rel(w.at)), "write_accepted": b.write.map(|w| w.accepted)},
                    "outcome": format!("{:?}", o.outcome),
                    "explained_by": o.explained_by.map(|f| self.faults[f].kind.name()),
                    "bare_redlock_majority": o.bare_majority,
                    "out_of_token_order": o.out_of_order,
                })
            }).collect::<Vec<_>>(),
            "leases_lost": self.leases.iter().filter(|l| l.lost.is_some()).map(|l| json!({
                "worker": l.slot,
                "key": l.key,
                "hash_slot": l.hash_slot,
                "ttl_ms": l.ttl / 1_000_000,
                "start_s": rel(l.start),
                "lost_s": rel(l.end),
                "reason": l.lost,
                "explained_by": l.explained_by.map(|f| self.faults[f].kind.name()),
            })).collect::<Vec<_>>(),
            "workers": self.incarnations.iter().map(|i| json!({
                "worker": i.slot,
                "incarnation": i.incarnation,
                "pid": i.pid,
                "killed": i.killed,
                "started_s": rel(i.started),
                "exit": i.exit,
            })).collect::<Vec<_>>(),
        })
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::time::Duration;

    use super::*;

    const S: u64 = 1_000_000_000;
    const MS: u64 = 1_000_000;

    fn config() -> Config {
        Config {
            quick: true,
            duration: Duration::from_secs(20),
            workers: 2,
            tasks: 1,
            seed: 1,
            json: None,
            svg: None,
            dir: None,
            margin: Duration::from_millis(500),
            topology: Topology::Single,
            masters: 3,
            faults: Vec::new(),
            keys: 0,
            fair: false,
        }
    }

    fn redlock_config() -> Config {
        Config {
            topology: Topology::Redlock,
            ..config()
        }
    }

    fn worker(dir: &Path, slot: usize, lines: &[String]) -> Incarnation {
        let log = dir.join(format!("w{slot}.log"));
        fs::write(&log, lines.join("\n")).expect("write the log");
        Incarnation {
            slot,
            incarnation: 0,
            pid: 100 + slot as u32,
            log,
            stderr: dir.join("none"),
            started: 0,
            ended: 20 * S,
            killed: false,
            exit: "exit status: 0".into(),
            clean_exit: true,
        }
    }

    /// Analyzes two workers' logs (`logs[0]`, `logs[1]`) with the resource's `journal`.
    fn two_workers(
        config: &Config,
        name: &str,
        logs: [Vec<String>; 2],
        faults: &[Fault],
        journal: Vec<Delivery>,
    ) -> Report {
        let dir =
            std::env::temp_dir().join(format!("lock-chaos-unit-{name}-{}", std::process::id()));
        fs::create_dir_all(&dir).expect("temp dir");
        let [a, b] = logs;
        let report = analyze(&Input {
            config,
            incarnations: &[worker(&dir, 0, &a), worker(&dir, 1, &b)],
            faults,
            problems: Vec::new(),
            t0: 0,
            t1: 20 * S,
            final_token: None,
            journal,
        })
        .expect("the logs parse");
        let _ = fs::remove_dir_all(&dir);
        report
    }

    /// Worker 0 enters at 1 s with token 10 and leaves at `stale_exit`, writing just before
    /// with `stale_accepted`, after worker 1's write (`stale_seq` 2) or before it (0); worker 1
    /// enters at 2 s with token 20, writes, leaves at 2.1 s. The resource's journal agrees.
    fn two_holders(
        name: &str,
        stale_exit: u64,
        stale_seq: u64,
        stale_accepted: u8,
        faults: &[Fault],
    ) -> Report {
        two_holders_on(
            &config(),
            name,
            stale_exit,
            stale_seq,
            stale_accepted,
            faults,
        )
    }

    fn two_holders_on(
        config: &Config,
        name: &str,
        stale_exit: u64,
        stale_seq: u64,
        stale_accepted: u8,
        faults: &[Fault],
    ) -> Report {
        two_holders_with_tokens(
            config,
            name,
            (10, 20),
            stale_exit,
            stale_seq,
            stale_accepted,
            faults,
        )
    }

    /// As `two_holders_on`, with the tokens of worker 0 and worker 1 given.
    fn two_holders_with_tokens(
        config: &Config,
        name: &str,
        (first, second): (u64, u64),
        stale_exit: u64,
        stale_seq: u64,
        stale_accepted: u8,
        faults: &[Fault],
    ) -> Report {
        let (stale_seq, newer_seq) = if stale_seq == 0 { (1, 2) } else { (2, 1) };
        let mut journal = vec![
            (
                stale_seq,
                Delivery {
                    token: first,
                    accepted: stale_accepted == 1,
                    at: stale_exit - MS,
                },
            ),
            (
                newer_seq,
                Delivery {
                    token: second,
                    accepted: true,
                    at: 2 * S + MS,
                },
            ),
        ];
        journal.sort_by_key(|(seq, _)| *seq);
        let stale = vec![
            format!("enter 0 1 {} {first} continue", S),
            format!(
                "write 0 1 {} {first} {stale_accepted} {stale_seq} 0",
                stale_exit - MS
            ),
            format!("exit 0 1 {stale_exit}"),
        ];
        let newer = vec![
            format!("enter 0 1 {} {second} abort", 2 * S),
            format!("write 0 1 {} {second} 1 {newer_seq} 1", 2 * S + MS),
            format!("exit 0 1 {}", 2 * S + 100 * MS),
            format!("enter 0 2 {} 30 abort", 5 * S),
            format!("exit 0 2 {}", 5 * S + 10 * MS),
        ];
        let journal = journal.into_iter().map(|(_, d)| d).collect();
        two_workers(config, name, [stale, newer], faults, journal)
    }

    fn pause_of_worker_0() -> Fault {
        Fault {
            kind: FaultKind::Pause,
            hit: Hit::Worker(0),
            pid: Some(100),
            start: S + MS,
            end: 2 * S + 500 * MS,
            serving: S + MS,
            detail: String::new(),
            slots: Vec::new(),
        }
    }

    /// A fault on the lock store or one of its masters from `start` to `end`, serving again at
    /// `serving`.
    fn store_fault(kind: FaultKind, hit: Hit, start: u64, end: u64, serving: u64) -> Fault {
        Fault {
            kind,
            hit,
            pid: None,
            start,
            end,
            serving,
            detail: String::new(),
            slots: Vec::new(),
        }
    }

    /// The overlap of `two_holders` runs from 2 s to 2.6 s: a fault from 1.5 s to 1.8 s is
    /// active around it.
    fn master_fault(node: usize) -> Fault {
        store_fault(
            FaultKind::RestartNoPersist,
            Hit::Master(node),
            1_500 * MS,
            1_800 * MS,
            1_500 * MS,
        )
    }

    /// The run failed, and one of its failures says `what`.
    fn assert_fails_with(report: &Report, what: &str) {
        assert!(
            report.failures.iter().any(|f| f.contains(what)),
            "{:?}",
            report.failures
        );
    }

    /// Worker 0 enters at 1 s with token 10 and gives up at `stale_exit` without logging a
    /// write (its body was dropped mid-write); worker 1 enters at 2 s with token 20, writes
    /// (seq 1) and leaves at 2.1 s. The resource's journal is `journal`; worker 0 was
    /// partitioned from 1.1 s to 2.9 s.
    fn delayed_write(name: &str, stale_exit: u64, journal: Vec<Delivery>) -> Report {
        let stale = vec![
            format!("enter 0 1 {} 10 abort", S),
            format!("exit 0 1 {stale_exit}"),
        ];
        let newer = vec![
            format!("enter 0 1 {} 20 abort", 2 * S),
            format!("write 0 1 {} 20 1 1 1", 2 * S + MS),
            format!("exit 0 1 {}", 2 * S + 100 * MS),
        ];
        let partition = Fault {
            kind: FaultKind::Partition,
            hit: Hit::Worker(0),
            pid: Some(100),
            start: 1_100 * MS,
            end: 2_900 * MS,
            serving: 1_100 * MS,
            detail: String::new(),
            slots: Vec::new(),
        };
        let name = format!("delayed-{name}");
        two_workers(&config(), &name, [stale, newer], &[partition], journal)
    }

    fn delivery(token: u64, accepted: bool, at: u64) -> Delivery {
        Delivery {
            token,
            accepted,
            at,
        }
    }

    /// A fault on one Redlock master at 1.5 s, while worker 0 holds the lock from 1 s and writes
    /// with its lease still held at `write`, leaving 10 ms later; worker 1 enters at 4 s.
    fn takeover_after_a_long_section(name: &str, write: u64) -> Report {
        let holder = vec![
            format!("enter 0 1 {} 10 abort", S),
            format!("write 0 1 {write} 10 1 1 1"),
            format!("exit 0 1 {}", write + 10 * MS),
        ];
        let next = vec![
            format!("enter 0 1 {} 20 abort", 4 * S),
            format!("write 0 1 {} 20 1 2 1", 4 * S + MS),
            format!("exit 0 1 {}", 4 * S + 100 * MS),
        ];
        let fault = store_fault(
            FaultKind::RestartPersist,
            Hit::Master(0),
            1_500 * MS,
            1_600 * MS,
            1_500 * MS,
        );
        let journal = vec![delivery(10, true, write), delivery(20, true, 4 * S + MS)];
        two_workers(&redlock_config(), name, [holder, next], &[fault], journal)
    }

    #[test]
    fn takeover_counts_from_when_a_holder_that_kept_its_lease_was_done() {
        // Held through the fault until 2.5 s: the next entry at 4 s is 1.5 s later.
        let report = takeover_after_a_long_section("takeover-held", 2_500 * MS);
        assert!(report.ok(), "{:?}", report.failures);
        assert_eq!(report.takeovers[0].after, Some(1_500 * MS));
        // Done at 1.2 s, before the fault: 2.5 s from the fault to the next entry is too long.
        let report = takeover_after_a_long_section("takeover-free", 1_200 * MS);
        assert_fails_with(&report, "taken again only after 2500 ms");
    }

    #[test]
    fn a_write_delayed_past_its_section_and_refused_by_fencing_is_counted_late() {
        let report = delayed_write(
            "refused",
            1_500 * MS,
            vec![delivery(20, true, 2 * S + MS), delivery(10, false, 3 * S)],
        );
        assert!(report.ok(), "{:?}", report.failures);
        assert!(report.overlaps.is_empty());
        assert_eq!(report.unlogged, vec![1]);
        assert_eq!(report.late, vec![1]);
        assert_eq!(report.refused(report.late.iter().copied()), 1);
    }

    #[test]
    fn an_overlap_whose_stale_write_was_never_logged_is_judged_by_the_journal() {
        let report = delayed_write(
            "overlap",
            2_500 * MS,
            vec![
                delivery(20, true, 2 * S + MS),
                delivery(10, false, 2_400 * MS),
            ],
        );
        assert!(report.ok(), "{:?}", report.failures);
        assert_eq!(report.overlaps.len(), 1);
        assert_eq!(report.overlaps[0].outcome, Outcome::Caught);
        assert_eq!(report.unlogged, vec![1]);
        assert!(
            report.late.is_empty(),
            "it arrived while its section still ran"
        );
    }

    #[test]
    fn a_stale_write_accepted_that_no_worker_logged_fails_the_run() {
        let report = delayed_write(
            "accepted",
            1_500 * MS,
            vec![delivery(20, true, 2 * S + MS), delivery(10, true, 3 * S)],
        );
        assert_eq!(report.stale_accepted, 1);
        assert_fails_with(&report, "accepted 1 stale tokens");
    }

    #[test]
    fn a_logged_write_missing_from_the_resources_journal_fails_the_run() {
        let report = delayed_write("missing", 1_500 * MS, Vec::new());
        assert_fails_with(&report, "not in the resource's journal");
    }

    #[test]
    fn the_journal_parses_and_a_bad_entry_is_an_error() {
        let entries = ["20 1 2000000001".to_owned(), "10 0 3000000000".to_owned()];
        assert_eq!(
            parse_journal(&entries),
            Ok(vec![
                delivery(20, true, 2_000_000_001),
                delivery(10, false, 3 * S)
            ])
        );
        assert!(parse_journal(&["20 1".to_owned()]).is_err());
        assert!(parse_journal(&["x 1 5".to_owned()]).is_err());
    }

    #[test]
    fn an_overlap_without_a_fault_fails_the_run() {
        let report = two_holders("unexplained", 2 * S + 600 * MS, 2, 0, &[]);
        assert_eq!(report.overlaps.len(), 1);
        assert!(!report.ok());
        assert_fails_with(&report, "no fault to explain");
    }

    #[test]
    fn an_overlap_during_a_pause_caught_by_fencing_passes() {
        let report = two_holders("caught", 2 * S + 600 * MS, 2, 0, &[pause_of_worker_0()]);
        assert_eq!(report.overlaps.len(), 1);
        assert_eq!(report.overlaps[0].outcome, Outcome::Caught);
        assert_eq!(report.overlaps[0].explained_by, Some(0));
        assert!(report.ok(), "{:?}", report.failures);
    }

    #[test]
    fn a_stale_write_that_was_accepted_fails_the_run() {
        let report = two_holders("stale", 2 * S + 600 * MS, 2, 1, &[pause_of_worker_0()]);
        assert_eq!(report.overlaps[0].outcome, Outcome::StaleAccepted);
        assert_eq!(report.stale_accepted, 1);
        assert!(!report.ok());
    }

    /// Worker 1 comes in at 2 s with token 10 while worker 0 holds token 20 from 1 s, and
    /// worker 0 writes last (accepted, its token being the higher).
    fn crossed_holders(name: &str, faults: &[Fault]) -> Report {
        two_holders_with_tokens(&config(), name, (20, 10), 2 * S + 600 * MS, 2, 1, faults)
    }

    #[test]
    fn holders_out_of_token_order_during_a_failover_pass_when_fencing_orders_their_writes() {
        let failover = store_fault(
            FaultKind::FailoverPause,
            Hit::Store,
            1_500 * MS,
            2_100 * MS,
            1_900 * MS,
        );
        let report = crossed_holders("crossed-failover", &[failover]);
        assert_eq!(report.overlaps.len(), 1);
        let overlap = &report.overlaps[0];
        assert!(overlap.out_of_order);
        // The stale holder is worker 1, with the lower token; its write came first.
        assert_eq!(report.holds[overlap.stale].token, 10);
        assert_eq!(overlap.outcome, Outcome::InOrder);
        assert!(report.ok(), "{:?}", report.failures);
    }

    #[test]
    fn holders_out_of_token_order_without_a_failover_fail_the_run() {
        let report = crossed_holders("crossed-pause", &[pause_of_worker_0()]);
        assert!(report.overlaps[0].out_of_order);
        assert_fails_with(&report, "fencing order");
    }

    #[test]
    fn a_fault_on_another_worker_does_not_explain_an_overlap() {
        let mut fault = pause_of_worker_0();
        fault.hit = Hit::Worker(1);
        let report = two_holders("other", 2 * S + 600 * MS, 2, 0, &[fault]);
        assert_eq!(report.overlaps[0].explained_by, None);
        assert!(!report.ok());
    }

    #[test]
    fn a_lock_not_taken_again_within_ttl_and_margin_fails_the_run() {
        let mut fault = pause_of_worker_0();
        // The next section after 2.2 s starts at 5 s: 2.8 s later, over 1 s + 500 ms.
        fault.start = 2 * S + 200 * MS;
        fault.end = 2 * S + 300 * MS;
        fault.serving = fault.start;
        fault.hit = Hit::Worker(1);
        let report = two_holders("takeover", 1_500 * MS, 0, 1, &[fault]);
        assert!(report.overlaps.is_empty());
        assert_fails_with(&report, "taken again only after");
    }

    /// A fault on master `node` from 0.5 s to 0.8 s: before worker 0 took the lock at 1 s, and
    /// active around the overlap (0.8 s + 1.5 s reaches past 2 s).
    fn master_fault_before_the_hold(node: usize) -> Fault {
        store_fault(
            FaultKind::RestartNoPersist,
            Hit::Master(node),
            500 * MS,
            800 * MS,
            500 * MS,
        )
    }

    #[test]
    fn a_fault_on_one_redlock_master_before_the_lock_was_taken_explains_nothing() {
        let report = two_holders_on(
            &redlock_config(),
            "one-master",
            2 * S + 600 * MS,
            2,
            0,
            &[master_fault_before_the_hold(1)],
        );
        assert_eq!(report.overlaps.len(), 1);
        assert_eq!(report.overlaps[0].explained_by, None);
        assert!(!report.ok());
    }

    #[test]
    fn two_faults_on_the_same_redlock_master_are_still_a_minority() {
        let mut again = master_fault_before_the_hold(1);
        again.kind = FaultKind::NodePause;
        again.start += 100 * MS;
        let report = two_holders_on(
            &redlock_config(),
            "same-master",
            2 * S + 600 * MS,
            2,
            0,
            &[master_fault_before_the_hold(1), again],
        );
        assert_eq!(report.overlaps[0].explained_by, None);
        assert!(!report.ok());
    }

    #[test]
    fn a_fault_on_one_redlock_master_while_the_lock_was_held_explains_a_bare_majority() {
        // 1.5 s: after worker 0 took the lock (1 s), before worker 1 came in (2 s).
        let report = two_holders_on(
            &redlock_config(),
            "bare-majority",
            2 * S + 600 * MS,
            2,
            0,
            &[master_fault(1)],
        );
        assert_eq!(report.overlaps[0].explained_by, Some(0));
        assert!(report.overlaps[0].bare_majority);
        assert!(report.ok(), "{:?}", report.failures);
        // After the newer holder came in, it explains nothing.
        let mut late = master_fault(1);
        late.start = 2 * S + 100 * MS;
        late.end = 2 * S + 200 * MS;
        late.serving = late.start;
        let report = two_holders_on(
            &redlock_config(),
            "bare-majority-late",
            2 * S + 600 * MS,
            2,
            0,
            &[late],
        );
        assert_eq!(report.overlaps[0].explained_by, None);
    }

    #[test]
    fn faults_on_a_majority_of_redlock_masters_together_explain_an_overlap() {
        let mut second = master_fault(2);
        second.start += 100 * MS;
        let report = two_holders_on(
            &redlock_config(),
            "majority",
            2 * S + 600 * MS,
            2,
            0,
            &[master_fault(0), second],
        );
        // The later of the two is named, and no bare majority is needed.
        assert_eq!(report.overlaps[0].explained_by, Some(1));
        assert!(!report.overlaps[0].bare_majority);
        assert!(report.ok(), "{:?}", report.failures);
    }

    #[test]
    fn faults_on_a_majority_of_masters_explain_nothing_once_over() {
        // Both ended at 0.49 s: their windows closed at 1.99 s, before the overlap at 2 s.
        let old = |node| {
            store_fault(
                FaultKind::NodePause,
                Hit::Master(node),
                100 * MS,
                490 * MS,
                100 * MS,
            )
        };
        let report = two_holders_on(
            &redlock_config(),
            "majority-over",
            2 * S + 600 * MS,
            2,
            0,
            &[old(0), old(1)],
        );
        assert_eq!(report.overlaps[0].explained_by, None);
        assert!(!report.ok());
    }

    #[test]
    fn a_failover_explains_an_overlap_until_a_lease_and_the_margin_after_its_end() {
        let failover = |end| store_fault(FaultKind::FailoverKill, Hit::Store, S + MS, end, end);
        // Ended at 1.2 s: its window reaches 1.2 + 1 + 0.5 = 2.7 s, past the overlap's start.
        let report = two_holders("failover", 2 * S + 600 * MS, 2, 0, &[failover(1_200 * MS)]);
        assert_eq!(report.overlaps[0].explained_by, Some(0));
        assert!(report.ok(), "{:?}", report.failures);
        // Ended at 0.4 s: the window closed at 1.9 s, before the overlap.
        let mut early = failover(400 * MS);
        early.start = 100 * MS;
        let report = two_holders("failover-early", 2 * S + 600 * MS, 2, 0, &[early]);
        assert_eq!(report.overlaps[0].explained_by, None);
    }

    /// A worker killed at 2.15 s, when the lock was free; the next section starts at 5 s.
    fn kill_at_2_15s() -> Fault {
        Fault {
            kind: FaultKind::Kill,
            hit: Hit::Worker(1),
            pid: Some(101),
            start: 2_150 * MS,
            end: 2_150 * MS,
            serving: 2_150 * MS,
            detail: String::new(),
            slots: Vec::new(),
        }
    }

    #[test]
    fn a_failover_that_began_before_the_takeover_was_due_takes_the_takeover_over() {
        // Alone, the kill's takeover (2.85 s) is too long.
        let report = two_holders("kill-alone", 1_500 * MS, 0, 1, &[kill_at_2_15s()]);
        assert_fails_with(&report, "taken again only after 2850 ms");
        // A failover from 2.8 s, serving again at 4.9 s, held everyone out meanwhile: the wait is
        // the failover's, 100 ms after the store served again.
        let failover = store_fault(
            FaultKind::FailoverPause,
            Hit::Store,
            2_800 * MS,
            5 * S + 200 * MS,
            4_900 * MS,
        );
        let report = two_holders(
            "kill-then-failover",
            1_500 * MS,
            0,
            1,
            &[kill_at_2_15s(), failover],
        );
        assert!(report.ok(), "{:?}", report.failures);
        assert!(report.takeovers[0].superseded);
        assert_eq!(report.takeovers[1].after, Some(100 * MS));
        // A later fault of a worker does not hold the store: it takes nothing over.
        let mut pause = pause_of_worker_0();
        pause.start = 2_800 * MS;
        pause.serving = 2_800 * MS;
        let report = two_holders(
            "kill-then-pause",
            1_500 * MS,
            0,
            1,
            &[kill_at_2_15s(), pause],
        );
        assert_fails_with(&report, "taken again only after 2850 ms");
    }

    #[test]
    fn the_takeover_after_a_failover_counts_from_when_the_store_served_again() {
        // The lock is free from 2.1 s; the next section starts at 5 s. The replica was promoted
        // at 4.8 s: 200 ms later is in time, though the failover started 2.8 s before.
        let failover = store_fault(
            FaultKind::FailoverPause,
            Hit::Store,
            2 * S + 200 * MS,
            5 * S + 500 * MS,
            4 * S + 800 * MS,
        );
        let report = two_holders("failover-takeover", 1_500 * MS, 0, 1, &[failover]);
        assert!(report.overlaps.is_empty());
        assert_eq!(report.takeovers[0].after, Some(200 * MS));
        assert!(report.ok(), "{:?}", report.failures);
    }
    fn many_keys_config() -> Config {
        Config {
            topology: Topology::Cluster,
            keys: 2,
            ..config()
        }
    }

    /// Two cluster masters' slots, as `redis-cli --cluster create` splits them over three.
    const FIRST_SHARD: (u16, u16) = (0, 5460);
    const SECOND_SHARD: (u16, u16) = (5461, 10922);

    /// A freeze of one Cluster master (`hit`: `Store` if it serves the lock) serving `slots`,
    /// from `start` to `end`.
    fn stall(kind: FaultKind, hit: Hit, slots: (u16, u16), start: u64, end: u64) -> Fault {
        Fault {
            slots: vec![slots],
            ..store_fault(kind, hit, start, end, start)
        }
    }

    /// Worker 0 holds a 1 s lease in hash slot `hash_slot` from 2 s until it is reported lost
    /// at 3 s, and another in the same slot kept from 2 s to 4 s. Both workers take the main
    /// lock in turn, at 1 s, 2 s and 3.2 s, so every fault from 1.7 s on has its takeover.
    fn lease_lost(name: &str, hash_slot: u16, faults: &[Fault]) -> Report {
        let worker_0 = vec![
            format!("enter 0 1 {S} 10 abort"),
            format!("exit 0 1 {}", S + 10 * MS),
            format!("lease 3 {hash_slot} {S} {} {} lost Expired", 2 * S, 3 * S),
            format!("lease 4 {hash_slot} {S} {} {} kept", 2 * S, 4 * S),
        ];
        let worker_1 = vec![
            format!("enter 0 1 {} 20 abort", 2 * S),
            format!("exit 0 1 {}", 2 * S + 10 * MS),
            format!("enter 0 2 {} 30 abort", 3_200 * MS),
            format!("exit 0 2 {}", 3_210 * MS),
        ];
        let report = two_workers(
            &many_keys_config(),
            name,
            [worker_0, worker_1],
            faults,
            Vec::new(),
        );
        assert_eq!(report.leases.len(), 2, "both leases are read back");
        report
    }

    fn lost_lease_explained_by(report: &Report) -> Option<FaultKind> {
        let lost = report.leases.iter().find(|l| l.lost.is_some());
        lost.and_then(|l| l.explained_by)
            .map(|f| report.faults[f].kind)
    }

    #[test]
    fn a_lease_lost_while_another_shard_was_stalled_fails_the_run() {
        let other = stall(
            FaultKind::ShardStall,
            Hit::Shard,
            SECOND_SHARD,
            2_500 * MS,
            3_200 * MS,
        );
        let report = lease_lost("lease-healthy-shard", 100, &[other]);
        assert_fails_with(&report, "1 leases on a healthy shard were reported lost");
        assert_eq!(lost_lease_explained_by(&report), None);
    }

    #[test]
    fn a_lease_lost_while_its_own_shard_was_stalled_passes() {
        let own = stall(
            FaultKind::ShardStall,
            Hit::Shard,
            FIRST_SHARD,
            2_500 * MS,
            3_200 * MS,
        );
        let report = lease_lost("lease-own-shard", 100, &[own]);
        assert!(report.ok(), "{:?}", report.failures);
        assert_eq!(
            lost_lease_explained_by(&report),
            Some(FaultKind::ShardStall)
        );
    }

    #[test]
    fn a_node_pause_of_the_locks_master_explains_lost_leases_in_its_slots_only() {
        let lock_master = stall(
            FaultKind::NodePause,
            Hit::Store,
            FIRST_SHARD,
            2_500 * MS,
            3_200 * MS,
        );
        let report = lease_lost(
            "lease-node-pause-own",
            5460,
            std::slice::from_ref(&lock_master),
        );
        assert!(report.ok(), "{:?}", report.failures);
        let report = lease_lost("lease-node-pause-other", 5461, &[lock_master]);
        assert_fails_with(&report, "healthy shard");
    }

    #[test]
    fn a_stall_of_its_shard_over_for_longer_than_a_lease_explains_no_lost_lease() {
        // Over at 1.2 s: renewals went through again long before the loss at 3 s (the lease's
        // ttl of 1 s and the 500 ms margin end at 2.7 s).
        let own = stall(
            FaultKind::ShardStall,
            Hit::Shard,
            FIRST_SHARD,
            800 * MS,
            1_200 * MS,
        );
        let report = lease_lost("lease-stall-long-over", 100, &[own]);
        assert_fails_with(&report, "healthy shard");
    }

    #[test]
    fn a_failover_explains_lost_leases_on_every_shard() {
        // Between the failure detection and the promotion the whole cluster refuses requests.
        let failover = store_fault(
            FaultKind::FailoverKill,
            Hit::Store,
            2_500 * MS,
            3_400 * MS,
            2_900 * MS,
        );
        let report = lease_lost("lease-failover", 9000, &[failover]);
        assert!(report.ok(), "{:?}", report.failures);
        assert_eq!(
            lost_lease_explained_by(&report),
            Some(FaultKind::FailoverKill)
        );
    }

    #[test]
    fn only_a_pause_of_the_leases_own_worker_explains_its_loss() {
        let pause = |slot: usize| Fault {
            hit: Hit::Worker(slot),
            pid: Some(100 + slot as u32),
            ..store_fault(
                FaultKind::Pause,
                Hit::Store,
                2_200 * MS,
                2_900 * MS,
                2_200 * MS,
            )
        };
        let report = lease_lost("lease-own-worker-paused", 100, &[pause(0)]);
        assert!(report.ok(), "{:?}", report.failures);
        assert_eq!(lost_lease_explained_by(&report), Some(FaultKind::Pause));
        let report = lease_lost("lease-other-worker-paused", 100, &[pause(1)]);
        assert_fails_with(&report, "healthy shard");
    }

    #[test]
    fn lease_lines_parse_and_a_bad_one_is_an_error() {
        let dir =
            std::env::temp_dir().join(format!("lock-chaos-unit-bad-lease-{}", std::process::id()));
        fs::create_dir_all(&dir).expect("temp dir");
        let bad = worker(&dir, 0, &[format!("lease 1 100 {S} 0 {S} vanished")]);
        let outcome = analyze(&Input {
            config: &many_keys_config(),
            incarnations: &[bad],
            faults: &[],
            problems: Vec::new(),
            t0: 0,
            t1: 20 * S,
            final_token: None,
            journal: Vec::new(),
        });
        let _ = fs::remove_dir_all(&dir);
        assert!(outcome.is_err_and(|e| e.contains("bad worker log line")));
    }
}
