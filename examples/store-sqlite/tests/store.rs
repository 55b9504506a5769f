//! The SQLite store against the store seam and through managers in one process.

mod common;

use std::time::{Duration, Instant};

use common::{TempDb, manager};
use lock_runtime::store::{Acquire, Ask, HolderId, Key, Release, Shape, Store};
use lock_runtime::{LockError, LockOptions};

fn key(name: &str) -> Key {
    Key::new("lock:", name, Shape::Lock).expect("a valid key")
}

async fn acquire(store: &dyn Store, key: &Key, token: &str, ttl: Duration) -> Acquire {
    store
        .acquire(key, token, ttl, Ask::default())
        .await
        .expect("the store answers")
}

fn fence(answer: &Acquire) -> u64 {
    match answer {
        Acquire::Acquired { fence } => *fence,
        Acquire::Busy { .. } => panic!("expected a grant, got {answer:?}"),
    }
}

#[tokio::test]
async fn two_managers_over_one_store_exclude_each_other() {
    let db = TempDb::new("managers");
    let store = db.store().await;
    let (one, two) = (manager(&store).await, manager(&store).await);
    let held = one.lock("order:1", LockOptions::new()).await.expect("free");
    let refused = two
        .lock("order:1", LockOptions::new().wait(Duration::ZERO))
        .await
        .expect_err("held by the other manager");
    assert!(refused.is_busy(), "{refused}");
    held.release().await.expect("released");
    let taken = two
        .lock("order:1", LockOptions::new().wait(Duration::ZERO))
        .await
        .expect("free once released");
    taken.release().await.expect("released");
}

#[tokio::test]
async fn a_busy_answer_names_the_holder_and_its_remaining_lease() {
    let db = TempDb::new("busy");
    let store = db.store().await;
    let key = key("order:2");
    fence(&acquire(&*store, &key, "owner-a", Duration::from_secs(10)).await);
    match acquire(&*store, &key, "owner-b", Duration::from_secs(10)).await {
        Acquire::Busy {
            remaining: Some(remaining),
            holder,
            in_line,
            ..
        } => {
            assert!(remaining > Duration::ZERO && remaining <= Duration::from_secs(10));
            assert_eq!(holder, Some(HolderId::of_token("owner-a")));
            assert!(!in_line);
        }
        other => panic!("expected busy with a remaining lease, got {other:?}"),
    }
}

#[tokio::test]
async fn release_checks_the_owner_token() {
    let db = TempDb::new("owner");
    let store = db.store().await;
    let key = key("order:3");
    fence(&acquire(&*store, &key, "owner-a", Duration::from_secs(10)).await);
    let release = |token: &'static str| {
        let (store, key) = (store.clone(), key.clone());
        async move {
            store
                .release(&key, token, Duration::ZERO)
                .await
                .expect("answered")
        }
    };
    assert_eq!(release("owner-b").await, Release::NotOwner);
    let still = acquire(&*store, &key, "owner-c", Duration::from_secs(10)).await;
    assert!(matches!(still, Acquire::Busy { .. }), "{still:?}");
    assert_eq!(release("owner-a").await, Release::Released);
    assert_eq!(release("owner-a").await, Release::Gone);
}

