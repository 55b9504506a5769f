//! What the examples share: choosing the lock backend from the environment, logging, stopping
//! on Ctrl-C or SIGTERM with the locks released, and turning the outcome into an exit code; and,
//! in [`flash_sale`], the flash sale's locked steps. The heavier examples (the shop service, the
//! metrics exporter, the leader scheduler) are the package `lock-service-examples`, which uses
//! these too.

use std::future::Future;
use std::io::IsTerminal;
use std::process::ExitCode;
use std::time::Duration;

use lock_runtime::{LockError, LockManager, LockOptions};
use tokio::signal::unix::{Signal, SignalKind, signal};
use tracing_subscriber::EnvFilter;

pub mod flash_sale;

/// The exit code of a demo stopped by SIGINT or SIGTERM (128 + 2, as a shell reports Ctrl-C).
pub const INTERRUPTED: u8 = 130;

/// Redis when `REDIS_URL` is set, otherwise the in-process memory backend.
pub async fn locks_from_env() -> Result<LockManager, LockError> {
    match std::env::var("REDIS_URL") {
        Ok(url) => LockManager::connect(&url).await,
        Err(_) => Ok(LockManager::memory()),
    }
}

/// Logs at `warn` unless `RUST_LOG` says otherwise, to stdout; in colour only when stdout is
/// a terminal (and `NO_COLOR` is unset), so a log redirected to a file or a pipe has no
/// escape codes in it.
pub fn init_logging() {
    let colour = std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none();
    tracing_subscriber::fmt()
        .with_env_filter(EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()))
        .with_ansi(colour)
        .init();
}

/// Ctrl-C (SIGINT) and SIGTERM, listened for from the moment [`StopSignal::install`] returns:
/// a signal that comes after it is never left to the default action, which would end the
/// process with its locks held.
pub struct StopSignal {
    interrupt: Signal,
    terminate: Signal,
}

impl StopSignal {
    /// Starts listening for SIGINT and SIGTERM.
    pub fn install() -> std::io::Result<StopSignal> {
        Ok(StopSignal {
            interrupt: signal(SignalKind::interrupt())?,
            terminate: signal(SignalKind::terminate())?,
        })
    }

    /// Resolves at the first SIGINT or SIGTERM since [`StopSignal::install`].
    pub async fn recv(&mut self) {
        tokio::select! {
            _ = self.interrupt.recv() => {}
            _ = self.terminate.recv() => {}
        }
    }
}

/// Runs `demo` to its end, unless Ctrl-C or SIGTERM comes first: then `shutdown()` releases
/// every lock `locks` hold (a rerun finds them free at once, instead of waiting out their
/// leases) and the demo ends with exit code [`INTERRUPTED`]. At its end, too, `shutdown()`
/// leaves nothing of the run on the server.
pub async fn run_until_stopped(
    locks: &[LockManager],
    demo: impl Future<Output = Result<ExitCode, LockError>>,
) -> Result<ExitCode, LockError> {
    let mut stop = StopSignal::install()
        .map_err(|err| LockError::Config(format!("cannot listen for Ctrl-C: {err}")))?;
    tokio::select! {
        biased;
        () = stop.recv() => {
            println!("interrupted: releasing the locks this run holds (LockManager::shutdown)");
            for manager in locks {
                manager.shutdown().await?;
            }
            println!("released (a lock kept for hold_at_least stays until its time is up)");
            Ok(ExitCode::from(INTERRUPTED))
        }
        outcome = demo => {
            // As a service does before it exits: what the run published for others to see
            // (its waits, for lockctl and deadlock detection) comes off the server too.
            for manager in locks {
                manager.shutdown().await?;
            }
            outcome
        }
    }
}

/// Waits until `key` is free, saying so when it is not: an earlier run may have left it held
/// (killed before it could release, or kept on purpose by `hold_at_least`). Gives up after
/// `at_most`, the longest lease that run could have left.
pub async fn wait_for_earlier_run(
    locks: &LockManager,
    key: &str,
    at_most: Duration,
) -> Result<(), LockError> {
    match locks.lock(key, LockOptions::new()).await {
        Ok(guard) => return guard.release().await,
        Err(LockError::Busy { .. }) => {}
        Err(err) => return Err(err),
    }
    println!(
        "`{key}` is still held, by an earlier run of this demo (killed, or keeping it for \
         hold_at_least); waiting up to {at_most:?} for its lease to end"
    );
    let guard = locks.lock(key, LockOptions::new().wait(at_most)).await?;
    guard.release().await?;
    println!("`{key}` is free: starting");
    Ok(())
}

/// An error (a connection or setup failure) as one `FAILED` line and a failing exit code.
pub fn report(outcome: Result<ExitCode, LockError>) -> ExitCode {
    outcome.unwrap_or_else(|err| {
        eprintln!("FAILED: {err}");
        ExitCode::FAILURE
    })
}
