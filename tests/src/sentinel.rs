//! A master with replicas, watched by Redis Sentinels.

use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use crate::resp::Reply;
use crate::server::RedisServer;
use crate::topology::{self, Role};

/// The name the sentinels monitor the master under.
pub const MASTER_NAME: &str = "mymaster";

/// How long the replicas may take to sync, and the sentinels to find the replicas and each other
/// (sentinels announce themselves every 2 s).
const SETTLE_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a failover may take: 1 s to call the master down, up to 1 s of random delay before
/// the election, the promotion, and the reconfiguration of the other replicas. A failed
/// election is retried after twice the failover timeout (6 s).
const FAILOVER_TIMEOUT: Duration = Duration::from_secs(40);

/// One master, its replicas and the sentinels watching it, each a [`RedisServer`] of its own, all
/// killed on drop.
///
/// ```no_run
/// use lock_tests::SentinelSetup;
///
/// let setup = SentinelSetup::start(1, 3);
/// // connect the client under test to setup.url()
/// let promoted = setup.kill_master_and_wait_failover();
/// assert_eq!(promoted.cmd(&["SET", "k", "v"]), "OK", "{}", setup.log());
/// ```
///
/// The sentinels run with `down-after-milliseconds 1000`, `failover-timeout 3000` and
/// `parallel-syncs 1`, and a quorum of a majority of them.
#[derive(Debug)]
pub struct SentinelSetup {
    /// The master it started with first, then the replicas.
    data: Vec<RedisServer>,
    sentinels: Vec<RedisServer>,
}

impl SentinelSetup {
    /// Starts a master, `replicas` replicas of it and `sentinels` sentinels, and returns once the
    /// replicas are in sync and every sentinel sees the master up, every replica with its link
    /// up, and all the other sentinels.
    ///
    /// # Panics
    ///
    /// If `sentinels` is 0, or the setup does not settle within 30 s; messages carry the logs.
    pub fn start(replicas: usize, sentinels: usize) -> Self {
        assert!(
            sentinels > 0,
            "SentinelSetup::start needs at least one sentinel"
        );
        let master = RedisServer::start_with(&DATA_ARGS);
        let master_port = master.port().to_string();
        let mut replica_args = DATA_ARGS.to_vec();
        replica_args.extend(["--replicaof", "127.0.0.1", &master_port]);
        let mut data = vec![master];
        data.extend(topology::start_all(replicas, |_| {
            RedisServer::start_with(&replica_args)
        }));
        let mut setup = Self {
            data,
            sentinels: Vec::new(),
        };
        // A sentinel learns of the replicas from the master's INFO, which it asks for at once
        // and then only every 10 s: the replicas must be attached before it starts.
        let synced = topology::settle(SETTLE_TIMEOUT, || setup.check_replication(&setup.data[0]));
        if let Err(why) = synced {
            panic!("replicas did not sync {why}\n{}", setup.log());
        }

        let quorum = sentinels / 2 + 1;
        let config = format!(
            "sentinel monitor {MASTER_NAME} 127.0.0.1 {master_port} {quorum}\n\
             sentinel down-after-milliseconds {MASTER_NAME} 1000\n\
             sentinel failover-timeout {MASTER_NAME} 3000\n\
             sentinel parallel-syncs {MASTER_NAME} 1\n"
        );
        setup.sentinels = topology::start_all(sentinels, |_| {
            RedisServer::start_with_config(&config, &["--sentinel"])
        });
        let watching = topology::settle(SETTLE_TIMEOUT, || setup.check_sentinels(Link::Up));
        if let Err(why) = watching {
            panic!("sentinels did not settle {why}\n{}", setup.log());
        }
        setup
    }

    /// The node the sentinels name master now (see
    /// [`current_master_addr`](Self::current_master_addr)).
    ///
    /// # Panics
    ///
    /// If no sentinel answers, or the one that does names a node not in this setup.
    pub fn master(&self) -> &RedisServer {
        let addr = self.current_master_addr();
        self.data_node_at(addr).unwrap_or_else(|| {
            panic!(
                "the sentinels name {addr} master, which is not a node of this setup\n{}",
                self.log()
            )
        })
    }

