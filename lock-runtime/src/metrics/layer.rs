//! The store calls' series, as a layer around the manager's store: every acquire request
//! answered, every renewal answer and every release the store did not confirm is counted here,
//! on its way between the engine and the store, rather than by the engine.

use std::sync::Arc;

use crate::store::Store;
#[cfg(feature = "metrics")]
use {
    crate::store::forward::forward,
    crate::store::{Acquire, Ask, Booking, BoxFuture, Key, Lease, Release, Renewal, StoreError},
    std::time::Duration,
    tokio::time::Instant,
};

/// `store` with its calls measured (the acquire requests, renewals and unconfirmed releases of
/// the metrics table), as a layer around it; without the feature, `store` itself.
pub(crate) fn measured(store: Arc<dyn Store>) -> Arc<dyn Store> {
    #[cfg(feature = "metrics")]
    return Arc::new(Measured { inner: store });
    #[cfg(not(feature = "metrics"))]
    store
}

/// A store whose calls are measured; everything else is the inner store's.
#[cfg(feature = "metrics")]
struct Measured {
    inner: Arc<dyn Store>,
}

/// Counts a release as unconfirmed unless it is answered: a release whose future is dropped
/// before its answer (its request timed out) was not confirmed either.
#[cfg(feature = "metrics")]
struct Unconfirmed {
    label: Option<&'static str>,
    answered: bool,
}

#[cfg(feature = "metrics")]
impl Drop for Unconfirmed {
    fn drop(&mut self) {
        if !self.answered {
            super::release_failed(self.label);
        }
    }
}

#[cfg(feature = "metrics")]
impl Measured {
    async fn measure_release(
        &self,
        lease: &Lease,
        release: BoxFuture<'_, Result<Release, StoreError>>,
    ) -> Result<Release, StoreError> {
        let mut unconfirmed = Unconfirmed {
            label: lease.options.label,
            answered: false,
        };
        let answer = release.await;
        unconfirmed.answered = answer.is_ok();
        answer
    }
}

#[cfg(feature = "metrics")]
impl Store for Measured {
    forward!(inner; announces, announce, steals, steal, describe, server, gate, fair, supports, leave, release, hands_off,
        hand_off, notifies, attach, watch, unwatch, keeps_waits, waits, retry_with_same_token,
        inspect);

    fn acquire<'a>(
        &'a self,
        key: &'a Key,
        token: &'a str,
        ttl: Duration,
        ask: Ask,
    ) -> BoxFuture<'a, Result<Acquire, StoreError>> {
        Box::pin(async move {
            let sent = Instant::now();
            let answer = self.inner.acquire(key, token, ttl, ask).await;
            if let Ok(answered) = &answer {
                let busy = matches!(answered, Acquire::Busy { .. });
                super::acquire_request(ask.label, sent.elapsed(), busy);
            }
            answer
        })
    }

    fn renew<'a>(&'a self, batch: &'a [Renewal], book: Booking<'a>) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            let counted = |indices: &[usize], answer: Result<Vec<Option<bool>>, StoreError>| {
                count_renewals(indices.len(), &answer);
                book(indices, answer);
            };
            self.inner.renew(batch, &counted).await;
        })
    }

    fn release_lease<'a>(
        &'a self,
        lease: &'a Lease,
        keep: Duration,
    ) -> BoxFuture<'a, Result<Release, StoreError>> {
        Box::pin(self.measure_release(lease, self.inner.release_lease(lease, keep)))
    }
}

/// Counts one booked part of a renewal batch of `count` leases: each renewed, not the owner's,
/// or without a verdict (the whole part, when it got no answer).
#[cfg(feature = "metrics")]
fn count_renewals(count: usize, answer: &Result<Vec<Option<bool>>, StoreError>) {
    let (mut renewed, mut not_owner, mut no_answer) = (0, 0, 0);
    for k in 0..count {
        let verdict = match answer {
            Ok(verdicts) => verdicts.get(k).copied().flatten(),
            Err(_) => None,
        };
        match verdict {
            Some(true) => renewed += 1,
            Some(false) => not_owner += 1,
            None => no_answer += 1,
        }
    }
    super::renewals(renewed, not_owner, no_answer);
}
