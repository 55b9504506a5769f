//! What a manager meets in a real program, beyond one lock on one manager: several managers on
//! one deployment, a guard's section seen by nested code, and a manager shut down.

use std::time::Duration;

use lock_runtime::{LockManager, LockOptions};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
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
        Ok::<_, lock_runtime::LockError>(waited)
    });
    tokio::time::sleep(ms(100)).await;
    held.release().await.expect("release");
    let waited = waiting.await.expect("task").expect("acquired");
    // The lease is 30 s: only a notification explains a handover this soon.
    assert!(waited < Duration::from_secs(5), "{waited:?}");
}

async fn redis(server: &lock_tests::RedisServer) -> LockManager {
    LockManager::connect(&server.url())
        .await
        .unwrap_or_else(|err| panic!("connect: {err}\n{}", server.log()))
}

/// A rolling deploy: the old instance shuts its manager down on SIGTERM, and the new one takes
/// the lock at once instead of waiting out a 30 s lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_releases_held_locks_and_the_next_instance_takes_them_at_once() {
    let server = lock_tests::RedisServer::start();
    let old = redis(&server).await;
    let new = redis(&server).await;
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
            .lock(
                "deploy:job",
                LockOptions::new().wait(Duration::from_secs(20)),
            )
            .await?;
        let waited = started.elapsed();
        guard.release().await?;
        Ok::<_, lock_runtime::LockError>(waited)
    });
    tokio::time::sleep(ms(200)).await;
    old.shutdown().await.expect("released");
    assert!(!held.is_held(), "the guard learns its lock is gone");
    let waited = waiting.await.expect("task").expect("acquired");
    assert!(
        waited < Duration::from_secs(5),
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
            Ok::<_, lock_runtime::LockError>(())
        })
        .await;
    assert!(ran.expect_err("the body never runs").is_shut_down());
    // A second call is harmless.
    locks.shutdown().await.expect("again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_section_running_at_shutdown_is_aborted_with_lease_lost() {
    let locks = LockManager::memory();
    let section = tokio::spawn({
        let locks = locks.clone();
        async move {
            locks
                .run_locked("long-job".into(), LockOptions::new(), async {
                    tokio::time::sleep(Duration::from_secs(60)).await;
                    Ok::<_, lock_runtime::LockError>("finished")
                })
                .await
        }
    });
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
