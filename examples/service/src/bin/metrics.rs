//! The locks' metrics, exported for Prometheus: a few locked calls, one of them waiting for the
//! other, then the text a `/metrics` endpoint would serve.
//!
//! `cargo run -p lock-service-examples --bin metrics` runs on memory; set `REDIS_URL` to use
//! Redis. In a service, install the recorder once at start-up and serve `handle.render()` (or let
//! the exporter's own HTTP listener do it, its `http-listener` feature). Ctrl-C (or SIGTERM)
//! releases the locks held at that moment (`LockManager::shutdown`).

use std::process::ExitCode;
use std::time::Duration;

use lock_runtime::{LockError, LockManager, LockOptions, distributed_lock};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

/// Labelled `report:<day>` in every metric: the template, never the rendered key.
#[distributed_lock(key = "report:<day>", ttl = "10s", wait = "50ms")]
async fn build_report(day: u32) -> Result<u32, LockError> {
    tokio::time::sleep(Duration::from_millis(20)).await;
    Ok(day)
}

/// A few locked calls, then the exported text.
async fn demo(locks: LockManager, handle: PrometheusHandle) -> Result<ExitCode, LockError> {
    // Two tasks build the same day's report at once: the second is told "busy" and waits (up
    // to 50 ms) for the first to release. (Two calls in one task would be one owner:
    // `HeldByThisTask`.)
    let (first, second) =
        tokio::join!(tokio::spawn(build_report(1)), tokio::spawn(build_report(1)));
    println!("report 1: {first:?}, {second:?}");
    // A lock taken through the API, labelled by hand.
    let guard = locks
        .lock("nightly-export", LockOptions::new().label("nightly-export"))
        .await?;
    guard.release().await?;
    println!("{}", handle.render());
    Ok(ExitCode::SUCCESS)
}

async fn run() -> Result<ExitCode, LockError> {
    let handle = match PrometheusBuilder::new().install_recorder() {
        Ok(handle) => handle,
        Err(err) => {
            eprintln!("cannot install the Prometheus recorder: {err}");
            return Ok(ExitCode::FAILURE);
        }
    };
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "memory://".to_owned());
    let locks = LockManager::connect(&url).await?;
    lock_runtime::set_global_default(locks.clone())?;
    lock_examples::run_until_stopped(std::slice::from_ref(&locks), demo(locks.clone(), handle))
        .await
}

#[tokio::main]
async fn main() -> ExitCode {
    lock_examples::init_logging();
    lock_examples::report(run().await)
}