    /// The data nodes that answer `ROLE` as replica now.
    pub fn replicas(&self) -> Vec<&RedisServer> {
        self.data
            .iter()
            .filter(|&node| matches!(topology::role(node), Some(Role::Replica { .. })))
            .collect()
    }

    /// Every data node, whatever its role now: the first master first, then the replicas it
    /// started with.
    pub fn nodes(&self) -> &[RedisServer] {
        &self.data
    }

    /// The sentinels.
    pub fn sentinels(&self) -> &[RedisServer] {
        &self.sentinels
    }

    /// The name the master is monitored under: `mymaster`.
    pub fn master_name(&self) -> &str {
        MASTER_NAME
    }

    /// `redis+sentinel://127.0.0.1:<s1>,127.0.0.1:<s2>,.../mymaster`.
    pub fn url(&self) -> String {
        let addrs: Vec<String> = self
            .sentinels
            .iter()
            .map(|sentinel| sentinel.addr().to_string())
            .collect();
        format!("redis+sentinel://{}/{MASTER_NAME}", addrs.join(","))
    }

    /// The master's address according to the first sentinel that answers
    /// `SENTINEL get-master-addr-by-name`.
    ///
    /// # Panics
    ///
    /// If no sentinel answers.
    pub fn current_master_addr(&self) -> SocketAddr {
        self.try_master_addr().unwrap_or_else(|| {
            panic!(
                "no sentinel answers get-master-addr-by-name\n{}",
                self.log()
            )
        })
    }

    /// As [`current_master_addr`](Self::current_master_addr), `None` when no sentinel answers:
    /// for watching the setup without a panic in the way.
    pub fn try_master_addr(&self) -> Option<SocketAddr> {
        self.sentinels.iter().find_map(master_addr_by_name)
    }

    /// Kills the current master (SIGKILL) and returns the replica that took its place, once
    /// every live sentinel names it master and it answers `ROLE` as master.
    ///
    /// # Panics
    ///
    /// If there is no replica to promote, or the failover does not complete within 40 s.
    pub fn kill_master_and_wait_failover(&self) -> &RedisServer {
        let old = self.master_with_replica();
        old.kill();
        self.wait_promoted(old, "after it was killed")
    }

    /// Stops the current master with SIGSTOP and returns the replica that took its place, as
    /// [`kill_master_and_wait_failover`](Self::kill_master_and_wait_failover) does. The old
    /// master is still paused: resumed, it is a master with its old data until a sentinel
    /// turns it into a replica (Sentinel waits 8 s before it does), and a client still
    /// connected to it meanwhile talks to a stale master. [`rejoin`](Self::rejoin) brings it
    /// back as a replica at once.
    ///
    /// # Panics
    ///
    /// As [`kill_master_and_wait_failover`](Self::kill_master_and_wait_failover).
    pub fn pause_master_and_wait_failover(&self) -> &RedisServer {
        let old = self.master_with_replica();
        old.pause();
        self.wait_promoted(old, "after it was paused")
    }

    /// Returns the replica that took over from `old`, a master the test stopped itself (to
    /// send it requests while it is paused, say), once every live sentinel names it master
    /// and it answers `ROLE` as master.
    ///
    /// # Panics
    ///
    /// As [`kill_master_and_wait_failover`](Self::kill_master_and_wait_failover).
    pub fn wait_replaced(&self, old: &RedisServer) -> &RedisServer {
        self.wait_promoted(old, "after the test stopped it")
    }

    /// Brings back a data node that a failover replaced, as a replica of the current master:
    /// resumes it if it was paused, restarts it (empty) if it was killed, points it at the
    /// master with `REPLICAOF`, and returns once the setup has settled (see
    /// [`wait_settled`](Self::wait_settled)). Later failovers then have a replica to promote
    /// again.
    ///
    /// # Panics
    ///
    /// If `node` is not a data node of this setup, or the setup does not settle within 30 s.
    pub fn rejoin(&self, node: &RedisServer) {
        assert!(
            self.data_node_at(node.addr()).is_some(),
            "{} is not a data node of this setup\n{}",
            node.addr(),
            self.log()
        );
        node.revive();
        let master = self.master();
        if master.port() != node.port() {
            let port = master.port().to_string();
            // A restarted node may follow the master already (it started with `--replicaof`
            // it): then the answer is `OK Already connected to specified master`.
            let reply = node.cmd(&["REPLICAOF", "127.0.0.1", &port]);
            assert!(
                reply.starts_with("OK"),
                "REPLICAOF on {} refused: {reply}\n{}",
                node.addr(),
                self.log()
            );
        }
        self.wait_settled();
    }

