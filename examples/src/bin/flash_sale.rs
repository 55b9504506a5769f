//! Flash sale: many requests race for a few items, and each user may buy only one.
//!
//! Two locks, always taken in the same order (user, then stock) so they cannot deadlock:
//! `order:<user_id>` makes a user's duplicate clicks queue up instead of all passing the "already
//! ordered?" check, and `stock:<sku>` makes "read stock, then decrement" one step. The shop and
//! its locked steps are in `lock_examples::flash_sale`, where the tests reach them too.
//!
//! Each run is a sale of its own, with an id in its keys (`order:<sale>:<user_id>`), so a run
//! started right after another, or after one that was killed, never meets that one's locks.
//! Ctrl-C (or SIGTERM) releases the locks held at that moment (`LockManager::shutdown`).
//!
//! `cargo run -p lock-examples --bin flash_sale` runs on memory; set `REDIS_URL` to use Redis.

use std::collections::HashMap;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use lock_examples::flash_sale::{Outcome, SKU, Shop, place_order};
use lock_runtime::LockError;

const STOCK: i64 = 50;
const USERS: u32 = 80;
const REQUESTS_PER_USER: u32 = 3;

async fn run() -> Result<ExitCode, LockError> {
    let locks = lock_examples::locks_from_env().await?;
    println!("flash sale on {}", locks.backend());
    // Every #[distributed_lock] without `manager = ...` in this process uses this one.
    lock_runtime::set_global_default(locks.clone())?;
    lock_examples::run_until_stopped(&[locks], sale()).await
}

async fn sale() -> Result<ExitCode, LockError> {
    let started_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_millis());
    let shop = Arc::new(Shop::new(format!("{started_ms:x}"), STOCK));
    println!(
        "sale {}: locks order:{0}:<user_id> and stock:{0}:{SKU}",
        shop.sale
    );
    let total = USERS * REQUESTS_PER_USER;
    println!(
        "{STOCK} x {SKU} on sale; {USERS} users send {REQUESTS_PER_USER} requests each, {total} at once"
    );

    let started = Instant::now();
    let requests: Vec<_> = (0..total)
        .map(|request| {
            let shop = shop.clone();
            // Interleaved, so that each user's requests are in flight together.
            let user_id = request % USERS;
            tokio::spawn(async move { place_order(&shop, user_id, request).await })
        })
        .collect();
    let mut counts: HashMap<Outcome, u32> = HashMap::new();
    let mut failures = Vec::new();
    for request in requests {
        match request.await.expect("request task") {
            Ok(outcome) => *counts.entry(outcome).or_default() += 1,
            Err(err) => failures.push(err),
        }
    }
    let count = |outcome| counts.get(&outcome).copied().unwrap_or(0);
    println!("done in {:?}", started.elapsed());
    println!("  orders placed:         {}", count(Outcome::Placed));
    println!("  rejected as duplicate: {}", count(Outcome::Duplicate));
    println!("  rejected, sold out:    {}", count(Outcome::SoldOut));
    for err in failures.iter().take(3) {
        println!("  failed: {err}");
    }

    let orders = shop.orders.lock().expect("orders");
    let sold = orders.values().map(Vec::len).sum::<usize>() as i64;
    let left = shop.stock.load(Ordering::SeqCst);
    let doubled = orders.values().filter(|o| o.len() > 1).count();
    println!("stock left: {left}, users with an order: {}", orders.len());
    let expected = STOCK.min(USERS.into());
    // Stock only ever goes down, so a non-negative end means it was never negative.
    if sold != expected || doubled > 0 || left < 0 || left != STOCK - sold {
        eprintln!(
            "FAILED: sold {sold} (expected {expected}), {doubled} users with two orders, stock {left}"
        );
        return Ok(ExitCode::FAILURE);
    }
    println!("ok: sold exactly {sold}, one order per user, stock never oversold");
    Ok(ExitCode::SUCCESS)
}

#[tokio::main]
async fn main() -> ExitCode {
    lock_examples::init_logging();
    lock_examples::report(run().await)
}
