//! The multi-key lock (`LockManager::lock_all`, `#[distributed_lock(keys = [..])]`) on every
//! backend: memory://, one redis-server, a master behind Sentinel, a three-master Redis
//! Cluster, and Redlock over three independent redis-servers.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use lock_runtime::inspect::{lock_key, queue_key};
use lock_runtime::{LostReason, distributed_lock};
use lock_tests::prelude::*;

/// The stored name of the lock `key`, where its releases are announced.
fn stored(key: &str) -> String {
    lock_key("lock:", key).expect("a key")
}

lock_tests::on_backends!(
    [memory, redis, sentinel, cluster, redlock]
    [
    every_key_is_held_with_its_own_token_until_release,
    a_busy_key_fails_the_call_and_frees_the_keys_taken_before_it,
    a_cancelled_attempt_leaves_nothing_held,
    callers_taking_overlapping_keys_in_any_order_never_deadlock,
    a_key_given_twice_is_one_lock_with_one_token,
    the_loss_of_one_key_is_reported_with_that_key,
    a_section_is_aborted_when_one_key_is_lost,
    release_on_panic_inside_the_attribute_frees_every_key,
    a_key_held_around_the_call_is_reentered_and_current_reports_the_first_key,
    fair_applies_to_every_key_and_redlock_refuses_it,
    ]
);

async fn every_key_is_held_with_its_own_token_until_release(f: Deployment) {
    let all = f
        .locks
        .lock_all(["acct:2", "acct:3", "acct:1"], LockOptions::new())
        .await
        .unwrap_or_else(|err| panic!("{err}\n{}", f.log()));
    assert_eq!(
        all.keys().collect::<Vec<_>>(),
        ["acct:1", "acct:2", "acct:3"]
    );
    assert!(all.is_held());
    for (key, token) in all.fencing_tokens() {
        assert!(token > 0, "{key}");
        assert_eq!(all.fencing_token(key), Some(token));
        assert!(!f.is_free(key).await, "{key} is held");
    }
    all.release().await.expect("release");
    for key in ["acct:1", "acct:2", "acct:3"] {
        assert!(f.is_free(key).await, "{key} released");
    }
}

async fn a_busy_key_fails_the_call_and_frees_the_keys_taken_before_it(f: Deployment) {
    let middle = f
        .locks
        .lock("busy:2", LockOptions::new())
        .await
        .expect("free");
    let locks = f.locks.clone();
    let started = Instant::now();
    let err = tokio::spawn(async move {
        let options = LockOptions::new().wait(ms(300));
        locks
            .lock_all(["busy:3", "busy:2", "busy:1"], options)
            .await
    })
    .await
    .expect("task")
    .expect_err("busy:2 is held");
    let LockError::Busy { key, waited, .. } = &err else {
        panic!("{err}\n{}", f.log());
    };
    assert_eq!(key, "busy:2", "the error names the key that failed");
    assert!(*waited >= ms(300), "{waited:?}");
    // It gave up after its wait, not after a lease.
    assert!(started.elapsed() < Duration::from_secs(10));
    // busy:1 was taken before busy:2 and given back before the error; busy:3 never taken.
    assert!(f.is_free("busy:1").await, "{}", f.log());
    assert!(f.is_free("busy:3").await);
    middle.release().await.expect("release");
}

async fn a_cancelled_attempt_leaves_nothing_held(f: Deployment) {
    let held = f
        .locks
        .lock("cancel:2", LockOptions::new())
        .await
        .expect("free");
    let locks = f.connect().await;
    let attempt = async move {
        let options = LockOptions::new().wait(Duration::from_secs(30));
        locks.lock_all(["cancel:1", "cancel:2"], options).await
    };
    // Cancelled once it took cancel:1 and waits on cancel:2.
    let attempt = f.spawn_waiting(&stored("cancel:2"), 1, attempt).await;
    assert!(eventually(|| async { !f.is_free("cancel:1").await }).await);
    attempt.abort();
    assert!(attempt.await.expect_err("aborted").is_cancelled());
    // The lease is 30 s: only the dropped guard's release frees cancel:1 this fast.
    let started = Instant::now();
    let first = f
        .locks
        .lock("cancel:1", LockOptions::new().wait(PATIENCE))
        .await
        .unwrap_or_else(|err| panic!("{err}\n{}", f.log()));
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    first.release().await.expect("release");
    held.release().await.expect("release");
    // Nor did the cancelled wait leave anything behind on cancel:2.
    assert!(f.is_free("cancel:2").await);
}

