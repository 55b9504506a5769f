//! Lock-delay ([`LockOptions::lock_delay`](crate::LockOptions::lock_delay)) as a layer around
//! the manager's store: a lock with a delay is kept by the store for its ttl and its delay, on
//! every acquire and every renewal, while the engine above keeps the holder's lease, its
//! renewal cadence and its lost-lease signal on the ttl alone. A lease that runs out without a
//! release therefore leaves the lock granted to nobody for the delay, and a busy answer's
//! remaining time counts it; a release deletes the lock as ever, and the next waiter gets it
//! at once. The store itself needs no part in it: it keeps each lock for the ttl it is asked.

use std::sync::Arc;
use std::time::Duration;

use crate::store::forward::forward;
use crate::store::{
    Acquire, Ask, Booking, BoxFuture, HandOff, Key, Lease, Release, Renewal, Store, StoreError,
};

/// `store` with lock-delay kept (see the module's documentation).
pub(crate) fn delayed(store: Arc<dyn Store>) -> Arc<dyn Store> {
    Arc::new(Delayed { inner: store })
}

/// A store that keeps each lock for its lease and its lock-delay; everything else is the inner
/// store's.
struct Delayed {
    inner: Arc<dyn Store>,
}

impl Store for Delayed {
    forward!(inner; announces, announce, steals, steal, describe, server, gate, fair, supports, leave, release, release_lease,
        hands_off, notifies, attach, watch, unwatch, keeps_waits, waits, retry_with_same_token,
        inspect);

    fn acquire<'a>(
        &'a self,
        key: &'a Key,
        token: &'a str,
        ttl: Duration,
        ask: Ask,
    ) -> BoxFuture<'a, Result<Acquire, StoreError>> {
        self.inner
            .acquire(key, token, ttl.saturating_add(ask.lock_delay), ask)
    }

    fn renew<'a>(&'a self, batch: &'a [Renewal], book: Booking<'a>) -> BoxFuture<'a, ()> {
        if batch
            .iter()
            .all(|renewal| delay_of(&renewal.lease).is_zero())
        {
            return self.inner.renew(batch, book);
        }
        Box::pin(async move {
            // Same order, so the indices booked are the caller's.
            let kept: Vec<Renewal> = batch
                .iter()
                .map(|renewal| Renewal {
                    lease: renewal.lease.clone(),
                    ttl: renewal.ttl.saturating_add(delay_of(&renewal.lease)),
                })
                .collect();
            self.inner.renew(&kept, book).await;
        })
    }

    fn hand_off<'a>(
        &'a self,
        from: &'a Lease,
        to: &'a Lease,
    ) -> BoxFuture<'a, Result<HandOff, StoreError>> {
        if delay_of(to).is_zero() {
            return self.inner.hand_off(from, to);
        }
        // A store hands a lock over for the waiter's ttl alone: a lock with a delay is
        // released instead, and the waiter, woken here, takes it with its own acquire.
        Box::pin(async move {
            Ok(
                match self.inner.release_lease(from, Duration::ZERO).await? {
                    Release::Released => HandOff::Released,
                    Release::NotOwner => HandOff::NotOwner,
                    Release::Gone => HandOff::Gone,
                },
            )
        })
    }
}

/// The lock-delay of `lease`.
fn delay_of(lease: &Lease) -> Duration {
    lease.options.delay()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::error::LockError;
    use crate::manager::LockManager;
    use crate::options::LockOptions;

    const TTL: Duration = Duration::from_secs(1);
    const DELAY: Duration = Duration::from_secs(3);

    /// Whether `locks` finds `key` busy, and for how long more.
    async fn busy_for(locks: &LockManager, key: &str) -> Option<Duration> {
        match locks.lock(key, LockOptions::new()).await {
            Err(LockError::Busy { retry_after, .. }) => retry_after,
            Ok(guard) => {
                drop(guard);
                None
            }
            Err(other) => panic!("not a busy answer: {other}"),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_lease_run_out_keeps_its_lock_for_the_delay() {
        let locks = LockManager::memory();
        let stalled = LockOptions::new()
            .ttl(TTL)
            .lock_delay(DELAY)
            .watchdog(false);
        let guard = locks.lock("printer", stalled).await.expect("free");
        let other = locks.clone();
        let left = tokio::spawn(async move { busy_for(&other, "printer").await })
            .await
            .expect("task");
        assert_eq!(left, Some(TTL + DELAY), "the busy answer counts the delay");
        guard.lost().await;
        tokio::time::advance(DELAY - Duration::from_millis(100)).await;
        let other = locks.clone();
        let left = tokio::spawn(async move { busy_for(&other, "printer").await })
            .await
            .expect("task");
        assert!(left.is_some(), "granted within the delay");
        tokio::time::advance(Duration::from_millis(200)).await;
        let other = locks.clone();
        let left = tokio::spawn(async move { busy_for(&other, "printer").await })
            .await
            .expect("task");
        assert_eq!(left, None, "still kept after the delay");
        drop(guard);
    }

    #[tokio::test(start_paused = true)]
    async fn a_release_frees_a_lock_with_a_delay_at_once() {
        let locks = LockManager::memory();
        let guard = locks
            .lock("printer", LockOptions::new().ttl(TTL).lock_delay(DELAY))
            .await
            .expect("free");
        guard.release().await.expect("released");
        let left = tokio::spawn(async move { busy_for(&locks, "printer").await })
            .await
            .expect("task");
        assert_eq!(left, None, "a release frees the lock at once");
    }
}
