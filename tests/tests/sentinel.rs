//! A master behind Sentinel: locks work through it and keep working across a failover.

use std::time::{Duration, Instant};

use lock_runtime::{LockError, LockManager, LockOptions};
use lock_tests::SentinelSetup;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

async fn manager(setup: &SentinelSetup) -> LockManager {
    LockManager::builder()
        .url(setup.url())
        .request_timeout(ms(500))
        .build()
        .await
        .unwrap_or_else(|err| panic!("connect: {err}\n{}", setup.log()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_work_through_sentinel_and_waiters_are_woken_by_release() {
    let setup = SentinelSetup::start(1, 3);
    let locks = manager(&setup).await;
    assert!(
        locks.backend().starts_with("redis sentinel"),
        "{}",
        locks.backend()
    );
    let guard = locks.lock("k", LockOptions::new()).await.expect("free");
    assert!(
        locks
            .lock("k", LockOptions::new())
            .await
            .expect_err("held")
            .is_busy()
    );
    let waiter_locks = locks.clone();
    let waiter = tokio::spawn(async move {
        let guard = waiter_locks
            .lock("k", LockOptions::new().wait(Duration::from_secs(10)))
            .await?;
        let entered = Instant::now();
        guard.release().await?;
        Ok::<_, LockError>(entered)
    });
    tokio::time::sleep(ms(200)).await;
    let released = Instant::now();
    guard.release().await.expect("release");
    let entered = waiter.await.expect("task").expect("waiter");
    assert!(entered.duration_since(released) < Duration::from_secs(1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failover_during_a_hold_is_survived_or_reported_and_locking_works_after_it() {
    let setup = SentinelSetup::start(1, 3);
    let locks = manager(&setup).await;
    let guard = locks
        .lock("held", LockOptions::new().ttl(Duration::from_secs(2)))
        .await
        .expect("free");
    let fence = guard.fencing_token();
    let old_master = setup.master().addr();
    setup.kill_master_and_wait_failover();
    assert_ne!(setup.current_master_addr(), old_master);

    // Within one lease the holder either renewed on the promoted replica or was told it lost.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let other = locks
        .clone()
        .lock("held", LockOptions::new().wait(Duration::from_secs(10)))
        .await;
    match other {
        Ok(other) => {
            // Someone else got it: the first holder must have been told first.
            assert!(
                !guard.is_held(),
                "two holders after the failover\n{}",
                setup.log()
            );
            assert!(other.fencing_token() > fence);
            other.release().await.expect("release on the new master");
        }
        Err(err) => {
            assert!(err.is_busy(), "{err}\n{}", setup.log());
            assert!(guard.is_held(), "busy, so the first holder still has it");
        }
    }
    drop(guard);
    let again = locks
        .lock("after", LockOptions::new().wait(Duration::from_secs(10)))
        .await
        .unwrap_or_else(|err| panic!("{err}\n{}", setup.log()));
    again.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_waiting_through_a_failover_gets_the_lock() {
    let setup = SentinelSetup::start(1, 3);
    let locks = manager(&setup).await;
    let holder = locks
        .lock("queue", LockOptions::new().ttl(Duration::from_secs(2)))
        .await
        .expect("free");
    let waiter_locks = locks.clone();
    let waiter = tokio::spawn(async move {
        let guard = waiter_locks
            .lock("queue", LockOptions::new().wait(Duration::from_secs(20)))
            .await?;
        guard.release().await
    });
    tokio::time::sleep(ms(200)).await;
    setup.kill_master_and_wait_failover();
    // The holder finishes after the failover; its lease may or may not have survived it.
    let _ = holder.release().await;
    waiter
        .await
        .expect("task")
        .unwrap_or_else(|err| panic!("{err}\n{}", setup.log()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_builder_names_sentinels_and_master_without_a_url() {
    let setup = SentinelSetup::start(0, 1);
    let sentinels: Vec<String> = setup
        .sentinels()
        .iter()
        .map(|s| s.addr().to_string())
        .collect();
    let locks = LockManager::builder()
        .sentinel(&sentinels, setup.master_name())
        .build()
        .await
        .unwrap_or_else(|err| panic!("connect: {err}\n{}", setup.log()));
    let guard = locks.lock("k", LockOptions::new()).await.expect("free");
    assert!(setup.master().holds_lock("lock:{k}"));
    guard.release().await.expect("release");
}

/// A master paused through a failover still believes it is the master when it comes back, until
/// the sentinels demote it; locks granted there in the meantime are lost when they do. A client
/// that sent nothing during the failover hears of it from the sentinels' `+switch-master` and
/// takes its next lock on the new master, not the old one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_client_follows_an_announced_failover_before_the_old_master_is_demoted() {
    let setup = SentinelSetup::start(1, 3);
    let locks = manager(&setup).await;
    let before = locks
        .lock("before", LockOptions::new())
        .await
        .expect("lock");
    before.release().await.expect("release");
    let node_at = |addr| {
        setup
            .nodes()
            .iter()
            .find(|node| node.addr() == addr)
            .expect("a data node of the setup")
    };
    let old = node_at(setup.current_master_addr());
    let new = tokio::task::block_in_place(|| setup.pause_master_and_wait_failover());
    assert_ne!(new.addr(), old.addr(), "{}", setup.log());
    // The announcement is published as the replica is promoted; give the client a moment.
    tokio::time::sleep(ms(500)).await;
    old.resume();
    let after = locks.lock("after", LockOptions::new()).await.expect("lock");
    let exists = |node: &lock_tests::RedisServer| node.holds_lock("lock:{after}");
    assert!(
        exists(new),
        "the lock is on the new master\n{}",
        setup.log()
    );
    assert!(!exists(old), "nothing was granted by the old one");
    after.release().await.expect("release");
}

/// A paused master that resumes serves the requests queued while it was stopped before it
/// learns that it was replaced, while the promoted replica grants the same lock to others. A
/// grant it sends to a client that has followed the failover meanwhile is given back, and the
/// client takes the lock on the new master instead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_from_a_master_replaced_while_the_request_was_out_is_not_trusted() {
    let setup = SentinelSetup::start(1, 3);
    // Longer than the failover: the acquire waits at the paused master for its answer.
    let locks = LockManager::builder()
        .url(setup.url())
        .request_timeout(Duration::from_secs(20))
        .build()
        .await
        .unwrap_or_else(|err| panic!("connect: {err}\n{}", setup.log()));
    let before = locks
        .lock("before", LockOptions::new())
        .await
        .expect("lock");
    before.release().await.expect("release");
    let old_addr = setup.current_master_addr();
    let old = setup
        .nodes()
        .iter()
        .find(|node| node.addr() == old_addr)
        .expect("a data node of the setup");
    old.pause();
    let taker = locks.clone();
    let acquire = tokio::spawn(async move {
        let options = LockOptions::new()
            .ttl(Duration::from_secs(30))
            .wait(Duration::from_secs(30));
        taker.lock("queued", options).await
    });
    // The acquire is sent, and waits in the paused master's socket.
    tokio::time::sleep(ms(200)).await;
    let new = tokio::task::block_in_place(|| setup.wait_replaced(old));
    // The client hears the sentinels' `+switch-master` and follows.
    tokio::time::sleep(ms(500)).await;
    old.resume();
    let guard = acquire
        .await
        .expect("task")
        .unwrap_or_else(|err| panic!("lock: {err}\n{}", setup.log()));
    assert!(
        new.holds_lock("lock:{queued}"),
        "the lock is on the new master, not only on the replaced one\n{}",
        setup.log()
    );
    guard.release().await.expect("release");
}

/// Fair waiters of two managers get the lock in the order they came, through Sentinel.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fair_waiters_get_the_lock_in_the_order_they_came() {
    let setup = SentinelSetup::start(1, 3);
    let a = manager(&setup).await;
    let b = manager(&setup).await;
    lock_tests::fair::served_in_the_order_they_came(&a, &b, "turns").await;
}