async fn callers_taking_overlapping_keys_in_any_order_never_deadlock(f: Deployment) {
    const KEYS: [&str; 4] = ["ring:a", "ring:b", "ring:c", "ring:d"];
    let inside: Arc<HashMap<&str, AtomicBool>> = Arc::new(
        KEYS.iter()
            .map(|key| (*key, AtomicBool::new(false)))
            .collect(),
    );
    let mut tasks = Vec::new();
    for task in 0..6u64 {
        let locks = f.locks.clone();
        let inside = inside.clone();
        tasks.push(tokio::spawn(async move {
            let mut seed = task * 7919 + 17;
            for _ in 0..8 {
                // Two or three keys, in a shuffled order: overlapping sets, opposite orders.
                let mut keys = KEYS.to_vec();
                for i in (1..keys.len()).rev() {
                    seed = seed
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    keys.swap(i, (seed >> 33) as usize % (i + 1));
                }
                keys.truncate(2 + (seed >> 40) as usize % 2);
                let options = LockOptions::new().wait(Duration::from_secs(20));
                let all = locks.lock_all(keys.clone(), options).await?;
                for key in &keys {
                    assert!(
                        !inside[key].swap(true, Ordering::SeqCst),
                        "{key} held twice"
                    );
                }
                tokio::time::sleep(ms(2)).await;
                for key in &keys {
                    inside[key].store(false, Ordering::SeqCst);
                }
                all.release()
                    .await
                    .map_err(|failed| failed.into_errors().remove(0))?;
            }
            Ok::<_, LockError>(())
        }));
    }
    let all = join_in_order(tasks);
    let finished = tokio::time::timeout(Duration::from_secs(40), all)
        .await
        .unwrap_or_else(|_| panic!("deadlocked\n{}", f.log()));
    for result in finished {
        result
            .expect("task")
            .unwrap_or_else(|err| panic!("{err}\n{}", f.log()));
    }
}

/// Awaits every task, in order.
async fn join_in_order<T>(
    tasks: Vec<tokio::task::JoinHandle<T>>,
) -> Vec<Result<T, tokio::task::JoinError>> {
    let mut out = Vec::with_capacity(tasks.len());
    for task in tasks {
        out.push(task.await);
    }
    out
}

async fn a_key_given_twice_is_one_lock_with_one_token(f: Deployment) {
    let all = f
        .locks
        .lock_all(["same", "same"], LockOptions::new())
        .await
        .expect("one lock");
    assert_eq!(all.keys().collect::<Vec<_>>(), ["same"]);
    assert_eq!(all.fencing_tokens().count(), 1);
    all.release().await.expect("release");
    let err = f
        .locks
        .lock_all(Vec::<String>::new(), LockOptions::new())
        .await
        .expect_err("no keys");
    assert!(matches!(err, LockError::Config(_)), "{err}");
}

/// A key held around the call under a fixed short lease is re-entered; the other key is
/// renewed. The outer lease runs out, and `lost()` names that key.
async fn the_loss_of_one_key_is_reported_with_that_key(f: Deployment) {
    // Short, but long enough to re-enter before it ends on a loaded machine.
    let short = LockOptions::new().ttl(ms(2000)).watchdog(false);
    let outer = f.locks.lock("lose:b", short).await.expect("free");
    let locks = f.locks.clone();
    outer
        .scope(async {
            let all = locks
                .lock_all(["lose:a", "lose:b"], LockOptions::new())
                .await
                .expect("lose:b re-entered, lose:a free");
            let (key, reason) = tokio::time::timeout(PATIENCE, all.lost())
                .await
                .expect("the outer lease runs out");
            assert_eq!((key, reason), ("lose:b", LostReason::Expired));
            assert!(!all.is_held());
            // lose:b is the outer holder's to release: this gives back lose:a only.
            all.release().await.expect("lose:a released");
        })
        .await;
    drop(outer);
    assert!(f.is_free("lose:a").await);
}

