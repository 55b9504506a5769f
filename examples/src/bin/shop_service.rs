//! The shop service: an HTTP flash sale whose stock and orders live in a SQLite file shared by
//! every instance, one order per user, the stock never oversold.
//!
//! `POST /orders/<user_id>` places the user's order. Two locks, always in this order: the user's
//! (`order:<user_id>`), so that a user's duplicate clicks on any instance queue up instead of all
//! passing the "already ordered?" check, then the stock's (`stock:<sku>`), so that one buyer at a
//! time takes an item. Each lock's fencing token goes with the write it protects, and the database
//! refuses a write whose token it has already seen (see `lock_examples::shop::db`).
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
use lock_examples::shop::{Database, Purchase, SKU, ShopError};
use lock_runtime::{LockError, distributed_lock};

/// An instance of the shop service.
#[derive(Debug, Parser)]
#[command(about = "The shop service: a flash sale over HTTP, locked with #[distributed_lock]")]
struct Args {
    /// The port to listen on, on 127.0.0.1 (0: any free port, printed at start).
    #[arg(long)]
    port: u16,
    /// The SQLite database file, created by shop_runner.
    #[arg(long)]
    db: PathBuf,
    /// This instance's name, recorded with its orders and sent in its answers.
    #[arg(long, default_value = "shop")]
    name: String,
}

/// One instance's state: its database connections and its name.
struct Shop {
    db: Database,
    name: String,
}

/// The fencing token of the innermost lock the running task holds.
fn fencing_token(section: &'static str) -> Result<u64, ShopError> {
    lock_runtime::current()
        .map(|lock| lock.fencing_token())
        .ok_or(ShopError::NotLocked(section))
}

impl Shop {
    /// One request per user at a time, across every instance. A short lease: a killed instance's
    /// locks free themselves within 2 s; the watchdog renews it while the body runs.
    #[distributed_lock(key = "order:<user_id>", ttl = "2s", wait = "10s")]
    async fn place_order(&self, user_id: u64) -> Result<Purchase, ShopError> {
        let user_token = fencing_token("place_order")?;
        // Both reads are repeated inside the purchase's transaction; here they spare the stock
        // lock the requests that cannot buy. Stock never goes up, so a 0 seen now is final.
        if self.db.has_order(user_id).await? {
            return Ok(Purchase::Duplicate);
        }
        if self.db.stock_left(SKU).await? <= 0 {
            return Ok(Purchase::SoldOut);
        }
        self.take_one(SKU, user_id, user_token).await
    }

    /// One buyer at a time: the stock row is written with this lock's token.
    #[distributed_lock(key = "stock:<sku>", ttl = "2s", wait = "10s")]
    async fn take_one(
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
        self.db.purchase(&order).await
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
    });
    let app = Router::new()
        .route(wire::HEALTH_PATH, get(|| async { "ok" }))
        .route("/orders/{user_id}", post(order))
        .with_state(shop.clone());

    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, args.port));
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|err| format!("cannot listen on {addr}: {err}"))?;
    let local = listener
        .local_addr()
        .map_err(|err| format!("cannot read the address of {addr}: {err}"))?;
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
