//! A Redis Cluster of private nodes, formed with `redis-cli --cluster create`.

use std::fs::File;
use std::io::ErrorKind;
use std::net::{Ipv4Addr, TcpListener};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::port::free_port;
use crate::server::RedisServer;
use crate::server::server_version;
use crate::tempdir::TempDir;
use crate::topology::{self, Role};

/// Number of hash slots in a Redis Cluster.
pub const SLOT_COUNT: u16 = 16384;

const CLI_NOT_FOUND: &str = "redis-cli not found: install it with 'sudo apt-get install redis-tools' (or run scripts/test.sh, which does)";
/// `--cluster-node-timeout`: how long a node may be unreachable before it is failed over.
/// Short, so failovers take seconds.
const NODE_TIMEOUT_MS: &str = "1000";
/// How long `redis-cli --cluster create` may take (it polls the join once a second).
const CREATE_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a cluster may take to reach a consistent, fully covered state: after creation, after
/// a failover. A master reports `cluster_state:ok` no sooner than 2 s after it started.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(30);

/// A Redis Cluster on loopback: `masters` masters with `replicas_per_master` replicas each, every
/// node a [`RedisServer`] of its own, all killed on drop.
///
/// ```no_run
/// use lock_tests::RedisCluster;
///
/// let cluster = RedisCluster::start(3, 1);
/// let master = cluster.master_for_key("lock:{order-1}");
/// let promoted = cluster.kill_master_and_wait_failover(master);
/// assert_eq!(promoted.cmd(&["SET", "lock:{order-1}", "x"]), "OK", "{}", cluster.log());
/// ```
///
/// Roles change with failovers, so [`masters`](Self::masters), [`replicas`](Self::replicas) and
/// [`master_for_key`](Self::master_for_key) ask the nodes each time. A node that does not answer
/// within a second (killed or paused) is neither master nor replica.
#[derive(Debug)]
pub struct RedisCluster {
    nodes: Vec<RedisServer>,
}

impl RedisCluster {
    /// Starts `masters * (1 + replicas_per_master)` nodes side by side, forms the cluster with
    /// `redis-cli --cluster create`, and returns once every node reports `cluster_state:ok` with
    /// all 16384 slots served, every node sees every other with the role it reports itself, and
    /// every replica's link to its master is up.
    ///
    /// # Panics
    ///
    /// If `masters` is below 3 (`redis-cli` refuses to create smaller clusters), if `redis-cli`
    /// is missing or fails, or if the cluster does not settle within 30 s; messages carry the
    /// logs.
    pub fn start(masters: usize, replicas_per_master: usize) -> Self {
        Self::start_on(masters, replicas_per_master, None)
    }

    /// [`start`](Self::start) with nodes that also speak TLS with the certificates of `certs`
    /// (each a [`RedisServer::start_tls`] that asks clients for a certificate), and talk to each
    /// other over TLS on the cluster bus (`--tls-cluster yes`). Over TLS, they name each other's
    /// TLS ports: connect to [`tls_url`](Self::tls_url). The harness keeps using the plain ports.
    ///
    /// # Panics
    ///
    /// As [`start`](Self::start).
    pub fn start_tls(masters: usize, certs: &crate::TestCerts) -> Self {
        Self::start_on(masters, 0, Some(certs))
    }

    fn start_on(
        masters: usize,
        replicas_per_master: usize,
        tls: Option<&crate::TestCerts>,
    ) -> Self {
        assert!(
            masters >= 3,
            "redis-cli --cluster create needs at least 3 masters, got {masters}"
        );
        let count = masters * (1 + replicas_per_master);
        let cluster = Self {
            nodes: topology::start_all(count, |_| start_node(tls)),
        };
        cluster.create(replicas_per_master);
        let settled = topology::settle(SETTLE_TIMEOUT, || {
            cluster.check(true)?;
            let found = (cluster.masters().len(), cluster.replicas().len());
            let expected = (masters, masters * replicas_per_master);
            if found != expected {
                return Err(format!(
                    "(masters, replicas) are {found:?}, expected {expected:?}"
                ));
            }
            Ok(())
        });
        if let Err(why) = settled {
            panic!("cluster did not form {why}\n{}", cluster.log());
        }
        cluster
    }

    /// Every node, masters and replicas, in start order (roles may have changed since).
    pub fn nodes(&self) -> &[RedisServer] {
        &self.nodes
    }

