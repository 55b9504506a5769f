//! What the lock runs on: the topology named by `--topology`, its servers, how the workers reach
//! it, where the lock lives in it, and the faults its nodes can suffer.
//!
//! - `single`: one [`LockServer`] behind one [`FaultProxy`] per worker.
//! - `redlock`: `--masters` independent [`LockServer`]s, each behind one proxy per worker.
//! - `sentinel`: the harness's [`SentinelSetup`] (a master, one replica, three sentinels).
//! - `cluster`: the harness's [`RedisCluster`] (three masters with one replica each).
//! - `postgres` and `pgbouncer`: the harness's PostgreSQL server, directly or through PgBouncer
//!   in transaction mode (see [`crate::postgres`]).
//!
//! A `node-pause` freezes one node: a Redlock master for longer than the lease (the others are
//! a majority), or the master that serves the lock on Sentinel and Cluster for less than their
//! 1 s failure detection, so that every client stalls on it and no failover follows.
//!
//! Sentinel and Cluster clients connect to the addresses the servers announce (the master
//! Sentinel names, the nodes `CLUSTER SLOTS` lists), so a proxy cannot sit between a worker and
//! them without rewriting those replies: there the worker-connection faults do not exist.

use std::net::SocketAddr;
use std::panic::{self, AssertUnwindSafe};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use lock_tests::{FaultProxy, RedisCluster, RedisServer, Reply, SentinelSetup, resp};

use crate::analyze::{FaultKind, Hit};
use crate::lockserver::LockServer;
use crate::postgres::PgStore;
use crate::rng::Rng;
use crate::{Config, Mode, now_ns, stored_key};

/// Sentinel: one replica to promote (a failover brings the old master back as the next one)
/// and three sentinels, so that a majority of them agrees on a failover.
const SENTINEL_REPLICAS: usize = 1;
const SENTINELS: usize = 3;
/// Cluster: the smallest `redis-cli --cluster create` accepts, one replica per master.
const CLUSTER_MASTERS: usize = 3;
const CLUSTER_REPLICAS: usize = 1;
/// How long a question to a lock node may take (the holder's pid, a lock left behind).
const ASK_TIMEOUT: Duration = Duration::from_secs(1);
/// How often the failover watch asks who masters the lock, and how long it waits for a node.
const WATCH_INTERVAL: Duration = Duration::from_millis(100);
const WATCH_TIMEOUT: Duration = Duration::from_millis(200);

/// What the lock runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Topology {
    Single,
    Sentinel,
    Cluster,
    Redlock,
    /// One PostgreSQL server, reached directly.
    Postgres,
    /// The same server through PgBouncer in transaction mode.
    PgBouncer,
}

impl Topology {
    pub(crate) const ALL: [Topology; 6] = [
        Topology::Single,
        Topology::Sentinel,
        Topology::Cluster,
        Topology::Redlock,
        Topology::Postgres,
        Topology::PgBouncer,
    ];