async fn a_section_is_aborted_when_one_key_is_lost(f: Deployment) {
    // Short, but long enough to re-enter before it ends on a loaded machine.
    let short = LockOptions::new().ttl(ms(2000)).watchdog(false);
    let outer = f.locks.lock("abort:z", short).await.expect("free");
    // A body that never ends: only the abort ends the section.
    let section = f
        .locks
        .run_locked_all(["abort:y", "abort:z"], LockOptions::new(), async move {
            std::future::pending::<()>().await;
            Ok::<_, LockError>(())
        });
    let result = tokio::time::timeout(PATIENCE, outer.scope(section)).await;
    match result.expect("the body was dropped") {
        Err(LockError::LeaseLost { key, .. }) => assert_eq!(key, "abort:z"),
        other => panic!("{other:?}\n{}", f.log()),
    }
    drop(outer);
    let started = Instant::now();
    let next = f
        .locks
        .lock("abort:y", LockOptions::new().wait(PATIENCE))
        .await
        .expect("released after the abort");
    // The lease is 30 s: only the release after the abort frees it this fast.
    assert!(started.elapsed() < Duration::from_secs(5));
    next.release().await.expect("release");
}

#[distributed_lock(keys = ["panic:<from>", "panic:<to>"], manager = locks)]
async fn transfer_that_panics(locks: &LockManager, from: u32, to: u32) -> Result<(), LockError> {
    assert_ne!(from, to);
    panic!("the transfer failed half-way");
}

async fn release_on_panic_inside_the_attribute_frees_every_key(f: Deployment) {
    let locks = f.locks.clone();
    let panicked = tokio::spawn(async move { transfer_that_panics(&locks, 1, 2).await }).await;
    assert!(panicked.expect_err("the task panicked").is_panic());
    // Released before the panic went on: no waiting needed.
    assert!(f.is_free("panic:1").await, "{}", f.log());
    assert!(f.is_free("panic:2").await);
}

#[distributed_lock(keys = ["nest:<a>", "nest:<b>"], manager = locks)]
async fn nested_pair(locks: &LockManager, a: &str, b: &str) -> Result<Vec<String>, LockError> {
    let first = lock_runtime::current().expect("inside").key().to_owned();
    let mut seen = vec![first];
    seen.extend(
        lock_runtime::current_all()
            .iter()
            .map(|lock| lock.key().to_owned()),
    );
    Ok(seen)
}

async fn a_key_held_around_the_call_is_reentered_and_current_reports_the_first_key(f: Deployment) {
    let locks = f.locks.clone();
    let outer_token = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let token = outer_token.clone();
    let seen = f
        .locks
        .run_locked("nest:2".into(), LockOptions::new(), async move {
            token.store(
                lock_runtime::current().expect("held").fencing_token(),
                Ordering::SeqCst,
            );
            let all = locks
                .lock_all(["nest:2", "nest:1"], LockOptions::new())
                .await?;
            let reentered: Vec<bool> = all.guards().map(|guard| guard.is_reentered()).collect();
            assert_eq!(reentered, [false, true], "nest:2 is the outer section's");
            all.release()
                .await
                .map_err(|failed| failed.into_errors().remove(0))?;
            assert!(lock_runtime::current().expect("outer").is_held());
            nested_pair(&locks, "2", "1").await
        })
        .await
        .unwrap_or_else(|err| panic!("{err}\n{}", f.log()));
    // current(): the first key in order; current_all(): the section's keys, then the outer
    // section's locks, each once.
    assert_eq!(seen, ["nest:1", "nest:1", "nest:2"]);
    assert!(outer_token.load(Ordering::SeqCst) > 0);
    assert!(f.is_free("nest:1").await);
    assert!(f.is_free("nest:2").await);
}

