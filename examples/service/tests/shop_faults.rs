//! The shop service's order path through the faults it never meets in a demo run: a lease lost
//! mid-order (stopped, or refused by the database's fence when another instance took over), a
//! lock busy past `wait`, Redis failing. No lock server: the testing kit's memory deployment;
//! the database is the service's SQLite, in a file of each test's own.
//!
//! SQLite answers from threads of its own, which tokio's paused clock does not wait for: the
//! tests that need the 10 s wait to pass in no time pause the clock only while no database
//! call is under way.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use lock_runtime::testing::{Fault, Holder, TestLocks, with_default};
use lock_runtime::{LockError, LostReason};
use lock_service_examples::shop::service::Shop;
use lock_service_examples::shop::wire::Outcome;
use lock_service_examples::shop::{Database, Fence, OnLeaseLost, Purchase, SKU, ShopError};

/// The wall time the scripted part of a test may take (after the database is made). It takes
/// a few milliseconds; the bound leaves room for a loaded machine.
const WALL: Duration = Duration::from_millis(500);

/// A database file of the test's own, removed when dropped.
struct DbFile(PathBuf);

impl DbFile {
    async fn create(name: &str, stock: u64) -> (DbFile, Database) {
        let path = std::env::temp_dir().join(format!(
            "lock-service-examples-{name}-{}.sqlite",
            std::process::id()
        ));
        let file = DbFile(path);
        file.remove();
        let db = Database::create(&file.0, SKU, stock)
            .await
            .expect("database created");
        (file, db)
    }

    fn remove(&self) {
        for suffix in ["", "-wal", "-shm"] {
            let mut path = self.0.clone().into_os_string();
            path.push(suffix);
            let _ = std::fs::remove_file(path);
        }
    }
}

impl Drop for DbFile {
    fn drop(&mut self) {
        self.remove();
    }
}

#[tokio::test]
async fn a_lease_lost_mid_order_stops_the_request_before_it_takes_stock() {
    let (_file, db) = DbFile::create("lost-abort", 5).await;
    let wall = std::time::Instant::now();
    let kit = TestLocks::new();
    let shop = Arc::new(Shop::new(db.clone(), "shop-1", OnLeaseLost::Abort));
    let gate = kit.on("stock:<sku>").pause_next_acquire();
    let request = tokio::spawn(kit.scope({
        let shop = shop.clone();
        async move { shop.place_order(7).await }
    }));
    // The user's row is claimed, the stock lock on its way: the lease goes now.
    gate.reached().await;
    kit.on("order:<user_id>")
        .lose_lease_now(LostReason::Expired)
        .await;
    let placed = request.await.expect("request task");
    assert!(
        matches!(&placed, Err(ShopError::Lock(LockError::LeaseLost { .. }))),
        "{placed:?}"
    );
    assert_eq!(shop.answer(placed).outcome, Outcome::LeaseLost);
    gate.open();
    kit.assert_lost("order:7");
    kit.assert_never_acquired("stock:sku-phone");
    assert!(kit.held().is_empty(), "{}", kit.shown_history());
    assert!(wall.elapsed() < WALL, "{:?}", wall.elapsed());
    assert!(!db.has_order(7).await.expect("read"));
    assert_eq!(db.stock_left(SKU).await.expect("read"), 5);
}

#[tokio::test]
async fn an_instance_that_lost_its_lease_mid_order_is_refused_by_the_fence() {
    let (_file, db) = DbFile::create("lost-continue", 5).await;
    let wall = std::time::Instant::now();
    let kit = TestLocks::new();
    let stalled = Arc::new(Shop::new(db.clone(), "shop-1", OnLeaseLost::Continue));
    let other = Shop::new(db.clone(), "shop-2", OnLeaseLost::Continue);
    let gate = kit.on("stock:<sku>").pause_next_acquire();
    let request = tokio::spawn(kit.scope({
        let shop = stalled.clone();
        async move { shop.place_order(7).await }
    }));
    gate.reached().await;
    kit.on("order:<user_id>")
        .lose_lease_now(LostReason::Expired)
        .await;
    // Another instance takes the user's lock over and places the user's order.
    let placed = with_default(&kit.instance(), other.place_order(7)).await;
    assert!(matches!(placed, Ok(Purchase::Placed)), "{placed:?}");
    // The stalled request goes on, as `continue` says: the user's row refuses its write.
    gate.open();
    let late = request.await.expect("request task");
    assert!(matches!(late, Ok(Purchase::Stale(Fence::User))), "{late:?}");
    assert_eq!(stalled.answer(late).outcome, Outcome::StaleRefused);
    let tokens = kit.fencing_tokens("order:7");
    assert!(tokens.len() == 2 && tokens[0] < tokens[1], "{tokens:?}");
    kit.assert_lost("order:7");
    assert!(wall.elapsed() < WALL, "{:?}", wall.elapsed());
    let audit = db.audit(SKU).await.expect("audit");
    assert!(audit.broken().is_empty(), "{audit:?}");
    assert_eq!(
        (audit.orders, audit.stock_left, audit.refused_writes),
        (1, 4, 1)
    );
}

