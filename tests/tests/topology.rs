//! The deployments the harness builds: independent masters and a Redis Cluster come up as
//! promised, and the cluster fails over when told to.

use std::collections::HashSet;
use std::io::ErrorKind;
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use lock_tests::resp;
use lock_tests::{Masters, RedisCluster, RedisServer, SLOT_COUNT, key_slot};

/// Ports of `nodes`, for comparing sets of nodes.
fn ports<'a>(nodes: impl IntoIterator<Item = &'a RedisServer>) -> HashSet<u16> {
    nodes.into_iter().map(RedisServer::port).collect()
}

/// True when nothing listens on `addr` any more (a paused process would still accept).
fn refuses(addr: SocketAddr) -> bool {
    TcpStream::connect_timeout(&addr, Duration::from_secs(5))
        .is_err_and(|e| e.kind() == ErrorKind::ConnectionRefused)
}

/// The value of `name` in an `INFO`-style text.
fn field(text: &str, name: &str) -> Option<String> {
    text.lines().find_map(|line| {
        let (key, value) = line.trim_end().split_once(':')?;
        (key == name).then(|| value.to_owned())
    })
}

#[test]
fn server_starts_from_a_writable_config_file() {
    let server = RedisServer::start_with_config("maxmemory 1mb\n", &[]);
    assert_eq!(
        server.cmd(&["CONFIG", "GET", "maxmemory"]),
        "maxmemory\n1048576",
        "{}",
        server.log()
    );
    assert_eq!(server.cmd(&["CONFIG", "REWRITE"]), "OK", "{}", server.log());
    server.restart();
    assert_eq!(
        server.cmd(&["CONFIG", "GET", "maxmemory"]),
        "maxmemory\n1048576",
        "the config file survives a restart\n{}",
        server.log()
    );
}

#[test]
fn masters_are_independent_servers_listed_in_the_url() {
    let masters = Masters::start(3);
    assert_eq!(masters.nodes().len(), 3);
    assert_eq!(ports(masters.nodes()).len(), 3, "{}", masters.log());
    let addrs: Vec<String> = masters
        .nodes()
        .iter()
        .map(|node| node.addr().to_string())
        .collect();
    assert_eq!(masters.url(), format!("redlock://{}", addrs.join(",")));
    let urls: Vec<String> = addrs.iter().map(|addr| format!("redis://{addr}")).collect();
    assert_eq!(masters.urls(), urls);

    assert_eq!(masters.node(0).cmd(&["SET", "k", "0"]), "OK");
    for i in 0..3 {
        let node = masters.node(i);
        assert_eq!(
            node.cmd(&["ROLE"]).lines().next(),
            Some("master"),
            "{}",
            masters.log()
        );
        let expected = if i == 0 { "0" } else { "(nil)" };
        assert_eq!(node.cmd(&["GET", "k"]), expected, "{}", masters.log());
    }
    assert!(
        masters.log().contains(&masters.node(2).addr().to_string()),
        "the log names every node"
    );
}

#[test]
fn masters_kill_and_pause_take_down_one_node_only() {
    let masters = Masters::start(3);
    masters.kill(0);
    assert!(
        masters.node(0).try_cmd(&["PING"]).is_err(),
        "a killed master refuses"
    );
    masters.pause(1);
    let stalled = resp::command(
        masters.node(1).addr(),
        None,
        &["PING"],
        Duration::from_millis(300),
    );
    assert!(stalled.is_err(), "a paused master does not answer");
    assert_eq!(masters.node(2).cmd(&["PING"]), "PONG", "{}", masters.log());

    masters.resume(1);
    assert_eq!(masters.node(1).cmd(&["PING"]), "PONG", "{}", masters.log());
    masters.restart(0);
    assert_eq!(masters.node(0).cmd(&["PING"]), "PONG", "{}", masters.log());
}

#[test]
fn dropping_masters_kills_them_all() {
    let masters = Masters::start(2);
    masters.pause(1);
    let nodes: Vec<_> = masters.nodes().iter().map(RedisServer::addr).collect();
    drop(masters);
    for addr in nodes {
        assert!(refuses(addr), "{addr} still accepts connections");
    }
}

#[test]
#[should_panic(expected = "there is no master 3")]
fn masters_node_out_of_range_says_so() {
    let masters = Masters::start(3);
    masters.node(3);
}

#[test]
#[should_panic(expected = "needs at least 3 masters")]
fn cluster_of_fewer_than_three_masters_is_refused() {
    RedisCluster::start(2, 0);
}

