//! A notice on the store's own connection may overtake the answer to an acquire that the store
//! granted already: it must still reach that lease.

use std::sync::Arc;
use std::time::Duration;

use crate::LostReason;
use crate::backend::memory::MemoryBackend;
use crate::error::LockError;
use crate::manager::LockManager;
use crate::options::LockOptions;
use crate::store::forward::forward;
use crate::store::{Acquire, Ask, Booking, BoxFuture, Key, Renewal, Store, StoreError};
use crate::waiters::Waiters;

/// The memory store, whose acquires take effect at once but whose answers come back late: a
/// reply still on the wire while the server serves others (a steal, and its notice on the
/// subscription's own connection).
struct LateAnswers {
    inner: Arc<dyn Store>,
    late: Duration,
}

impl Store for LateAnswers {
    forward!(inner; announces, announce, steals, steal, describe, server, gate, fair, supports,
        leave, release, release_lease, hands_off, hand_off, notifies, attach, watch, unwatch,
        keeps_waits, waits, retry_with_same_token, inspect);

    fn acquire<'a>(
        &'a self,
        key: &'a Key,
        token: &'a str,
        ttl: Duration,
        ask: Ask,
    ) -> BoxFuture<'a, Result<Acquire, StoreError>> {
        let granted = self.inner.acquire(key, token, ttl, ask);
        Box::pin(async move {
            let answer = granted.await;
            tokio::time::sleep(self.late).await;
            answer
        })
    }

    fn renew<'a>(&'a self, batch: &'a [Renewal], book: Booking<'a>) -> BoxFuture<'a, ()> {
        self.inner.renew(batch, book)
    }
}

async fn late_answers() -> LockManager {
    let store: Arc<dyn Store> = Arc::new(LateAnswers {
        inner: Arc::new(MemoryBackend::new(Arc::new(Waiters::default()))),
        late: Duration::from_millis(300),
    });
    LockManager::builder()
        .store(store)
        .build()
        .await
        .expect("manager")
}

#[tokio::test(start_paused = true)]
async fn a_steal_heard_before_the_victims_answer_fails_the_victims_acquire() {
    let locks = late_answers().await;
    let ttl = Duration::from_secs(30);
    let victim = {
        let locks = locks.clone();
        tokio::spawn(async move { locks.lock("job", LockOptions::new().ttl(ttl)).await })
    };
    // The victim's acquire has taken the lock in the store; its answer is still on its way.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let thief = locks
        .steal("job", LockOptions::new().ttl(ttl), "test")
        .await
        .expect("stolen");
    assert!(thief.stolen_from().is_some(), "taken from the victim");
    // Never a guard that believes it holds `job` beside the thief's.
    match victim.await.expect("task") {
        Err(LockError::LeaseLost {
            reason: LostReason::Stolen,
            ..
        }) => {}
        other => panic!("the victim's acquire answered {other:?}"),
    }
    assert!(thief.is_held());
}

#[tokio::test(start_paused = true)]
async fn a_release_request_heard_before_the_holders_answer_reaches_it() {
    let locks = late_answers().await;
    let holder = {
        let locks = locks.clone();
        tokio::spawn(async move { locks.lock("report", LockOptions::new()).await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    locks
        .request_release("report", "test")
        .await
        .expect("asked");
    let holder = holder.await.expect("task").expect("the holder's acquire");
    let heard = tokio::time::timeout(Duration::from_secs(2), holder.release_requested()).await;
    assert!(
        heard.is_ok(),
        "the holder never heard the request to let go"
    );
}

#[tokio::test(start_paused = true)]
async fn a_release_request_skips_a_waiter_that_takes_the_lock_later() {
    let locks = LockManager::memory();
    let first = locks.lock("queue", LockOptions::new()).await.expect("free");
    locks.request_release("queue", "test").await.expect("asked");
    first.release_requested().await;
    let next = {
        let locks = locks.clone();
        tokio::spawn(async move {
            locks
                .lock("queue", LockOptions::new().wait(Duration::from_secs(60)))
                .await
        })
    };
    first.release().await.expect("released");
    let next = next.await.expect("task").expect("the waiter's turn");
    let heard = tokio::time::timeout(Duration::from_secs(1), next.release_requested()).await;
    assert!(heard.is_err(), "the request was for the holder before it");
}