    /// The lock lives in a PostgreSQL table.
    pub(crate) fn is_postgres(self) -> bool {
        matches!(self, Topology::Postgres | Topology::PgBouncer)
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            Topology::Single => "single",
            Topology::Sentinel => "sentinel",
            Topology::Cluster => "cluster",
            Topology::Redlock => "redlock",
            Topology::Postgres => "postgres",
            Topology::PgBouncer => "pgbouncer",
        }
    }

    pub(crate) fn parse(name: &str) -> Result<Self, String> {
        Topology::ALL
            .into_iter()
            .find(|t| t.name() == name)
            .ok_or_else(|| {
                format!(
                    "unknown topology {name}: use single, sentinel, cluster, redlock, postgres or pgbouncer"
                )
            })
    }

    /// The faults that exist on this topology, in the order a round starts from before the
    /// seeded shuffle.
    pub(crate) fn fault_kinds(self) -> &'static [FaultKind] {
        use FaultKind::*;
        match self {
            Topology::Single => &[
                Kill,
                Pause,
                RestartPersist,
                RestartNoPersist,
                Stall,
                Delay,
                Cut,
                Partition,
            ],
            Topology::Redlock => &[
                Kill,
                Pause,
                RestartPersist,
                RestartNoPersist,
                Stall,
                Delay,
                Cut,
                Partition,
                NodePause,
            ],
            Topology::Sentinel | Topology::Cluster => {
                &[Kill, Pause, NodePause, FailoverKill, FailoverPause]
            }
            Topology::Postgres => &[
                Kill,
                Pause,
                ServerCrash,
                Terminate,
                Stall,
                Delay,
                Cut,
                Partition,
                NodePause,
            ],
            Topology::PgBouncer => &[
                Kill,
                Pause,
                ServerCrash,
                PoolerRestart,
                Terminate,
                Stall,
                Delay,
                Cut,
                Partition,
                NodePause,
            ],
        }
    }

    /// How long a `node-pause` lasts, in percent of the ttl. A Redlock master is frozen past the
    /// lease. The one master of the lock on Sentinel and Cluster is frozen for less than the
    /// 1 s in which they notice a dead node (`down-after-milliseconds`,
    /// `cluster-node-timeout`), which no failover follows: about half of these outlast the
    /// holder's local deadline (a renewal is due a third of the ttl after the last one), so the
    /// holder learns it lost the lease while the server, once it runs again, has the lock
    /// expire or renews it late.
    pub(crate) fn node_pause_pct(self) -> (u64, u64) {
        match self {
            Topology::Sentinel | Topology::Cluster => (40, 85),
            Topology::Single | Topology::Redlock | Topology::Postgres | Topology::PgBouncer => {
                (130, 220)
            }
        }
    }

    /// The faults a report counts: the injected ones, and on Sentinel and Cluster the
    /// failovers the deployment did on its own.
    pub(crate) fn reported_kinds(self) -> Vec<FaultKind> {
        let mut kinds = self.fault_kinds().to_vec();
        if matches!(self, Topology::Sentinel | Topology::Cluster) {
            kinds.push(FaultKind::FailoverObserved);
        }
        kinds
    }
}

/// How a failover fault takes the master out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Stop {
    /// SIGKILL.
    Kill,
    /// SIGSTOP until a replica has taken over, then SIGCONT.
    Pause,
}

/// What a fault did to the lock store, with wall-clock times (ns).
pub(crate) struct StoreFault {
    pub(crate) hit: Hit,
    pub(crate) start: u64,
    pub(crate) end: u64,
    /// When the lock could be taken again (see `analyze::Fault::serving`).
    pub(crate) serving: u64,
    pub(crate) detail: String,
    /// The hash slots of a frozen Cluster master (see `analyze::Fault::slots`).
    pub(crate) slots: Vec<(u16, u16)>,
}

/// The running deployment.
pub(crate) struct Deployment {
    topology: Topology,
    store: Store,
}

enum Store {
    /// Servers of this experiment (one, or Redlock's masters), each behind one proxy per
    /// worker: `proxies[worker][server]`.
    Servers {
        servers: Vec<LockServer>,
        proxies: Vec<Vec<FaultProxy>>,
    },
    /// A harness deployment that fails over; shared with the failover watch.
    Replicated(Arc<dyn Replicated + Send + Sync>),
    /// PostgreSQL, directly or through PgBouncer.
    Postgres(PgStore),
}

/// Sentinel or Cluster: what a failover fault and the failover watch need.
trait Replicated {
    fn describe(&self) -> String;
    fn url(&self) -> String;
    /// The master that serves the lock's key now.
    fn lock_master(&self) -> &RedisServer;
    /// The same, without panicking: `None` when nobody can say now.
    fn serving_master(&self) -> Option<SocketAddr>;
    /// Waits until every node is up in its role again.
    fn wait_settled(&self);
    /// Takes `master` out and returns the replica promoted in its place, once the deployment
    /// serves from it. The harness panics (with the servers' logs) if that does not happen.
    fn fail_over(&self, master: &RedisServer, how: Stop) -> &RedisServer;
    /// Brings a replaced master back as a replica.
    fn rejoin(&self, node: &RedisServer);
    fn log(&self) -> String;
    /// Every master now: Sentinel's one, each shard's on Cluster.
    fn masters(&self) -> Vec<&RedisServer>;
}

impl Replicated for SentinelSetup {
    fn describe(&self) -> String {
        format!(
            "Sentinel: a master, {} replica(s), {} sentinels",
            self.nodes().len() - 1,
            self.sentinels().len()
        )
    }