#[test]
fn cluster_of_three_masters_covers_all_slots_and_routes_keys() {
    let cluster = RedisCluster::start(3, 0);
    let log = || cluster.log();
    assert_eq!(cluster.nodes().len(), 3);
    assert_eq!(cluster.masters().len(), 3, "{}", log());
    assert!(cluster.replicas().is_empty(), "{}", log());
    for node in cluster.nodes() {
        let info = node.cmd(&["CLUSTER", "INFO"]);
        assert_eq!(
            field(&info, "cluster_state").as_deref(),
            Some("ok"),
            "{info}"
        );
        assert_eq!(
            field(&info, "cluster_slots_ok"),
            Some(SLOT_COUNT.to_string()),
            "{info}"
        );
        assert_eq!(field(&info, "cluster_known_nodes").as_deref(), Some("3"));
    }

    let addrs: Vec<String> = cluster
        .nodes()
        .iter()
        .map(|node| node.addr().to_string())
        .collect();
    assert_eq!(
        cluster.url(),
        format!("redis+cluster://{}", addrs.join(","))
    );
    let seeds: Vec<String> = addrs.iter().map(|addr| format!("redis://{addr}")).collect();
    assert_eq!(cluster.seed_urls(), seeds);

    for key in ["foo", "bar", "{user1000}.following", "lock:{order-7}", ""] {
        let slot = key_slot(key);
        assert_eq!(
            cluster.nodes()[0].cmd(&["CLUSTER", "KEYSLOT", key]),
            slot.to_string(),
            "slot of {key:?}"
        );
    }

    // Slots are spread over all three masters.
    let owners = ports(
        (0..SLOT_COUNT)
            .step_by(1000)
            .map(|s| cluster.master_for_slot(s)),
    );
    assert_eq!(owners, ports(cluster.masters()), "{}", log());

    let owner = cluster.master_for_key("foo");
    assert_eq!(owner.cmd(&["SET", "foo", "bar"]), "OK", "{}", log());
    assert_eq!(owner.cmd(&["GET", "foo"]), "bar", "{}", log());
    for other in cluster.masters() {
        if other.port() == owner.port() {
            continue;
        }
        assert_eq!(
            other.cmd(&["GET", "foo"]),
            format!("(error) MOVED {} {}", key_slot("foo"), owner.addr()),
            "{}",
            log()
        );
    }

    let nodes: Vec<_> = cluster.nodes().iter().map(RedisServer::addr).collect();
    drop(cluster);
    for addr in nodes {
        assert!(refuses(addr), "dropping the cluster leaves {addr} running");
    }
}

#[test]
fn cluster_replica_takes_over_from_a_killed_master() {
    let cluster = RedisCluster::start(3, 1);
    let log = || cluster.log();
    assert_eq!(cluster.nodes().len(), 6);
    assert_eq!(cluster.masters().len(), 3, "{}", log());
    assert_eq!(cluster.replicas().len(), 3, "{}", log());
    for replica in cluster.replicas() {
        let info = replica.cmd(&["INFO", "replication"]);
        assert_eq!(
            field(&info, "master_link_status").as_deref(),
            Some("up"),
            "{info}"
        );
    }

    let master = cluster.master_for_key("job");
    let replicas = ports(cluster.replicas_of(master));
    assert_eq!(replicas.len(), 1, "{}", log());
    assert_eq!(master.cmd(&["SET", "job", "before"]), "OK");
    assert_eq!(master.cmd(&["WAIT", "1", "5000"]), "1", "{}", log());

    let promoted = cluster.kill_master_and_wait_failover(master);
    assert!(replicas.contains(&promoted.port()), "{}", log());
    assert!(master.try_cmd(&["PING"]).is_err(), "the old master is dead");
    assert_eq!(cluster.master_for_key("job").port(), promoted.port());
    assert_eq!(cluster.masters().len(), 3, "{}", log());
    for node in cluster.masters() {
        let info = node.cmd(&["CLUSTER", "INFO"]);
        assert_eq!(
            field(&info, "cluster_state").as_deref(),
            Some("ok"),
            "{info}"
        );
    }
    assert_eq!(promoted.cmd(&["GET", "job"]), "before", "{}", log());
    assert_eq!(promoted.cmd(&["SET", "job", "after"]), "OK", "{}", log());
}

#[test]
fn cluster_manual_failover_swaps_master_and_replica() {
    let cluster = RedisCluster::start(3, 1);
    let log = || cluster.log();
    let master = cluster.master_for_key("job");
    let replica = cluster.manual_failover(master);
    assert_ne!(replica.port(), master.port());
    assert_eq!(cluster.master_for_key("job").port(), replica.port());
    assert_eq!(
        ports(cluster.replicas_of(replica)),
        HashSet::from([master.port()]),
        "the old master follows the new one\n{}",
        log()
    );
    assert_eq!(replica.cmd(&["SET", "job", "x"]), "OK", "{}", log());
    assert_eq!(
        master.cmd(&["GET", "job"]),
        format!("(error) MOVED {} {}", key_slot("job"), replica.addr()),
        "{}",
        log()
    );
}

#[test]
fn cluster_replica_takes_over_from_a_paused_master_which_then_steps_down() {
    let cluster = RedisCluster::start(3, 1);
    let log = || cluster.log();
    let master = cluster.master_for_key("job");
    let promoted = cluster.pause_master_and_wait_failover(master);
    assert_eq!(cluster.master_for_key("job").port(), promoted.port());
    assert_eq!(promoted.cmd(&["SET", "job", "x"]), "OK", "{}", log());

    master.resume();
    let stepped_down = lock_tests::wait_until(Duration::from_secs(20), || {
        ports(cluster.replicas_of(promoted)).contains(&master.port())
    });
    assert!(
        stepped_down,
        "the resumed master did not follow its replica\n{}",
        log()
    );
}
