//! Every form of `#[distributed_lock]` that must compile also runs, on memory://: the lock is
//! held while the body runs, and released when the call returns, when `?` leaves the body, when
//! the body panics and when the caller drops the call mid-body.
//!
//! Each form's fn takes an [`Exit`] that says how its body leaves, and runs the same body
//! ([`body`]); [`check_form`] drives one form through all four exits.

use std::future::{Future, pending, poll_fn};
use std::num::ParseIntError;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::Poll;

use async_trait::async_trait;
use lock_runtime::distributed_lock;
use lock_tests::prelude::*;
use lock_tests::{busy_elsewhere, is_free};
use tokio::time::timeout;

/// How a body leaves.
enum Exit {
    Return,
    Question,
    Panic,
    /// Sets the flag once inside, then never finishes: the caller drops the call.
    Hang(Arc<AtomicBool>),
}

#[derive(Debug)]
enum AppError {
    Parse,
    Lock(#[allow(dead_code)] LockError),
}

impl From<LockError> for AppError {
    fn from(err: LockError) -> Self {
        AppError::Lock(err)
    }
}

impl From<ParseIntError> for AppError {
    fn from(_: ParseIntError) -> Self {
        AppError::Parse
    }
}

type Seen = (String, bool);

/// The body every form runs: the key `current()` reports and whether another owner finds it
/// held, then the exit.
async fn body(locks: &LockManager, exit: Exit) -> Result<Seen, AppError> {
    let key = lock_runtime::current()
        .expect("inside a locked body")
        .key()
        .to_owned();
    let held = busy_elsewhere(locks, &key).await;
    match exit {
        Exit::Return => Ok((key, held)),
        Exit::Question => {
            let _: u32 = "not a number".parse()?;
            Ok((key, held))
        }
        Exit::Panic => panic!("body of {key} panicked"),
        Exit::Hang(inside) => {
            inside.store(true, Ordering::SeqCst);
            pending().await
        }
    }
}

/// Runs `call` with each exit and checks the lock `key` of `locks` around it.
async fn check_form<F, Fut>(locks: &LockManager, key: &str, call: F)
where
    F: Fn(Exit) -> Fut,
    Fut: Future<Output = Result<Seen, AppError>>,
{
    let (seen, held) = call(Exit::Return).await.expect("locked call");
    assert_eq!(seen, key);
    assert!(held, "{key}: the body ran without the lock");
    assert!(is_free(locks, key).await, "{key}: still held after return");

    let failed = call(Exit::Question).await;
    assert!(matches!(failed, Err(AppError::Parse)), "{key}: {failed:?}");
    assert!(is_free(locks, key).await, "{key}: still held after `?`");

    let mut panicking = pin!(call(Exit::Panic));
    let caught =
        poll_fn(
            |cx| match catch_unwind(AssertUnwindSafe(|| panicking.as_mut().poll(cx))) {
                Ok(Poll::Pending) => Poll::Pending,
                Ok(Poll::Ready(_)) => Poll::Ready(false),
                Err(_) => Poll::Ready(true),
            },
        )
        .await;
    assert!(caught, "{key}: the body did not panic");
    assert!(is_free(locks, key).await, "{key}: still held after a panic");

    let inside = Arc::new(AtomicBool::new(false));
    let mut hanging = Box::pin(call(Exit::Hang(inside.clone())));
    let entered = timeout(
        PATIENCE,
        poll_fn(|cx| {
            if hanging.as_mut().poll(cx).is_ready() {
                return Poll::Ready(false);
            }
            if inside.load(Ordering::SeqCst) {
                Poll::Ready(true)
            } else {
                cx.waker().wake_by_ref();
                Poll::Pending
            }
        }),
    )
    .await;
    assert_eq!(entered.ok(), Some(true), "{key}: the body was not entered");
    drop(hanging);
    let released = eventually(|| is_free(locks, key)).await;
    assert!(released, "{key}: still held after cancellation");
}

struct Svc {
    locks: LockManager,
    calls: u64,
}

impl Svc {
    fn new() -> Svc {
        Svc {
            locks: LockManager::memory(),
            calls: 0,
        }
    }

    fn locks(&self) -> &LockManager {
        &self.locks
    }

    #[distributed_lock(key = "ref:<id>", manager = self.locks())]
    async fn by_ref(&self, id: u64, exit: Exit) -> Result<Seen, AppError> {
        body(&self.locks, exit).await
    }

    #[distributed_lock(key = "mut:<id>", manager = &self.locks)]
    async fn by_mut(&mut self, id: u64, exit: Exit) -> Result<Seen, AppError> {
        self.calls += 1;
        body(&self.locks, exit).await
    }

    #[distributed_lock(key = "arc:<id>", manager = self.locks())]
    async fn by_arc(self: Arc<Self>, id: u64, exit: Exit) -> Result<Seen, AppError> {
        body(&self.locks, exit).await
    }

    #[distributed_lock(key = "own:<id>", manager = &self.locks)]
    async fn by_value(self, id: u64, exit: Exit) -> Result<Seen, AppError> {
        body(&self.locks, exit).await
    }