    fn url(&self) -> String {
        SentinelSetup::url(self)
    }

    fn lock_master(&self) -> &RedisServer {
        self.master()
    }

    fn serving_master(&self) -> Option<SocketAddr> {
        self.try_master_addr()
    }

    fn wait_settled(&self) {
        SentinelSetup::wait_settled(self);
    }

    /// Sentinel fails over its one master, which is `master` (from `lock_master`).
    fn fail_over(&self, _master: &RedisServer, how: Stop) -> &RedisServer {
        match how {
            Stop::Kill => self.kill_master_and_wait_failover(),
            Stop::Pause => self.pause_master_and_wait_failover(),
        }
    }

    fn rejoin(&self, node: &RedisServer) {
        SentinelSetup::rejoin(self, node);
    }

    fn log(&self) -> String {
        SentinelSetup::log(self)
    }

    fn masters(&self) -> Vec<&RedisServer> {
        vec![self.master()]
    }
}

impl Replicated for RedisCluster {
    fn describe(&self) -> String {
        format!(
            "Cluster: {} masters with {} replica(s) each",
            self.masters().len(),
            self.replicas().len() / self.masters().len().max(1)
        )
    }

    fn url(&self) -> String {
        RedisCluster::url(self)
    }

    fn lock_master(&self) -> &RedisServer {
        self.master_for_key(stored_key())
    }

    fn serving_master(&self) -> Option<SocketAddr> {
        self.try_master_for_key(stored_key()).map(RedisServer::addr)
    }

    fn wait_settled(&self) {
        RedisCluster::wait_settled(self);
    }

    fn fail_over(&self, master: &RedisServer, how: Stop) -> &RedisServer {
        match how {
            Stop::Kill => self.kill_master_and_wait_failover(master),
            Stop::Pause => self.pause_master_and_wait_failover(master),
        }
    }

    fn rejoin(&self, node: &RedisServer) {
        RedisCluster::rejoin(self, node);
    }

    fn log(&self) -> String {
        RedisCluster::log(self)
    }

    fn masters(&self) -> Vec<&RedisServer> {
        RedisCluster::masters(self)
    }
}

/// The hash slots `node` serves by its own `CLUSTER NODES` line (`myself`), as inclusive
/// ranges; empty if it does not answer or is no cluster node.
fn served_slots(node: &RedisServer) -> Vec<(u16, u16)> {
    let Ok(Reply::Bulk(nodes)) = node.try_cmd(&["CLUSTER", "NODES"]) else {
        return Vec::new();
    };
    let nodes = String::from_utf8_lossy(&nodes);
    let Some(me) = nodes.lines().find(|line| line.contains("myself")) else {
        return Vec::new();
    };
    parse_slot_ranges(me)
}

/// The slot ranges at the end of a `CLUSTER NODES` line (`0-5460 5461 [93->-id]`): the ninth
/// field on; slots being imported or migrated (in brackets) are left out.
fn parse_slot_ranges(line: &str) -> Vec<(u16, u16)> {
    line.split_whitespace()
        .skip(8)
        .filter_map(|range| match range.split_once('-') {
            Some((first, last)) => Some((first.parse().ok()?, last.parse().ok()?)),
            None => range.parse().ok().map(|slot| (slot, slot)),
        })
        .collect()
}

/// Runs a harness step, whose failures are panics carrying the servers' logs, as a `Result`.
/// The default hook has already printed the whole message; the error keeps its first line.
pub(crate) fn harness<T>(what: &str, step: impl FnOnce() -> T) -> Result<T, String> {
    panic::catch_unwind(AssertUnwindSafe(step)).map_err(|payload| {
        let message = payload
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| payload.downcast_ref::<&str>().copied())
            .unwrap_or("(no message)");
        let first = message.lines().next().unwrap_or_default();
        format!("{what}: {first} (the servers' logs are in topology.log)")
    })
}

/// Which of `count` servers a fault hits: the one store, or a random Redlock master. A single
/// server takes nothing from `rng`, so its fault schedule stays what it was before Redlock.
fn pick(count: usize, rng: &mut Rng) -> (usize, Hit) {
    if count == 1 {
        return (0, Hit::Store);
    }
    let node = rng.below(count as u64) as usize;
    (node, Hit::Master(node))
}

