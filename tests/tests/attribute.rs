//! What a `#[distributed_lock]` fn does when it runs, on memory:// (no Redis needed): every way
//! out of the body releases the lock before the call returns, nested calls re-enter, the key is
//! rendered from the arguments, `manager = ...` is the manager used, and a lock that cannot be
//! held keeps the body from running or stops it.
//!
//! The global default manager is process-wide. Only
//! `manager_expression_is_used_instead_of_the_global_default` sets it; the call with neither a
//! default nor `manager` is in `attribute_no_default.rs`, a process of its own.
//!
//! The release tests run on the current-thread runtime and check the lock from the test's own
//! task: no background task can run in between, so they see whether the call itself gave the
//! lock back, not whether a guard's Drop will eventually do it.

use std::fmt::Display;
use std::future::{Future, poll_fn};
use std::num::ParseIntError;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::Poll;
use std::time::Duration;

use lock_runtime::distributed_lock;
use lock_tests::prelude::*;
use lock_tests::{busy_elsewhere, is_free};
use tokio::sync::Barrier;
use tokio::time::timeout;

/// From inside a locked body: the key `current()` reports, and whether others see it held.
async fn observe(locks: &LockManager) -> (String, bool) {
    let current = lock_runtime::current().expect("inside a locked body");
    let key = current.key().to_owned();
    let held = busy_elsewhere(locks, &key).await;
    (key, held)
}

#[derive(Debug)]
enum AppError {
    Parse,
    Lock,
}

impl From<LockError> for AppError {
    fn from(_: LockError) -> Self {
        AppError::Lock
    }
}

impl From<ParseIntError> for AppError {
    fn from(_: ParseIntError) -> Self {
        AppError::Parse
    }
}

#[distributed_lock(key = "early:<id>", manager = locks)]
async fn maybe_return_early(locks: &LockManager, id: u32, early: bool) -> Result<bool, LockError> {
    if early {
        return Ok(lock_runtime::current().is_some());
    }
    tokio::task::yield_now().await;
    Ok(false)
}

#[tokio::test]
async fn early_return_releases_the_lock() {
    let locks = LockManager::memory();
    let returned_inside = maybe_return_early(&locks, 1, true).await;
    assert!(
        returned_inside.expect("locked call"),
        "returned outside the locked section"
    );
    assert!(
        is_free(&locks, "early:1").await,
        "still held after `return`"
    );
}

#[distributed_lock(key = "parse:<id>", manager = locks)]
async fn parse_quantity(locks: &LockManager, id: u32, text: &str) -> Result<u32, AppError> {
    let quantity = text.parse()?;
    tokio::task::yield_now().await;
    Ok(quantity)
}

#[tokio::test]
async fn question_mark_error_releases_the_lock() {
    let locks = LockManager::memory();
    let parsed = parse_quantity(&locks, 2, "many").await;
    assert!(matches!(parsed, Err(AppError::Parse)), "{parsed:?}");
    assert!(is_free(&locks, "parse:2").await, "still held after `?`");
}

#[distributed_lock(key = "stock:<sku>", manager = locks)]
async fn count_stock(locks: &LockManager, sku: String) -> Result<u32, LockError> {
    tokio::task::yield_now().await;
    panic!("inventory of {sku} is corrupt");
}

#[tokio::test]
async fn panic_in_body_releases_the_lock() {
    let locks = LockManager::memory();
    // Caught in this task (not via a spawned task's JoinError), so no other task can release
    // the lock between the panic and the check.
    let mut call = pin!(count_stock(&locks, "sku-9".into()));
    let caught = poll_fn(
        |cx| match catch_unwind(AssertUnwindSafe(|| call.as_mut().poll(cx))) {
            Ok(Poll::Pending) => Poll::Pending,
            Ok(Poll::Ready(result)) => Poll::Ready(Ok(result)),
            Err(panic) => Poll::Ready(Err(panic)),
        },
    )
    .await;
    let panic = caught.expect_err("the body panicked");
    let message = panic.downcast::<String>().expect("panic message");
    assert_eq!(*message, "inventory of sku-9 is corrupt");
    assert!(
        is_free(&locks, "stock:sku-9").await,
        "still held after a panic"
    );
}

#[distributed_lock(key = "account:<id>", manager = locks, wait = "0s")]
async fn transfer(locks: &LockManager, id: u32) -> Result<(u64, u64, bool), LockError> {
    let outer = lock_runtime::current().expect("inside transfer");
    let inner = audit(locks, id).await?;
    let still_held = busy_elsewhere(locks, outer.key()).await;
    Ok((outer.fencing_token(), inner, still_held))
}

