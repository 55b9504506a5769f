//! Client memory per held lock, as live heap: 10,000 locks held at once (as the benchmark's
//! `hold_many` scenario holds them: one future per lock, all driven by one task), on memory://
//! and on a redis-server, through `LockManager::lock` and through `#[distributed_lock]`. The
//! global allocator counts the bytes allocated and freed, so the figure is the net growth of the
//! heap divided by the locks held: neither allocator fragmentation nor the machine's load moves
//! it, unlike the benchmark's resident-set figure.
//!
//! A measurement, not a check: ignored by default. Run it with
//!
//! ```sh
//! cargo test --release -p lock-tests --test memory -- --ignored --nocapture
//! ```
//!
//! (`LOCK_MEMORY_LOCKS=n` holds `n` locks instead.) The figure includes the holding future of
//! each lock (the caller's, as in the benchmark; its size is printed beside it) and, on
//! memory://, the in-process table that stands in for the server.

use std::alloc::System;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use lock_runtime::distributed_lock;
use lock_tests::prelude::*;
use stats_alloc::{INSTRUMENTED_SYSTEM, StatsAlloc};
use tokio::sync::{Notify, watch};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

/// Bytes and blocks on the heap now, net of what was freed, since the start of the process.
fn live_heap() -> (i64, i64) {
    let stats = GLOBAL.stats();
    (
        stats.bytes_allocated as i64 - stats.bytes_deallocated as i64,
        stats.allocations as i64 - stats.deallocations as i64,
    )
}

/// The lease: long enough that no renewal falls inside a measurement.
const LEASE: Duration = Duration::from_secs(30);

/// At most this many acquires on the wire at once, so that no buffer grows for a burst that
/// an application holding many locks would not send.
const IN_FLIGHT: usize = 64;

type Until = Pin<Box<dyn Future<Output = ()> + Send>>;

/// Counts the locks held and wakes the holder on each.
#[derive(Default)]
struct Progress {
    held: AtomicUsize,
    more: Notify,
}

impl Progress {
    fn count_in(&self) {
        self.held.fetch_add(1, Ordering::SeqCst);
        self.more.notify_one();
    }

    fn held(&self) -> usize {
        self.held.load(Ordering::SeqCst)
    }
}

/// How a lock is held: as the benchmark's contenders hold it, each with a future of its own
/// type.
trait Path: Send + Sync + 'static {
    const NAME: &'static str;

    /// Holds the lock of `key` until `until` resolves, counting itself in on `progress` once
    /// it has it.
    fn hold(
        self: Arc<Self>,
        key: String,
        progress: Arc<Progress>,
        until: Until,
    ) -> impl Future<Output = Result<(), LockError>> + Send + 'static;
}

struct Manager {
    locks: LockManager,
}

impl Path for Manager {
    const NAME: &'static str = "LockManager::lock";

    async fn hold(
        self: Arc<Self>,
        key: String,
        progress: Arc<Progress>,
        until: Until,
    ) -> Result<(), LockError> {
        // Boxed, as the benchmark does: while the lock is held the future keeps the guard,
        // not the space of the finished acquire.
        let guard = Box::pin(self.locks.lock(&key, LockOptions::new().ttl(LEASE))).await?;
        progress.count_in();
        until.await;
        guard.release().await
    }
}

struct Attribute {
    locks: LockManager,
}

impl Attribute {
    #[distributed_lock(key = "<key>", ttl = "30s", manager = self.locks)]
    async fn hold_locked(
        &self,
        key: &str,
        held: &(dyn Fn() + Sync),
        until: Until,
    ) -> Result<(), LockError> {
        held();
        until.await;
        Ok(())
    }
}

impl Path for Attribute {
    const NAME: &'static str = "distributed_lock";

    async fn hold(
        self: Arc<Self>,
        key: String,
        progress: Arc<Progress>,
        until: Until,
    ) -> Result<(), LockError> {
        self.hold_locked(&key, &|| progress.count_in(), until).await
    }
}