#[tokio::test]
async fn a_release_that_keeps_the_lock_leaves_it_busy_for_nobody_until_then() {
    let db = TempDb::new("keep");
    let store = db.store().await;
    let key = key("order:9");
    fence(&acquire(&*store, &key, "owner-a", Duration::from_secs(30)).await);
    let keep = Duration::from_millis(500);
    let kept = store.release(&key, "owner-a", keep).await;
    assert_eq!(kept.expect("answered"), Release::Released);
    match acquire(&*store, &key, "owner-b", Duration::from_secs(10)).await {
        Acquire::Busy {
            remaining: Some(remaining),
            holder: None,
            ..
        } => assert!(remaining <= keep, "{remaining:?}"),
        other => panic!("expected busy for nobody, got {other:?}"),
    }
    // Its former owner no longer holds it.
    let again = store.release(&key, "owner-a", Duration::ZERO).await;
    assert_eq!(again.expect("answered"), Release::NotOwner);
    let until = Instant::now() + Duration::from_secs(10);
    while matches!(
        acquire(&*store, &key, "owner-b", Duration::from_secs(10)).await,
        Acquire::Busy { .. }
    ) {
        assert!(Instant::now() < until, "still kept after {keep:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_retried_acquire_of_the_holder_keeps_its_fencing_token() {
    let db = TempDb::new("retry");
    let store = db.store().await;
    let key = key("order:4");
    let first = fence(&acquire(&*store, &key, "owner-a", Duration::from_secs(10)).await);
    let again = fence(&acquire(&*store, &key, "owner-a", Duration::from_secs(10)).await);
    assert_eq!(first, again);
}

#[tokio::test]
async fn the_watchdog_keeps_a_lease_renewed_past_its_ttl() {
    let db = TempDb::new("renew");
    let store = db.store().await;
    let manager = manager(&store).await;
    // The watchdog renews a third of the way into the lease: a lock still held after three
    // leases was renewed.
    let ttl = Duration::from_millis(600);
    let held = manager
        .lock("order:5", LockOptions::new().ttl(ttl))
        .await
        .expect("free");
    tokio::time::sleep(ttl * 3).await;
    assert!(held.is_held());
    let other = acquire(&*store, &key("order:5"), "owner-b", ttl).await;
    assert!(matches!(other, Acquire::Busy { .. }), "{other:?}");
    held.release().await.expect("released");
}

#[tokio::test]
async fn a_renewal_of_a_lock_another_owner_took_loses_the_lease() {
    let db = TempDb::new("stolen");
    let store = db.store().await;
    let manager = manager(&store).await;
    let held = manager
        .lock(
            "order:8",
            LockOptions::new().ttl(Duration::from_millis(900)),
        )
        .await
        .expect("free");
    // Behind the holder's back: its row goes, another owner takes the lock.
    let sql = rusqlite::Connection::open(db.path()).expect("open the file");
    sql.busy_timeout(Duration::from_secs(5))
        .expect("busy timeout");
    sql.execute("DELETE FROM holders WHERE name = 'lock:{order:8}'", [])
        .expect("deleted");
    fence(&acquire(&*store, &key("order:8"), "thief", Duration::from_secs(30)).await);
    let lost = tokio::time::timeout(Duration::from_secs(10), held.lost())
        .await
        .expect("the next renewal finds the lease gone");
    assert_eq!(lost, lock_runtime::LostReason::NotOwner);
}

#[tokio::test]
async fn fencing_tokens_rise_across_release_expiry_and_reopening() {
    let db = TempDb::new("fences");
    let key = key("order:6");
    let mut fences = Vec::new();
    {
        let store = db.store().await;
        fences.push(fence(
            &acquire(&*store, &key, "a", Duration::from_secs(10)).await,
        ));
        let released = store.release(&key, "a", Duration::ZERO).await;
        assert_eq!(released.expect("answered"), Release::Released);
        fences.push(fence(
            &acquire(&*store, &key, "b", Duration::from_millis(100)).await,
        ));
        // "b" is never released: "c" gets in once its lease has ended.
        let until = Instant::now() + Duration::from_secs(10);
        loop {
            let answer = acquire(&*store, &key, "c", Duration::from_secs(10)).await;
            if let Acquire::Acquired { fence } = answer {
                fences.push(fence);
                break;
            }
            assert!(Instant::now() < until, "the expired lease still blocks");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let released = store.release(&key, "c", Duration::ZERO).await;
        assert_eq!(released.expect("answered"), Release::Released);
    }
    // A new process (here: a new store over the same file) goes on from the last token.
    let store = db.store().await;
    fences.push(fence(
        &acquire(&*store, &key, "d", Duration::from_secs(10)).await,
    ));
    assert!(
        fences.windows(2).all(|pair| pair[0] < pair[1]),
        "{fences:?}"
    );
}

#[tokio::test]
async fn a_release_wakes_a_waiter_of_another_manager_at_once() {
    let db = TempDb::new("wake");
    let store = db.store().await;
    let (one, two) = (manager(&store).await, manager(&store).await);
    // Renewed by the watchdog, this lease never ends by itself: only a release told to the
    // waiter lets it in before its 30 s wait is out.
    let held = one
        .lock("order:7", LockOptions::new().ttl(Duration::from_secs(20)))
        .await
        .expect("free");
    let waiter = tokio::spawn(async move {
        let asked = Instant::now();
        let guard = two
            .lock("order:7", LockOptions::new().wait(Duration::from_secs(30)))
            .await;
        (guard.map(|guard| guard.fencing_token()), asked.elapsed())
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let released_at = Instant::now();
    let held_fence = held.fencing_token();
    held.release().await.expect("released");
    let (taken, _) = waiter.await.expect("the waiter ran");
    assert!(taken.expect("taken after the release") > held_fence);
    assert!(
        released_at.elapsed() < Duration::from_secs(10),
        "the waiter waited out the lease instead of being woken"
    );
}

#[tokio::test]
async fn a_semaphore_admits_its_permits_across_managers_and_no_more() {
    let db = TempDb::new("semaphore");
    let store = db.store().await;
    let (one, two) = (manager(&store).await, manager(&store).await);
    let now = LockOptions::new().wait(Duration::ZERO);
    let first = one.semaphore("exports", 2, now).await.expect("a permit");
    let second = two.semaphore("exports", 2, now).await.expect("a permit");
    assert!(second.fencing_token() > first.fencing_token());
    let full = one.semaphore("exports", 2, now).await.expect_err("full");
    assert!(full.is_busy(), "{full}");
    let declared = two
        .semaphore("exports", 3, now)
        .await
        .expect_err("other permits");
    assert!(matches!(declared, LockError::Config(_)), "{declared}");
    first.release().await.expect("released");
    let third = two
        .semaphore("exports", 2, now)
        .await
        .expect("a permit given back");
    third.release().await.expect("released");
    second.release().await.expect("released");
}

#[tokio::test]
async fn a_read_write_lock_is_refused_with_a_clear_error() {
    let db = TempDb::new("rw");
    let store = db.store().await;
    let manager = manager(&store).await;
    let refused = manager
        .read_lock("catalog", LockOptions::new())
        .await
        .expect_err("not kept here");
    assert!(matches!(refused, LockError::Config(_)), "{refused}");
    assert!(refused.to_string().contains("read-write"), "{refused}");
}

#[tokio::test]
async fn a_database_kept_busy_by_another_connection_is_a_transient_failure() {
    let db = TempDb::new("busy-db");
    let store = lock_store_sqlite::SqliteStore::open_with_busy_timeout(
        db.path(),
        Duration::from_millis(100),
    )
    .await
    .expect("open the database");
    let other = rusqlite::Connection::open(db.path()).expect("open the file");
    other
        .execute_batch("BEGIN IMMEDIATE")
        .expect("the write lock");
    let failed = store
        .acquire(
            &key("order:10"),
            "owner-a",
            Duration::from_secs(10),
            Ask::default(),
        )
        .await
        .expect_err("the file's write lock is held elsewhere");
    assert!(failed.is_transient(), "{failed}");
    let shown = failed.to_string();
    assert!(
        shown.contains("lock:{order:10}") && !shown.contains("owner-a"),
        "{shown}"
    );
    other
        .execute_batch("ROLLBACK")
        .expect("the write lock let go");
    let after = acquire(&store, &key("order:10"), "owner-a", Duration::from_secs(10)).await;
    fence(&after);
}
