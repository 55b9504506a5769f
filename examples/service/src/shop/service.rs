//! The shop service's locked work, which `shop_service` serves over HTTP (and
//! `tests/shop_service.rs` runs through scripted lock faults): one order per user, the stock
//! never oversold, each row fenced by its lock's fencing token.
//!
//! The locks are the default manager's (`set_global_default` in the service, a test's scope in
//! the tests).

use lock_runtime::{LockError, distributed_lock};

use super::db::Order;
use super::wire::{OrderAnswer, Outcome};
use super::{Database, Fence, OnLeaseLost, Purchase, Row, SKU, ShopError};

/// One instance's state: its database connections, its name and its lease-loss policy.
#[derive(Debug)]
pub struct Shop {
    db: Database,
    name: String,
    on_lease_lost: OnLeaseLost,
}

/// The fencing token of the innermost lock the running task holds.
fn fencing_token(section: &'static str) -> Result<u64, ShopError> {
    lock_runtime::current()
        .map(|lock| lock.fencing_token())
        .ok_or(ShopError::NotLocked(section))
}

/// The service functions. Each lock is declared twice, once per `on_lease_lost` (the attribute
/// takes it at compile time); the bodies are shared. The leases are short: a killed instance's
/// locks free themselves within 2 s, and the watchdog renews them while a body runs.
impl Shop {
    /// An instance called `name` on `db`, whose requests do as `on_lease_lost` says when their
    /// lease is lost.
    pub fn new(db: Database, name: impl Into<String>, on_lease_lost: OnLeaseLost) -> Shop {
        Shop {
            db,
            name: name.into(),
            on_lease_lost,
        }
    }

    /// This instance's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// What the service answers for the outcome of [`Shop::place_order`].
    pub fn answer(&self, placed: Result<Purchase, ShopError>) -> OrderAnswer {
        let (outcome, error) = match placed {
            Ok(Purchase::Placed) => (Outcome::Placed, None),
            Ok(Purchase::Duplicate) => (Outcome::Duplicate, None),
            Ok(Purchase::SoldOut) => (Outcome::SoldOut, None),
            Ok(Purchase::Stale(_)) => (Outcome::StaleRefused, None),
            Err(err @ ShopError::Lock(LockError::LeaseLost { .. })) => {
                (Outcome::LeaseLost, Some(err.to_string()))
            }
            Err(err @ ShopError::Lock(LockError::Busy { .. })) => {
                (Outcome::Busy, Some(err.to_string()))
            }
            Err(err) => (Outcome::Failed, Some(err.to_string())),
        };
        OrderAnswer {
            outcome,
            instance: self.name.clone(),
            error,
        }
    }

    /// One request per user at a time, across every instance.
    pub async fn place_order(&self, user_id: u64) -> Result<Purchase, ShopError> {
        match self.on_lease_lost {
            OnLeaseLost::Abort => self.place_order_or_abort(user_id).await,
            OnLeaseLost::Continue => self.place_order_and_continue(user_id).await,
        }
    }

    #[distributed_lock(key = "order:<user_id>", ttl = "2s", wait = "10s")]
    async fn place_order_or_abort(&self, user_id: u64) -> Result<Purchase, ShopError> {
        self.order_locked(user_id).await
    }

    #[distributed_lock(
        key = "order:<user_id>",
        ttl = "2s",
        wait = "10s",
        on_lease_lost = "continue"
    )]
    async fn place_order_and_continue(&self, user_id: u64) -> Result<Purchase, ShopError> {
        self.order_locked(user_id).await
    }

    /// Runs under `order:<user_id>`.
    async fn order_locked(&self, user_id: u64) -> Result<Purchase, ShopError> {
        let user_token = fencing_token("place_order")?;
        if !self
            .db
            .claim(Row::User(user_id), user_token, &self.name)
            .await?
        {
            return Ok(Purchase::Stale(Fence::User));
        }
        // Under this lock no other request of the user can order meanwhile.
        if self.db.has_order(user_id).await? {
            return Ok(Purchase::Duplicate);
        }
        // Spares the stock lock the requests that cannot buy: stock never goes up, so a 0 read
        // without the stock lock is final.
        if self.db.stock_left(SKU).await? <= 0 {
            return Ok(Purchase::SoldOut);
        }
        match self.on_lease_lost {
            OnLeaseLost::Abort => self.take_one_or_abort(SKU, user_id, user_token).await,
            OnLeaseLost::Continue => self.take_one_and_continue(SKU, user_id, user_token).await,
        }
    }

    /// One buyer at a time: the stock row is written with this lock's token.
    #[distributed_lock(key = "stock:<sku>", ttl = "2s", wait = "10s")]
    async fn take_one_or_abort(
        &self,
        sku: &str,
        user_id: u64,
        user_token: u64,
    ) -> Result<Purchase, ShopError> {
        self.buy_locked(sku, user_id, user_token).await
    }

    #[distributed_lock(
        key = "stock:<sku>",
        ttl = "2s",
        wait = "10s",
        on_lease_lost = "continue"
    )]
    async fn take_one_and_continue(
        &self,
        sku: &str,
        user_id: u64,
        user_token: u64,
    ) -> Result<Purchase, ShopError> {
        self.buy_locked(sku, user_id, user_token).await
    }

    /// Runs under `order:<user_id>` and `stock:<sku>`.
    async fn buy_locked(
        &self,
        sku: &str,
        user_id: u64,
        user_token: u64,
    ) -> Result<Purchase, ShopError> {
        let order = Order {
            user_id,
            sku,
            user_token,
            stock_token: fencing_token("take_one")?,
            instance: &self.name,
        };
        if !self
            .db
            .claim(Row::Stock(sku), order.stock_token, &self.name)
            .await?
        {
            return Ok(Purchase::Stale(Fence::Stock));
        }
        // Read, decide, write the new value: correct only while no one else holds the lock, and
        // the fence refuses the write if someone has held it since.
        let left = self.db.stock_left(sku).await?;
        if left <= 0 {
            return Ok(Purchase::SoldOut);
        }
        self.db.purchase(&order, left - 1).await
    }
}
