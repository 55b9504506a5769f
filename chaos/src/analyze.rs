//! Reads the workers' logs and the fault log back and checks the invariants.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs;
use std::path::PathBuf;

use serde_json::{Value, json};

use crate::deployment::Topology;
use crate::{Config, Mode, TTL};

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
    /// PostgreSQL: the postmaster and every backend SIGKILLed, the server started again on its
    /// data through crash recovery.
    ServerCrash,
    /// PostgreSQL: backends ended with `pg_terminate_backend` (a worker's own, found by its
    /// `application_name`, or behind PgBouncer every backend of the lock role).
    Terminate,
    /// PgBouncer SIGKILLed and started again on its port: every client connection drops.
    PoolerRestart,
}

impl FaultKind {
    pub(crate) const ALL: [FaultKind; 16] = [
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
        FaultKind::ServerCrash,
        FaultKind::Terminate,
        FaultKind::PoolerRestart,
    ];

    pub(crate) fn parse(name: &str) -> Result<Self, String> {
        FaultKind::ALL
            .into_iter()
            .find(|kind| kind.name() == name)
            .ok_or_else(|| format!("unknown fault kind {name}"))
    }

    /// A replica promoted while the master was killed or frozen: the master's last
    /// acknowledged writes may never have reached it, the fence counter's last increments
    /// among them, so the tokens those handed out are handed out again (docs/GUARANTEES.md's "a
    /// failover that lost them"; `wait_for_replicas` is what prevents it).
    pub(crate) fn may_lose_writes(self) -> bool {
        matches!(self, FaultKind::FailoverKill | FaultKind::FailoverPause)
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
            FaultKind::ServerCrash => "server-crash",
            FaultKind::Terminate => "terminate",
            FaultKind::PoolerRestart => "pooler-restart",
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

/// A section's operation on the resource: a write, or in rw mode a reader's read.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Write {
    pub(crate) at: u64,
    pub(crate) accepted: bool,
    pub(crate) seq: u64,
    pub(crate) held: bool,
    /// A read: the resource's value it was answered (the token of the last write accepted).
    pub(crate) seen: Option<u64>,
}

/// One write as the resource saw it, from its journal (the `n`th entry is write `seq` n + 1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Delivery {
    pub(crate) token: u64,
    pub(crate) accepted: bool,
    /// The sender's clock when it sent the operation (wall-clock ns, comparable with the
    /// workers' logs: every process runs on this machine).
    pub(crate) at: u64,
    /// A reader's read (rw mode), not a write.
    pub(crate) read: bool,
}

/// Reads the resource's journal: one `<token> <accepted 0|1> <ns>` entry per write, in order,
/// ` r` after a read.
pub(crate) fn parse_journal(entries: &[String]) -> Result<Vec<Delivery>, String> {
    entries
        .iter()
        .map(|entry| {
            let parts: Vec<&str> = entry.split_whitespace().collect();
            let bad = || format!("bad resource journal entry: {entry}");
            let (token, accepted, at, read) = match parts[..] {
                [token, accepted, at] => (token, accepted, at, false),
                [token, accepted, at, "r"] => (token, accepted, at, true),
                _ => return Err(bad()),
            };
            Ok(Delivery {
                token: token.parse().map_err(|_| bad())?,
                accepted: accepted == "1",
                at: at.parse().map_err(|_| bad())?,
                read,
            })
        })
        .collect()
}

/// What a section held.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Role {
    /// The lock.
    Exclusive,
    /// A read share of the read-write lock.
    Read,
    /// The write hold of the read-write lock.
    Write,
    /// A permit of the semaphore.
    Permit,
}

impl Role {
    fn parse(tag: Option<&str>) -> Self {
        match tag {
            Some("read") => Role::Read,
            Some("write") => Role::Write,
            Some("permit") => Role::Permit,
            _ => Role::Exclusive,
        }
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            Role::Exclusive => "exclusive",
            Role::Read => "read",
            Role::Write => "write",
            Role::Permit => "permit",
        }
    }
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
    pub(crate) role: Role,
    /// Its operation on the resource (none for a semaphore's permit).
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
    /// The newer one's operation reached the resource and was refused: a token above it had
    /// been accepted before, which only tokens out of order make possible.
    pub(crate) newer_refused: bool,
    pub(crate) start: u64,
    pub(crate) end: u64,
    pub(crate) outcome: Outcome,
    /// The fault that explains it (index into `faults`).
    pub(crate) explained_by: Option<usize>,
    /// Explained by a fault on a minority of Redlock masters, which takes the lock only from a
    /// holder that had it on a bare majority (see `explanation`).
    pub(crate) bare_majority: bool,
}