/// A restarted whole store serves again once it is back; with one Redlock master out, the
/// others serve all along.
fn serving(hit: Hit, start: u64, end: u64) -> u64 {
    match hit {
        Hit::Master(_) | Hit::Shard => start,
        Hit::Store | Hit::Worker(_) => end,
    }
}

impl Deployment {
    /// Starts the topology `config` names; this experiment's own servers keep their data and
    /// logs under `dir`.
    pub(crate) fn start(config: &Config, dir: &Path) -> Result<Deployment, String> {
        let store = match config.topology {
            Topology::Single => {
                Store::servers(vec![LockServer::start(&dir.join("lock-redis"))?], config)
            }
            Topology::Redlock => {
                let masters = (0..config.masters)
                    .map(|i| LockServer::start(&dir.join(format!("master-{i}"))))
                    .collect::<Result<Vec<_>, _>>()?;
                Store::servers(masters, config)
            }
            Topology::Sentinel => {
                let setup = harness("start Sentinel", || {
                    SentinelSetup::start(SENTINEL_REPLICAS, SENTINELS)
                })?;
                Store::Replicated(Arc::new(setup))
            }
            Topology::Cluster => {
                let cluster = harness("start the cluster", || {
                    RedisCluster::start(CLUSTER_MASTERS, CLUSTER_REPLICAS)
                })?;
                Store::Replicated(Arc::new(cluster))
            }
            Topology::Postgres | Topology::PgBouncer => Store::Postgres(PgStore::start(
                config.workers,
                config.topology == Topology::PgBouncer,
            )?),
        };
        Ok(Deployment {
            topology: config.topology,
            store,
        })
    }

    /// For the run's header line.
    pub(crate) fn describe(&self) -> String {
        match &self.store {
            Store::Servers { servers, .. } if servers.len() == 1 => {
                "single Redis, one proxy per worker".into()
            }
            Store::Servers { servers, .. } => format!(
                "Redlock over {} masters, one proxy per worker and master",
                servers.len()
            ),
            Store::Replicated(store) => store.describe(),
            Store::Postgres(store) => store.describe(),
        }
    }

    /// The URL worker `slot` takes the lock through.
    pub(crate) fn worker_url(&self, slot: usize) -> String {
        match &self.store {
            Store::Servers { proxies, .. } => {
                let addrs: Vec<String> = proxies[slot]
                    .iter()
                    .map(|proxy| proxy.addr().to_string())
                    .collect();
                let scheme = match self.topology {
                    Topology::Redlock => "redlock",
                    _ => "redis",
                };
                format!("{scheme}://{}", addrs.join(","))
            }
            Store::Replicated(store) => store.url(),
            Store::Postgres(store) => store.worker_url(slot),
        }
    }

    /// The proxies between worker `slot` and the lock store (none on Sentinel and Cluster).
    pub(crate) fn proxies(&self, slot: usize) -> &[FaultProxy] {
        match &self.store {
            Store::Servers { proxies, .. } => &proxies[slot],
            Store::Replicated(_) => &[],
            Store::Postgres(store) => store.proxies(slot),
        }
    }

    /// The nodes that hold the lock's state now: the one server, every Redlock master, or the
    /// master that serves the key on Sentinel and Cluster.
    fn lock_nodes(&self) -> Result<Vec<SocketAddr>, String> {
        match &self.store {
            Store::Servers { servers, .. } => Ok(servers.iter().map(LockServer::addr).collect()),
            Store::Replicated(store) => store
                .serving_master()
                .map(|master| vec![master])
                .ok_or_else(|| "no node says it masters the lock now".to_owned()),
            Store::Postgres(_) => Ok(Vec::new()),
        }
    }

    /// The pid recorded in the lock on a majority of its nodes (on the one node, but for
    /// Redlock): the process that holds it now, if anyone does.
    pub(crate) fn holder_pid(&self) -> Option<u32> {
        let nodes = self.lock_nodes().ok()?;
        let pids: Vec<u32> = nodes
            .iter()
            .filter_map(|&node| match ask(node, &["GET", &stored_key()]) {
                Ok(Reply::Bulk(value)) => holder_pid_in(&String::from_utf8_lossy(&value)),
                _ => None,
            })
            .collect();
        let majority = nodes.len() / 2 + 1;
        pids.iter()
            .copied()
            .find(|&pid| pids.iter().filter(|&&other| other == pid).count() >= majority)
    }

