//! Deadlocks between waiters that hold other locks: found within a process and across
//! processes (managers of their own on one deployment), the youngest wait of those that chose
//! `Deadlock::Fail` gives up, and nothing is found, or costs a Redis call, where there is no
//! cycle; across PostgreSQL managers and processes too (directly and through PgBouncer).

use std::time::Duration;

use lock_runtime::{Deadlock, LockError, LockManager, LockOptions};
use lock_tests::deadlocks::ring;
use lock_tests::{Deployment, PgBouncer, PostgresServer, RedisServer, on_backends};
use tokio::time::Instant;

/// Waits longer than any test takes: a call that is not told of a deadlock would hang here.
const PATIENCE: Duration = Duration::from_secs(30);

fn failing() -> LockOptions {
    LockOptions::new()
        .ttl(Duration::from_secs(10))
        .wait(PATIENCE)
        .deadlock(Deadlock::Fail)
}

/// Exactly one member gave up with `Deadlock`, naming the cycle from its own wait; the others
/// got their second lock.
fn one_gave_up(outcomes: &[(Result<(), LockError>, Duration)], keys: &[&str]) -> Duration {
    let failed: Vec<_> = outcomes
        .iter()
        .filter_map(|(outcome, took)| outcome.as_ref().err().map(|err| (err, *took)))
        .collect();
    assert_eq!(failed.len(), 1, "{outcomes:?}");
    let (err, took) = failed[0];
    let LockError::Deadlock { key, cycle, .. } = err else {
        panic!("not a deadlock: {err}");
    };
    assert_eq!(cycle.members.len(), keys.len(), "{cycle:?}");
    assert_eq!(&cycle.members[0].waits_for, key, "{cycle:?}");
    let mut waited: Vec<&str> = cycle.members.iter().map(|m| m.waits_for.as_str()).collect();
    waited.sort_unstable();
    assert_eq!(waited, keys, "{cycle:?}");
    for member in &cycle.members {
        assert_eq!(member.holds.len(), 1, "{cycle:?}");
        assert_eq!(member.pid, Some(std::process::id()), "{cycle:?}");
    }
    let text = err.to_string();
    assert!(text.contains("deadlock"), "{text}");
    took
}

async fn two_managers_in_opposite_orders_one_gives_up(f: Deployment) {
    let other = f.connect().await;
    let outcomes = ring(
        vec![
            (f.locks.clone(), "acct:1".into(), "acct:2".into()),
            (other, "acct:2".into(), "acct:1".into()),
        ],
        failing(),
    )
    .await;
    let took = one_gave_up(&outcomes, &["acct:1", "acct:2"]);
    eprintln!("deadlock broken after {took:?}");
}

async fn three_managers_in_a_ring_one_gives_up(f: Deployment) {
    let second = f.connect().await;
    let third = f.connect().await;
    let outcomes = ring(
        vec![
            (f.locks.clone(), "k:1".into(), "k:2".into()),
            (second, "k:2".into(), "k:3".into()),
            (third, "k:3".into(), "k:1".into()),
        ],
        failing(),
    )
    .await;
    let took = one_gave_up(&outcomes, &["k:1", "k:2", "k:3"]);
    eprintln!("three-way deadlock broken after {took:?}");
}

on_backends!(mod across_managers; [memory, redis, sentinel, cluster, redlock] [
    two_managers_in_opposite_orders_one_gives_up,
    three_managers_in_a_ring_one_gives_up,
]);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_tasks_of_one_manager_in_opposite_orders_one_gives_up() {
    let locks = LockManager::memory();
    let outcomes = ring(
        vec![
            (locks.clone(), "a".into(), "b".into()),
            (locks.clone(), "b".into(), "a".into()),
        ],
        failing(),
    )
    .await;
    one_gave_up(&outcomes, &["a", "b"]);
}

