//! What a manager meets in a real program, beyond one lock on one manager: several managers on
//! one deployment, a guard's section seen by nested code, and a manager shut down.

//!
//! The tests on memory:// run on tokio's paused clock: time moves only when every task waits,
//! so a sleep there lets every other task get as far as it can, whatever the machine's load.

use std::time::Duration;

use lock_tests::prelude::*;

async fn memory(url: &str) -> LockManager {
    LockManager::connect(url)
        .await
        .unwrap_or_else(|err| panic!("{url}: {err}"))
}

#[tokio::test]
async fn managers_connected_to_memory_share_one_lock_table() {
    let a = memory("memory://").await;
    let b = memory("memory://").await;
    let key = "lifecycle:shared-job";
    let held = a.lock(key, LockOptions::new()).await.expect("free");
    let err = b
        .lock(key, LockOptions::new())
        .await
        .expect_err("held through the other manager");
    assert!(err.is_busy(), "{err}");
    let first = held.fencing_token();
    held.release().await.expect("release");
    let next = b.lock(key, LockOptions::new()).await.expect("free again");
    assert!(
        next.fencing_token() > first,
        "fencing tokens rise across managers"
    );
    next.release().await.expect("release");
}

#[tokio::test]
async fn named_memory_tables_are_apart_from_each_other_and_from_the_default() {
    let key = "lifecycle:isolated-job";
    let a = memory("memory://lifecycle-a").await;
    let a_again = memory("memory://lifecycle-a").await;
    let b = memory("memory://lifecycle-b").await;
    let default = memory("memory://").await;
    let held = a.lock(key, LockOptions::new()).await.expect("free");
    assert!(
        a_again
            .lock(key, LockOptions::new())
            .await
            .expect_err("same name, same table")
            .is_busy()
    );
    let other = b
        .lock(key, LockOptions::new())
        .await
        .expect("another table");
    let third = default
        .lock(key, LockOptions::new())
        .await
        .expect("the default table is another one too");
    for guard in [held, other, third] {
        guard.release().await.expect("release");
    }
}

#[tokio::test(start_paused = true)]
async fn a_release_through_one_manager_wakes_a_waiter_of_another_at_once() {
    let key = "lifecycle:handover";
    let holder = memory("memory://lifecycle-handover").await;
    let waiter = memory("memory://lifecycle-handover").await;
    let held = holder.lock(key, LockOptions::new()).await.expect("free");
    let waiting = tokio::spawn(async move {
        let started = tokio::time::Instant::now();
        let guard = waiter
            .lock(key, LockOptions::new().wait(Duration::from_secs(20)))
            .await?;
        let waited = started.elapsed();
        guard.release().await?;
        Ok::<_, LockError>(waited)
    });
    // Paused clock: the waiter is waiting by the time this sleep ends.
    tokio::time::sleep(ms(100)).await;
    held.release().await.expect("release");
    let waited = waiting.await.expect("task").expect("acquired");
    // The lease is 30 s: only a notification explains a handover at the release.
    assert!(waited < Duration::from_secs(1), "{waited:?}");
}

/// A rolling deploy: the old instance shuts its manager down on SIGTERM, and the new one takes
/// the lock at once instead of waiting out a 30 s lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_releases_held_locks_and_the_next_instance_takes_them_at_once() {
    let server = RedisServer::start();
    let old = connect(&server).await;
    let new = connect(&server).await;
    let held = old
        .lock(
            "deploy:job",
            LockOptions::new().ttl(Duration::from_secs(30)),
        )
        .await
        .expect("free");
    let waiting = tokio::spawn(async move {
        let started = tokio::time::Instant::now();
        let guard = new
            .lock("deploy:job", LockOptions::new().wait(PATIENCE))
            .await?;
        let waited = started.elapsed();
        guard.release().await?;
        Ok::<_, LockError>(waited)
    });
    // The new instance waits: subscribed to the lock's releases.
    let subscribed = wait_until_async(PATIENCE, || {
        server
            .cmd(&["PUBSUB", "NUMSUB", "lock:{deploy:job}"])
            .ends_with("\n1")
    })
    .await;
    assert!(subscribed, "{}", server.log());
    old.shutdown().await.expect("released");
    assert!(!held.is_held(), "the guard learns its lock is gone");
    let waited = waiting.await.expect("task").expect("acquired");
    // Well within the 30 s lease: the shutdown released the lock.
    assert!(
        waited < Duration::from_secs(15),
        "{waited:?}\n{}",
        server.log()
    );
    // The guard's own release afterwards says what happened and touches nothing.
    let err = held.release().await.expect_err("already released");
    assert!(err.is_lease_lost(), "{err}");
    assert!(err.to_string().contains("shut down"), "{err}");
}

#[tokio::test]
async fn a_shut_down_manager_takes_no_more_locks() {
    let locks = LockManager::memory();
    locks.shutdown().await.expect("nothing held");
    assert!(locks.is_shut_down());
    let err = locks
        .lock("after", LockOptions::new())
        .await
        .expect_err("shut down");
    assert!(err.is_shut_down(), "{err}");
    assert_eq!(err.key(), Some("after"));
    let ran = locks
        .run_locked("after".into(), LockOptions::new(), async {
            Ok::<_, LockError>(())
        })
        .await;
    assert!(ran.expect_err("the body never runs").is_shut_down());
    // A second call is harmless.
    locks.shutdown().await.expect("again");
}