    /// Waits until every live sentinel names the same master, it answers `ROLE` as master and
    /// counts every other data node as a replica online, each replica has its link up, and
    /// every sentinel sees each replica up. The master is looked up again on every check:
    /// Sentinel may fail over on its own meanwhile (two failovers in quick succession can make
    /// a sentinel call the fresh master down), and then the setup settles around the new one.
    ///
    /// # Panics
    ///
    /// If the setup does not settle within 30 s.
    pub fn wait_settled(&self) {
        let settled = topology::settle(SETTLE_TIMEOUT, || {
            let master = self.named_master()?;
            self.check_replication(master)?;
            self.check_sentinels(Link::Any)
        });
        if let Err(why) = settled {
            panic!("the setup did not settle {why}\n{}", self.log());
        }
    }

    /// The logs of all nodes and sentinels, each under a header naming it. Meant for assertion
    /// messages.
    pub fn log(&self) -> String {
        let data = self.data.iter().map(|node| ("data node", node));
        let sentinels = self.sentinels.iter().map(|node| ("sentinel", node));
        topology::logs(data.chain(sentinels))
    }

    fn data_node_at(&self, addr: SocketAddr) -> Option<&RedisServer> {
        self.data.iter().find(|node| node.addr() == addr)
    }

    /// The current master, after checking that it has a replica to fail over to.
    fn master_with_replica(&self) -> &RedisServer {
        let master = self.master();
        assert!(
            !self.replicas().is_empty(),
            "no replica to fail over to\n{}",
            self.log()
        );
        master
    }

    /// Waits until every live sentinel names one node other than `old` master and that node
    /// answers `ROLE` as master.
    fn wait_promoted(&self, old: &RedisServer, context: &str) -> &RedisServer {
        let promoted = topology::settle(FAILOVER_TIMEOUT, || {
            let master = self.named_master()?;
            if master.addr() == old.addr() {
                return Err(format!("the sentinels still name {} master", old.addr()));
            }
            Ok(master)
        });
        promoted.unwrap_or_else(|why| {
            panic!(
                "no replica took over from {} {context} {why}\n{}",
                old.addr(),
                self.log()
            )
        })
    }

    /// The node every live sentinel names master, if they agree and it answers `ROLE` as
    /// master.
    fn named_master(&self) -> Result<&RedisServer, String> {
        let named: Vec<SocketAddr> = self
            .sentinels
            .iter()
            .filter_map(master_addr_by_name)
            .collect();
        let Some(&addr) = named.first() else {
            return Err("no sentinel answers".to_owned());
        };
        if named.iter().any(|&other| other != addr) {
            return Err(format!("the sentinels name {named:?} master"));
        }
        let node = self
            .data_node_at(addr)
            .ok_or_else(|| format!("{addr} is not a node of this setup"))?;
        match topology::role(node) {
            Some(Role::Master) => Ok(node),
            role => Err(format!("{addr} is named master but has role {role:?}")),
        }
    }

    /// `Ok` when `master` counts every other data node as a replica online and each of them has
    /// its link up.
    fn check_replication(&self, master: &RedisServer) -> Result<(), String> {
        let replicas: Vec<&RedisServer> = self
            .data
            .iter()
            .filter(|node| node.port() != master.port())
            .collect();
        let info = topology::ask_text(master, &["INFO", "replication"])?;
        let online = (0..replicas.len())
            .filter(|i| {
                topology::info_field(&info, &format!("slave{i}"))
                    .is_some_and(|slave| slave.contains("state=online"))
            })
            .count();
        if online != replicas.len() {
            return Err(format!(
                "master {} has {online} of {} replicas online",
                master.addr(),
                replicas.len()
            ));
        }
        for replica in replicas {
            let info = topology::ask_text(replica, &["INFO", "replication"])?;
            let link = topology::info_field(&info, "master_link_status");
            if link != Some("up") {
                return Err(format!(
                    "replica {} has master_link_status {link:?}",
                    replica.addr()
                ));
            }
        }
        Ok(())
    }