/// Under `Deadlock::Wait` nobody gives up: a wait runs out its budget and ends `Busy`, and that
/// `Busy` names the deadlock it was found part of, from its own wait on, rather than leaving the
/// caller to guess why the lock stayed busy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_that_nobody_fails_ends_busy_naming_the_deadlock() {
    let locks = LockManager::memory();
    let options = LockOptions::new()
        .ttl(Duration::from_secs(10))
        .wait(Duration::from_secs(3))
        .deadlock(Deadlock::Wait);
    let outcomes = ring(
        vec![
            (locks.clone(), "left".into(), "right".into()),
            (locks.clone(), "right".into(), "left".into()),
        ],
        options,
    )
    .await;
    // The first to run out frees its first lock, which the other may then get in time.
    let busy: Vec<&LockError> = outcomes
        .iter()
        .filter_map(|(outcome, _)| outcome.as_ref().err())
        .collect();
    assert!(!busy.is_empty(), "{outcomes:?}");
    for err in busy {
        assert!(err.is_busy(), "{err}");
        let cycle = err
            .deadlock_cycle()
            .unwrap_or_else(|| panic!("no cycle named: {err}"));
        assert_eq!(
            Some(cycle.members[0].waits_for.as_str()),
            err.key(),
            "{err}"
        );
        assert_eq!(cycle.members.len(), 2, "{err}");
        let text = err.to_string();
        assert!(text.contains("part of a deadlock"), "{text}");
        assert!(
            text.contains("holds `left` and waits for `right`"),
            "{text}"
        );
        assert!(
            text.contains("holds `right` and waits for `left`"),
            "{text}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_builder_default_applies_where_options_say_nothing() {
    let deployment = Deployment::redis().await;
    let failing = |builder: lock_runtime::LockManagerBuilder| builder.deadlock(Deadlock::Fail);
    let one = deployment.connect_with(failing).await;
    let two = deployment.connect_with(failing).await;
    let options = LockOptions::new()
        .ttl(Duration::from_secs(10))
        .wait(PATIENCE);
    let outcomes = ring(
        vec![(one, "x".into(), "y".into()), (two, "y".into(), "x".into())],
        options,
    )
    .await;
    one_gave_up(&outcomes, &["x", "y"]);
}

/// Two waiters that each hold a lock of their own and wait for a third, held by someone who
/// waits for nothing: a chain, not a cycle. Nobody gives up, and both get it in turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_behind_one_holder_are_no_deadlock() {
    let deployment = Deployment::redis().await;
    let holder = deployment
        .locks
        .lock("shared", LockOptions::new())
        .await
        .expect("free");
    let mut waiters = Vec::new();
    for own in ["own:1", "own:2"] {
        let locks = deployment.connect().await;
        waiters.push(tokio::spawn(async move {
            let mine = locks.lock(own, failing()).await.expect("free");
            let shared = locks.lock("shared", failing()).await;
            let outcome = match shared {
                Ok(guard) => guard.release().await,
                Err(err) => Err(err),
            };
            mine.release().await.expect("release");
            outcome
        }));
    }
    // Long enough for several rounds of detection to see both waits published.
    let server = deployment.server_of("lock:{shared}").expect("one server");
    wait_until(|| hash_len(server, "lock:waits:{waits}") == 2).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    holder.release().await.expect("release");
    for waiter in waiters {
        waiter
            .await
            .expect("the waiter's task")
            .expect("no deadlock where there is no cycle");
    }
}

/// An uncontended lock, and a short wait by a task that holds nothing else, write nothing
/// about waits: only a wait while holding pays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_waiting_while_holding_costs_redis_calls() {
    let server = tokio::task::spawn_blocking(RedisServer::start)
        .await
        .expect("server start");
    let locks = LockManager::connect(&server.url()).await.expect("connect");
    server.cmd(&["CONFIG", "RESETSTAT"]);
    for i in 0..50 {
        let guard = locks
            .lock(format!("order:{i}"), LockOptions::new())
            .await
            .expect("free");
        guard.release().await.expect("release");
    }
    // A wait of about 50 ms by a task that holds nothing.
    let held = locks.lock("busy", LockOptions::new()).await.expect("free");
    let other = LockManager::connect(&server.url()).await.expect("connect");
    let waiter = tokio::spawn(async move {
        other
            .lock("busy", LockOptions::new().wait(PATIENCE))
            .await
            .map(drop)
    });
    let queued = waiting_for(&server, "lock:{busy}");
    wait_until(queued).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    held.release().await.expect("release");
    waiter.await.expect("task").expect("acquired");
    let stats = server.cmd(&["INFO", "commandstats"]);
    for command in ["hset", "hgetall", "hdel"] {
        assert!(
            !stats.contains(&format!("cmdstat_{command}:")),
            "{command} was sent:\n{stats}"
        );
    }
    // A wait while holding is published at once.
    let outer = locks.lock("outer", LockOptions::new()).await.expect("free");
    let held = locks.lock("inner", LockOptions::new()).await.expect("free");
    let other = LockManager::connect(&server.url()).await.expect("connect");
    let waiter = tokio::spawn(async move {
        let mine = other.lock("mine", LockOptions::new()).await.expect("free");
        let inner = other
            .lock("inner", LockOptions::new().wait(PATIENCE))
            .await
            .map(drop);
        drop(mine);
        inner
    });
    wait_until(|| hash_len(&server, "lock:waits:{waits}") == 1).await;
    held.release().await.expect("release");
    waiter.await.expect("task").expect("acquired");
    // Its record goes with its wait.
    wait_until(|| hash_len(&server, "lock:waits:{waits}") == 0).await;
    outer.release().await.expect("release");
}