#[tokio::test(start_paused = true)]
async fn shutdown_wakes_the_tasks_waiting_through_the_manager() {
    let holder = memory("memory://lifecycle-shutdown-waiters").await;
    let leaving = memory("memory://lifecycle-shutdown-waiters").await;
    let held = holder.lock("busy", LockOptions::new()).await.expect("free");
    let waiter = tokio::spawn({
        let leaving = leaving.clone();
        async move {
            leaving
                .lock("busy", LockOptions::new().wait(Duration::from_secs(60)))
                .await
        }
    });
    // Paused clock: the waiter is waiting by the time this sleep ends.
    tokio::time::sleep(ms(100)).await;
    leaving.shutdown().await.expect("nothing held");
    let answer = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("woken, not left to its 60 s wait")
        .expect("task");
    assert!(answer.expect_err("shut down").is_shut_down());
    assert!(held.is_held(), "another manager's lock is untouched");
    held.release().await.expect("release");
}

#[tokio::test(start_paused = true)]
async fn a_section_running_at_shutdown_is_aborted_with_lease_lost() {
    let locks = LockManager::memory();
    let section = tokio::spawn({
        let locks = locks.clone();
        async move {
            locks
                .run_locked("long-job".into(), LockOptions::new(), async {
                    tokio::time::sleep(Duration::from_secs(60)).await;
                    Ok::<_, LockError>("finished")
                })
                .await
        }
    });
    // Paused clock: the section is running by the time this sleep ends.
    tokio::time::sleep(ms(100)).await;
    locks.shutdown().await.expect("released");
    let outcome = tokio::time::timeout(Duration::from_secs(5), section)
        .await
        .expect("aborted at once")
        .expect("task");
    let err = outcome.expect_err("aborted");
    assert!(err.is_lease_lost(), "{err}");
    assert!(err.to_string().contains("shut down"), "{err}");
}

#[tokio::test]
async fn a_guard_scope_lets_nested_sections_reenter_its_lock() {
    let locks = LockManager::memory();
    let options = LockOptions::new().wait(Duration::from_secs(5));
    let guard = locks.lock("order:1", options).await.expect("free");
    let token = guard.fencing_token();
    let inside = guard
        .scope(async {
            let held = lock_runtime::current().expect("the guard's section is current");
            assert_eq!((held.key(), held.fencing_token()), ("order:1", token));
            locks
                .run_locked("order:1".into(), options, async {
                    Ok::<_, LockError>(lock_runtime::current().map(|held| held.fencing_token()))
                })
                .await
        })
        .await
        .expect("re-entered, not waited for");
    assert_eq!(inside, Some(token));
    assert!(
        guard.is_held(),
        "the nested section did not release the outer lock"
    );
    guard.release().await.expect("release");
    let again = locks
        .lock("order:1", LockOptions::new())
        .await
        .expect("free after release");
    again.release().await.expect("release");
}

#[tokio::test(start_paused = true)]
async fn a_task_that_asks_for_a_lock_it_holds_outside_a_scope_is_told_at_once() {
    let locks = LockManager::memory();
    let guard = locks
        .lock("order:2", LockOptions::new())
        .await
        .expect("free");
    let started = tokio::time::Instant::now();
    let err = locks
        .run_locked(
            "order:2".into(),
            LockOptions::new().wait(Duration::from_secs(30)),
            async { Ok::<_, LockError>(()) },
        )
        .await
        .expect_err("would wait for itself");
    // Paused clock: any waiting would have moved it.
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
    assert!(matches!(err, LockError::HeldByThisTask { .. }), "{err}");
    assert!(err.to_string().contains("guard.scope"), "{err}");
    // Another task is another owner: it waits, and gets the lock once the guard is released.
    let other = tokio::spawn({
        let locks = locks.clone();
        async move {
            let guard = locks
                .lock("order:2", LockOptions::new().wait(Duration::from_secs(30)))
                .await?;
            guard.release().await
        }
    });
    // Paused clock: the other task is waiting by the time this sleep ends.
    tokio::time::sleep(ms(50)).await;
    guard.release().await.expect("release");
    other
        .await
        .expect("task")
        .expect("the other task waited and got it");
}

/// Two `join!` branches are one task, so one owner: the second branch asking for the lock the
/// first holds is told at once instead of waiting for its sibling.
#[tokio::test(start_paused = true)]
async fn join_branches_of_one_task_are_one_owner() {
    let locks = LockManager::memory();
    let options = LockOptions::new().wait(Duration::from_secs(30));
    // Paused clock: the first branch holds the lock while the second asks for it.
    let first = locks.run_locked("order:3".into(), options, async {
        tokio::time::sleep(ms(200)).await;
        Ok::<_, LockError>(())
    });
    let second = async {
        tokio::time::sleep(ms(50)).await;
        locks
            .run_locked("order:3".into(), options, async { Ok::<_, LockError>(()) })
            .await
    };
    let (first, second) = tokio::join!(first, second);
    first.expect("the first branch ran");
    let err = second.expect_err("the sibling holds it");
    assert!(matches!(err, LockError::HeldByThisTask { .. }), "{err}");
}
