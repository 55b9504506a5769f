//! A holder takes a lock with a fixed lease and never gives it back (it hangs); a waiter wants
//! the same lock. Measured: how long after the lease ran out on the server the waiter entered.
//!
//! The server-side expiry is taken as (the instant just before the holder's acquire was sent) +
//! lease: the server set the expiry while handling that request, so it cannot be earlier (Redis
//! keeps expiries in whole milliseconds and treats a key as expired only once the current
//! millisecond is past it, which may add up to 1 ms). The figure is therefore an upper bound:
//! it includes up to one acquire round trip and that millisecond.
//!
//! Redis calls and server CPU are per takeover, from the holder's acquire to the waiter's
//! release: for a lock that polls, they grow with the lease.

use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use super::Metric;
use crate::BenchError;
use crate::contender::Contender;
use crate::server::{Per, Probe};

pub async fn measure(
    contender: &Arc<dyn Contender>,
    mut probe: Probe,
    key: &str,
    lease: Duration,
) -> Result<Vec<Metric>, BenchError> {
    let before = probe.reading().await?;
    let late_ms = takeover(contender, key, lease).await?;
    let usage = probe.reading().await?.since(&before);
    let mut metrics = vec![Metric::new("takeover_after_expiry", "ms", late_ms)];
    metrics.extend(usage.metrics(Per::Takeover, 1));
    Ok(metrics)
}

/// One takeover: how many milliseconds after the hung holder's lease ran out (negative: before)
/// the waiter entered. Whatever the server, the holder's lease is `lease` from just before its
/// acquire was sent.
pub async fn takeover(
    contender: &Arc<dyn Contender>,
    key: &str,
    lease: Duration,
) -> Result<f64, BenchError> {
    let sent = Arc::new(OnceLock::new());
    let held = Arc::new(Notify::new());
    let holder = {
        let contender = contender.clone();
        let (key, sent, held) = (key.to_owned(), sent.clone(), held.clone());
        tokio::spawn(async move {
            let _ = sent.set(Instant::now());
            contender
                .hold_without_release(&key, lease, &|| held.notify_one())
                .await
        })
    };
    let outcome = async {
        tokio::time::timeout(lease, held.notified())
            .await
            .map_err(|_| BenchError::new("expiry: the holder did not get the free lock"))?;
        let entered = Arc::new(Mutex::new(None));
        let section = {
            let entered = entered.clone();
            Box::pin(async move {
                *entered.lock().unwrap_or_else(PoisonError::into_inner) = Some(Instant::now());
            })
        };
        tokio::time::timeout(
            lease * 2 + Duration::from_secs(5),
            contender.exclusive(key, section),
        )
        .await
        .map_err(|_| BenchError::new("expiry: the waiter never entered"))??;
        let entered = entered
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .ok_or_else(|| BenchError::new("expiry: the waiter's section did not run"))?;
        let sent = *sent
            .get()
            .ok_or_else(|| BenchError::new("expiry: the holder never started"))?;
        let expiry = sent + lease;
        let late_ms = if entered >= expiry {
            (entered - expiry).as_secs_f64() * 1e3
        } else {
            -(expiry - entered).as_secs_f64() * 1e3
        };
        Ok::<_, BenchError>(late_ms)
    }
    .await;
    // The hung holder goes away; whatever it does on the way finds the lock no longer its own.
    holder.abort();
    if let Ok(Err(err)) = holder.await {
        return Err(err);
    }
    outcome
}