    /// `Ok` when every sentinel sees the master up, all the other sentinels, and every replica
    /// up (with `Link::Up`: with its link to the master up, too).
    fn check_sentinels(&self, link: Link) -> Result<(), String> {
        let replicas = self.data.len() - 1;
        let others = (self.sentinels.len() - 1).to_string();
        for sentinel in &self.sentinels {
            let master = sentinel_fields(sentinel, &["SENTINEL", "master", MASTER_NAME])?;
            let flags = master.get("flags").map(String::as_str);
            if flags != Some("master") {
                return Err(format!("{} flags the master {flags:?}", sentinel.addr()));
            }
            let seen = master.get("num-other-sentinels");
            if seen != Some(&others) {
                return Err(format!(
                    "{} sees {seen:?} other sentinels, expected {others}",
                    sentinel.addr()
                ));
            }
            let listed = sentinel_list(sentinel, &["SENTINEL", "replicas", MASTER_NAME])?;
            let linked = listed
                .iter()
                .filter(|replica| {
                    replica.get("flags").map(String::as_str) == Some("slave")
                        && (link == Link::Any
                            || replica.get("master-link-status").map(String::as_str) == Some("ok"))
                })
                .count();
            if linked != replicas {
                return Err(format!(
                    "{} sees {linked} of {replicas} replicas up ({link:?}): {listed:?}",
                    sentinel.addr()
                ));
            }
        }
        Ok(())
    }
}

/// What [`SentinelSetup::check_sentinels`] asks of the sentinels' view of each replica's link.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Link {
    /// Up: at the start, when a sentinel would otherwise learn of the replicas only from the
    /// master's INFO 10 s later.
    Up,
    /// Whatever it was when the sentinel last asked. A sentinel that did not lead the failover
    /// refreshes a replica's INFO every 10 s only, so it may report a rejoined replica's link
    /// down for that long; it asks every second once the master is down, which is all a
    /// failover needs.
    Any,
}

/// Arguments of the master and replicas: replicas sync at once instead of waiting 5 s for more
/// replicas to join.
const DATA_ARGS: [&str; 2] = ["--repl-diskless-sync-delay", "0"];

/// The master's address as `sentinel` names it, or `None` when it does not answer.
fn master_addr_by_name(sentinel: &RedisServer) -> Option<SocketAddr> {
    let reply = topology::ask(
        sentinel,
        &["SENTINEL", "get-master-addr-by-name", MASTER_NAME],
    )?;
    let Reply::Array(items) = reply else {
        return None;
    };
    let [Reply::Bulk(ip), Reply::Bulk(port)] = items.as_slice() else {
        return None;
    };
    let ip: Ipv4Addr = String::from_utf8_lossy(ip).parse().ok()?;
    let port: u16 = String::from_utf8_lossy(port).parse().ok()?;
    Some(SocketAddr::from((ip, port)))
}

/// A `SENTINEL` reply that is one flat list of field names and values, as a map.
fn sentinel_fields(
    sentinel: &RedisServer,
    args: &[&str],
) -> Result<HashMap<String, String>, String> {
    match topology::ask(sentinel, args) {
        Some(Reply::Array(items)) => Ok(fields(&items)),
        other => Err(format!("{args:?} on {} gave {other:?}", sentinel.addr())),
    }
}

/// A `SENTINEL` reply that is a list of field lists (replicas, sentinels), as maps.
fn sentinel_list(
    sentinel: &RedisServer,
    args: &[&str],
) -> Result<Vec<HashMap<String, String>>, String> {
    let Some(Reply::Array(entries)) = topology::ask(sentinel, args) else {
        return Err(format!("{args:?} on {} gave no list", sentinel.addr()));
    };
    Ok(entries
        .iter()
        .map(|entry| match entry {
            Reply::Array(items) => fields(items),
            _ => HashMap::new(),
        })
        .collect())
}

fn fields(items: &[Reply]) -> HashMap<String, String> {
    items
        .chunks_exact(2)
        .map(|pair| (pair[0].to_string(), pair[1].to_string()))
        .collect()
}
