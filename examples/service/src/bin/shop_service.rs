//! The shop service: an HTTP flash sale whose stock and orders live in a SQLite file shared by
//! every instance, one order per user, the stock never oversold.
//!
//! `POST /orders/<user_id>` places the user's order. Two locks, always in this order: the user's
//! (`order:<user_id>`), so that a user's duplicate clicks on any instance queue up instead of all
//! passing the "already ordered?" check, then the stock's (`stock:<sku>`), so that one buyer at a
//! time takes an item. Each lock's fencing token claims the row it protects before the row is
//! read, and the database refuses a write decided under an older token (see
//! `lock_service_examples::shop::db`). The locked service itself is
//! `lock_service_examples::shop::service`, where the tests reach it too; this binary serves it
//! over HTTP.
//!
//! ```sh
//! REDIS_URL=redis://127.0.0.1:7000 cargo run -p lock-service-examples --bin shop_service -- \
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
use lock_service_examples::shop::service::Shop;
use lock_service_examples::shop::wire::{self, OrderAnswer, Outcome};
use lock_service_examples::shop::{Database, OnLeaseLost};

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

async fn order(
    State(shop): State<Arc<Shop>>,
    Path(user_id): Path<u64>,
) -> (StatusCode, Json<OrderAnswer>) {
    let answer = shop.answer(shop.place_order(user_id).await);
    if answer.outcome == Outcome::Failed {
        tracing::warn!(
            user_id,
            "order failed: {}",
            answer.error.as_deref().unwrap_or("")
        );
    }
    let status =
        StatusCode::from_u16(answer.outcome.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
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
    let shop = Arc::new(Shop::new(db, args.name, args.on_lease_lost));
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
        shop.name()
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