#[tokio::test]
async fn a_users_lock_held_elsewhere_past_the_wait_answers_busy() {
    let (_file, db) = DbFile::create("busy", 5).await;
    let wall = std::time::Instant::now();
    let kit = TestLocks::new();
    let shop = Shop::new(db.clone(), "shop-1", OnLeaseLost::Abort);
    let _elsewhere = kit
        .phantom_holder(
            "order:7",
            Holder::new("web-2", 4242, "shop"),
            Duration::from_secs(60),
        )
        .await
        .expect("free");
    // No database call until the answer: the 10 s wait may pass on a paused clock.
    tokio::time::pause();
    let start = tokio::time::Instant::now();
    let placed = kit.scope(shop.place_order(7)).await;
    let waited = start.elapsed();
    tokio::time::resume();
    let Err(ShopError::Lock(LockError::Busy { retry_after, .. })) = &placed else {
        panic!("expected Busy, got {placed:?}");
    };
    assert!(
        waited >= Duration::from_secs(10),
        "gave up after {waited:?}"
    );
    assert!(
        retry_after.is_some_and(|left| left <= Duration::from_secs(50)),
        "{retry_after:?}"
    );
    assert_eq!(shop.answer(placed).outcome, Outcome::Busy);
    kit.assert_never_acquired("order:7");
    assert!(wall.elapsed() < WALL, "{:?}", wall.elapsed());
    assert!(!db.has_order(7).await.expect("read"));
}

#[tokio::test]
async fn a_refused_redis_command_while_taking_stock_fails_the_order_and_frees_the_user() {
    let (_file, db) = DbFile::create("refused", 5).await;
    let wall = std::time::Instant::now();
    let kit = TestLocks::new();
    let shop = Shop::new(db.clone(), "shop-1", OnLeaseLost::Abort);
    kit.on("stock:<sku>").fail_acquires(1, Fault::Permanent);
    let placed = kit.scope(shop.place_order(7)).await;
    assert!(
        matches!(&placed, Err(ShopError::Lock(err)) if !err.is_retryable()),
        "{placed:?}"
    );
    let answer = shop.answer(placed);
    assert_eq!(answer.outcome, Outcome::Failed);
    assert!(
        answer
            .error
            .is_some_and(|error| error.contains("stock:sku-phone"))
    );
    kit.assert_acquired_in_order(&["order:7"]);
    kit.assert_not_held("order:7");
    // The user's next click goes through.
    let placed = kit.scope(shop.place_order(7)).await;
    assert!(matches!(placed, Ok(Purchase::Placed)), "{placed:?}");
    assert!(wall.elapsed() < WALL, "{:?}", wall.elapsed());
}

#[tokio::test]
async fn redis_down_for_the_whole_wait_fails_the_order_as_retryable() {
    let (_file, db) = DbFile::create("down", 5).await;
    let wall = std::time::Instant::now();
    let kit = TestLocks::new();
    let shop = Shop::new(db.clone(), "shop-1", OnLeaseLost::Abort);
    kit.on("order:<user_id>")
        .fail_acquires(u32::MAX, Fault::Transient);
    tokio::time::pause();
    let placed = kit.scope(shop.place_order(7)).await;
    tokio::time::resume();
    assert!(
        matches!(&placed, Err(ShopError::Lock(err @ LockError::Backend { .. })) if err.is_retryable()),
        "{placed:?}"
    );
    assert_eq!(shop.answer(placed).outcome, Outcome::Failed);
    kit.assert_never_acquired("order:7");
    assert!(wall.elapsed() < WALL, "{:?}", wall.elapsed());
    assert!(!db.has_order(7).await.expect("read"));
}