async fn fair_applies_to_every_key_and_redlock_refuses_it(f: Deployment) {
    let fair = LockOptions::new().wait(PATIENCE).fair(true);
    let taken = f.locks.lock_all(["fair:1", "fair:2"], fair).await;
    if f.is_redlock() {
        let err = taken.expect_err("Redlock has no fair mode");
        assert!(matches!(err, LockError::Config(_)), "{err}");
        assert!(f.is_free("fair:1").await && f.is_free("fair:2").await);
        return;
    }
    let all = taken.unwrap_or_else(|err| panic!("{err}\n{}", f.log()));
    let locks = f.connect().await;
    let waiter = async move { locks.lock_all(["fair:2", "fair:1"], fair).await };
    // Released once the waiter is in line for fair:1, the first in order.
    let waiter = f.spawn_waiting(&stored("fair:1"), 0, waiter).await;
    if let Some(server) = f.server_of(&stored("fair:1")) {
        let line = queue_key(&stored("fair:1"));
        let in_line = wait_until_async(PATIENCE, || server.cmd(&["ZCARD", &line]) == "1");
        assert!(in_line.await, "{}", f.log());
    }
    all.release().await.expect("release");
    let next = waiter.await.expect("task").expect("served in turn");
    next.release().await.expect("release");
}

/// On a cluster, keys on different masters are each locked on their own master, each with its
/// own fencing token: no command ever names two of them, so there is no CROSSSLOT.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_keys_on_different_masters_are_each_held_there() {
    let f = Deployment::cluster().await;
    let cluster = f.redis_cluster().expect("a cluster");
    let stored = |key: &str| format!("lock:{{{key}}}");
    // Three keys that land on three different masters.
    let mut keys: Vec<String> = Vec::new();
    let mut masters: Vec<u16> = Vec::new();
    for i in 0..1000 {
        let key = format!("shard:{i}");
        let port = cluster.master_for_key(stored(&key)).port();
        if !masters.contains(&port) {
            masters.push(port);
            keys.push(key);
        }
        if keys.len() == 3 {
            break;
        }
    }
    assert_eq!(keys.len(), 3, "three masters serve some key\n{}", f.log());
    let all = f
        .locks
        .lock_all(keys.clone(), LockOptions::new())
        .await
        .unwrap_or_else(|err| panic!("{err}\n{}", f.log()));
    let tokens: Vec<u64> = all.fencing_tokens().map(|(_, token)| token).collect();
    assert!(tokens.iter().all(|&token| token > 0), "{tokens:?}");
    for key in &keys {
        let master = cluster.master_for_key(stored(key));
        assert_eq!(
            master.cmd(&["EXISTS", &stored(key)]),
            "1",
            "{key} on {}",
            master.port()
        );
    }
    all.release().await.expect("release");
    for key in &keys {
        let master = cluster.master_for_key(stored(key));
        let left = master.cmd(&["GET", &stored(key)]);
        assert!(!left.starts_with("held"), "{key}: {left}");
    }
}

/// `lock_all` takes locks: options asking for a semaphore's permit are refused before anything
/// is taken, with the way to take permits instead.
#[tokio::test]
async fn lock_all_with_permits_in_its_options_is_refused() {
    let f = Deployment::memory().await;
    let err = f
        .locks
        .lock_all(["quota:1", "quota:2"], LockOptions::new().permits(3))
        .await
        .expect_err("permits are not locks");
    assert!(matches!(err, LockError::Config(_)), "{err}");
    assert!(err.to_string().contains("semaphore"), "{err}");
    assert!(f.is_free("quota:1").await && f.is_free("quota:2").await);
}
