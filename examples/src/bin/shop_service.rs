//! The shop service: an HTTP flash sale whose stock and orders live in a SQLite file shared by
//! every instance, one order per user, the stock never oversold.
//!
//! `POST /orders/<user_id>` places the user's order. Two locks, always in this order: the user's
//! (`order:<user_id>`), so that a user's duplicate clicks on any instance queue up instead of all
//! passing the "already ordered?" check, then the stock's (`stock:<sku>`), so that one buyer at a
//! time takes an item. Each lock's fencing token claims the row it protects before the row is
//! read, and the database refuses a write decided under an older token (see
//! `lock_examples::shop::db`).
//!
//! ```sh
//! REDIS_URL=redis://127.0.0.1:7000 cargo run -p lock-examples --bin shop_service -- \
//!     --port 8081 --db /tmp/shop.sqlite --name shop-1
//! ```
//!
//! The database must exist (`shop_runner` creates it). Without `REDIS_URL` the locks are the
//! process's own: fine for one instance, wrong for several. `shop_runner` starts three against
//! one Redis and fires load at them.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};
use clap::Parser;
use lock_examples::shop::db::Order;
use lock_examples::shop::wire::{self, OrderAnswer, Outcome};
use lock_examples::shop::{Database, Fence, OnLeaseLost, Purchase, Row, SKU, ShopError};
use lock_runtime::{LockError, distributed_lock};

/// An instance of the shop service.
#[derive(Debug, Parser)]
#[command(about = "The shop service: a flash sale over HTTP, locked with #[distributed_lock]")]
struct Args {
    /// The port to listen on, on 127.0.0.1 (0: a free port the system picks; either way the
    /// address bound is printed at start, in a `listening on http://<addr>` line).
    #[arg(long)]
    port: u16,
    /// The SQLite database file, created by shop_runner.
    #[arg(long)]
    db: PathBuf,
    /// This instance's name, recorded with its orders and sent in its answers.
    #[arg(long, default_value = "shop")]
    name: String,
    /// What a request does when its lock's lease is lost (the instance stalled past it).
    #[arg(long, value_enum, default_value = "abort")]
    on_lease_lost: OnLeaseLost,
}

/// One instance's state: its database connections, its name and its lease-loss policy.
struct Shop {
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
    /// One request per user at a time, across every instance.
    async fn place_order(&self, user_id: u64) -> Result<Purchase, ShopError> {
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

async fn order(
    State(shop): State<Arc<Shop>>,
    Path(user_id): Path<u64>,
) -> (StatusCode, Json<OrderAnswer>) {
    let (outcome, error) = match shop.place_order(user_id).await {
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
        Err(err) => {
            tracing::warn!(user_id, "order failed: {err}");
            (Outcome::Failed, Some(err.to_string()))
        }
    };
    let status =
        StatusCode::from_u16(outcome.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let answer = OrderAnswer {
        outcome,
        instance: shop.name.clone(),
        error,
    };
    (status, Json(answer))
}

async fn run(args: Args) -> Result<(), String> {
    let locks = lock_examples::locks_from_env()
        .await
        .map_err(|err| err.to_string())?;
    let backend = locks.backend().to_owned();
    lock_runtime::set_global_default(locks).map_err(|err| err.to_string())?;
    let db = Database::open(&args.db)
        .await
        .map_err(|err| format!("{}: {err}", args.db.display()))?;
    let shop = Arc::new(Shop {
        db,
        name: args.name,
        on_lease_lost: args.on_lease_lost,
    });
    let app = Router::new()
        .route(wire::HEALTH_PATH, get(|| async { "ok" }))
        .route(wire::ORDER_ROUTE, post(order))
        .with_state(shop.clone());

    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, args.port));
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|err| format!("cannot listen on {addr}: {err}"))?;
    let local = listener
        .local_addr()
        .map_err(|err| format!("cannot read the address of {addr}: {err}"))?;
    // `shop_runner` starts instances with `--port 0` and reads the address back from this line:
    // printed only once the port is bound, so a request sent to it waits in the backlog.
    println!(
        "{} listening on http://{local}, locks on {backend}",
        shop.name
    );
    axum::serve(listener, app)
        .with_graceful_shutdown(async {
            // Without a signal handler the service runs until killed, which is fine too.
            let _ = tokio::signal::ctrl_c().await;
        })
        .await
        .map_err(|err| format!("serving on {local}: {err}"))
}

#[tokio::main]
async fn main() -> ExitCode {
    lock_examples::init_logging();
    match run(Args::parse()).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("shop_service: {err}");
            ExitCode::FAILURE
        }
    }
}
