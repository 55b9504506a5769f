//! Flash sale: many requests race for a few items, and each user may buy only one.
//!
//! Two locks, always taken in the same order (user, then stock) so they cannot deadlock:
//! `order:<user_id>` makes a user's duplicate clicks queue up instead of all passing the "already
//! ordered?" check, and `stock:<sku>` makes "read stock, then decrement" one step.
//!
//! Each run is a sale of its own, with an id in its keys (`order:<sale>:<user_id>`), so a run
//! started right after another, or after one that was killed, never meets that one's locks.
//! Ctrl-C (or SIGTERM) releases the locks held at that moment (`LockManager::shutdown`).
//!
//! `cargo run -p lock-examples --bin flash_sale` runs on memory; set `REDIS_URL` to use Redis.

use std::collections::HashMap;
use std::process::ExitCode;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use lock_runtime::{LockError, distributed_lock};

const SKU: &str = "sku-phone";
const STOCK: i64 = 50;
const USERS: u32 = 80;
const REQUESTS_PER_USER: u32 = 3;

/// The shop's database. Each read and write takes a moment, as a real one does: without the
/// locks, requests would interleave between the check and the write.
#[derive(Default)]
struct Shop {
    /// This sale's id: one user's orders and the stock are locked per sale.
    sale: String,
    stock: AtomicI64,
    orders: Mutex<HashMap<u32, Vec<u32>>>,
}

impl Shop {
    async fn has_order(&self, user_id: u32) -> bool {
        tokio::time::sleep(Duration::from_millis(1)).await;
        self.orders.lock().expect("orders").contains_key(&user_id)
    }

    fn record_order(&self, user_id: u32, request: u32) {
        let mut orders = self.orders.lock().expect("orders");
        orders.entry(user_id).or_default().push(request);
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Outcome {
    Placed,
    Duplicate,
    SoldOut,
}

/// One user's order at a time: a second click waits here and then sees the first order.
#[distributed_lock(key = "order:<shop.sale>:<user_id>", wait = "2s")]
async fn place_order(shop: &Shop, user_id: u32, request: u32) -> Result<Outcome, LockError> {
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
async fn take_one(shop: &Shop, sku: &str) -> Result<bool, LockError> {
    if shop.stock.load(Ordering::SeqCst) <= 0 {
        return Ok(false);
    }
    tokio::time::sleep(Duration::from_millis(1)).await; // the payment reservation
    shop.stock.fetch_sub(1, Ordering::SeqCst);
    Ok(true)
}

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
    let shop = Arc::new(Shop {
        sale: format!("{started_ms:x}"),
        ..Shop::default()
    });
    shop.stock.store(STOCK, Ordering::SeqCst);
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