    // The form under test: a fn that returns its future.
    #[allow(clippy::manual_async_fn)]
    #[distributed_lock(key = "future:<id>", manager = self.locks)]
    fn returning_future(
        &self,
        id: u64,
        exit: Exit,
    ) -> impl Future<Output = Result<Seen, AppError>> + '_ {
        async move { body(&self.locks, exit).await }
    }
}

#[tokio::test]
async fn ref_self_with_an_accessor_manager() {
    let svc = Svc::new();
    check_form(&svc.locks, "ref:1", |exit| svc.by_ref(1, exit)).await;
}

#[tokio::test]
async fn mut_self_with_a_borrowed_manager() {
    let svc = tokio::sync::Mutex::new(Svc::new());
    let locks = svc.lock().await.locks.clone();
    check_form(&locks, "mut:2", |exit| async {
        svc.lock().await.by_mut(2, exit).await
    })
    .await;
    assert_eq!(svc.lock().await.calls, 4);
}

#[tokio::test]
async fn arc_self_with_an_accessor_manager() {
    let svc = Arc::new(Svc::new());
    check_form(&svc.locks, "arc:3", |exit| svc.clone().by_arc(3, exit)).await;
}

#[tokio::test]
async fn self_by_value_with_a_borrowed_manager() {
    let locks = LockManager::memory();
    check_form(&locks, "own:4", |exit| {
        let svc = Svc {
            locks: locks.clone(),
            calls: 0,
        };
        svc.by_value(4, exit)
    })
    .await;
}

#[tokio::test]
async fn fn_returning_impl_future() {
    let svc = Svc::new();
    check_form(&svc.locks, "future:5", |exit| svc.returning_future(5, exit)).await;
}

#[distributed_lock(key = "param:<id>", manager = locks)]
async fn with_mut_manager(locks: &mut LockManager, id: u64, exit: Exit) -> Result<Seen, AppError> {
    body(locks, exit).await
}

#[tokio::test]
async fn mut_manager_parameter() {
    let locks = LockManager::memory();
    check_form(&locks, "param:6", |exit| {
        let mut own = locks.clone();
        async move { with_mut_manager(&mut own, 6, exit).await }
    })
    .await;
}

macro_rules! locked {
    ($name:ident, $key:literal, $ttl:expr) => {
        #[distributed_lock(key = $key, ttl = $ttl, manager = locks)]
        async fn $name(locks: &LockManager, id: u64, exit: Exit) -> Result<Seen, AppError> {
            body(locks, exit).await
        }
    };
}

locked!(from_macro_rules, "macro:<id>", "10s");

#[tokio::test]
async fn options_from_macro_rules() {
    let locks = LockManager::memory();
    check_form(&locks, "macro:7", |exit| from_macro_rules(&locks, 7, exit)).await;
}

#[async_trait]
trait Jobs {
    async fn run_mut(&mut self, id: u64, exit: Exit) -> Result<Seen, AppError>;
    async fn run_arc(self: Arc<Self>, id: u64, exit: Exit) -> Result<Seen, AppError>;
}

#[async_trait]
impl Jobs for Svc {
    #[distributed_lock(key = "trait-mut:<id>", manager = self.locks())]
    async fn run_mut(&mut self, id: u64, exit: Exit) -> Result<Seen, AppError> {
        // Under #[async_trait] a parameter read only by the key is reported unused (async-trait
        // rebinds it inside the block that the lock wraps).
        let _ = id;
        self.calls += 1;
        body(&self.locks, exit).await
    }

    #[distributed_lock(key = "trait-arc:<id>", manager = &self.locks)]
    async fn run_arc(self: Arc<Self>, id: u64, exit: Exit) -> Result<Seen, AppError> {
        let _ = id;
        body(&self.locks, exit).await
    }
}

#[tokio::test]
async fn async_trait_mut_self_with_an_accessor_manager() {
    let svc = tokio::sync::Mutex::new(Svc::new());
    let locks = svc.lock().await.locks.clone();
    check_form(&locks, "trait-mut:8", |exit| async {
        svc.lock().await.run_mut(8, exit).await
    })
    .await;
}

#[tokio::test]
async fn async_trait_arc_self_with_a_borrowed_manager() {
    let svc = Arc::new(Svc::new());
    check_form(&svc.locks, "trait-arc:9", |exit| {
        svc.clone().run_arc(9, exit)
    })
    .await;
}

static STACKED: std::sync::LazyLock<LockManager> = std::sync::LazyLock::new(LockManager::memory);

// `#[tokio::test]` above the attribute: the test itself runs under the lock.
#[tokio::test]
#[distributed_lock(key = "stacked-test", manager = &*STACKED)]
async fn tokio_test_stacked_above_runs_under_the_lock() -> Result<(), LockError> {
    let current = lock_runtime::current().expect("the test body runs under the lock");
    assert_eq!(current.key(), "stacked-test");
    assert!(busy_elsewhere(&STACKED, "stacked-test").await);
    Ok(())
}