    /// The nodes that answer `ROLE` as master now.
    pub fn masters(&self) -> Vec<&RedisServer> {
        self.with_role(|role| role == Role::Master)
    }

    /// The nodes that answer `ROLE` as replica now.
    pub fn replicas(&self) -> Vec<&RedisServer> {
        self.with_role(|role| matches!(role, Role::Replica { .. }))
    }

    /// The nodes that answer `ROLE` as replicas of `master` now.
    pub fn replicas_of(&self, master: &RedisServer) -> Vec<&RedisServer> {
        let master_port = master.port();
        self.with_role(|role| role == Role::Replica { master_port })
    }

    /// `redis://127.0.0.1:<port>` of every node, replicas included.
    pub fn seed_urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }

    /// `redis+cluster://127.0.0.1:<p1>,127.0.0.1:<p2>,...` with every node as a seed.
    pub fn url(&self) -> String {
        let addrs: Vec<String> = self.nodes.iter().map(|n| n.addr().to_string()).collect();
        format!("redis+cluster://{}", addrs.join(","))
    }

    /// `rediss+cluster://127.0.0.1:<tls p1>,...` with every node as a seed, for a cluster
    /// started with [`start_tls`](Self::start_tls).
    ///
    /// # Panics
    ///
    /// If the nodes have no TLS port.
    pub fn tls_url(&self) -> String {
        let addrs: Vec<String> = self
            .nodes
            .iter()
            .map(|node| match node.tls_port() {
                Some(port) => format!("127.0.0.1:{port}"),
                None => panic!("the cluster was not started with start_tls"),
            })
            .collect();
        format!("rediss+cluster://{}", addrs.join(","))
    }

    /// The master serving the slot of `key` (see [`key_slot`]).
    ///
    /// # Panics
    ///
    /// If no live master claims the slot (e.g. its master was killed and not yet failed over).
    pub fn master_for_key(&self, key: impl AsRef<[u8]>) -> &RedisServer {
        self.master_for_slot(key_slot(key))
    }

    /// The master that claims `slot` in its own `CLUSTER NODES` line.
    ///
    /// # Panics
    ///
    /// As [`master_for_key`](Self::master_for_key).
    pub fn master_for_slot(&self, slot: u16) -> &RedisServer {
        self.try_master_for_slot(slot)
            .unwrap_or_else(|| panic!("no live master serves slot {slot}\n{}", self.log()))
    }

    /// As [`master_for_key`](Self::master_for_key), `None` when no live master claims the slot:
    /// for watching the cluster without a panic in the way.
    pub fn try_master_for_key(&self, key: impl AsRef<[u8]>) -> Option<&RedisServer> {
        self.try_master_for_slot(key_slot(key))
    }

    fn try_master_for_slot(&self, slot: u16) -> Option<&RedisServer> {
        let serves = |node: &RedisServer| {
            let Ok(view) = topology::ask_text(node, &["CLUSTER", "NODES"]) else {
                return false;
            };
            parse_nodes(&view)
                .iter()
                .find(|entry| entry.has_flag("myself"))
                .is_some_and(|me| me.has_flag("master") && me.serves(slot))
        };
        self.masters().into_iter().find(|&node| serves(node))
    }

    /// Kills `master` (SIGKILL) and returns the replica that took its place, once the cluster
    /// has settled again: `cluster_state:ok` and all slots served on every live node, and every
    /// live node agreeing on the roles.
    ///
    /// # Panics
    ///
    /// If `master` is not a master of this cluster or has no replica, or if no replica takes
    /// over within 30 s.
    pub fn kill_master_and_wait_failover(&self, master: &RedisServer) -> &RedisServer {
        let candidates = self.failover_candidates(master);
        master.kill();
        self.wait_promoted(master, &candidates, "after it was killed")
    }

    /// Stops `master` with SIGSTOP and returns the replica that took its place, as
    /// [`kill_master_and_wait_failover`](Self::kill_master_and_wait_failover) does. The old
    /// master is still paused: after [`RedisServer::resume`] it learns that it lost its slots
    /// and turns into a replica, but until then a client still connected to it is talking to
    /// a stale master.
    ///
    /// # Panics
    ///
    /// As [`kill_master_and_wait_failover`](Self::kill_master_and_wait_failover).
    pub fn pause_master_and_wait_failover(&self, master: &RedisServer) -> &RedisServer {
        let candidates = self.failover_candidates(master);
        master.pause();
        self.wait_promoted(master, &candidates, "after it was paused")
    }

    /// Brings back a node that a failover replaced: resumes it if it was paused, restarts it if
    /// it was killed (empty, but with its `nodes.conf`, so it is the same cluster node), and
    /// returns once the cluster has settled with every node up (see
    /// [`wait_settled`](Self::wait_settled)); the returning master has then turned into a
    /// replica, since the cluster tells it that its slots moved. Later failovers then have a
    /// replica to promote again.
    ///
    /// # Panics
    ///
    /// If `node` is not a node of this cluster, or the cluster does not settle within 30 s.
    pub fn rejoin(&self, node: &RedisServer) {
        assert!(
            self.nodes.iter().any(|ours| ours.port() == node.port()),
            "{} is not a node of this cluster\n{}",
            node.addr(),
            self.log()
        );
        node.revive();
        let replica = topology::settle(SETTLE_TIMEOUT, || match topology::role(node) {
            Some(Role::Replica { .. }) => Ok(()),
            role => Err(format!("{} has role {role:?}", node.addr())),
        });
        if let Err(why) = replica {
            panic!(
                "{} did not rejoin as a replica {why}\n{}",
                node.addr(),
                self.log()
            );
        }
        self.wait_settled();
    }

    /// Waits until every node is up and reports `cluster_state:ok` with all slots served, all
    /// agree on who is master and replica, and every replica's link is up: as after
    /// [`start`](Self::start), whatever failed over since.
    ///
    /// # Panics
    ///
    /// If the cluster does not settle within 30 s.
    pub fn wait_settled(&self) {
        if let Err(why) = topology::settle(SETTLE_TIMEOUT, || self.check(true)) {
            panic!("the cluster did not settle {why}\n{}", self.log());
        }
    }

    /// Promotes a replica of `master` with `CLUSTER FAILOVER` (the coordinated kind: the master
    /// stops taking writes until the replica caught up) and returns it once it is master, the
    /// old master has become its replica, and the cluster has settled.
    ///
    /// # Panics
    ///
    /// If `master` is not a live master of this cluster or has no replica, or if the failover
    /// does not complete within 30 s.
    pub fn manual_failover(&self, master: &RedisServer) -> &RedisServer {
        let candidates = self.failover_candidates(master);
        let replica = candidates[0];
        let reply = replica.cmd(&["CLUSTER", "FAILOVER"]);
        assert_eq!(
            reply,
            "OK",
            "CLUSTER FAILOVER on {} refused\n{}",
            replica.addr(),
            self.log()
        );
        let master_port = replica.port();
        let settled = topology::settle(SETTLE_TIMEOUT, || {
            if topology::role(replica) != Some(Role::Master) {
                return Err(format!("{} is not master yet", replica.addr()));
            }
            if topology::role(master) != Some(Role::Replica { master_port }) {
                return Err(format!(
                    "{} is not a replica of {} yet",
                    master.addr(),
                    replica.addr()
                ));
            }
            self.check(false)
        });
        if let Err(why) = settled {
            panic!(
                "manual failover of {} to {} did not complete {why}\n{}",
                master.addr(),
                replica.addr(),
                self.log()
            );
        }
        replica
    }

    /// The logs of all nodes, each under a header naming it. Meant for assertion messages.
    pub fn log(&self) -> String {
        topology::logs(self.nodes.iter().map(|node| ("cluster node", node)))
    }

    fn with_role(&self, wanted: impl Fn(Role) -> bool) -> Vec<&RedisServer> {
        self.nodes
            .iter()
            .filter(|&node| topology::role(node).is_some_and(&wanted))
            .collect()
    }

    /// The replicas of `master`, after checking that it is one of ours and a master.
    fn failover_candidates(&self, master: &RedisServer) -> Vec<&RedisServer> {
        assert!(
            self.nodes.iter().any(|node| node.port() == master.port()),
            "{} is not a node of this cluster\n{}",
            master.addr(),
            self.log()
        );
        assert_eq!(
            topology::role(master),
            Some(Role::Master),
            "{} is not a live master\n{}",
            master.addr(),
            self.log()
        );
        let candidates = self.replicas_of(master);
        assert!(
            !candidates.is_empty(),
            "master {} has no replica to fail over to\n{}",
            master.addr(),
            self.log()
        );
        candidates
    }

    /// Waits until one of `candidates` is master and the cluster has settled without `master`.
    fn wait_promoted<'a>(
        &self,
        master: &RedisServer,
        candidates: &[&'a RedisServer],
        context: &str,
    ) -> &'a RedisServer {
        let settled = topology::settle(SETTLE_TIMEOUT, || {
            let promoted = candidates
                .iter()
                .copied()
                .find(|&node| topology::role(node) == Some(Role::Master))
                .ok_or_else(|| format!("no replica of {} is master yet", master.addr()))?;
            self.check(false)?;
            Ok(promoted)
        });
        settled.unwrap_or_else(|why| {
            panic!(
                "no replica took over from {} {context} {why}\n{}",
                master.addr(),
                self.log()
            )
        })
    }

    /// `Ok` when every live node (all nodes, with `all_up`) says `cluster_state:ok` with all
    /// slots served, sees every other live node healthy and in the role that node reports, and
    /// (for replicas) has its link to the master up; otherwise the first thing amiss.
    fn check(&self, all_up: bool) -> Result<(), String> {
        let mut live = Vec::new();
        for node in &self.nodes {
            match topology::role(node) {
                Some(role) => live.push((node, role)),
                None if all_up => return Err(format!("{} does not answer ROLE", node.addr())),
                None => {}
            }
        }
        for &(node, role) in &live {
            let info = topology::ask_text(node, &["CLUSTER", "INFO"])?;
            let state = topology::info_field(&info, "cluster_state");
            let slots_ok = topology::info_field(&info, "cluster_slots_ok");
            if state != Some("ok") || slots_ok != Some("16384") {
                return Err(format!(
                    "{} reports cluster_state {state:?} with {slots_ok:?} slots ok",
                    node.addr()
                ));
            }
            let view = topology::ask_text(node, &["CLUSTER", "NODES"])?;
            check_view(node, &parse_nodes(&view), &live)?;
            if let Role::Replica { .. } = role {
                let replication = topology::ask_text(node, &["INFO", "replication"])?;
                let link = topology::info_field(&replication, "master_link_status");
                if link != Some("up") {
                    return Err(format!("{} has master_link_status {link:?}", node.addr()));
                }
            }
        }
        Ok(())
    }
}