    /// Where a grant of `mode`'s primitive is still held (or kept), as `node address`
    /// descriptions; empty when nowhere. A lock freed for the first fair waiter
    /// (`free next=..`, or a 0.2 `free fence=..` marker) is not one; a semaphore's or read-write lock's keys exist only while
    /// someone holds a lease (they expire with the longest).
    pub(crate) fn locks_left(&self, mode: Mode) -> Result<Vec<String>, String> {
        if let Store::Postgres(store) = &self.store {
            return store.locks_left();
        }
        let mut left = Vec::new();
        for node in self.lock_nodes()? {
            for key in mode.held_keys() {
                let held = match mode {
                    Mode::Exclusive => match ask(node, &["GET", &key]) {
                        Ok(Reply::Nil) => false,
                        Ok(Reply::Bulk(value)) => !value.starts_with(b"free "),
                        other => return Err(format!("GET on {node}: {other:?}")),
                    },
                    Mode::ReadWrite | Mode::Semaphore => match ask(node, &["EXISTS", &key]) {
                        Ok(Reply::Integer(n)) => n > 0,
                        other => return Err(format!("EXISTS on {node}: {other:?}")),
                    },
                };
                if held {
                    left.push(format!("{node} ({key})"));
                }
            }
        }
        Ok(left)
    }

    /// SIGKILL the server (one Redlock master), then start it again on its port: with
    /// `persist` from its append-only file, otherwise wiped and without persistence.
    pub(crate) fn restart(&mut self, persist: bool, rng: &mut Rng) -> Result<StoreFault, String> {
        let servers = self.servers_mut("a restart")?;
        let (node, hit) = pick(servers.len(), rng);
        let start = now_ns();
        servers[node].restart(persist)?;
        let end = now_ns();
        let detail = if persist {
            "SIGKILL, restarted with appendonly yes (appendfsync always)"
        } else {
            "SIGKILL, data wiped, restarted with appendonly no"
        };
        Ok(StoreFault {
            hit,
            start,
            end,
            serving: serving(hit, start, end),
            detail: detail.into(),
            slots: Vec::new(),
        })
    }

    /// SIGKILL the PostgreSQL server and start it again through crash recovery.
    pub(crate) fn crash_server(&self) -> Result<StoreFault, String> {
        self.postgres("server-crash")?.crash()
    }

    /// SIGKILL PgBouncer and start it again.
    pub(crate) fn restart_pooler(&self) -> Result<StoreFault, String> {
        self.postgres("pooler-restart")?.restart_pooler()
    }

    /// End worker `slot`'s backends (behind PgBouncer: every backend of the lock role).
    pub(crate) fn terminate(&self, slot: usize) -> Result<StoreFault, String> {
        self.postgres("terminate")?.terminate(slot)
    }

    fn postgres(&self, what: &str) -> Result<&PgStore, String> {
        match &self.store {
            Store::Postgres(store) => Ok(store),
            Store::Servers { .. } | Store::Replicated(_) => Err(format!(
                "{what} is not a fault of the {} topology",
                self.topology.name()
            )),
        }
    }

