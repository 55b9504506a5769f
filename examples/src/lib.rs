//! What the examples share: choosing the lock backend from the environment, logging, and
//! turning the outcome into an exit code; and, in [`shop`], the database and answers of the shop
//! service that `shop_service` serves and `shop_runner` drives.

use std::process::ExitCode;

use lock_runtime::{LockError, LockManager};
use tracing_subscriber::EnvFilter;

pub mod shop;

/// Redis when `REDIS_URL` is set, otherwise the in-process memory backend.
pub async fn locks_from_env() -> Result<LockManager, LockError> {
    match std::env::var("REDIS_URL") {
        Ok(url) => LockManager::connect(&url).await,
        Err(_) => Ok(LockManager::memory()),
    }
}

/// Logs at `warn` unless `RUST_LOG` says otherwise.
pub fn init_logging() {
    tracing_subscriber::fmt()
        .with_env_filter(EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()))
        .init();
}

/// An error (a connection or setup failure) as one `FAILED` line and a failing exit code.
pub fn report(outcome: Result<ExitCode, LockError>) -> ExitCode {
    outcome.unwrap_or_else(|err| {
        eprintln!("FAILED: {err}");
        ExitCode::FAILURE
    })
}