/// The hash slot of `key`: CRC16 (XMODEM) of the key modulo 16384, where a key with a non-empty
/// `{hash tag}` is hashed by the tag alone, so `{user1000}.following` and
/// `{user1000}.followers` share a slot.
pub fn key_slot(key: impl AsRef<[u8]>) -> u16 {
    let key = key.as_ref();
    crc16(hash_tag(key).unwrap_or(key)) % SLOT_COUNT
}

/// What is between the first `{` and the first `}` after it, unless that is empty.
fn hash_tag(key: &[u8]) -> Option<&[u8]> {
    let open = key.iter().position(|&b| b == b'{')?;
    let after = &key[open + 1..];
    let close = after.iter().position(|&b| b == b'}')?;
    (close > 0).then(|| &after[..close])
}

/// CRC16/XMODEM: polynomial 0x1021, initial value 0, no reflection, as Redis Cluster uses.
fn crc16(bytes: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &byte in bytes {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 == 0 {
                crc << 1
            } else {
                (crc << 1) ^ 0x1021
            };
        }
    }
    crc
}

/// Starts one cluster node. Its config file is named after its port (a retry on another port
/// must not load the file a failed attempt left). Its bus gets a free port of its own
/// (`--cluster-port`, Redis 7): the default, port + 10000, does not exist for ports above 55535.
/// Older servers have no `--cluster-port`; they get a port whose port + 10000 is free. With
/// `tls`, it also speaks TLS, on the bus too (see [`RedisCluster::start_tls`]).
fn start_node(tls: Option<&crate::TestCerts>) -> RedisServer {
    let bus_port_option = server_version() >= (7, 0, 0);
    let choose_port = if bus_port_option {
        free_port
    } else {
        free_port_with_default_bus
    };
    RedisServer::start_custom_on(None, choose_port, |port| {
        let mut args = [
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            &format!("nodes-{port}.conf"),
            "--cluster-node-timeout",
            NODE_TIMEOUT_MS,
            // A replica fails over however long its link was down: a busy test machine must
            // not make it think its data too stale.
            "--cluster-replica-validity-factor",
            "0",
            // Replicas sync at once instead of waiting 5 s for more replicas to join.
            "--repl-diskless-sync-delay",
            "0",
        ]
        .map(str::to_owned)
        .to_vec();
        if bus_port_option {
            let bus_port = loop {
                let candidate = free_port();
                if candidate != port {
                    break candidate;
                }
            };
            args.extend(["--cluster-port".to_owned(), bus_port.to_string()]);
        }
        if let Some(certs) = tls {
            args.extend(certs.server_args(free_port(), true));
            args.extend(["--tls-cluster".to_owned(), "yes".to_owned()]);
        }
        args
    })
}

