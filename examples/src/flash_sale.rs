//! The flash sale's shop and its two locked steps, which the `flash_sale` binary races many
//! requests through (and `tests/flash_sale.rs` runs through scripted lock faults).
//!
//! Two locks, always taken in the same order (user, then stock) so they cannot deadlock:
//! `order:<sale>:<user_id>` makes a user's duplicate clicks queue up instead of all passing the
//! "already ordered?" check, and `stock:<sale>:<sku>` makes "read stock, then decrement" one
//! step. The locks are the default manager's (`set_global_default`, or a test's scope).

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use lock_runtime::{LockError, distributed_lock};

/// The one item on sale.
pub const SKU: &str = "sku-phone";

/// The shop's database. Each read and write takes a moment, as a real one does: without the
/// locks, requests would interleave between the check and the write.
#[derive(Default, Debug)]
pub struct Shop {
    /// This sale's id: one user's orders and the stock are locked per sale.
    pub sale: String,
    /// Items left.
    pub stock: AtomicI64,
    /// The requests that placed an order, by user.
    pub orders: Mutex<HashMap<u32, Vec<u32>>>,
}

impl Shop {
    /// A sale called `sale` with `stock` items.
    pub fn new(sale: impl Into<String>, stock: i64) -> Shop {
        Shop {
            sale: sale.into(),
            stock: AtomicI64::new(stock),
            orders: Mutex::default(),
        }
    }

    async fn has_order(&self, user_id: u32) -> bool {
        tokio::time::sleep(Duration::from_millis(1)).await;
        self.orders.lock().expect("orders").contains_key(&user_id)
    }

    fn record_order(&self, user_id: u32, request: u32) {
        let mut orders = self.orders.lock().expect("orders");
        orders.entry(user_id).or_default().push(request);
    }

    /// Items left.
    pub fn stock_left(&self) -> i64 {
        self.stock.load(Ordering::SeqCst)
    }

    /// The requests of `user_id` that placed an order.
    pub fn orders_of(&self, user_id: u32) -> Vec<u32> {
        let orders = self.orders.lock().expect("orders");
        orders.get(&user_id).cloned().unwrap_or_default()
    }
}

/// What became of one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// The order was recorded and one item taken.
    Placed,
    /// The user had ordered already.
    Duplicate,
    /// Nothing left.
    SoldOut,
}

/// One user's order at a time: a second click waits here and then sees the first order.
#[distributed_lock(key = "order:<shop.sale>:<user_id>", wait = "2s")]
pub async fn place_order(shop: &Shop, user_id: u32, request: u32) -> Result<Outcome, LockError> {
    if shop.has_order(user_id).await {
        return Ok(Outcome::Duplicate);
    }
    if !take_one(shop, SKU).await? {
        return Ok(Outcome::SoldOut);
    }
    shop.record_order(user_id, request);
    Ok(Outcome::Placed)
}

/// Check and decrement as one step, so two buyers never take the last item both.
#[distributed_lock(key = "stock:<shop.sale>:<sku>", wait = "2s")]
pub async fn take_one(shop: &Shop, sku: &str) -> Result<bool, LockError> {
    if shop.stock.load(Ordering::SeqCst) <= 0 {
        return Ok(false);
    }
    tokio::time::sleep(Duration::from_millis(1)).await; // the payment reservation
    shop.stock.fetch_sub(1, Ordering::SeqCst);
    Ok(true)
}
