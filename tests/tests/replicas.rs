//! Waiting for replica acknowledgements after an acquire (`wait_for_replicas`).

use std::time::Duration;

use lock_runtime::{LockError, LockManager, LockOptions};
use lock_tests::{RedisServer, wait_until};

/// A master with one replica in sync.
fn master_and_replica() -> (RedisServer, RedisServer) {
    let master = RedisServer::start();
    let port = master.port().to_string();
    let replica = RedisServer::start_with(&["--replicaof", "127.0.0.1", &port]);
    let synced = wait_until(Duration::from_secs(10), || {
        replica
            .cmd(&["INFO", "replication"])
            .contains("master_link_status:up")
    });
    assert!(
        synced,
        "replica never synced\n{}\n{}",
        master.log(),
        replica.log()
    );
    (master, replica)
}

async fn manager(master: &RedisServer) -> LockManager {
    LockManager::builder()
        .url(master.url())
        .wait_for_replicas(1, Duration::from_millis(500))
        .build()
        .await
        .unwrap_or_else(|err| panic!("{err}\n{}", master.log()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acknowledged_lock_is_on_the_replica_when_acquire_returns() {
    let (master, replica) = master_and_replica();
    let locks = manager(&master).await;
    let guard = locks.lock("acked", LockOptions::new()).await.expect("free");
    assert_eq!(
        replica.cmd(&["EXISTS", "lock:{acked}"]),
        "1",
        "{}",
        replica.log()
    );
    guard.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_replica_paused_acquire_fails_cleanly_and_leaves_no_lock() {
    let (master, replica) = master_and_replica();
    let locks = manager(&master).await;
    replica.pause();
    let ran = std::sync::atomic::AtomicBool::new(false);
    let result = locks
        .run_locked("unacked".into(), LockOptions::new(), async {
            ran.store(true, std::sync::atomic::Ordering::SeqCst);
            Ok::<_, LockError>(())
        })
        .await;
    replica.resume();
    let err = result.expect_err("no replica acknowledged");
    assert!(matches!(err, LockError::Backend { .. }), "{err}");
    assert!(err.to_string().contains("replicas acknowledged"), "{err}");
    assert!(!ran.load(std::sync::atomic::Ordering::SeqCst));
    assert_eq!(
        master.cmd(&["EXISTS", "lock:{unacked}"]),
        "0",
        "{}",
        master.log()
    );
}
