//! The store calls' series, as a layer around the manager's store: every acquire request
//! answered, every renewal answer and every release the store did not confirm is counted here,
//! on its way between the engine and the store, rather than by the engine.

use std::sync::Arc;

use crate::store::Store;
#[cfg(feature = "metrics")]
use {
    crate::store::{
        Acquire, Ask, Booking, BoxFuture, Changes, HandOff, Inspect, Key, Lease, Release, Renewal,
        Shape, StoreError, WaitsUpdate,
    },
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

#[cfg(feature = "metrics")]
/// Counts a release as unconfirmed unless it is answered: a release whose future is dropped
/// before its answer (its request timed out) was not confirmed either.
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
    fn describe(&self) -> &str {
        self.inner.describe()
    }

    fn server(&self) -> &str {
        self.inner.server()
    }

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

    fn gate<'a>(&'a self, key: &'a Key) -> Option<BoxFuture<'a, ()>> {
        self.inner.gate(key)
    }

    fn fair(&self) -> bool {
        self.inner.fair()
    }

    fn supports(&self, shape: Shape) -> Result<(), &'static str> {
        self.inner.supports(shape)
    }

    fn leave<'a>(&'a self, key: &'a Key, token: &'a str) -> BoxFuture<'a, Result<(), StoreError>> {
        self.inner.leave(key, token)
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

    fn release<'a>(
        &'a self,
        key: &'a Key,
        token: &'a str,
        keep: Duration,
    ) -> BoxFuture<'a, Result<Release, StoreError>> {
        self.inner.release(key, token, keep)
    }

    fn release_lease<'a>(
        &'a self,
        lease: &'a Lease,
        keep: Duration,
    ) -> BoxFuture<'a, Result<Release, StoreError>> {
        Box::pin(self.measure_release(lease, self.inner.release_lease(lease, keep)))
    }

    fn hands_off(&self) -> bool {
        self.inner.hands_off()
    }

    fn hand_off<'a>(
        &'a self,
        from: &'a Lease,
        to: &'a Lease,
    ) -> BoxFuture<'a, Result<HandOff, StoreError>> {
        self.inner.hand_off(from, to)
    }

    fn notifies(&self) -> bool {
        self.inner.notifies()
    }

    fn attach(&self, changes: &Changes) {
        self.inner.attach(changes);
    }

    fn watch<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<(), StoreError>> {
        self.inner.watch(key)
    }

    fn unwatch(&self, key: &str) {
        self.inner.unwatch(key);
    }

    fn keeps_waits(&self) -> bool {
        self.inner.keeps_waits()
    }

    fn waits<'a>(
        &'a self,
        key: &'a str,
        update: &'a WaitsUpdate,
    ) -> BoxFuture<'a, Result<Vec<(String, String)>, StoreError>> {
        self.inner.waits(key, update)
    }

    fn retry_with_same_token(&self) -> bool {
        self.inner.retry_with_same_token()
    }

    fn inspect(&self) -> Option<&dyn Inspect> {
        self.inner.inspect()
    }
}

#[cfg(feature = "metrics")]
/// Counts one booked part of a renewal batch of `count` leases: each renewed, not the owner's,
/// or without a verdict (the whole part, when it got no answer).
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