    /// SIGSTOP one node for `pause`, then SIGCONT: a random Redlock master, the master that
    /// serves the lock on Sentinel and Cluster (see [`Topology::node_pause_pct`]), or the
    /// PostgreSQL server.
    pub(crate) fn pause_node(
        &mut self,
        pause: Duration,
        rng: &mut Rng,
    ) -> Result<StoreFault, String> {
        let what = format!("SIGSTOP for {} ms", pause.as_millis());
        let mut slots = Vec::new();
        let (hit, start, detail) = match &self.store {
            Store::Servers { servers, .. } => {
                let (node, hit) = pick(servers.len(), rng);
                let start = now_ns();
                servers[node].pause()?;
                std::thread::sleep(pause);
                servers[node].resume()?;
                (hit, start, what)
            }
            Store::Replicated(store) => {
                let store = store.as_ref();
                // Freeze the master that serves now, not one a failover is still replacing.
                harness("let the deployment settle", || store.wait_settled())?;
                let master = harness("find the lock's master", || store.lock_master())?;
                slots = self.slots_of(master);
                let start = now_ns();
                harness("pause the lock's master", || master.pause())?;
                std::thread::sleep(pause);
                harness("resume the lock's master", || master.resume())?;
                (
                    Hit::Store,
                    start,
                    format!("master {}: {what}", master.addr()),
                )
            }
            Store::Postgres(store) => return store.pause(pause),
        };
        let end = now_ns();
        Ok(StoreFault {
            hit,
            start,
            end,
            serving: serving(hit, start, end),
            detail,
            slots,
        })
    }

    /// The slots `master` serves, on Cluster (none elsewhere).
    fn slots_of(&self, master: &RedisServer) -> Vec<(u16, u16)> {
        match self.topology {
            Topology::Cluster => served_slots(master),
            Topology::Single
            | Topology::Sentinel
            | Topology::Redlock
            | Topology::Postgres
            | Topology::PgBouncer => Vec::new(),
        }
    }

    /// SIGSTOP one Cluster master, picked at random, for `pause` (less than the failure
    /// detection, see [`Topology::node_pause_pct`]), then SIGCONT: every client stalls on its
    /// shard, no failover follows, and the other shards serve all along. If it serves the lock
    /// it is a `node-pause` of the lock's master as far as the lock goes; otherwise the lock
    /// does not notice, and only the many-keys leases in its slots are at stake.
    pub(crate) fn stall_shard(
        &mut self,
        pause: Duration,
        rng: &mut Rng,
    ) -> Result<StoreFault, String> {
        let Store::Replicated(store) = &self.store else {
            return Err(format!(
                "no shards on the {} topology",
                self.topology.name()
            ));
        };
        let store = store.as_ref();
        harness("let the deployment settle", || store.wait_settled())?;
        let masters = harness("list the masters", || store.masters())?;
        let lock_master = harness("find the lock's master", || store.lock_master())?.addr();
        let Some(&master) = masters.get(rng.below(masters.len().max(1) as u64) as usize) else {
            return Err("no master to stall".into());
        };
        let hit = if master.addr() == lock_master {
            Hit::Store
        } else {
            Hit::Shard
        };
        let slots = self.slots_of(master);
        let start = now_ns();
        harness("pause a master", || master.pause())?;
        std::thread::sleep(pause);
        harness("resume the master", || master.resume())?;
        let end = now_ns();
        let ranges: Vec<String> = slots.iter().map(|(a, b)| format!("{a}-{b}")).collect();
        Ok(StoreFault {
            hit,
            start,
            end,
            serving: start,
            detail: format!(
                "master {} (slots {}{}): SIGSTOP for {} ms",
                master.addr(),
                ranges.join(","),
                if hit == Hit::Store {
                    ", the lock's"
                } else {
                    ""
                },
                pause.as_millis()
            ),
            slots,
        })
    }

    /// Takes the lock's master out (`how`), waits until a replica has taken over, then brings
    /// the old master back as a replica, so the next failover has one to promote.
    pub(crate) fn fail_over(&self, how: Stop) -> Result<StoreFault, String> {
        let Store::Replicated(store) = &self.store else {
            return Err(format!(
                "no failover on the {} topology",
                self.topology.name()
            ));
        };
        let store = store.as_ref();
        // A failover the deployment did on its own may still be settling.
        harness("let the deployment settle", || store.wait_settled())?;
        let old = harness("find the lock's master", || store.lock_master())?;
        let start = now_ns();
        let began = Instant::now();
        let promoted = harness("fail over", || store.fail_over(old, how))?;
        let serving = now_ns();
        let promotion = began.elapsed();
        harness("bring the old master back", || store.rejoin(old))?;
        let end = now_ns();
        let verb = match how {
            Stop::Kill => "SIGKILL",
            Stop::Pause => "SIGSTOP",
        };
        Ok(StoreFault {
            hit: Hit::Store,
            start,
            end,
            serving,
            detail: format!(
                "{verb} master {}, {} serving after {} ms, old master back as a replica after {} ms",
                old.addr(),
                promoted.addr(),
                promotion.as_millis(),
                began.elapsed().as_millis()
            ),
            slots: Vec::new(),
        })
    }

