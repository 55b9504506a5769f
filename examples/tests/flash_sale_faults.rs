//! The flash sale's order path through the faults it never meets in a demo run: a lease lost
//! mid-order, a lock busy past `wait`, Redis failing. No server: each runs on the testing kit's
//! memory deployment with tokio's clock paused, so the 2 s waits take no wall time.

use std::sync::Arc;
use std::time::Duration;

use lock_examples::flash_sale::{Outcome, Shop, place_order};
use lock_runtime::testing::{Fault, Holder, TestLocks};
use lock_runtime::{LockError, LostReason};
use tokio::time::Instant;

/// The wall time a scripted test may take. They take a few milliseconds; the bound leaves
/// room for a loaded machine.
const WALL: Duration = Duration::from_millis(500);

/// A sale `s1` with 5 items.
fn shop() -> Arc<Shop> {
    Arc::new(Shop::new("s1", 5))
}

/// User 7's order, on the kit's locks.
async fn order(kit: &TestLocks, shop: &Arc<Shop>) -> Result<Outcome, LockError> {
    kit.scope(place_order(shop, 7, 0)).await
}

#[tokio::test(start_paused = true)]
async fn an_order_goes_through_user_then_stock() {
    let wall = std::time::Instant::now();
    let kit = TestLocks::new();
    let shop = shop();
    assert_eq!(order(&kit, &shop).await.expect("placed"), Outcome::Placed);
    assert_eq!(
        order(&kit, &shop).await.expect("answered"),
        Outcome::Duplicate
    );
    kit.assert_acquired_in_order(&["order:s1:7", "stock:s1:sku-phone", "order:s1:7"]);
    assert!(kit.held().is_empty(), "{}", kit.shown_history());
    assert!(wall.elapsed() < WALL, "{:?}", wall.elapsed());
}

#[tokio::test(start_paused = true)]
async fn a_lease_lost_mid_order_stops_it_before_it_takes_stock() {
    let wall = std::time::Instant::now();
    let kit = TestLocks::new();
    let shop = shop();
    // The order holds the user's lock and is on its way to the stock's: stop it there.
    let gate = kit.on("stock:<shop.sale>:<sku>").pause_next_acquire();
    let request = tokio::spawn(kit.scope({
        let shop = shop.clone();
        async move { place_order(&shop, 7, 0).await }
    }));
    gate.reached().await;
    let lost = kit
        .on("order:<shop.sale>:<user_id>")
        .lose_lease_now(LostReason::NotOwner)
        .await;
    assert_eq!(lost, 1);
    let answer = request.await.expect("request task");
    match answer {
        Err(LockError::LeaseLost { key, reason, .. }) => {
            assert_eq!(key, "order:s1:7");
            assert_eq!(reason, LostReason::NotOwner);
        }
        other => panic!("expected LeaseLost, got {other:?}"),
    }
    gate.open();
    // Nothing was sold: the section stopped before it took stock.
    assert_eq!(shop.stock_left(), 5);
    assert!(shop.orders_of(7).is_empty());
    kit.assert_lost("order:s1:7");
    kit.assert_never_acquired("stock:s1:sku-phone");
    assert!(kit.held().is_empty(), "{}", kit.shown_history());
    assert!(wall.elapsed() < WALL, "{:?}", wall.elapsed());
}

#[tokio::test(start_paused = true)]
async fn a_users_lock_held_elsewhere_past_the_wait_answers_busy() {
    let wall = std::time::Instant::now();
    let kit = TestLocks::new();
    let shop = shop();
    // Another instance works on the user's first click, for 30 s.
    let _elsewhere = kit
        .phantom_holder(
            "order:s1:7",
            Holder::new("web-2", 4242, "flash-sale"),
            Duration::from_secs(30),
        )
        .await
        .expect("free");
    let start = Instant::now();
    let err = order(&kit, &shop)
        .await
        .expect_err("busy for the whole wait");
    let LockError::Busy {
        key, retry_after, ..
    } = &err
    else {
        panic!("expected Busy, got {err:?}");
    };
    assert_eq!(key, "order:s1:7");
    let retry_after = retry_after.expect("the holder's lease has an end");
    assert!(retry_after <= Duration::from_secs(28), "{retry_after:?}");
    assert!(
        start.elapsed() >= Duration::from_secs(2),
        "gave up after {:?}",
        start.elapsed()
    );
    assert_eq!(shop.stock_left(), 5);
    kit.assert_never_acquired("order:s1:7");
    assert!(wall.elapsed() < WALL, "{:?}", wall.elapsed());
}

#[tokio::test(start_paused = true)]
async fn a_stock_lock_busy_past_the_wait_fails_the_order_and_frees_the_user() {
    let wall = std::time::Instant::now();
    let kit = TestLocks::new();
    let shop = shop();
    kit.on("stock:*").busy(u32::MAX, Duration::from_secs(10));
    let err = order(&kit, &shop).await.expect_err("busy");
    assert!(
        err.is_busy() && err.key() == Some("stock:s1:sku-phone"),
        "{err:?}"
    );
    kit.assert_acquired_in_order(&["order:s1:7"]);
    kit.assert_not_held("order:s1:7");
    assert!(shop.orders_of(7).is_empty());
    assert!(wall.elapsed() < WALL, "{:?}", wall.elapsed());
}

#[tokio::test(start_paused = true)]
async fn a_dropped_redis_connection_while_taking_stock_is_ridden_out() {
    let wall = std::time::Instant::now();
    let kit = TestLocks::new();
    let shop = shop();
    kit.on("stock:<shop.sale>:<sku>")
        .fail_acquires(2, Fault::Transient);
    assert_eq!(order(&kit, &shop).await.expect("placed"), Outcome::Placed);
    assert_eq!(shop.stock_left(), 4);
    kit.assert_acquired_in_order(&["order:s1:7", "stock:s1:sku-phone"]);
    assert!(wall.elapsed() < WALL, "{:?}", wall.elapsed());
}

#[tokio::test(start_paused = true)]
async fn a_refused_redis_command_fails_the_order_at_once_and_the_next_click_works() {
    let wall = std::time::Instant::now();
    let kit = TestLocks::new();
    let shop = shop();
    kit.on("stock:*").fail_acquires(1, Fault::Permanent);
    let start = Instant::now();
    let err = order(&kit, &shop).await.expect_err("refused");
    assert!(
        matches!(
            err,
            LockError::Backend {
                operation: "acquire",
                ..
            }
        ) && !err.is_retryable(),
        "{err:?}"
    );
    // Only the 1 ms the order's "already ordered?" read takes: a refusal is not waited out.
    assert!(
        start.elapsed() < Duration::from_millis(100),
        "{:?}",
        start.elapsed()
    );
    kit.assert_not_held("order:s1:7");
    assert_eq!(shop.stock_left(), 5);
    assert_eq!(order(&kit, &shop).await.expect("placed"), Outcome::Placed);
    assert!(wall.elapsed() < WALL, "{:?}", wall.elapsed());
}

#[tokio::test(start_paused = true)]
async fn redis_down_for_the_whole_wait_fails_the_order_as_retryable() {
    let wall = std::time::Instant::now();
    let kit = TestLocks::new();
    let shop = shop();
    kit.on("*").fail_acquires(u32::MAX, Fault::Transient);
    let err = order(&kit, &shop).await.expect_err("down");
    assert!(
        matches!(
            err,
            LockError::Backend {
                transient: true,
                ..
            }
        ) && err.is_retryable(),
        "{err:?}"
    );
    kit.assert_never_acquired("order:s1:7");
    assert!(wall.elapsed() < WALL, "{:?}", wall.elapsed());
}