// Another fn, another template, the same rendered key.
#[distributed_lock(key = "account:<account>", manager = locks, wait = "0s")]
async fn audit(locks: &LockManager, account: u32) -> Result<u64, LockError> {
    let inner = lock_runtime::current().expect("inside audit");
    Ok(inner.fencing_token())
}

#[tokio::test]
async fn nested_call_with_the_same_key_reenters_with_the_same_fencing_token() {
    let locks = LockManager::memory();
    let nested = timeout(PATIENCE, transfer(&locks, 5)).await;
    let (outer, inner, _) = nested.expect("no deadlock").expect("re-entered");
    assert_eq!(outer, inner, "the nested call took a lock of its own");
}

#[tokio::test]
async fn leaving_a_nested_call_keeps_the_outer_lock() {
    let locks = LockManager::memory();
    let (_, _, still_held) = transfer(&locks, 6).await.expect("re-entered");
    assert!(still_held, "the nested call released the outer lock");
    assert!(
        is_free(&locks, "account:6").await,
        "the outer call did not release"
    );
}

#[distributed_lock(key = "room:<room>", manager = locks, wait = "0s")]
async fn meet(locks: &LockManager, room: u32, everyone: Arc<Barrier>) -> Result<(), LockError> {
    everyone.wait().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn different_keys_do_not_block_each_other() {
    let locks = LockManager::memory();
    let everyone = Arc::new(Barrier::new(2));
    let calls = [1, 2].map(|room| {
        let (locks, everyone) = (locks.clone(), everyone.clone());
        tokio::spawn(async move { meet(&locks, room, everyone).await })
    });
    for call in calls {
        let call = timeout(PATIENCE, call)
            .await
            .expect("both bodies inside at once");
        call.expect("call task").expect("not busy");
    }
}

#[distributed_lock(key = "job:<id>", manager = locks, wait = "0s")]
async fn run_job(locks: &LockManager, id: u32, ran: &AtomicBool) -> Result<(), LockError> {
    ran.store(true, Ordering::SeqCst);
    Ok(())
}

#[tokio::test]
async fn busy_lock_with_zero_wait_returns_busy_and_skips_the_body() {
    let locks = LockManager::memory();
    // A guard from `lock()` opens no locked section: the call below does not re-enter it.
    let held = locks.lock("job:7", LockOptions::new()).await.expect("lock");
    let ran = AtomicBool::new(false);
    match run_job(&locks, 7, &ran).await {
        Err(LockError::Busy { key, .. }) => assert_eq!(key, "job:7"),
        other => panic!("expected Busy, got {other:?}"),
    }
    assert!(!ran.load(Ordering::SeqCst), "the body ran without the lock");
    held.release().await.expect("release");
    run_job(&locks, 7, &ran).await.expect("free now");
    assert!(ran.load(Ordering::SeqCst), "the body did not run once free");
}

struct Reports {
    locks: LockManager,
}

impl Reports {
    #[distributed_lock(key = "report:<day>", manager = self.locks)]
    async fn build(&self, day: u32) -> Result<u32, LockError> {
        Ok(day)
    }
}

#[distributed_lock(key = "report:<day>")]
async fn build_with_global_default(day: u32) -> Result<u32, LockError> {
    Ok(day)
}

#[tokio::test]
async fn manager_expression_is_used_instead_of_the_global_default() {
    lock_runtime::set_global_default(LockManager::memory()).expect("only this test sets it");
    let global = lock_runtime::global_default().expect("just set");
    let reports = Reports {
        locks: LockManager::memory(),
    };

    let held = reports.locks.lock("report:1", LockOptions::new()).await;
    let held = held.expect("lock on the struct's manager");
    let busy = reports.build(1).await;
    assert!(busy.is_err_and(|err| err.is_busy()), "ignored `manager`");
    assert_eq!(build_with_global_default(1).await.expect("global free"), 1);
    held.release().await.expect("release");

    let held = global.lock("report:2", LockOptions::new()).await;
    let held = held.expect("lock on the global default");
    assert_eq!(reports.build(2).await.expect("struct's manager free"), 2);
    let busy = build_with_global_default(2).await;
    assert!(
        busy.is_err_and(|err| err.is_busy()),
        "no global default used"
    );
    held.release().await.expect("release");
}

#[distributed_lock(key = "entity:<kind>:<id>", manager = locks)]
async fn touch<K, I, E>(locks: &LockManager, kind: K, id: I) -> Result<(String, bool), E>
where
    K: Display + Send,
    I: Display + Send,
    E: From<LockError>,
{
    Ok(observe(locks).await)
}

#[tokio::test]
async fn generic_fn_runs_under_its_lock() {
    let locks = LockManager::memory();
    let touched: Result<_, LockError> = touch(&locks, "user", 7u64).await;
    let (key, held) = touched.expect("locked call");
    assert_eq!(key, "entity:user:7");
    assert!(held, "the body ran without the lock");
    assert!(is_free(&locks, &key).await, "not released");
}

struct Ledger {
    locks: LockManager,
    id: u32,
    balance: u64,
}

impl Ledger {
    #[distributed_lock(key = "ledger:<self.id>", manager = self.locks)]
    async fn inspect(&self) -> Result<(String, bool), LockError> {
        Ok(observe(&self.locks).await)
    }

    #[distributed_lock(key = "ledger:<self.id>", manager = self.locks)]
    async fn deposit(&mut self, amount: u64) -> Result<(String, bool), LockError> {
        self.balance += amount;
        Ok(observe(&self.locks).await)
    }

    #[distributed_lock(key = "ledger:<self.id>", manager = self.locks)]
    async fn close(self: Arc<Self>) -> Result<(String, bool), LockError> {
        Ok(observe(&self.locks).await)
    }
}

fn ledger(id: u32) -> Ledger {
    let locks = LockManager::memory();
    Ledger {
        locks,
        id,
        balance: 0,
    }
}

#[tokio::test]
async fn ref_self_method_runs_under_its_lock() {
    let ledger = ledger(3);
    let (key, held) = ledger.inspect().await.expect("locked call");
    assert_eq!(key, "ledger:3");
    assert!(held, "the body ran without the lock");
    assert!(is_free(&ledger.locks, &key).await, "not released");
}

#[tokio::test]
async fn mut_self_method_runs_under_its_lock() {
    let mut ledger = ledger(4);
    let (key, held) = ledger.deposit(25).await.expect("locked call");
    assert_eq!((key.as_str(), ledger.balance), ("ledger:4", 25));
    assert!(held, "the body ran without the lock");
    assert!(is_free(&ledger.locks, &key).await, "not released");
}

#[tokio::test]
async fn arc_self_method_runs_under_its_lock() {
    let ledger = Arc::new(ledger(5));
    let (key, held) = ledger.clone().close().await.expect("locked call");
    assert_eq!(key, "ledger:5");
    assert!(held, "the body ran without the lock");
    assert!(is_free(&ledger.locks, &key).await, "not released");
}

#[distributed_lock(key = "order:<id>", manager = locks)]
async fn place_order(locks: &LockManager, id: u64) -> Result<String, LockError> {
    let current = lock_runtime::current().expect("inside place_order");
    Ok(current.key().to_owned())
}

#[tokio::test]
async fn current_reports_the_rendered_key() {
    let locks = LockManager::memory();
    assert_eq!(
        place_order(&locks, 42).await.expect("locked call"),
        "order:42"
    );
    assert!(
        lock_runtime::current().is_none(),
        "current() outside a body"
    );
}

struct Order {
    tenant: &'static str,
    number: u64,
}

#[distributed_lock(key = "tenant:<order.tenant>:order:<order.number>", manager = locks)]
async fn ship(locks: &LockManager, order: &Order) -> Result<String, LockError> {
    let current = lock_runtime::current().expect("inside ship");
    Ok(current.key().to_owned())
}

#[tokio::test]
async fn field_placeholder_renders_the_field() {
    let locks = LockManager::memory();
    let order = Order {
        tenant: "acme",
        number: 42,
    };
    let key = ship(&locks, &order).await.expect("locked call");
    assert_eq!(key, "tenant:acme:order:42");
}

#[distributed_lock(
    key = "export:<name>",
    ttl = "300ms",
    watchdog = false,
    on_lease_lost = "abort",
    manager = locks
)]
async fn export(locks: &LockManager, name: &str, finished: &AtomicBool) -> Result<(), LockError> {
    tokio::time::sleep(Duration::from_secs(3)).await;
    finished.store(true, Ordering::SeqCst);
    Ok(())
}

/// On tokio's paused clock: the 300 ms lease runs out before the 3 s body ends, whatever the
/// machine's load.
#[tokio::test(start_paused = true)]
async fn lost_lease_with_abort_returns_lease_lost_and_stops_the_body() {
    let locks = LockManager::memory();
    let finished = AtomicBool::new(false);
    let exported = timeout(PATIENCE, export(&locks, "daily", &finished)).await;
    match exported.expect("the call returns") {
        Err(LockError::LeaseLost { key, .. }) => assert_eq!(key, "export:daily"),
        other => panic!("expected LeaseLost, got {other:?}"),
    }
    assert!(
        !finished.load(Ordering::SeqCst),
        "the body ran past its lease"
    );
}