impl Overlap {
    /// A failover that may have lost the counter's last writes explains it, and the tokens
    /// went down: the newer holder got the lower token, or its operation was refused for a
    /// token above it accepted before. The fencing guarantee leaves that out.
    pub(crate) fn after_lost_writes(&self, faults: &[Fault]) -> bool {
        (self.out_of_order || self.newer_refused)
            && self
                .explained_by
                .is_some_and(|f| faults[f].kind.may_lose_writes())
    }
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

/// Semaphore mode: a moment a holder came in while all the permits were held already.
#[derive(Clone, Debug)]
pub(crate) struct Excess {
    /// When the holder one too many came in, and when the first of them left.
    pub(crate) start: u64,
    pub(crate) end: u64,
    /// Indices into `holds`: those inside, the one that came in last included.
    pub(crate) holders: Vec<usize>,
    /// The fault that explains it (index into `faults`): one that could have taken the lease
    /// of a holder that was inside before.
    pub(crate) explained_by: Option<usize>,
}

/// How much the holders shared the primitive: readers in rw mode, permit holders in
/// semaphore mode (nobody in exclusive mode, where sharing is an overlap).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Sharing {
    /// Pairs of sections of different tasks that were inside together.
    pub(crate) pairs: usize,
    /// The most sections inside at one moment.
    pub(crate) most_at_once: usize,
    /// How long (ns) two or more were inside together.
    pub(crate) shared_ns: u64,
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
    /// Semaphore mode: more holders than permits at once.
    pub(crate) excess: Vec<Excess>,
    pub(crate) sharing: Sharing,
    /// Semaphore mode: fencing tokens that two sections were given, each with the failover
    /// that lost the counter's writes, if one explains it (index into `faults`).
    pub(crate) duplicate_tokens: Vec<Option<usize>>,
    /// Rw mode: accepted reads whose value was written by a writer whose section overlaps
    /// the reader's.
    pub(crate) dirty_reads: usize,
    pub(crate) errors: BTreeMap<String, u64>,
    pub(crate) violations: u64,
    pub(crate) stale_accepted: u64,
    pub(crate) journal: Vec<Delivery>,
    /// Journal entries no worker logged: the writer died or gave up before the answer came.
    pub(crate) unlogged: Vec<usize>,
    /// Of those, the ones whose entry is timed after the section that sent them had ended.
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
                    role: Role::parse(parts.get(6).copied()),
                    write: None,
                });
            }
            Some(op @ ("write" | "read")) => {
                let key = (field(&parts, 1, line)?, field(&parts, 2, line)?);
                if let Some(&i) = open.get(&key) {
                    holds[i].write = Some(Write {
                        at: field(&parts, 3, line)?,
                        accepted: field::<u8>(&parts, 5, line)? == 1,
                        seq: field(&parts, 6, line)?,
                        held: field::<u8>(&parts, 7, line)? == 1,
                        seen: if op == "read" {
                            Some(field(&parts, 8, line)?)
                        } else {
                            None
                        },
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
                // No mode takes a lock while holding another, so no wait can be part of a
                // deadlock: one reported is a false one.
                if kind == "deadlock" {
                    violations += 1;
                }
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
    // nobody lived or waited to log): an accepted write's token is higher than every token
    // accepted before it, a reader's included, and an accepted read's higher than every
    // accepted write's before it.
    let journal = &input.journal;
    let stale_accepted = stale_in(journal);
    let highest = journal
        .iter()
        .filter(|d| d.accepted)
        .map(|d| d.token)
        .max()
        .unwrap_or(0);
    let disagree = holds
        .iter()
        .filter_map(|h| h.write.map(|w| (w, h.token)))
        .filter(|(w, token)| {
            let entry = (w.seq as usize).checked_sub(1).and_then(|i| journal.get(i));
            entry.is_none_or(|d| {
                d.token != *token || d.accepted != w.accepted || d.read != w.seen.is_some()
            })
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

    // Every pair of sections of different tasks that intersect, but for two readers (which
    // share) and a semaphore's holders (which are counted instead).
    let mut overlaps = Vec::new();
    let mut reader_pairs = 0;
    let pairs = if input.config.mode == Mode::Semaphore {
        0
    } else {
        holds.len()
    };
    for i in 0..pairs {
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
            if first.role == Role::Read && second.role == Role::Read {
                reader_pairs += 1;
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
                // Refused by the fence, before or after the newer holder's own operation: a
                // claim (the newer one's, or a later holder's) shut it out.
                (Some(sw), _) if !journal[sw].accepted => Outcome::Caught,
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
            let newer_refused = delivered.by_hold[newer].is_some_and(|nw| !journal[nw].accepted);
            overlaps.push(Overlap {
                stale,
                newer,
                start,
                end,
                outcome,
                out_of_order,
                newer_refused,
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
    // A stale write accepted because a failover lost the counter's last writes and handed
    // the newer holder a lower token is outside the fencing guarantee, which says so; any
    // other is a failure.
    let uncaught = overlaps
        .iter()
        .filter(|o| o.outcome == Outcome::StaleAccepted && !o.after_lost_writes(input.faults))
        .count();
    if uncaught > 0 {
        failures.push(format!(
            "{uncaught} overlaps where the stale holder's later write was accepted"
        ));
    }

    let grace = ttl + margin;
    let excess = if input.config.mode == Mode::Semaphore {
        over_capacity(&holds, input.faults, input.config, grace)
    } else {
        Vec::new()
    };
    let unexplained = excess.iter().filter(|e| e.explained_by.is_none()).count();
    if unexplained > 0 {
        failures.push(format!(
            "{unexplained} times more than {} holders of the semaphore at once, with no fault to explain it",
            input.config.permits
        ));
    }
    let duplicate_tokens = if input.config.mode == Mode::Semaphore {
        duplicates(&holds, input.faults, grace)
    } else {
        Vec::new()
    };
    let unexplained_duplicates = duplicate_tokens.iter().filter(|d| d.is_none()).count();
    if unexplained_duplicates > 0 {
        failures.push(format!(
            "{unexplained_duplicates} fencing tokens were handed out to two sections, with no \
             failover that could lose the counter's writes to explain it"
        ));
    }
    let sharing = sharing(&holds, input.config.mode, reader_pairs);
    let dirty_reads = dirty_reads(&holds);

    // After each fault someone holds the lock again within the limit (semaphore mode: every
    // permit is held again).
    let taken = Taken::new(input.config, &holds);
    let limit = input.config.takeover_limit().as_nanos() as u64;
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
        let again = taken.at(from);
        let after = again.map(|at| at - from);
        // A later fault that made the store unavailable (a failover, a restart) before the lock
        // was taken again within the limit holds everyone out itself: the wait is then judged
        // by that fault's own takeover, counted from when the store served again.
        let deadline = from + limit;
        let superseded = input.faults[k + 1..].iter().any(|later| {
            later.pid.is_none()
                && later.serving > later.start
                && later.start < deadline
                && again.is_none_or(|entered| later.start < entered)
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
            Some(after) if after <= limit => {}
            Some(after) => failures.push(format!(
                "after {} at {:.2}s the lock was taken again only after {} ms, counted from {:.2}s (limit {} ms)",
                f.kind.name(),
                (f.start.saturating_sub(input.t0)) as f64 / 1e9,
                after / 1_000_000,
                (from.saturating_sub(input.t0)) as f64 / 1e9,
                limit / 1_000_000
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
        excess,
        sharing,
        duplicate_tokens,
        dirty_reads,
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

/// Journal entries accepted although stale: a write whose token is not higher than every
/// token accepted before it, a read whose token is not higher than every write's accepted
/// before it. (In exclusive mode there are only writes: accepted tokens rise strictly.)
fn stale_in(journal: &[Delivery]) -> u64 {
    let (mut highest, mut highest_write, mut stale) = (0, 0, 0);
    for d in journal.iter().filter(|d| d.accepted) {
        let floor = if d.read { highest_write } else { highest };
        if d.token <= floor {
            stale += 1;
        }
        highest = highest.max(d.token);
        if !d.read {
            highest_write = highest_write.max(d.token);
        }
    }
    stale
}

/// How many sections were inside from each moment on: `(time, count)` steps in time order, a
/// section that leaves counted before one that comes in at the same nanosecond.
fn steps<'a>(holds: impl Iterator<Item = &'a Hold>) -> Vec<(u64, usize)> {
    let mut events: Vec<(u64, bool)> = holds
        .flat_map(|h| [(h.enter, true), (h.exit, false)])
        .collect();
    events.sort_unstable();
    let mut inside = 0usize;
    events
        .into_iter()
        .map(|(at, enters)| {
            inside = if enters {
                inside + 1
            } else {
                inside.saturating_sub(1)
            };
            (at, inside)
        })
        .collect()
}

/// Readers' sharing in rw mode, permit holders' in semaphore mode.
fn sharing(holds: &[Hold], mode: Mode, reader_pairs: usize) -> Sharing {
    let shares = |h: &&Hold| match mode {
        Mode::ReadWrite => h.role == Role::Read,
        Mode::Semaphore => true,
        Mode::Exclusive => false,
    };
    let steps = steps(holds.iter().filter(shares));
    let shared_ns = steps
        .windows(2)
        .filter(|w| w[0].1 >= 2)
        .map(|w| w[1].0 - w[0].0)
        .sum();
    let pairs = match mode {
        Mode::Semaphore => overlapping_pairs(holds),
        Mode::ReadWrite | Mode::Exclusive => reader_pairs,
    };
    Sharing {
        pairs,
        most_at_once: steps.iter().map(|s| s.1).max().unwrap_or(0),
        shared_ns,
    }
}

/// Pairs of sections (sorted by enter) of different tasks whose [enter, exit] intersect.
fn overlapping_pairs(holds: &[Hold]) -> usize {
    let mut pairs = 0;
    for (i, first) in holds.iter().enumerate() {
        pairs += holds[i + 1..]
            .iter()
            .take_while(|second| second.enter < first.exit)
            .filter(|second| {
                (second.slot, second.incarnation, second.task)
                    != (first.slot, first.incarnation, first.task)
            })
            .count();
    }
    pairs
}

/// Semaphore mode: each time a section came in while `permits` others were inside. It is
/// explained when a fault could have taken the lease of one of those that were inside before
/// (the same faults as for an overlap of the lock's holders, see [`explanation`]).
fn over_capacity(holds: &[Hold], faults: &[Fault], config: &Config, grace: u64) -> Vec<Excess> {
    let permits = config.permits as usize;
    let mut inside: Vec<usize> = Vec::new();
    let mut excess = Vec::new();
    for (j, h) in holds.iter().enumerate() {
        inside.retain(|&i| holds[i].exit > h.enter);
        if inside.len() >= permits {
            let end = inside.iter().map(|&i| holds[i].exit).fold(h.exit, u64::min);
            let explained_by = inside.iter().find_map(|&i| {
                explanation(faults, &holds[i], (h.enter, end), grace, config.quorum())
                    .map(|(fault, _)| fault)
            });
            let mut holders = inside.clone();
            holders.push(j);
            excess.push(Excess {
                start: h.enter,
                end,
                holders,
                explained_by,
            });
        }
        inside.push(j);
    }
    excess
}

/// Semaphore mode: each fencing token given to two sections, with the failover that explains
/// it (index into `faults`), if one does: a failover that may have lost the master's last
/// writes, begun before the later section entered, that the earlier one entered before it
/// ended, and that the later one entered within `grace` of its end.
fn duplicates(holds: &[Hold], faults: &[Fault], grace: u64) -> Vec<Option<usize>> {
    let mut by_token: Vec<usize> = (0..holds.len()).collect();
    by_token.sort_unstable_by_key(|&i| (holds[i].token, holds[i].enter));
    by_token
        .windows(2)
        .filter(|pair| holds[pair[0]].token == holds[pair[1]].token)
        .map(|pair| {
            let (earlier, later) = (&holds[pair[0]], &holds[pair[1]]);
            lost_writes_between(faults, earlier.enter, later.enter, grace)
        })
        .collect()
}

/// The failover that may have lost the counter's writes between a section entered at
/// `earlier` and one entered at `later` (see [`duplicates`]).
fn lost_writes_between(faults: &[Fault], earlier: u64, later: u64, grace: u64) -> Option<usize> {
    faults.iter().position(|f| {
        f.kind.may_lose_writes()
            && f.start <= later
            && earlier <= f.end
            && later <= f.end.saturating_add(grace)
    })
}

/// Rw mode: accepted reads that saw the value of a writer whose section overlaps the
/// reader's (each is also an overlap of the two, judged as such).
fn dirty_reads(holds: &[Hold]) -> usize {
    let writers: HashMap<u64, &Hold> = holds
        .iter()
        .filter(|h| h.role == Role::Write)
        .map(|h| (h.token, h))
        .collect();
    holds
        .iter()
        .filter(|h| h.role == Role::Read)
        .filter_map(|h| {
            let seen = h.write.filter(|r| r.accepted)?.seen?;
            Some((h, writers.get(&seen)?))
        })
        .filter(|(reader, writer)| writer.enter < reader.exit && reader.enter < writer.exit)
        .count()
}

/// When the primitive is taken again after a moment: the lock, or the read-write lock in either
/// mode, by a section that comes in; a semaphore once every permit is held again.
enum Taken {
    /// The sections' enter times, sorted.
    Enters(Vec<u64>),
    /// How many sections were inside, and the number that means every permit.
    Full(Vec<(u64, usize)>, usize),
}

impl Taken {
    fn new(config: &Config, holds: &[Hold]) -> Self {
        match config.mode {
            // In rw mode a reader coming in counts: a writer may rightly wait behind a long
            // reader that came in before it asked.
            Mode::Exclusive | Mode::ReadWrite => {
                let mut enters: Vec<u64> = holds.iter().map(|h| h.enter).collect();
                enters.sort_unstable();
                Taken::Enters(enters)
            }
            Mode::Semaphore => Taken::Full(steps(holds.iter()), config.permits as usize),
        }
    }

    /// The first moment after `from` the primitive is taken again (`from` itself for a
    /// semaphore whose permits are all held then).
    fn at(&self, from: u64) -> Option<u64> {
        match self {
            Taken::Enters(enters) => enters.get(enters.partition_point(|&e| e <= from)).copied(),
            Taken::Full(steps, permits) => {
                let next = steps.partition_point(|&(at, _)| at <= from);
                let now = next.checked_sub(1).map_or(0, |i| steps[i].1);
                if now >= *permits {
                    return Some(from);
                }
                steps[next..]
                    .iter()
                    .find(|&&(_, inside)| inside >= *permits)
                    .map(|&(at, _)| at)
            }
        }
    }
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
        let semaphore = self.config.mode == Mode::Semaphore;
        if semaphore {
            println!(
                "  holds: {} sections (a permit's token fences nothing: no resource operation)",
                self.holds.len()
            );
        } else {
            println!(
                "  holds: {} sections, {} {} ({} refused by fencing, {} after the lease was lost)",
                self.holds.len(),
                writes,
                if self.config.mode == Mode::ReadWrite {
                    "writes and reads"
                } else {
                    "writes"
                },
                refused,
                lost_writes
            );
            println!(
                "  writes no worker logged: {} (arrived after their section had ended: {}, of them refused by fencing {})",
                self.unlogged.len(),
                self.late.len(),
                self.refused(self.late.iter().copied())
            );
        }
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
        if !semaphore {
            self.print_overlaps();
        }
        println!("  stale tokens accepted: {}", self.stale_accepted);
        println!("  sections without the lock: {}", self.violations);
        self.print_mode();
        self.print_end();
    }

    fn print_overlaps(&self) {
        println!(
            "  overlaps: {} (caught by fencing {}, writes in order {}, no conflicting write {}, stale accepted {})",
            self.overlaps.len(),
            self.count(Outcome::Caught),
            self.count(Outcome::InOrder),
            self.count(Outcome::NoConflict),
            self.count(Outcome::StaleAccepted)
        );
        let after_lost_writes = self
            .overlaps
            .iter()
            .filter(|o| o.outcome == Outcome::StaleAccepted && o.after_lost_writes(&self.faults))
            .count();
        if after_lost_writes > 0 {
            println!(
                "  of the stale accepted, after a failover that may have lost the counter's last writes (tokens went down: the newer holder got the lower token, or its operation was refused for a higher one): {after_lost_writes}"
            );
        }
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
    }

    /// The many-keys leases, the worst takeover and the verdict.
    fn print_end(&self) {
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
                "  worst takeover: {} ms after {} (limit {} ms = {})",
                t.after.unwrap_or(0) / 1_000_000,
                self.faults[t.fault].kind.name(),
                self.config.takeover_limit().as_millis(),
                match (self.config.mode, self.config.lock_delay.is_zero()) {
                    (Mode::ReadWrite, true) => "2 ttl + margin",
                    (Mode::ReadWrite, false) => "2 ttl + margin + lock-delay",
                    (_, true) => "ttl + margin",
                    (_, false) => "ttl + margin + lock-delay",
                }
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

    /// The mode's own lines: readers' sharing and reads in rw mode; holders at once, over
    /// capacity and tokens in semaphore mode.
    fn print_mode(&self) {
        let sharing = &self.sharing;
        let shared_s = sharing.shared_ns as f64 / 1e9;
        match self.config.mode {
            Mode::Exclusive => {}
            Mode::ReadWrite => {
                let (reads, refused) = self.reads();
                println!(
                    "  reads: {reads} ({refused} refused by fencing, {} of a writer overlapping the reader); {} write sections, {} read sections",
                    self.dirty_reads,
                    self.holds.iter().filter(|h| h.role == Role::Write).count(),
                    self.holds.iter().filter(|h| h.role == Role::Read).count()
                );
                println!(
                    "  readers sharing: {} pairs of read sections inside together, at most {} readers at once, {shared_s:.1} s with two or more",
                    sharing.pairs, sharing.most_at_once
                );
            }
            Mode::Semaphore => {
                println!(
                    "  permits: {}; at most {} holders at once, {} pairs of sections inside together, {shared_s:.1} s with two or more",
                    self.config.permits, sharing.most_at_once, sharing.pairs
                );
                let mut by_fault: BTreeMap<&str, usize> = BTreeMap::new();
                for e in &self.excess {
                    let name = e
                        .explained_by
                        .map_or("unexplained", |f| self.faults[f].kind.name());
                    *by_fault.entry(name).or_default() += 1;
                }
                let by_fault: Vec<String> =
                    by_fault.iter().map(|(k, n)| format!("{k} {n}")).collect();
                println!(
                    "  over capacity (a holder in while every permit was held): {}{}",
                    self.excess.len(),
                    if by_fault.is_empty() {
                        String::new()
                    } else {
                        format!(" (explained by: {})", by_fault.join(", "))
                    }
                );
                println!("  unexplained over capacity: {}", self.unexplained_excess());
                let explained = self.duplicate_tokens.iter().filter(|d| d.is_some()).count();
                println!(
                    "  tokens handed out twice: {} ({explained} after a failover that may have lost the counter's last writes)",
                    self.duplicate_tokens.len()
                );
                let kills: Vec<u64> = self
                    .faults
                    .iter()
                    .zip(&self.takeovers)
                    .filter(|(f, t)| f.kind == FaultKind::Kill && !t.superseded)
                    .filter_map(|(_, t)| t.after)
                    .collect();
                if let Some(worst) = kills.iter().max() {
                    println!(
                        "  every permit held again after a kill: {} kills, worst {} ms",
                        kills.len(),
                        worst / 1_000_000
                    );
                }
            }
        }
    }

    /// Reads the resource's journal has, and of them those it refused.
    fn reads(&self) -> (usize, usize) {
        let reads = self.journal.iter().filter(|d| d.read);
        (reads.clone().count(), reads.filter(|d| !d.accepted).count())
    }

    fn unexplained_excess(&self) -> usize {
        self.excess
            .iter()
            .filter(|e| e.explained_by.is_none())
            .count()
    }

    /// The summary's figures of the rw and semaphore modes (zero in exclusive mode).
    fn mode_json(&self) -> Value {
        json!({
            "write_sections": self.holds.iter().filter(|h| matches!(h.role, Role::Write | Role::Exclusive)).count(),
            "read_sections": self.holds.iter().filter(|h| h.role == Role::Read).count(),
            "reads": self.reads().0,
            "reads_refused": self.reads().1,
            "reads_of_an_overlapping_writer": self.dirty_reads,
            "shared_pairs": self.sharing.pairs,
            "most_at_once": self.sharing.most_at_once,
            "shared_s": self.sharing.shared_ns as f64 / 1e9,
            "over_capacity": self.excess.len(),
            "unexplained_over_capacity": self.unexplained_excess(),
            "tokens_handed_out_twice": self.duplicate_tokens.len(),
            "tokens_handed_out_twice_unexplained": self.duplicate_tokens.iter().filter(|d| d.is_none()).count(),
        })
    }

    /// The rw and semaphore modes' settings and the moments over capacity, beside the rest.
    fn mode_settings_json(&self) -> Value {
        let rel = |t: u64| t.saturating_sub(self.t0) as f64 / 1e9;
        json!({
            "mode": self.config.mode.name(),
            "permits": (self.config.mode == Mode::Semaphore).then_some(self.config.permits),
            "reads_pct": (self.config.mode == Mode::ReadWrite).then_some(self.config.reads_pct),
            "over_capacity": self.excess.iter().map(|e| json!({
                "start_s": rel(e.start),
                "end_s": rel(e.end),
                "holders": e.holders.iter().map(|&i| {
                    let h = &self.holds[i];
                    json!({"worker": h.slot, "task": h.task, "token": h.token, "enter_s": rel(h.enter), "exit_s": rel(h.exit)})
                }).collect::<Vec<_>>(),
                "explained_by": e.explained_by.map(|f| self.faults[f].kind.name()),
            })).collect::<Vec<_>>(),
        })
    }

    pub(crate) fn json(&self) -> Value {
        let mut report = self.json_common();
        if let (Some(summary), Value::Object(mode)) =
            (report["summary"].as_object_mut(), self.mode_json())
        {
            summary.extend(mode);
        }
        if let (Some(report), Value::Object(mode)) =
            (report.as_object_mut(), self.mode_settings_json())
        {
            report.extend(mode);
        }
        report
    }

    fn json_common(&self) -> Value {
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
            "takeover_margin_ms": self.config.takeover_margin.unwrap_or(self.config.margin).as_millis() as u64,
            "lock_delay_ms": self.config.lock_delay.as_millis() as u64,
            "fault_margin_ms": self.config.margin.as_millis() as u64,
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
                "overlaps_stale_accepted_after_lost_writes": self.overlaps.iter().filter(|o| o.outcome == Outcome::StaleAccepted && o.after_lost_writes(&self.faults)).count(),
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
                    "stale": {"worker": a.slot, "task": a.task, "role": a.role.name(), "token": a.token, "on_lease_lost": if a.continues { "continue" } else { "abort" }, "write_s": a.write.map(|w| rel(w.at)), "write_accepted": a.write.map(|w| w.accepted)},
                    "newer": {"worker": b.slot, "task": b.task, "role": b.role.name(), "token": b.token, "on_lease_lost": if b.continues { "continue" } else { "abort" }, "write_s": b.write.map(|w| rel(w.at)), "write_accepted": b.write.map(|w| w.accepted)},
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
            "processes": self.incarnations.iter().map(|i| json!({
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
            takeover_margin: None,
            topology: Topology::Single,
            masters: 3,
            faults: Vec::new(),
            keys: 0,
            fair: false,
            lock_delay: Duration::ZERO,
            mode: Mode::Exclusive,
            permits: crate::DEFAULT_PERMITS,
            reads_pct: crate::DEFAULT_READS_PCT,
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
                    read: false,
                },
            ),
            (
                newer_seq,
                Delivery {
                    token: second,
                    accepted: true,
                    at: 2 * S + MS,
                    read: false,
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
            read: false,
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

    /// A claim refused as the stale holder's section goes on: its entry comes before the newer
    /// holder's write in the journal (the newer holder claimed as it came in), and it is caught
    /// all the same.
    #[test]
    fn a_stale_operation_refused_before_the_newer_holders_write_is_caught() {
        let report = two_holders("early", 2 * S + 600 * MS, 0, 0, &[pause_of_worker_0()]);
        assert_eq!(report.overlaps.len(), 1);
        assert_eq!(report.overlaps[0].outcome, Outcome::Caught);
        assert!(report.ok(), "{:?}", report.failures);
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

    // The rw mode.

    fn rw_config() -> Config {
        Config {
            mode: Mode::ReadWrite,
            ..config()
        }
    }

    fn semaphore_config(permits: u32) -> Config {
        Config {
            mode: Mode::Semaphore,
            permits,
            ..config()
        }
    }

    fn read_entry(token: u64, accepted: bool, at: u64) -> Delivery {
        Delivery {
            read: true,
            ..delivery(token, accepted, at)
        }
    }

    /// Worker 0 reads from 1 s to 2.5 s with token 10 (its read at 2.4 s, `seq` given), worker
    /// 1 takes `role` at 2 s with token 20 and touches the resource at 2.001 s (`seq` 1 or 2 as
    /// the reader's is 2 or 1), leaving at 2.1 s. The journal is as given.
    fn reader_and(
        name: &str,
        role: &str,
        (reader_seq, reader_accepted): (u64, u8),
        faults: &[Fault],
        journal: Vec<Delivery>,
    ) -> Report {
        let other_seq = 3 - reader_seq;
        let reader = vec![
            format!("enter 0 1 {} 10 continue read", S),
            format!(
                "read 0 1 {} 10 {reader_accepted} {reader_seq} 0 5",
                2_400 * MS
            ),
            format!("exit 0 1 {}", 2_500 * MS),
        ];
        let op = if role == "read" {
            format!("read 0 1 {} 20 1 {other_seq} 1 5", 2 * S + MS)
        } else {
            format!("write 0 1 {} 20 1 {other_seq} 1", 2 * S + MS)
        };
        let other = vec![
            format!("enter 0 1 {} 20 abort {role}", 2 * S),
            op,
            format!("exit 0 1 {}", 2 * S + 100 * MS),
        ];
        let name = format!("rw-{name}");
        two_workers(&rw_config(), &name, [reader, other], faults, journal)
    }

    #[test]
    fn readers_inside_together_share_and_are_no_overlap() {
        let journal = vec![
            read_entry(20, true, 2 * S + MS),
            read_entry(10, true, 2_400 * MS),
        ];
        let report = reader_and("share", "read", (2, 1), &[], journal);
        assert!(report.ok(), "{:?}", report.failures);
        assert!(report.overlaps.is_empty());
        assert_eq!(report.sharing.pairs, 1);
        assert_eq!(report.sharing.most_at_once, 2);
        assert_eq!(report.sharing.shared_ns, 100 * MS);
    }

    #[test]
    fn a_writer_inside_with_a_reader_and_no_fault_fails_the_run() {
        let journal = vec![
            delivery(20, true, 2 * S + MS),
            read_entry(10, false, 2_400 * MS),
        ];
        let report = reader_and("writer-in", "write", (2, 0), &[], journal);
        assert_eq!(report.overlaps.len(), 1);
        assert_fails_with(&report, "1 overlaps with no fault to explain them");
    }

    #[test]
    fn a_stale_reader_refused_after_a_newer_write_during_a_pause_passes() {
        let journal = vec![
            delivery(20, true, 2 * S + MS),
            read_entry(10, false, 2_400 * MS),
        ];
        let report = reader_and("caught", "write", (2, 0), &[pause_of_worker_0()], journal);
        assert!(report.ok(), "{:?}", report.failures);
        assert_eq!(report.overlaps[0].outcome, Outcome::Caught);
    }

    #[test]
    fn a_stale_read_accepted_after_a_newer_write_fails_the_run() {
        let journal = vec![
            delivery(20, true, 2 * S + MS),
            read_entry(10, true, 2_400 * MS),
        ];
        let report = reader_and(
            "stale-read",
            "write",
            (2, 1),
            &[pause_of_worker_0()],
            journal,
        );
        assert_eq!(report.stale_accepted, 1);
        assert_eq!(report.overlaps[0].outcome, Outcome::StaleAccepted);
        assert_fails_with(&report, "accepted 1 stale tokens");
    }

    /// Worker 0 writes with token 10 from 1 s to 2.5 s, its write at 2.4 s (after worker 1's
    /// read); worker 1 reads with token 20 from 2 s to 2.1 s. Worker 0 was paused.
    fn stale_writer_after_a_reader(name: &str, writer_accepted: bool) -> Report {
        let writer = vec![
            format!("enter 0 1 {} 10 continue write", S),
            format!(
                "write 0 1 {} 10 {} 2 0",
                2_400 * MS,
                u8::from(writer_accepted)
            ),
            format!("exit 0 1 {}", 2_500 * MS),
        ];
        let reader = vec![
            format!("enter 0 1 {} 20 abort read", 2 * S),
            format!("read 0 1 {} 20 1 1 1 0", 2 * S + MS),
            format!("exit 0 1 {}", 2 * S + 100 * MS),
        ];
        let journal = vec![
            read_entry(20, true, 2 * S + MS),
            delivery(10, writer_accepted, 2_400 * MS),
        ];
        let name = format!("rw-stale-writer-{name}");
        let faults = [pause_of_worker_0()];
        two_workers(&rw_config(), &name, [writer, reader], &faults, journal)
    }

    #[test]
    fn a_stale_writer_after_a_newer_readers_read_must_be_refused() {
        let refused = stale_writer_after_a_reader("refused", false);
        assert!(refused.ok(), "{:?}", refused.failures);
        assert_eq!(refused.overlaps[0].outcome, Outcome::Caught);
        let accepted = stale_writer_after_a_reader("accepted", true);
        assert_eq!(accepted.stale_accepted, 1);
        assert_fails_with(&accepted, "stale holder's later write was accepted");
    }

    #[test]
    fn a_read_of_an_overlapping_writers_value_is_counted() {
        // The reader reads after the writer's write and sees its token: the writer came in
        // while the reader held its share.
        let reader = vec![
            format!("enter 0 1 {} 10 abort read", S),
            format!("read 0 1 {} 10 1 2 1 20", 2_050 * MS),
            format!("exit 0 1 {}", 2_500 * MS),
        ];
        let writer = vec![
            format!("enter 0 1 {} 20 abort write", 2 * S),
            format!("write 0 1 {} 20 1 1 1", 2 * S + MS),
            format!("exit 0 1 {}", 2 * S + 100 * MS),
        ];
        // Its token is below the value it was answered, so the resource would refuse it: here
        // the journal says it did not, which is also stale.
        let journal = vec![
            delivery(20, true, 2 * S + MS),
            read_entry(10, true, 2_050 * MS),
        ];
        let report = two_workers(&rw_config(), "rw-dirty", [reader, writer], &[], journal);
        assert_eq!(report.dirty_reads, 1);
        assert!(!report.ok());
    }

    #[test]
    fn the_journal_tells_reads_from_writes() {
        let entries = ["20 1 5 r".to_owned(), "21 0 6".to_owned()];
        let parsed = parse_journal(&entries).expect("valid");
        assert!(parsed[0].read && !parsed[1].read);
        assert!(parse_journal(&["20 1 5 w".to_owned()]).is_err());
    }

    #[test]
    fn rw_mode_allows_readers_a_lease_more_to_come_back_after_a_kill() {
        let kill = Fault {
            kind: FaultKind::Kill,
            hit: Hit::Worker(0),
            pid: Some(100),
            start: 3 * S,
            end: 3 * S,
            serving: 3 * S,
            detail: String::new(),
            slots: Vec::new(),
        };
        let logs = |role: &str| {
            [
                vec![
                    format!("enter 0 1 {} 10 abort {role}", S),
                    format!("exit 0 1 {}", S + 10 * MS),
                ],
                vec![
                    format!("enter 0 1 {} 20 abort {role}", 5_200 * MS),
                    format!("exit 0 1 {}", 5_210 * MS),
                ],
            ]
        };
        let faults = [kill];
        let rw = two_workers(&rw_config(), "rw-kill", logs("read"), &faults, Vec::new());
        assert!(rw.ok(), "{:?}", rw.failures);
        let exclusive = two_workers(&config(), "ex-kill", logs(""), &faults, Vec::new());
        assert_fails_with(&exclusive, "taken again only after 2200 ms");
    }

    // The semaphore mode.

    /// Worker 0's tasks 0 and 1 hold permits from 1 s to 2.5 s, worker 1 comes in at 2 s and
    /// leaves at 2.1 s; tokens 10, 11, 20.
    fn three_holders(config: &Config, name: &str, faults: &[Fault], third_token: u64) -> Report {
        let first = vec![
            format!("enter 0 1 {} 10 continue permit", S),
            format!("enter 1 1 {} 11 abort permit", S + MS),
            format!("exit 0 1 {}", 2_500 * MS),
            format!("exit 1 1 {}", 2_500 * MS),
        ];
        let second = vec![
            format!("enter 0 1 {} {third_token} abort permit", 2 * S),
            format!("exit 0 1 {}", 2 * S + 100 * MS),
        ];
        let name = format!("sem-{name}");
        two_workers(config, &name, [first, second], faults, Vec::new())
    }

    #[test]
    fn more_holders_than_permits_and_no_fault_fail_the_run() {
        let report = three_holders(&semaphore_config(2), "over", &[], 20);
        assert_eq!(report.excess.len(), 1);
        assert_eq!(report.excess[0].holders.len(), 3);
        assert_eq!(report.sharing.most_at_once, 3);
        assert_fails_with(&report, "more than 2 holders of the semaphore at once");
    }

    #[test]
    fn as_many_holders_as_permits_pass_and_count_as_sharing() {
        let report = three_holders(&semaphore_config(3), "full", &[], 20);
        assert!(report.ok(), "{:?}", report.failures);
        assert!(report.excess.is_empty());
        assert_eq!(report.sharing.pairs, 3);
        assert_eq!(report.sharing.most_at_once, 3);
    }

    #[test]
    fn more_holders_than_permits_during_a_pause_of_a_holder_pass() {
        let report = three_holders(&semaphore_config(2), "paused", &[pause_of_worker_0()], 20);
        assert!(report.ok(), "{:?}", report.failures);
        assert_eq!(report.excess[0].explained_by, Some(0));
    }

    #[test]
    fn a_fault_on_the_newcomers_worker_does_not_explain_too_many_holders() {
        let pause_of_worker_1 = Fault {
            hit: Hit::Worker(1),
            pid: Some(101),
            ..pause_of_worker_0()
        };
        let report = three_holders(&semaphore_config(2), "newcomer", &[pause_of_worker_1], 20);
        assert_fails_with(&report, "more than 2 holders of the semaphore at once");
    }

    /// A stale operation accepted is outside the fencing guarantee only after a failover that
    /// may have lost writes, and only where tokens went down.
    #[test]
    fn a_stale_operation_accepted_is_explained_only_where_a_failover_took_tokens_down() {
        let faults = [
            store_fault(FaultKind::FailoverPause, Hit::Store, S, 2 * S, 2 * S),
            store_fault(FaultKind::NodePause, Hit::Store, S, 2 * S, 2 * S),
        ];
        let overlap = |explained_by, out_of_order, newer_refused| Overlap {
            stale: 0,
            newer: 1,
            out_of_order,
            newer_refused,
            start: S,
            end: 2 * S,
            outcome: Outcome::StaleAccepted,
            explained_by: Some(explained_by),
            bare_majority: false,
        };
        assert!(overlap(0, true, false).after_lost_writes(&faults));
        assert!(overlap(0, false, true).after_lost_writes(&faults));
        assert!(!overlap(0, false, false).after_lost_writes(&faults));
        assert!(!overlap(1, true, true).after_lost_writes(&faults));
    }

    #[test]
    fn a_token_handed_out_twice_fails_the_run() {
        let report = three_holders(&semaphore_config(3), "twice", &[], 11);
        assert_eq!(report.duplicate_tokens, [None]);
        assert_fails_with(&report, "1 fencing tokens were handed out to two sections");
    }

    /// A replica promoted while the master was killed may lack the counter's last increments:
    /// the tokens they handed out come again, as docs/GUARANTEES.md says. A failover that ended long
    /// before the second grant, or a kill of a worker, explains nothing.
    #[test]
    fn a_token_handed_out_again_after_a_failover_that_lost_writes_is_explained() {
        let failover = store_fault(
            FaultKind::FailoverKill,
            Hit::Store,
            1_500 * MS,
            1_900 * MS,
            1_800 * MS,
        );
        let report = three_holders(&semaphore_config(3), "lost-writes", &[failover], 11);
        assert!(report.ok(), "{:?}", report.failures);
        assert_eq!(report.duplicate_tokens, [Some(0)]);

        let long_before = store_fault(
            FaultKind::FailoverKill,
            Hit::Store,
            10 * MS,
            20 * MS,
            15 * MS,
        );
        let report = three_holders(&semaphore_config(3), "lost-before", &[long_before], 11);
        assert_fails_with(&report, "1 fencing tokens were handed out to two sections");
        let paused = store_fault(
            FaultKind::NodePause,
            Hit::Store,
            1_500 * MS,
            1_900 * MS,
            1_900 * MS,
        );
        let report = three_holders(&semaphore_config(3), "node-pause", &[paused], 11);
        assert_fails_with(&report, "1 fencing tokens were handed out to two sections");
    }

    /// Permits 2. Worker 0 holds one until it is killed at 3 s; worker 1's task 0 holds one
    /// from 2.5 s to 7 s, its task 1 comes in at `back` (both permits held again).
    fn permit_back_at(name: &str, back: u64) -> Report {
        let kill = Fault {
            kind: FaultKind::Kill,
            hit: Hit::Worker(0),
            pid: Some(100),
            start: 3 * S,
            end: 3 * S,
            serving: 3 * S,
            detail: String::new(),
            slots: Vec::new(),
        };
        let killed = vec![format!("enter 0 1 {} 10 abort permit", 2 * S)];
        let other = vec![
            format!("enter 0 1 {} 11 abort permit", 2_500 * MS),
            format!("enter 1 1 {back} 20 abort permit"),
            format!("exit 1 1 {}", back + 10 * MS),
            format!("exit 0 1 {}", 7 * S),
        ];
        let dir =
            std::env::temp_dir().join(format!("lock-chaos-unit-sem-{name}-{}", std::process::id()));
        fs::create_dir_all(&dir).expect("temp dir");
        let mut dead = worker(&dir, 0, &killed);
        dead.killed = true;
        dead.ended = 3 * S;
        let report = analyze(&Input {
            config: &semaphore_config(2),
            incarnations: &[dead, worker(&dir, 1, &other)],
            faults: &[kill],
            problems: Vec::new(),
            t0: 0,
            t1: 20 * S,
            final_token: None,
            journal: Vec::new(),
        })
        .expect("the logs parse");
        let _ = fs::remove_dir_all(&dir);
        report
    }

    #[test]
    fn a_dead_holders_permit_must_be_held_again_within_the_limit() {
        let back = permit_back_at("back", 3_900 * MS);
        assert!(back.ok(), "{:?}", back.failures);
        assert_eq!(back.takeovers[0].after, Some(900 * MS));
        let late = permit_back_at("late", 5 * S);
        assert_fails_with(&late, "taken again only after 2000 ms");
    }
}