/// A free port whose default cluster bus port (port + 10000) is free too.
fn free_port_with_default_bus() -> u16 {
    loop {
        let port = free_port();
        let Some(bus) = port.checked_add(10_000) else {
            continue;
        };
        if bus != 6379 && TcpListener::bind((Ipv4Addr::LOCALHOST, bus)).is_ok() {
            return port;
        }
    }
}

impl RedisCluster {
    /// Runs `redis-cli --cluster create` on all nodes, its output in a file (a pipe nobody reads
    /// could fill up and block it), and kills it if it runs too long.
    fn create(&self, replicas_per_master: usize) {
        let dir = TempDir::new("cluster-create");
        let output_path = dir.path().join("redis-cli.out");
        let output = File::create(&output_path)
            .unwrap_or_else(|e| panic!("cannot create {}: {e}", output_path.display()));
        let stderr = output
            .try_clone()
            .unwrap_or_else(|e| panic!("cannot share {}: {e}", output_path.display()));
        let spawned = Command::new("redis-cli")
            .args(["--cluster", "create"])
            .args(self.nodes.iter().map(|node| node.addr().to_string()))
            .args(["--cluster-replicas", &replicas_per_master.to_string()])
            .arg("--cluster-yes")
            .stdin(Stdio::null())
            .stdout(output)
            .stderr(stderr)
            .spawn();
        let mut child = match spawned {
            Ok(child) => child,
            Err(e) if e.kind() == ErrorKind::NotFound => panic!("{CLI_NOT_FOUND}"),
            Err(e) => panic!("cannot spawn redis-cli: {e}"),
        };
        let deadline = Instant::now() + CREATE_TIMEOUT;
        let status = loop {
            if let Some(status) = child.try_wait().ok().flatten() {
                break Some(status);
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        if status.is_some_and(|status| status.success()) {
            return;
        }
        let said = std::fs::read_to_string(&output_path).unwrap_or_default();
        let outcome = match status {
            Some(status) => format!("failed ({status})"),
            None => format!("did not finish within {CREATE_TIMEOUT:?}"),
        };
        panic!(
            "redis-cli --cluster create {outcome}\n--- redis-cli output ---\n{said}\n{}",
            self.log()
        );
    }
}

/// One line of `CLUSTER NODES`.
#[derive(Debug)]
struct NodeEntry<'a> {
    id: &'a str,
    port: u16,
    flags: Vec<&'a str>,
    /// The master's id for a replica, `-` for a master.
    master_id: &'a str,
    /// Inclusive ranges; slots being migrated or imported (`[...]`) are left out.
    slots: Vec<(u16, u16)>,
}

impl NodeEntry<'_> {
    fn has_flag(&self, flag: &str) -> bool {
        self.flags.contains(&flag)
    }

