//! The deployments the harness builds: independent masters, a Redis Cluster and a Sentinel setup
//! come up as promised, and fail over when told to.

use std::collections::HashSet;
use std::io::ErrorKind;
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use lock_tests::resp::{self, Reply};
use lock_tests::{
    MASTER_NAME, Masters, ProcessState, RedisCluster, RedisServer, SLOT_COUNT, SentinelSetup,
    key_slot,
};

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
    let stepped_down = lock_tests::wait_until(lock_tests::prelude::PATIENCE, || {
        ports(cluster.replicas_of(promoted)).contains(&master.port())
    });
    assert!(
        stepped_down,
        "the resumed master did not follow its replica\n{}",
        log()
    );
}

#[test]
fn cluster_master_killed_rejoins_as_a_replica_and_can_take_over_again() {
    let cluster = RedisCluster::start(3, 1);
    let log = || cluster.log();
    let first = cluster.master_for_key("job");
    let promoted = cluster.kill_master_and_wait_failover(first);
    assert_eq!(first.state(), ProcessState::Killed);

    cluster.rejoin(first);
    assert_eq!(first.state(), ProcessState::Running);
    assert_eq!(
        ports(cluster.replicas_of(promoted)),
        HashSet::from([first.port()]),
        "the restarted master follows its old replica\n{}",
        log()
    );
    assert_eq!(promoted.cmd(&["SET", "job", "x"]), "OK", "{}", log());

    // With a replica again, the slot survives a second failover.
    let back = cluster.kill_master_and_wait_failover(promoted);
    assert_eq!(back.port(), first.port(), "{}", log());
    assert_eq!(cluster.master_for_key("job").port(), first.port());
}

#[test]
fn sentinel_master_paused_past_failover_rejoins_as_a_replica() {
    let setup = SentinelSetup::start(1, 3);
    let log = || setup.log();
    let first = setup.master();
    let promoted = setup.pause_master_and_wait_failover();
    assert_ne!(promoted.port(), first.port());
    assert_eq!(first.state(), ProcessState::Paused);
    // A paused node is not probed: asking for the replicas does not wait for it.
    let asked = std::time::Instant::now();
    assert!(setup.replicas().is_empty(), "{}", log());
    assert!(asked.elapsed() < Duration::from_millis(900));

    setup.rejoin(first);
    assert_eq!(ports(setup.replicas()), HashSet::from([first.port()]));
    assert_eq!(setup.master().port(), promoted.port());
    assert_eq!(promoted.cmd(&["SET", "k", "after"]), "OK", "{}", log());

    // The rejoined node is a replica the sentinels can promote again.
    let back = setup.kill_master_and_wait_failover();
    assert_eq!(back.port(), first.port(), "{}", log());
}

#[test]
fn sentinels_report_the_master_and_a_new_one_after_failover() {
    let setup = SentinelSetup::start(2, 3);
    let log = || setup.log();
    let first = &setup.nodes()[0];
    assert_eq!(setup.master().port(), first.port(), "{}", log());
    assert_eq!(setup.current_master_addr(), first.addr());
    assert_eq!(setup.replicas().len(), 2, "{}", log());
    assert_eq!(setup.sentinels().len(), 3);
    assert_eq!(setup.master_name(), MASTER_NAME);
    let addrs: Vec<String> = setup
        .sentinels()
        .iter()
        .map(|sentinel| sentinel.addr().to_string())
        .collect();
    assert_eq!(
        setup.url(),
        format!("redis+sentinel://{}/mymaster", addrs.join(","))
    );
    for sentinel in setup.sentinels() {
        let replicas = sentinel.cmd(&["SENTINEL", "replicas", MASTER_NAME]);
        for replica in setup.replicas() {
            assert!(
                replicas.contains(&replica.port().to_string()),
                "{} does not list {}:\n{replicas}",
                sentinel.addr(),
                replica.addr()
            );
        }
        let others = sentinel.cmd(&["SENTINEL", "sentinels", MASTER_NAME]);
        let known = setup
            .sentinels()
            .iter()
            .filter(|other| others.contains(&other.port().to_string()))
            .count();
        assert_eq!(known, 2, "{} knows:\n{others}", sentinel.addr());
    }
    assert_eq!(first.cmd(&["SET", "k", "before"]), "OK");
    assert_eq!(first.cmd(&["WAIT", "2", "5000"]), "2", "{}", log());

    let promoted = setup.kill_master_and_wait_failover();
    assert_ne!(promoted.port(), first.port());
    assert_eq!(setup.current_master_addr(), promoted.addr());
    assert_eq!(setup.master().port(), promoted.port());
    assert_eq!(promoted.cmd(&["GET", "k"]), "before", "{}", log());
    assert_eq!(promoted.cmd(&["SET", "k", "after"]), "OK", "{}", log());
    for sentinel in setup.sentinels() {
        let named = sentinel.cmd(&["SENTINEL", "get-master-addr-by-name", MASTER_NAME]);
        assert_eq!(
            named,
            format!("127.0.0.1\n{}", promoted.port()),
            "{}",
            log()
        );
    }
}

#[test]
fn sentinel_setup_without_replicas_watches_its_master() {
    let setup = SentinelSetup::start(0, 1);
    assert!(setup.replicas().is_empty());
    assert_eq!(setup.master().port(), setup.nodes()[0].port());
    let master = setup.sentinels()[0].cmd(&["SENTINEL", "master", MASTER_NAME]);
    assert!(
        master.contains(&setup.nodes()[0].port().to_string()),
        "{master}\n{}",
        setup.log()
    );
    assert!(matches!(
        resp::command(
            setup.sentinels()[0].addr(),
            None,
            &["SENTINEL", "ckquorum", MASTER_NAME],
            Duration::from_secs(5),
        ),
        Ok(Reply::Status(_))
    ));

    let nodes: Vec<_> = setup
        .nodes()
        .iter()
        .chain(setup.sentinels())
        .map(RedisServer::addr)
        .collect();
    drop(setup);
    for addr in nodes {
        assert!(refuses(addr), "dropping the setup leaves {addr} running");
    }
}
