//! Many tasks on several managers taking one key over and over, counting who is inside: what
//! the mutual exclusion, fencing and semaphore checks read.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use crate::error::LockError;
use crate::guard::LockGuard;
use crate::manager::LockManager;
use crate::options::LockOptions;

use super::bounds::{LONG_TTL, PATIENCE};

/// Tasks per manager.
const TASKS: usize = 3;
/// Holds per task.
const ROUNDS: usize = 4;
/// How long each hold lasts: long enough for another holder to overlap if the store let it.
const HOLD: Duration = Duration::from_millis(2);

/// What a key is taken as.
#[derive(Clone, Copy)]
pub(crate) enum Take {
    /// Its lock.
    Lock,
    /// One of its `n` permits.
    Permit(u32),
}

impl Take {
    /// Takes `key` on `manager` with `options`.
    pub(crate) async fn on(
        self,
        manager: &LockManager,
        key: &str,
        options: LockOptions,
    ) -> Result<LockGuard, LockError> {
        match self {
            Take::Lock => manager.lock(key, options).await,
            Take::Permit(permits) => manager.semaphore(key, permits, options).await,
        }
    }
}

/// What a contention saw.
pub(crate) struct Contention {
    /// The most holders inside at one moment.
    pub(crate) most: usize,
    /// Each hold's fencing token and manager, in the order the holds began.
    pub(crate) tokens: Vec<(u64, usize)>,
}

/// Every manager runs [`TASKS`] tasks that each take `key` [`ROUNDS`] times. Fails with the
/// first acquire or release that failed.
pub(crate) async fn contend(
    managers: &[LockManager],
    key: &str,
    take: Take,
) -> Result<Contention, String> {
    let inside = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let tokens = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for (index, manager) in managers.iter().enumerate() {
        for _ in 0..TASKS {
            let (manager, key) = (manager.clone(), key.to_owned());
            let (inside, most, tokens) = (inside.clone(), most.clone(), tokens.clone());
            tasks.push(tokio::spawn(async move {
                let options = LockOptions::new().ttl(LONG_TTL).wait(PATIENCE);
                for _ in 0..ROUNDS {
                    let guard = take.on(&manager, &key, options).await.map_err(|err| {
                        format!("manager {index} could not take `{key}` within {PATIENCE:?}: {err}")
                    })?;
                    let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    tokens
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .push((guard.fencing_token(), index));
                    tokio::time::sleep(HOLD).await;
                    inside.fetch_sub(1, Ordering::SeqCst);
                    guard.release().await.map_err(|err| {
                        format!("manager {index} could not release `{key}`: {err}")
                    })?;
                }
                Ok::<(), String>(())
            }));
        }
    }
    for task in tasks {
        task.await
            .map_err(|err| format!("a contending task ended abnormally: {err}"))??;
    }
    let tokens = std::mem::take(&mut *tokens.lock().unwrap_or_else(PoisonError::into_inner));
    Ok(Contention {
        most: most.load(Ordering::SeqCst),
        tokens,
    })
}

/// How many holds a contention over `managers` managers makes.
pub(crate) fn holds(managers: usize) -> usize {
    managers * TASKS * ROUNDS
}
