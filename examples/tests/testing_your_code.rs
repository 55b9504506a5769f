//! The guide's "Testing your code" (docs/TESTING.md): every block there is an excerpt of this file, which runs
//! each of them.

use std::time::Duration;

use lock_runtime::testing::{Fault, Holder, TestLocks};
use lock_runtime::{LockError, LockOptions, LostReason, distributed_lock};

#[distributed_lock(key = "order:<user_id>", ttl = "30s", wait = "5s")]
async fn place_order(user_id: u64) -> Result<u64, LockError> {
    tokio::time::sleep(Duration::from_secs(20)).await; // the payment provider, slow today
    Ok(lock_runtime::current().map_or(0, |lock| lock.fencing_token()))
}

#[tokio::test(start_paused = true)] // 30 s leases, 5 s waits and renewals take no wall time
async fn the_lock_stays_busy_past_wait() {
    let kit = TestLocks::new(); // a lock table of this test's own
    kit.on("order:<user_id>")
        .busy(u32::MAX, Duration::from_secs(30));
    let err = kit.scope(place_order(7)).await.expect_err("busy"); // scope: the attribute's manager
    assert!(err.is_busy());
    kit.assert_never_acquired("order:7");
}

#[tokio::test(start_paused = true)]
async fn redis_errors() {
    let kit = TestLocks::new();
    kit.on("order:*").fail_acquires(2, Fault::Transient); // a dropped connection: retried within wait
    assert!(kit.scope(place_order(7)).await.is_ok());
    kit.on("order:*").fail_acquires(1, Fault::Permanent); // a refused command: never retried
    let err = kit.scope(place_order(7)).await.expect_err("refused");
    assert!(!err.is_retryable());
}

#[tokio::test(start_paused = true)]
async fn the_lease_is_lost_mid_order() {
    let kit = TestLocks::new();
    kit.on("order:7")
        .lose_lease_at_next_renewal(LostReason::NotOwner); // 10 s into the 20 s body
    let err = kit.scope(place_order(7)).await.expect_err("lost");
    assert!(err.is_lease_lost());
    kit.assert_lost("order:7");
    kit.assert_not_held("order:7");
}

#[tokio::test(start_paused = true)]
async fn the_lease_is_lost_now() -> Result<(), LockError> {
    let kit = TestLocks::new();
    let guard = kit.manager().lock("order:7", LockOptions::new()).await?;
    kit.on("order:7").lose_lease_now(LostReason::Expired).await;
    assert_eq!(guard.lost().await, LostReason::Expired); // at once, no renewal needed
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn another_instance_holds_the_lock() -> Result<(), LockError> {
    let kit = TestLocks::new();
    let holder = Holder::new("web-2", 4242, "shop");
    let other = kit
        .phantom_holder("order:7", holder, Duration::from_secs(60))
        .await?;
    assert!(kit.scope(place_order(7)).await.expect_err("held").is_busy());
    let other_token = other.fencing_token();
    other.release().await?; // or let its 60 s run out
    assert!(kit.scope(place_order(7)).await? > other_token);
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn releases_are_slow_or_fail() -> Result<(), LockError> {
    let kit = TestLocks::new();
    kit.on("order:*")
        .slow_releases(Duration::from_secs(1))
        .fail_releases(u32::MAX, Fault::Transient);
    let guard = kit
        .manager()
        .lock("order:7", LockOptions::new().ttl(Duration::from_secs(10)))
        .await?;
    assert!(guard.release().await.is_err()); // after 1 s; retried in the background, in vain
    kit.assert_held("order:7"); // until its lease runs out
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn what_was_taken_in_which_order() -> Result<(), LockError> {
    let kit = TestLocks::new();
    let held = kit.manager().lock("order:7", LockOptions::new()).await?;
    let waiter = tokio::spawn(kit.scope(place_order(7))); // waits up to 5 s
    kit.until(|kit| kit.waiters("order:7") == 1).await; // a state, never a sleep
    held.release().await?;
    let token = waiter.await.expect("task")?;
    kit.assert_acquired_in_order(&["order:7", "order:7"]);
    assert!(kit.fencing_tokens("order:7")[0] < token);
    kit.assert_not_held("order:7");
    println!("{}", kit.shown_history()); // what a failed assertion shows
    Ok(())
}