    fn serves(&self, slot: u16) -> bool {
        self.slots
            .iter()
            .any(|&(first, last)| (first..=last).contains(&slot))
    }
}

/// Parses `CLUSTER NODES`: `<id> <ip:port@cport[,hostname]> <flags> <master> <ping-sent>
/// <pong-recv> <config-epoch> <link-state> <slot>...`. Lines it cannot read are skipped.
fn parse_nodes(text: &str) -> Vec<NodeEntry<'_>> {
    text.lines().filter_map(parse_node).collect()
}

fn parse_node(line: &str) -> Option<NodeEntry<'_>> {
    let fields: Vec<&str> = line.split_whitespace().collect();
    let [id, addr, flags, master_id, _, _, _, _, slots @ ..] = fields.as_slice() else {
        return None;
    };
    let host_port = addr.split(['@', ',']).next()?;
    let port = host_port.rsplit_once(':')?.1.parse().ok()?;
    let slots = slots
        .iter()
        .filter(|range| !range.starts_with('['))
        .filter_map(|range| match range.split_once('-') {
            Some((first, last)) => Some((first.parse().ok()?, last.parse().ok()?)),
            None => {
                let slot = range.parse().ok()?;
                Some((slot, slot))
            }
        })
        .collect();
    Some(NodeEntry {
        id,
        port,
        flags: flags.split(',').collect(),
        master_id,
        slots,
    })
}