/// `HLEN key` on `server`.
fn hash_len(server: &RedisServer, key: &str) -> u64 {
    server.cmd(&["HLEN", key]).trim().parse().unwrap_or(0)
}

/// Whether someone was told the lock `stored` is busy (its value says `waiting=1`).
fn waiting_for<'a>(server: &'a RedisServer, stored: &'a str) -> impl Fn() -> bool + 'a {
    move || server.cmd(&["GET", stored]).contains("waiting=1")
}

async fn wait_until(done: impl Fn() -> bool) {
    let give_up = Instant::now() + Duration::from_secs(20);
    while !done() {
        assert!(Instant::now() < give_up, "not within 20 s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Real processes on one store (`url`), each taking the lock `first` and then waiting for `second`
/// (with `Deadlock::Fail`) once every one holds its first: the line each printed, `acquired
/// <ms>` or `deadlock <ms>`.
async fn processes(url: &str, members: &[(&str, &str)]) -> Vec<String> {
    use std::io::{BufRead, BufReader, Write};
    use std::process::{Command, Stdio};
    const CONTENDER: &str = env!("CARGO_BIN_EXE_contender");
    let mut children: Vec<_> = members
        .iter()
        .map(|(first, second)| {
            Command::new(CONTENDER)
                .args(["deadlock", url, first, second, "fail"])
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .spawn()
                .expect("spawn a contender")
        })
        .collect();
    let mut outputs: Vec<_> = children
        .iter_mut()
        .map(|child| BufReader::new(child.stdout.take().expect("stdout")))
        .collect();
    let outputs = tokio::task::spawn_blocking(move || {
        let mut line = String::new();
        for output in &mut outputs {
            line.clear();
            output.read_line(&mut line).expect("read");
            assert_eq!(line.trim(), "held");
        }
        outputs
    })
    .await
    .expect("every one holds");
    for child in &mut children {
        let stdin = child.stdin.as_mut().expect("stdin");
        writeln!(stdin, "go").expect("write");
    }
    let outcomes = tokio::task::spawn_blocking(move || {
        outputs
            .into_iter()
            .map(|mut output| {
                let mut line = String::new();
                output.read_line(&mut line).expect("read");
                line.trim().to_owned()
            })
            .collect::<Vec<_>>()
    })
    .await
    .expect("every one ends");
    for mut child in children {
        assert!(child.wait().expect("exit").success(), "{outcomes:?}");
    }
    outcomes
}

/// Exactly one of the processes' `outcomes` gave up in the deadlock; the others acquired.
fn one_process_gave_up(outcomes: &[String]) {
    let gave_up = outcomes
        .iter()
        .filter(|o| o.starts_with("deadlock "))
        .count();
    let acquired = outcomes
        .iter()
        .filter(|o| o.starts_with("acquired "))
        .count();
    assert_eq!((gave_up, acquired), (1, outcomes.len() - 1), "{outcomes:?}");
}

/// Two real processes on one Redis take `acct:1` and `acct:2` in opposite orders with
/// `Deadlock::Fail`: one gives up, the other then gets its second lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_processes_in_opposite_orders_one_gives_up() {
    let server = tokio::task::spawn_blocking(RedisServer::start)
        .await
        .expect("server start");
    let outcomes = processes(&server.url(), &[("acct:1", "acct:2"), ("acct:2", "acct:1")]).await;
    one_process_gave_up(&outcomes);
    eprintln!("two processes: {outcomes:?}");
}

/// Three real processes in a ring (each holds one account and waits for the next one's): one
/// gives up, and the other two then get theirs in turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_processes_in_a_ring_one_gives_up() {
    let server = tokio::task::spawn_blocking(RedisServer::start)
        .await
        .expect("server start");
    let ring = [
        ("acct:1", "acct:2"),
        ("acct:2", "acct:3"),
        ("acct:3", "acct:1"),
    ];
    let outcomes = processes(&server.url(), &ring).await;
    one_process_gave_up(&outcomes);
    eprintln!("three processes: {outcomes:?}");
}

/// A user with the rights docs/SERVERS.md lists, and `+hset +hdel +hgetall` for the published
/// waits, has deadlocks across processes found.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_with_the_documented_rights_has_deadlocks_found() {
    let server = tokio::task::spawn_blocking(RedisServer::start)
        .await
        .expect("server start");
    let rights = "~lock:* &lock:* +evalsha +eval +get +set +del +incr +pexpire +pttl +time \
                  +type +hget +zadd +zrem +zrange +zrangebyscore +zcard +multi +exec +exists \
                  +info +ping +publish +subscribe +unsubscribe +hset +hdel +hgetall";
    let mut command = vec!["ACL", "SETUSER", "locker", "on", ">pw"];
    command.extend(rights.split_whitespace());
    server.cmd(&command);
    let url = format!("redis://locker:pw@{}", server.addr());
    let one = LockManager::connect(&url).await.expect("connect");
    let two = LockManager::connect(&url).await.expect("connect");
    let outcomes = ring(
        vec![
            (one, "acl:1".into(), "acl:2".into()),
            (two, "acl:2".into(), "acl:1".into()),
        ],
        failing(),
    )
    .await;
    one_gave_up(&outcomes, &["acl:1", "acl:2"]);
}