    /// Starts watching, on a thread of its own, which node masters the lock (Sentinel and
    /// Cluster only): failovers the injector did not cause show up in its findings.
    pub(crate) fn watch_failovers(&self) -> Option<FailoverWatch> {
        let Store::Replicated(store) = &self.store else {
            return None;
        };
        let store = store.clone();
        let stop = Arc::new(AtomicBool::new(false));
        let thread = std::thread::spawn({
            let stop = stop.clone();
            move || watch(store.as_ref(), &stop)
        });
        Some(FailoverWatch {
            stop,
            thread: Some(thread),
        })
    }

    /// The logs of a harness deployment's nodes (this experiment's own servers log into the
    /// run's directory already).
    pub(crate) fn log(&self) -> Option<String> {
        match &self.store {
            Store::Servers { .. } => None,
            Store::Replicated(store) => Some(store.log()),
            Store::Postgres(store) => Some(store.log()),
        }
    }

    fn servers_mut(&mut self, what: &str) -> Result<&mut Vec<LockServer>, String> {
        match &mut self.store {
            Store::Servers { servers, .. } => Ok(servers),
            Store::Replicated(_) | Store::Postgres(_) => Err(format!(
                "{what} is not a fault of the {} topology",
                self.topology.name()
            )),
        }
    }
}

/// The `pid` a held lock records of its holder (see `lock_runtime::inspect::StoredLock`); `None`
/// for a released one, or one that records no holder.
fn holder_pid_in(value: &str) -> Option<u32> {
    let lock = lock_runtime::inspect::StoredLock::parse(value)?;
    if lock.state != "held" {
        return None;
    }
    lock.holder_field("pid")?.parse().ok()
}

/// A running failover watch (see [`Deployment::watch_failovers`]).
pub(crate) struct FailoverWatch {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<Vec<StoreFault>>>,
}

