//! Redlock over five independent masters: what a minority of failed, paused or foreign-held
//! masters does to acquisition and renewal.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use lock_runtime::LostReason;
use lock_tests::Masters;
use lock_tests::prelude::*;

async fn manager(masters: &Masters) -> LockManager {
    manager_with_timeout(masters, ms(500)).await
}

async fn manager_with_timeout(masters: &Masters, request_timeout: Duration) -> LockManager {
    LockManager::builder()
        .url(masters.url())
        .request_timeout(request_timeout)
        .build()
        .await
        .unwrap_or_else(|err| panic!("connect: {err}\n{}", masters.log()))
}

/// How many acquire attempts reached `server` since its last `CONFIG RESETSTAT`: the `TIME`
/// the acquire script reads (Redis 7 counts the commands scripts run), which a release does
/// not read.
fn acquire_attempts(server: &RedisServer) -> u64 {
    server
        .command_calls()
        .iter()
        .find(|(command, _)| command == "time")
        .map_or(0, |&(_, calls)| calls)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_two_of_five_masters_killed_acquisitions_still_succeed() {
    let masters = Masters::start(5);
    let locks = manager(&masters).await;
    masters.kill(0);
    masters.kill(3);
    for i in 0..20 {
        let guard = locks
            .lock(format!("k{i}"), LockOptions::new())
            .await
            .unwrap_or_else(|err| panic!("{err}\n{}", masters.log()));
        guard.release().await.expect("release");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_three_of_five_masters_killed_acquire_fails_within_its_wait_budget() {
    let masters = Masters::start(5);
    let locks = manager(&masters).await;
    for i in [0, 2, 4] {
        masters.kill(i);
    }
    let started = Instant::now();
    let wait = ms(800);
    let err = locks
        .lock("k", LockOptions::new().wait(wait))
        .await
        .expect_err("no quorum");
    let took = started.elapsed();
    let shown = err.to_string();
    assert!(
        shown.contains("2 of 5 masters answered, 3 needed"),
        "{shown}"
    );
    // The budget, one more attempt (each bounded by its request timeout) and a loaded machine.
    assert!(took < wait + Duration::from_secs(3), "{took:?}");
}

/// Too few masters answering is a blip, not a verdict: within its wait budget an acquire tries
/// again (with a fresh owner token each time), as it does on one Redis that stalls.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_majority_paused_briefly_is_waited_out_within_the_wait_budget() {
    let masters = Masters::start(3);
    let locks = manager(&masters).await;
    masters.pause(0);
    masters.pause(1);
    let free = masters.node(2);
    free.cmd(&["CONFIG", "RESETSTAT"]);
    let options = LockOptions::new()
        .ttl(Duration::from_secs(2))
        .wait(PATIENCE);
    let acquire = tokio::spawn({
        let locks = locks.clone();
        async move { locks.lock("blip", options).await }
    });
    // A second attempt on the master that answers: the first found no majority.
    let retried = wait_until_async(PATIENCE, || acquire_attempts(free) >= 2).await;
    assert!(retried, "the acquire never tried again\n{}", masters.log());
    assert!(!acquire.is_finished(), "acquired with a majority paused");
    masters.resume(0);
    masters.resume(1);
    let guard = acquire
        .await
        .expect("acquire task")
        .unwrap_or_else(|err| panic!("a blip within the wait: {err}\n{}", masters.log()));
    assert!(guard.is_held());
    guard.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_master_does_not_stall_acquisition_past_the_node_timeout() {
    let masters = Masters::start(5);
    // Stalled for its request timeout, the acquire would take 10 s; the node timeout of a 30 s
    // lease is 250 ms.
    let locks = manager_with_timeout(&masters, Duration::from_secs(10)).await;
    masters.pause(1);
    let started = Instant::now();
    let guard = locks
        .lock("k", LockOptions::new())
        .await
        .expect("quorum without it");
    let took = started.elapsed();
    masters.resume(1);
    assert!(took < Duration::from_secs(3), "{took:?}");
    guard.release().await.expect("release");
}

/// A master that gave no answer is left out until it answers a `PING` again: later locks do
/// not wait out its timeout again (which would keep their grants on the other masters held
/// that long, for contenders to split between them), and once it is back it is asked again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_that_gave_no_answer_is_left_out_until_it_answers_again() {
    let masters = Masters::start(3);
    let locks = manager_with_timeout(&masters, Duration::from_secs(10)).await;
    // ttl 30 s: the node timeout is 250 ms.
    let options = LockOptions::new();
    masters.pause(0);
    let started = Instant::now();
    for _ in 0..20 {
        let guard = locks
            .lock("k", options)
            .await
            .unwrap_or_else(|err| panic!("quorum without it: {err}\n{}", masters.log()));
        guard.release().await.expect("release");
    }
    let took = started.elapsed();
    masters.resume(0);
    // Waiting for it each time, the twenty would take at least 20 x 250 ms.
    assert!(took < Duration::from_secs(3), "{took:?}");
    // Back, it answers the probe and holds the next locks with the others.
    let asked_again = eventually(|| async {
        let guard = locks.lock("k", options).await.expect("lock");
        let on_it = masters.nodes()[0].holds_lock("lock:{k}");
        guard.release().await.expect("release");
        on_it
    })
    .await;
    assert!(
        asked_again,
        "the resumed master is never asked again\n{}",
        masters.log()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_minority_grant_is_given_back_on_every_master() {
    let masters = Masters::start(5);
    // Someone else holds the lock on three masters.
    for server in &masters.nodes()[..3] {
        hold_for(server, "theirs");
    }
    let locks = manager(&masters).await;
    let err = locks
        .lock("k", LockOptions::new())
        .await
        .expect_err("held by a majority");
    assert!(err.is_busy(), "{err}");
    for server in &masters.nodes()[3..] {
        assert!(!server.holds_lock("lock:{k}"), "{}", server.log());
    }
    for server in &masters.nodes()[..3] {
        let lock = server.stored_lock("lock:{k}").expect("theirs");
        assert_eq!(lock.token.as_deref(), Some("theirs"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewal_by_quorum_survives_a_minority_and_reports_the_loss_of_the_majority() {
    let masters = Masters::start(5);
    let locks = manager(&masters).await;
    let ttl = Duration::from_secs(2);
    let guard = locks
        .lock("k", LockOptions::new().ttl(ttl))
        .await
        .expect("free");
    masters.kill(0);
    masters.kill(1);
    // Two leases pass: only renewals by the three left keep it that long.
    let killed = Instant::now();
    let outlived = wait_until_async(PATIENCE, || !guard.is_held() || killed.elapsed() > 2 * ttl);
    assert!(outlived.await);
    assert!(guard.is_held(), "three of five still renew it");
    masters.kill(2);
    let reason = tokio::time::timeout(PATIENCE, guard.lost())
        .await
        .expect("told when the lease runs out");
    assert_eq!(reason, LostReason::Expired);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_builder_names_the_masters_without_a_url() {
    let masters = Masters::start(3);
    let addrs: Vec<String> = masters
        .nodes()
        .iter()
        .map(|n| n.addr().to_string())
        .collect();
    let locks = LockManager::builder()
        .redlock(&addrs)
        .build()
        .await
        .unwrap_or_else(|err| panic!("connect: {err}\n{}", masters.log()));
    assert!(
        locks.backend().starts_with("redlock over 3 masters"),
        "{}",
        locks.backend()
    );
    let guard = locks.lock("k", LockOptions::new()).await.expect("free");
    for node in masters.nodes() {
        assert!(node.holds_lock("lock:{k}"), "{}", node.log());
    }
    guard.release().await.expect("release");
}

/// Gives masters 0 and 1 each to another contender, with a 30 s lease, and leaves master 2
/// free: no one holds a majority of `lock:{k}`.
fn split_between_two_contenders(masters: &Masters) {
    for (node, token) in [(0, "contender-x"), (1, "contender-y")] {
        hold_for(masters.node(node), token);
    }
}

/// Stores `lock:{k}` on `server` as held by `token` for 30 s, as another contender's grant.
fn hold_for(server: &RedisServer, token: &str) {
    let value = format!("held fence=1 token={token} waiting=0");
    server.cmd(&["SET", "lock:{k}", &value, "PX", "30000"]);
}

/// Masters split between two other contenders, one master each, both with a long lease: no one
/// holds a majority, so a waiter must not sleep for their leases. It retries soon and takes the
/// lock once they have given their grants back, here without a word (as a contender killed
/// after its give-back was sent, or whose announcement was lost, would).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_does_not_wait_out_the_leases_of_contenders_that_split_the_masters() {
    let masters = Masters::start(3);
    split_between_two_contenders(&masters);
    let locks = manager(&masters).await;
    let free = masters.node(2);
    free.cmd(&["CONFIG", "RESETSTAT"]);
    let waiter = tokio::spawn(async move {
        let guard = locks
            .lock("k", LockOptions::new().wait(Duration::from_secs(25)))
            .await?;
        guard.release().await
    });
    // Two attempts on the free master: the first one was refused and the waiter waits.
    let tried = wait_until_async(PATIENCE, || acquire_attempts(free) >= 2).await;
    assert!(tried, "the waiter never tried twice\n{}", masters.log());
    assert!(!waiter.is_finished(), "the split masters keep it out");
    for node in [0, 1] {
        masters.node(node).cmd(&["DEL", "lock:{k}"]);
    }
    // Well before the contenders' leases (30 s) would run out.
    tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .expect("taken well before the contenders' 30 s leases")
        .expect("task")
        .expect("the waiter gets the lock");
}

/// Every attempt of a Redlock acquire that has to try again has an owner token of its own. A
/// failed attempt gives back what it took, and a give-back can land late: one to a master that
/// gave no answer is not waited for, and one to a restarted master is sent again once its
/// script is loaded, possibly behind the next attempt's acquire. Under the same token it would
/// remove the next attempt's grant, and the holder would go on without a majority (the
/// 30-minute chaos run saw that twice, each time just after a master restarted empty).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_attempt_of_an_acquire_has_an_owner_token_of_its_own() {
    let masters = Masters::start(3);
    split_between_two_contenders(&masters);
    // The slow log with a threshold of 0 keeps every command with its arguments.
    let free = masters.node(2);
    free.cmd(&["CONFIG", "SET", "slowlog-log-slower-than", "0"]);
    free.cmd(&["CONFIG", "SET", "slowlog-max-len", "10000"]);
    free.cmd(&["SLOWLOG", "RESET"]);
    let locks = manager(&masters).await;
    let err = locks
        // Long enough for a second attempt on a loaded machine.
        .lock("k", LockOptions::new().wait(Duration::from_secs(3)))
        .await
        .expect_err("the masters stay split");
    assert!(matches!(err, LockError::Busy { .. }), "{err}");
    let log = free.cmd(&["SLOWLOG", "GET", "10000"]);
    let tokens: BTreeSet<&str> = log
        .split(|c: char| !(c.is_ascii_hexdigit() || c == '-'))
        .filter(|word| word.len() == 36 && word.matches('-').count() == 4)
        .collect();
    assert!(
        tokens.len() >= 2,
        "the attempts on the free master used {} owner token(s):\n{log}",
        tokens.len()
    );
}

/// Two waiters in different processes (two managers), a lock held on a majority and free on one
/// master: each waiter's attempt takes the free master and gives it back. Given back with a
/// release announcement, that would wake the other waiter, whose give-back wakes the first,
/// round and round while the owner holds on. Given back quietly, they wait for the owner.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_giving_back_a_minority_do_not_wake_each_other() {
    let masters = Masters::start(3);
    let owner = manager(&masters).await;
    let guard = owner
        .lock("k", LockOptions::new().ttl(Duration::from_secs(10)))
        .await
        .expect("free");
    // The owner keeps a majority (masters 0 and 1); master 2 lost its grant.
    masters.node(2).cmd(&["DEL", "lock:{k}"]);
    let mut waiters = Vec::new();
    for _ in 0..2 {
        let locks = manager(&masters).await;
        waiters.push(tokio::spawn(async move {
            let guard = locks.lock("k", LockOptions::new().wait(PATIENCE)).await?;
            guard.release().await
        }));
    }
    // Both waiters asked the free master and were refused (each attempt takes it and gives
    // it back): from here they wait for the owner.
    let free = masters.node(2);
    free.cmd(&["CONFIG", "RESETSTAT"]);
    let asked = wait_until_async(PATIENCE, || acquire_attempts(free) >= 2).await;
    assert!(asked, "the waiters never asked\n{}", masters.log());
    // A second of their waiting, observed as a rate: woken by each other's give-backs, they
    // would ask many times a second.
    free.cmd(&["CONFIG", "RESETSTAT"]);
    let window = Instant::now();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let calls = acquire_attempts(free);
    let seconds = window.elapsed().as_secs_f64();
    assert!(
        (calls as f64) < 10.0 * seconds,
        "{calls} acquire attempts in {seconds:.1} s on the free master while the owner held on"
    );
    guard.release().await.expect("release");
    for waiter in waiters {
        waiter
            .await
            .expect("task")
            .expect("the waiter gets the lock once released");
    }
}

/// A copy of the lock that outlived the lease on one master (an acquire that reached it late)
/// is not the lock: once another owner holds a majority, the first owner's release says its
/// lease was lost, as on one server, and leaves the new owner's copies alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_after_expiry_with_a_stale_minority_copy_reports_the_lease_lost() {
    let masters = Masters::start(3);
    let locks = manager(&masters).await;
    let first = locks
        .lock("late", LockOptions::new().ttl(ms(1000)).watchdog(false))
        .await
        .expect("free");
    let stored = "lock:{late}";
    assert_eq!(
        masters.node(2).cmd(&["PEXPIRE", stored, "60000"]),
        "1",
        "{}",
        masters.log()
    );
    first.lost().await;
    let second = locks
        .lock("late", LockOptions::new().wait(PATIENCE))
        .await
        .unwrap_or_else(|err| panic!("a majority is free once the lease ran out: {err}"));
    let released = first.release().await;
    assert!(
        matches!(released, Err(LockError::LeaseLost { .. })),
        "the first owner's release after its lease ran out: {released:?}\n{}",
        masters.log()
    );
    assert!(second.is_held(), "{}", masters.log());
    for i in 0..2 {
        assert!(
            masters.node(i).holds_lock(stored),
            "master {i} lost the second owner's copy\n{}",
            masters.log()
        );
    }
    second.release().await.expect("the second owner's release");
}