/// Two managers over one PostgreSQL database, each with a pool of its own as two processes
/// have, take `acct:1` and `acct:2` in opposite orders with `Deadlock::Fail`: each sees the
/// other's wait in the published records, and one gives up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_postgres_managers_in_opposite_orders_one_gives_up() {
    let server = tokio::task::spawn_blocking(PostgresServer::start)
        .await
        .expect("server start");
    postgres_ring(&server.url(), &server).await;
}

/// The same through PgBouncer in transaction mode: every write and read of the records is one
/// function call, which the pooler carries.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_postgres_managers_through_pgbouncer_in_opposite_orders_one_gives_up() {
    let (server, bouncer) = tokio::task::spawn_blocking(|| {
        let server = PostgresServer::start();
        let bouncer = PgBouncer::start(&server);
        (server, bouncer)
    })
    .await
    .expect("servers start");
    postgres_ring(&bouncer.url(), &server).await;
}

/// Two managers over `url` in the ring of `acct:1` and `acct:2`: one gives up.
async fn postgres_ring(url: &str, server: &PostgresServer) {
    let connect = || async {
        LockManager::connect(url)
            .await
            .unwrap_or_else(|err| panic!("connect: {err}\n{}", server.log()))
    };
    let (one, two) = (connect().await, connect().await);
    let outcomes = ring(
        vec![
            (one, "acct:1".into(), "acct:2".into()),
            (two, "acct:2".into(), "acct:1".into()),
        ],
        failing(),
    )
    .await;
    let took = one_gave_up(&outcomes, &["acct:1", "acct:2"]);
    eprintln!("postgres: deadlock broken after {took:?}");
}

/// Two real processes on one PostgreSQL database take `acct:1` and `acct:2` in opposite
/// orders with `Deadlock::Fail`: one gives up, the other then gets its second lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_postgres_processes_in_opposite_orders_one_gives_up() {
    let server = tokio::task::spawn_blocking(PostgresServer::start)
        .await
        .expect("server start");
    let outcomes = processes(&server.url(), &[("acct:1", "acct:2"), ("acct:2", "acct:1")]).await;
    one_process_gave_up(&outcomes);
    eprintln!("two postgres processes: {outcomes:?}");
}
