use lock_runtime::{LockError, LockManager, distributed_lock};

#[derive(Debug, PartialEq)]
struct OrderId(u64);

/// Places an order; one at a time per user.
#[distributed_lock(key = "order:<user_id>", ttl = "30s")]
async fn place_order(user_id: u64, voucher_id: u64) -> Result<OrderId, LockError> {
    if let Some(lock) = lock_runtime::current() {
        assert_eq!(lock.key(), format!("order:{user_id}"));
    }
    Ok(OrderId(user_id * 1000 + voucher_id))
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    lock_runtime::set_global_default(LockManager::memory()).expect("first default");
    assert_eq!(place_order(7, 3).await.expect("locked call"), OrderId(7003));
}
