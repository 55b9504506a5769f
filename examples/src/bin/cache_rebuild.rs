//! Cache rebuild: a hot key expires while 100 readers want it at once. Without a lock, every
//! reader misses and asks the database (a cache stampede); with one, a single reader rebuilds the
//! entry and the others wait on the lock and then find it in the cache.
//!
//! Ctrl-C (or SIGTERM) releases the locks held at that moment (`LockManager::shutdown`); a run
//! that finds the rebuild lock still held by a killed earlier run says so and waits for its lease.
//!
//! `cargo run -p lock-examples --bin cache_rebuild` runs on memory; set `REDIS_URL` to use Redis.

use std::collections::HashMap;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lock_runtime::{LockError, LockManager, distributed_lock};

const HOT_KEY: &str = "product:42";
const READERS: usize = 100;
/// The lock `rebuild` takes for [`HOT_KEY`], and the longest lease a killed run can leave on it
/// (the default `ttl`, 30 s, and a margin).
const REBUILD_KEY: &str = "rebuild:product:42";
const EARLIER_RUN_AT_MOST: Duration = Duration::from_secs(32);

/// The cache in front of the database (Redis or memcached in a real service).
#[derive(Default)]
struct Cache {
    entries: Mutex<HashMap<String, String>>,
}

impl Cache {
    fn get(&self, key: &str) -> Option<String> {
        self.entries.lock().expect("cache").get(key).cloned()
    }

    fn put(&self, key: &str, value: String) {
        self.entries
            .lock()
            .expect("cache")
            .insert(key.to_owned(), value);
    }

    fn expire(&self, key: &str) {
        self.entries.lock().expect("cache").remove(key);
    }
}

/// A slow database that counts its queries.
#[derive(Default)]
struct Database {
    queries: AtomicU32,
}

impl Database {
    async fn query(&self, key: &str) -> String {
        self.queries.fetch_add(1, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(300)).await;
        format!("{key}: {{\"name\": \"kettle\", \"price\": 39}}")
    }
}

struct App {
    locks: LockManager,
    cache: Cache,
    db: Database,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Source {
    Cache,
    Database,
    CacheAfterWaiting,
}

async fn read(app: &App, key: &str) -> Result<Source, LockError> {
    if app.cache.get(key).is_some() {
        return Ok(Source::Cache);
    }
    rebuild(app, key).await
}

/// One loader per key at a time. The lock is the second look: whoever held it before us may
/// have filled the cache while we waited.
#[distributed_lock(key = "rebuild:<key>", wait = "5s", manager = app.locks)]
async fn rebuild(app: &App, key: &str) -> Result<Source, LockError> {
    if app.cache.get(key).is_some() {
        return Ok(Source::CacheAfterWaiting);
    }
    let value = app.db.query(key).await;
    app.cache.put(key, value);
    Ok(Source::Database)
}

/// `readers` concurrent reads of `key`: how many were served from where.
async fn stampede(app: &Arc<App>, key: &str, readers: usize) -> HashMap<Source, u32> {
    let reads: Vec<_> = (0..readers)
        .map(|_| {
            let (app, key) = (app.clone(), key.to_owned());
            tokio::spawn(async move { read(&app, &key).await })
        })
        .collect();
    let mut served = HashMap::new();
    for read in reads {
        match read.await.expect("reader task") {
            Ok(source) => *served.entry(source).or_default() += 1,
            Err(err) => println!("  a read failed: {err}"),
        }
    }
    served
}

async fn run() -> Result<ExitCode, LockError> {
    let locks = lock_examples::locks_from_env().await?;
    println!("cache rebuild on {}", locks.backend());
    lock_examples::run_until_stopped(std::slice::from_ref(&locks), demo(locks.clone())).await
}

async fn demo(locks: LockManager) -> Result<ExitCode, LockError> {
    lock_examples::wait_for_earlier_run(&locks, REBUILD_KEY, EARLIER_RUN_AT_MOST).await?;
    let (cache, db) = (Cache::default(), Database::default());
    let app = Arc::new(App { locks, cache, db });
    app.cache.put(HOT_KEY, "warm".into());

    let served = stampede(&app, HOT_KEY, READERS).await;
    let hits = served.get(&Source::Cache).copied().unwrap_or(0);
    println!("{READERS} readers while {HOT_KEY} is cached: {hits} cache hits");

    app.cache.expire(HOT_KEY);
    println!("{HOT_KEY} expires; {READERS} readers arrive at once");
    let started = Instant::now();
    let served = stampede(&app, HOT_KEY, READERS).await;
    for (label, source) in [
        ("rebuilt from the database:", Source::Database),
        ("waited on the lock, then cache:", Source::CacheAfterWaiting),
        ("found it cached straight away:", Source::Cache),
    ] {
        println!("  {label:<32}{}", served.get(&source).copied().unwrap_or(0));
    }
    println!("  all served in {:?}", started.elapsed());

    let queries = app.db.queries.load(Ordering::SeqCst);
    let answered: u32 = served.values().sum();
    println!("database queries: {queries}");
    if queries != 1 || answered as usize != READERS {
        eprintln!("FAILED: {queries} queries, {answered} answers; expected 1 and {READERS}");
        return Ok(ExitCode::FAILURE);
    }
    println!("ok: the database was hit exactly once");
    Ok(ExitCode::SUCCESS)
}

#[tokio::main]
async fn main() -> ExitCode {
    lock_examples::init_logging();
    lock_examples::report(run().await)
}