struct Figures {
    locks: usize,
    /// Live heap growth per lock while all are held.
    held: f64,
    /// Blocks on the heap per lock while all are held.
    blocks: f64,
    /// What is still on the heap per lock once all were released.
    after_release: f64,
    /// The size of one holding future, which the heap figure includes.
    future: usize,
}

fn waiting_for(stopped: &watch::Receiver<bool>) -> Until {
    let mut stopped = stopped.clone();
    Box::pin(async move {
        let _ = stopped.wait_for(|&stop| stop).await;
    })
}

/// Holds `count` locks at once through `path`, and measures the heap while they are held.
async fn measure<P: Path>(path: &Arc<P>, count: usize, tag: &str) -> Figures {
    let keys: Vec<String> = (0..count)
        .map(|i| format!("bench:{tag}:hold_many:{}:0:{i}", P::NAME))
        .collect();
    let (stop, stopped) = watch::channel(false);
    let progress = Arc::new(Progress::default());
    let future = std::mem::size_of_val(&path.clone().hold(
        String::new(),
        progress.clone(),
        waiting_for(&stopped),
    ));

    let before = live_heap();
    let holder = {
        let (path, progress) = (path.clone(), progress.clone());
        tokio::spawn(async move {
            // One future per lock, all driven by this task.
            let mut holds = FuturesUnordered::new();
            let mut keys = keys.into_iter();
            let mut pushed = 0;
            let mut outcome = Ok(());
            loop {
                while pushed - progress.held() < IN_FLIGHT
                    && let Some(key) = keys.next()
                {
                    holds.push(
                        path.clone()
                            .hold(key, progress.clone(), waiting_for(&stopped)),
                    );
                    pushed += 1;
                }
                tokio::select! {
                    () = progress.more.notified() => {}
                    finished = holds.next() => match finished {
                        Some(Err(err)) if outcome.is_ok() => outcome = Err(err),
                        Some(_) => {}
                        None if pushed == count => break,
                        None => {}
                    },
                }
            }
            outcome
        })
    };
    assert!(
        wait_until_async(PATIENCE * 3, || progress.held() == count).await,
        "{}: only {} of {count} locks held",
        P::NAME,
        progress.held()
    );
    // Whatever the last grants left to finish (their guards' registration, a waking driver).
    tokio::time::sleep(Duration::from_millis(200)).await;
    let during = live_heap();
    stop.send(true).expect("the holder listens");
    holder
        .await
        .expect("the holder finished")
        .expect("every lock held and released");
    tokio::time::sleep(Duration::from_millis(200)).await;
    let after = live_heap();
    Figures {
        locks: count,
        held: (during.0 - before.0) as f64 / count as f64,
        blocks: (during.1 - before.1) as f64 / count as f64,
        after_release: (after.0 - before.0) as f64 / count as f64,
        future,
    }
}

/// A fresh deployment and manager for each figure: the tables a first run grows are kept for
/// the next one, which would then not pay for them.
async fn measure_on<P: Path>(
    backend: &str,
    count: usize,
    path: impl Fn(LockManager) -> P,
) -> Figures {
    let deployment = match backend {
        "memory" => Deployment::memory().await,
        _ => Deployment::redis().await,
    };
    let path = Arc::new(path(deployment.locks.clone()));
    // A first round sets up what every later lock shares: the connection, the scripts, the
    // watchdog's driver.
    measure(&path, 100, "warm").await;
    let figures = measure(&path, count, backend).await;
    println!(
        "{backend:<7} {:<18} {:>6} locks: {:>5.0} B live heap per lock held in {:.1} blocks \
         (the holding future {} B of it); {:>4.0} B per lock left after release",
        P::NAME,
        figures.locks,
        figures.held,
        figures.blocks,
        figures.future,
        figures.after_release,
    );
    figures
}

fn lock_count() -> usize {
    std::env::var("LOCK_MEMORY_LOCKS")
        .ok()
        .and_then(|text| text.parse().ok())
        .unwrap_or(10_000)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement: run with --ignored --nocapture"]
async fn live_heap_per_held_lock() {
    let count = lock_count();
    for backend in ["memory", "redis"] {
        measure_on(backend, count, |locks| Manager { locks }).await;
        measure_on(backend, count, |locks| Attribute { locks }).await;
    }
}