/// `Ok` when `node`'s view of the cluster has every node of `live` healthy and in the role it
/// reports itself (for a replica: following the master it names).
fn check_view(
    node: &RedisServer,
    view: &[NodeEntry<'_>],
    live: &[(&RedisServer, Role)],
) -> Result<(), String> {
    let entry_at = |port: u16| view.iter().find(|entry| entry.port == port);
    for &(other, role) in live {
        let Some(entry) = entry_at(other.port()) else {
            return Err(format!("{} does not know {}", node.addr(), other.addr()));
        };
        let unhealthy = ["fail", "fail?", "handshake", "noaddr"];
        if let Some(flag) = unhealthy.iter().find(|&&flag| entry.has_flag(flag)) {
            return Err(format!("{} flags {} as {flag}", node.addr(), other.addr()));
        }
        let agrees = match role {
            Role::Master => entry.has_flag("master"),
            Role::Replica { master_port } => {
                entry.has_flag("slave")
                    && entry_at(master_port).is_some_and(|master| master.id == entry.master_id)
            }
            Role::Sentinel => false,
        };
        if !agrees {
            return Err(format!(
                "{} sees {} as {:?}, it says it is {role:?}",
                node.addr(),
                other.addr(),
                entry.flags
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc16_is_the_xmodem_variant() {
        // The standard check value of CRC-16/XMODEM.
        assert_eq!(crc16(b"123456789"), 0x31c3);
    }

    #[test]
    fn key_slot_matches_known_slots() {
        assert_eq!(key_slot("foo"), 12182);
        assert_eq!(key_slot("bar"), 5061);
        assert_eq!(key_slot("123456789"), 12739);
        assert_eq!(key_slot(""), 0);
    }

    #[test]
    fn keys_with_the_same_hash_tag_share_a_slot() {
        assert_eq!(
            key_slot("{user1000}.following"),
            key_slot("{user1000}.followers")
        );
        assert_eq!(key_slot("{user1000}.following"), key_slot("user1000"));
        assert_eq!(key_slot("foo{bar}baz"), key_slot("bar"));
    }

    #[test]
    fn only_the_first_non_empty_hash_tag_counts() {
        // An empty tag means the whole key is hashed.
        assert_eq!(key_slot("{}foo"), crc16(b"{}foo") % SLOT_COUNT);
        assert_ne!(key_slot("{}foo"), key_slot("foo"));
        // Only the first `{` opens a tag, and the first `}` after it closes it.
        assert_eq!(key_slot("foo{{bar}}zap"), key_slot("{bar"));
        assert_eq!(key_slot("foo{bar}{zap}"), key_slot("bar"));
        // No closing brace: no tag.
        assert_eq!(key_slot("{foo"), crc16(b"{foo") % SLOT_COUNT);
    }

    #[test]
    fn cluster_nodes_lines_parse() {
        let text = "\
07c37dfeb235213a872192d90877d0cd55635b91 127.0.0.1:30004@31004,host1 slave e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca 0 1426238317239 4 connected
e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca 127.0.0.1:30001@31001 myself,master - 0 0 1 connected 0-5460 6000 [5461->-292f8b365bb7edb5e285caf0b7e6ddc7265d2f4f]
";
        let entries = parse_nodes(text);
        assert_eq!(entries.len(), 2);
        assert_eq!(entries[0].port, 30004);
        assert!(entries[0].has_flag("slave"));
        assert_eq!(entries[0].master_id, entries[1].id);
        assert!(entries[1].has_flag("myself") && entries[1].has_flag("master"));
        assert_eq!(entries[1].slots, [(0, 5460), (6000, 6000)]);
        assert!(entries[1].serves(5460) && entries[1].serves(6000));
        assert!(!entries[1].serves(5461));
    }
}