impl Drop for FailoverWatch {
    /// A run that ends early does not leave the watch asking forever.
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

impl FailoverWatch {
    /// Stops the watch and returns every change of master it saw, injected or not: from the
    /// last time it saw the old master named to the first time the old master no longer
    /// answered as a master (a client still connected to it could take the lock there until
    /// then), serving again when the new master was first named.
    pub(crate) fn stop(mut self) -> Result<Vec<StoreFault>, String> {
        self.stop.store(true, Ordering::Relaxed);
        let thread = self
            .thread
            .take()
            .ok_or("the failover watch was stopped twice")?;
        thread
            .join()
            .map_err(|_| "the failover watch panicked".to_owned())
    }
}

/// A change of master seen by the watch whose old master may still act as one.
struct Change {
    old: SocketAddr,
    new: SocketAddr,
    start: u64,
    serving: u64,
}

impl Change {
    fn over(self, end: u64) -> StoreFault {
        StoreFault {
            hit: Hit::Store,
            start: self.start,
            end,
            serving: self.serving,
            detail: format!(
                "{} named master instead of {} after {} ms; the old master stopped answering as one {} ms later",
                self.new,
                self.old,
                self.serving.saturating_sub(self.start) / 1_000_000,
                end.saturating_sub(self.serving) / 1_000_000
            ),
            slots: Vec::new(),
        }
    }
}

fn watch(store: &dyn Replicated, stop: &AtomicBool) -> Vec<StoreFault> {
    let mut found = Vec::new();
    // The master named last, and when.
    let mut named: Option<(SocketAddr, u64)> = None;
    let mut open: Option<Change> = None;
    while !stop.load(Ordering::Relaxed) {
        let now = now_ns();
        if let Some(master) = store.serving_master() {
            if let Some((old, last)) = named
                && old != master
            {
                if let Some(change) = open.take() {
                    found.push(change.over(now));
                }
                open = Some(Change {
                    old,
                    new: master,
                    start: last,
                    serving: now,
                });
            }
            named = Some((master, now));
        }
        if open
            .as_ref()
            .is_some_and(|change| !answers_as_master(change.old))
            && let Some(change) = open.take()
        {
            found.push(change.over(now_ns()));
        }
        std::thread::sleep(WATCH_INTERVAL);
    }
    if let Some(change) = open {
        found.push(change.over(now_ns()));
    }
    found
}

/// Whether `node` answers `ROLE` as a master now.
fn answers_as_master(node: SocketAddr) -> bool {
    match resp::command(node, None, &["ROLE"], WATCH_TIMEOUT) {
        Ok(Reply::Array(items)) => {
            matches!(items.first(), Some(Reply::Bulk(role)) if role == b"master")
        }
        _ => false,
    }
}

impl Store {
    fn servers(servers: Vec<LockServer>, config: &Config) -> Store {
        let proxies = (0..config.workers)
            .map(|_| {
                servers
                    .iter()
                    .map(|server| FaultProxy::start(server.addr()))
                    .collect()
            })
            .collect();
        Store::Servers { servers, proxies }
    }
}

fn ask(node: SocketAddr, args: &[&str]) -> std::io::Result<Reply> {
    resp::command(node, None, args, ASK_TIMEOUT)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::TTL;

    #[test]
    fn every_topology_parses_from_its_name() {
        for topology in Topology::ALL {
            assert_eq!(Topology::parse(topology.name()), Ok(topology));
        }
        assert!(Topology::parse("raft").is_err());
    }

    #[test]
    fn worker_connection_faults_exist_only_where_a_proxy_can_sit() {
        let proxied = [
            FaultKind::Stall,
            FaultKind::Delay,
            FaultKind::Cut,
            FaultKind::Partition,
        ];
        for topology in Topology::ALL {
            let has = proxied
                .iter()
                .all(|kind| topology.fault_kinds().contains(kind));
            let expected = !matches!(topology, Topology::Sentinel | Topology::Cluster);
            assert_eq!(has, expected, "{topology:?}");
        }
    }

    #[test]
    fn a_node_pause_on_sentinel_and_cluster_ends_before_a_failover_could_start() {
        // `down-after-milliseconds` and `cluster-node-timeout` in the harness are 1 s.
        for topology in [Topology::Sentinel, Topology::Cluster] {
            assert!(topology.fault_kinds().contains(&FaultKind::NodePause));
            let (lo, hi) = topology.node_pause_pct();
            assert!(lo < hi && TTL * hi as u32 / 100 < Duration::from_millis(900));
        }
        let (lo, _) = Topology::Redlock.node_pause_pct();
        assert!(
            TTL * lo as u32 / 100 > TTL,
            "a Redlock master is frozen past the lease"
        );
    }

    #[test]
    fn one_server_is_the_whole_store_and_takes_nothing_from_the_rng() {
        let mut rng = Rng::new(5);
        let before = rng.clone().next_u64();
        assert_eq!(pick(1, &mut rng), (0, Hit::Store));
        assert_eq!(rng.next_u64(), before);
        let (node, hit) = pick(3, &mut rng);
        assert_eq!(hit, Hit::Master(node));
        assert!(node < 3);
    }

    #[test]
    fn a_cluster_nodes_line_gives_its_slot_ranges_without_slots_in_migration() {
        let line = "07c37dfeb2 127.0.0.1:30004@31004 myself,master - 0 0 1 connected \
                    0-5460 6000 [93->-292f8b365bb]";
        assert_eq!(parse_slot_ranges(line), [(0, 5460), (6000, 6000)]);
        let replica = "e7d1eecce 127.0.0.1:30005@31005 myself,slave 07c37dfeb2 0 0 1 connected";
        assert!(parse_slot_ranges(replica).is_empty());
    }

    #[test]
    fn the_holder_pid_is_read_from_a_held_lock_only() {
        let held = "held token=t waiting=0 since=1 host=web-1 pid=42 app=chaos pid=7";
        assert_eq!(holder_pid_in(held), Some(42));
        let old = "held fence=5 token=t waiting=1 since=1 host=h pid=9 app=";
        assert_eq!(holder_pid_in(old), Some(9));
        for other in [
            "held token=t waiting=0",
            "kept waiting=0",
            "free next=t until=5",
            "x",
        ] {
            assert_eq!(holder_pid_in(other), None, "{other}");
        }
    }
}
