//! The store seam as a user sees it: a store written here, against the public
//! `lock_runtime::store` API only, given to `LockManagerBuilder::store`. Several managers over
//! one store stand for several processes. What the engine does with a store that declares few
//! capabilities: refusals that name what is missing, waiting on the lease where nobody is told
//! of releases, and waking at once where the store tells [`Changes`]. Its inspection side
//! ([`Inspect`]): what `lockctl` lists, shows and force-releases through, written here too.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lock_runtime::store::{
    Acquire, Ask, Booking, BoxFuture, Changes, HolderId, Inspect, Key, Kind, LockInfo, LockState,
    Recorded, Release, Renewal, Shape, Store, StoreError, Unlocked, WaitRecord, whole,
};
use lock_runtime::{LockError, LockManager, LockOptions};
use tokio::time::Instant;

/// One lock per key name, its owner token and lease end by this process's clock, and one fence
/// counter per key that outlives the lock: the least a store keeps.
#[derive(Default)]
struct Table {
    locks: HashMap<String, (String, Instant)>,
    fences: HashMap<String, u64>,
}

#[derive(Default)]
struct TableStore {
    table: Mutex<Table>,
    /// Whether it tells releases to the managers over it.
    tells: bool,
    managers: Mutex<Vec<Changes>>,
    /// Acquire requests answered, for the test to wait on.
    asked: AtomicUsize,
    /// Made to fail every request transiently.
    down: AtomicBool,
    /// Whether it offers its inspection side.
    inspectable: bool,
}

impl TableStore {
    fn table(&self) -> std::sync::MutexGuard<'_, Table> {
        self.table.lock().expect("not poisoned")
    }

    fn check_up(&self) -> Result<(), StoreError> {
        if self.down.load(Ordering::SeqCst) {
            return Err(StoreError::transient("the table at test:0 is down"));
        }
        Ok(())
    }
}

fn ready<'a, T: Send + 'a>(value: T) -> BoxFuture<'a, T> {
    Box::pin(std::future::ready(value))
}

impl Store for TableStore {
    fn describe(&self) -> &str {
        "table store"
    }

    fn server(&self) -> &str {
        "test:0"
    }

    fn acquire<'a>(
        &'a self,
        key: &'a Key,
        token: &'a str,
        ttl: Duration,
        _ask: Ask,
    ) -> BoxFuture<'a, Result<Acquire, StoreError>> {
        self.asked.fetch_add(1, Ordering::SeqCst);
        if let Err(err) = self.check_up() {
            return ready(Err(err));
        }
        let now = Instant::now();
        let mut table = self.table();
        let Table { locks, fences } = &mut *table;
        match locks.get(key.name()) {
            Some((holder, end)) if *end > now && holder != token => {
                return ready(Ok(Acquire::Busy {
                    remaining: Some(*end - now),
                    holder: Some(HolderId::of_token(holder)),
                    in_line: false,
                    blocker: None,
                }));
            }
            _ => {}
        }
        let fence = fences.entry(key.name().to_owned()).or_default();
        *fence += 1;
        locks.insert(key.name().to_owned(), (token.to_owned(), now + ttl));
        ready(Ok(Acquire::Acquired { fence: *fence }))
    }

    fn renew<'a>(&'a self, batch: &'a [Renewal], book: Booking<'a>) -> BoxFuture<'a, ()> {
        if let Err(err) = self.check_up() {
            book(&whole(batch), Err(err));
            return ready(());
        }
        let now = Instant::now();
        let mut table = self.table();
        let answers = batch
            .iter()
            .map(|renewal| match table.locks.get_mut(renewal.key()) {
                Some((holder, end)) if *end > now && holder == renewal.token() => {
                    *end = now + renewal.ttl();
                    Some(true)
                }
                _ => Some(false),
            })
            .collect();
        drop(table);
        book(&whole(batch), Ok(answers));
        ready(())
    }

    fn release<'a>(
        &'a self,
        key: &'a Key,
        token: &'a str,
        keep: Duration,
    ) -> BoxFuture<'a, Result<Release, StoreError>> {
        if let Err(err) = self.check_up() {
            return ready(Err(err));
        }
        let now = Instant::now();
        let mut table = self.table();
        let answer = match table.locks.get_mut(key.name()) {
            Some((holder, end)) if *end > now && holder == token => {
                if keep.is_zero() {
                    table.locks.remove(key.name());
                } else {
                    *end = now + keep;
                }
                Release::Released
            }
            Some((_, end)) if *end > now => Release::NotOwner,
            _ => Release::Gone,
        };
        drop(table);
        if answer == Release::Released && self.tells {
            for changes in self.managers.lock().expect("not poisoned").iter() {
                changes.released(key.name());
            }
        }
        ready(Ok(answer))
    }

    fn notifies(&self) -> bool {
        self.tells
    }

    fn attach(&self, changes: &Changes) {
        self.managers
            .lock()
            .expect("not poisoned")
            .push(changes.clone());
    }

    fn inspect(&self) -> Option<&dyn Inspect> {
        self.inspectable.then_some(self as &dyn Inspect)
    }
}

/// The table's inspection side: a lock is its row, named as the engine's `Key` names it.
impl TableStore {
    /// The lock stored as `name`, as a tool sees it; `None` if no live row holds it.
    fn info(&self, key: &str, name: &str) -> Option<LockInfo> {
        let now = Instant::now();
        let table = self.table();
        let (token, end) = table.locks.get(name).filter(|(_, end)| *end > now)?;
        let mut info = LockInfo::new(key, Kind::Lock, name, "test:0");
        info.state = LockState::Held;
        info.fence = table.fences.get(name).copied();
        // Any id of the owner token that is not the token itself.
        info.holder_id = Some(format!("{:x}", HolderId::of_token(token).get()));
        info.lease_ms = Some((*end - now).as_millis() as i64);
        info.unlock_id = info.holder_id.clone();
        Some(info)
    }

    fn force_release(&self, seen: &LockInfo) -> Unlocked {
        let Some(now) = self.info(&seen.key, &seen.stored_as) else {
            return Unlocked::AlreadyFree;
        };
        if now.unlock_id != seen.unlock_id {
            return Unlocked::Changed {
                now: Some(Recorded::of(&now)),
            };
        }
        self.table().locks.remove(&seen.stored_as);
        for changes in self.managers.lock().expect("not poisoned").iter() {
            changes.released(&seen.stored_as);
        }
        Unlocked::Released {
            removed: Some(Recorded::of(&now)),
        }
    }
}

impl Inspect for TableStore {
    fn places(&self) -> BoxFuture<'_, Result<Vec<String>, StoreError>> {
        ready(Ok(vec!["test:0".to_owned()]))
    }

    fn list<'a>(
        &'a self,
        prefix: &'a str,
        pattern: &'a str,
    ) -> BoxFuture<'a, Result<Vec<LockInfo>, StoreError>> {
        // `*` and a name or a name's beginning (`order:*`) are globs enough for this table.
        let matches = |key: &str| match pattern.strip_suffix('*') {
            Some(start) => key.starts_with(start),
            None => key == pattern,
        };
        let mut names: Vec<(String, String)> = (self.table().locks.keys())
            .filter_map(|name| {
                Some((
                    lock_runtime::inspect::lock_name(prefix, name)?,
                    name.clone(),
                ))
            })
            .filter(|(key, _)| matches(key))
            .collect();
        names.sort();
        let listed = names
            .iter()
            .filter_map(|(key, name)| self.info(key, name))
            .collect();
        ready(Ok(listed))
    }

    fn show<'a>(
        &'a self,
        prefix: &'a str,
        key: &'a str,
    ) -> BoxFuture<'a, Result<Vec<LockInfo>, StoreError>> {
        let name = match Key::new(prefix, key, Shape::Lock) {
            Ok(stored) => stored.name().to_owned(),
            Err(err) => return ready(Err(StoreError::config(err.to_string()))),
        };
        let info = self.info(key, &name);
        ready(Ok(vec![info.unwrap_or_else(|| {
            LockInfo::new(key, Kind::Lock, name, "test:0")
        })]))
    }

    fn unlock<'a>(
        &'a self,
        _prefix: &'a str,
        seen: &'a LockInfo,
    ) -> BoxFuture<'a, Result<Unlocked, StoreError>> {
        ready(Ok(self.force_release(seen)))
    }

    fn waits<'a>(&'a self, _prefix: &'a str) -> BoxFuture<'a, Result<Vec<WaitRecord>, StoreError>> {
        ready(Err(StoreError::permanent(
            "the table at test:0 keeps no published waits",
        )))
    }
}

async fn manager_over(store: &Arc<TableStore>) -> LockManager {
    LockManager::builder()
        .store(store.clone())
        .build()
        .await
        .expect("a manager over the table store")
}

const PATIENCE: Duration = Duration::from_secs(20);

#[tokio::test]
async fn two_managers_over_one_store_exclude_each_other_and_fence_in_order() {
    let store = Arc::new(TableStore::default());
    let (a, b) = (manager_over(&store).await, manager_over(&store).await);
    let first = a.lock("order:1", LockOptions::new()).await.expect("free");
    let busy = b
        .lock("order:1", LockOptions::new().wait(Duration::ZERO))
        .await
        .expect_err("held by the other manager");
    assert!(matches!(busy, LockError::Busy { .. }), "{busy:?}");
    let fence = first.fencing_token();
    first.release().await.expect("released");
    let second = b
        .lock("order:1", LockOptions::new())
        .await
        .expect("free again");
    assert!(second.fencing_token() > fence);
    second.release().await.expect("released");
    assert!(store.table().locks.is_empty(), "nothing left held");
}

#[tokio::test]
async fn a_shape_the_store_does_not_keep_is_refused_naming_it_and_the_store() {
    let manager = manager_over(&Arc::new(TableStore::default())).await;
    let err = manager
        .semaphore("pool", 3, LockOptions::new())
        .await
        .expect_err("no semaphores here");
    let shown = err.to_string();
    assert!(matches!(err, LockError::Config(_)), "{err:?}");
    assert!(shown.contains("table store"), "{shown}");
    assert!(shown.contains("semaphore"), "{shown}");
    let err = manager
        .read_lock("doc", LockOptions::new())
        .await
        .expect_err("no read-write locks here");
    assert!(err.to_string().contains("read-write lock"), "{err}");
}

#[tokio::test]
async fn fair_waiting_is_refused_where_the_store_keeps_no_line() {
    let manager = manager_over(&Arc::new(TableStore::default())).await;
    let err = manager
        .lock("k", LockOptions::new().fair(true))
        .await
        .expect_err("no line of waiters here");
    let shown = err.to_string();
    assert!(shown.contains("table store"), "{shown}");
    assert!(shown.contains("leave fair out"), "{shown}");
}

#[tokio::test]
async fn a_builder_given_a_store_and_a_url_is_refused() {
    let err = LockManager::builder()
        .url("memory://")
        .store(Arc::new(TableStore::default()))
        .build()
        .await
        .expect_err("one or the other");
    assert!(err.to_string().contains("either a URL or a store"), "{err}");
}

/// A waiter of a store that tells releases takes the lock at the release, long before the
/// holder's lease would have ended.
#[tokio::test]
async fn a_waiter_wakes_at_a_release_the_store_tells() {
    let store = Arc::new(TableStore {
        tells: true,
        ..TableStore::default()
    });
    let (a, b) = (manager_over(&store).await, manager_over(&store).await);
    let ttl = Duration::from_secs(60);
    let held = a
        .lock("k", LockOptions::new().ttl(ttl))
        .await
        .expect("free");
    let asked = store.asked.load(Ordering::SeqCst);
    let waiter = tokio::spawn(async move {
        let started = Instant::now();
        let guard = b
            .lock("k", LockOptions::new().wait(Duration::from_secs(120)))
            .await
            .expect("taken after the release");
        (started.elapsed(), guard.release().await)
    });
    // The waiter was told the lock is busy before it is released.
    let told =
        lock_tests::wait_until_async(PATIENCE, || store.asked.load(Ordering::SeqCst) > asked).await;
    assert!(told, "the waiter never asked");
    held.release().await.expect("released");
    let (waited, released) = tokio::time::timeout(PATIENCE, waiter)
        .await
        .expect("woken by the release, not the lease's end")
        .expect("no panic");
    released.expect("released");
    assert!(waited < ttl / 2, "waited {waited:?}");
}

/// A store's transient failure reaches the caller as a retryable error naming the store's
/// server, and a permanent one as not retryable.
#[tokio::test]
async fn a_store_failure_keeps_its_kind_and_names_the_server() {
    let store = Arc::new(TableStore::default());
    let manager = manager_over(&store).await;
    store.down.store(true, Ordering::SeqCst);
    let err = manager
        .lock("k", LockOptions::new().wait(Duration::ZERO))
        .await
        .expect_err("the store is down");
    assert!(err.is_retryable(), "{err:?}");
    let shown = err.to_string();
    assert!(shown.contains("test:0"), "{shown}");
    assert!(!StoreError::permanent("no table").is_transient());
}

/// One store per process for the scheme `tablestore://`, as a store's package would open one
/// per URL.
static SHARED: std::sync::LazyLock<Arc<TableStore>> = std::sync::LazyLock::new(|| {
    Arc::new(TableStore {
        tells: true,
        inspectable: true,
        ..TableStore::default()
    })
});

fn register_table_scheme() {
    lock_runtime::store::register_scheme("TableStore", |url: String| async move {
        if url.contains("broken") {
            return Err(StoreError::permanent("no table at test:0 (broken)"));
        }
        Ok(SHARED.clone() as Arc<dyn Store>)
    })
    .expect("a scheme of its own");
}

#[tokio::test]
async fn a_registered_scheme_reaches_the_store_through_connect_and_the_test_kit() {
    register_table_scheme();
    let a = LockManager::connect("tablestore://one")
        .await
        .expect("connected");
    let b = LockManager::connect("TABLESTORE://one")
        .await
        .expect("connected");
    assert_eq!(a.backend(), "table store");
    let held = a.lock("scheme:k", LockOptions::new()).await.expect("free");
    let busy = b
        .lock("scheme:k", LockOptions::new().wait(Duration::ZERO))
        .await
        .expect_err("held through the other manager");
    assert!(busy.is_busy(), "{busy:?}");
    held.release().await.expect("released");
    // The test kit's layer goes around a registered store as around the library's own.
    let kit = lock_runtime::testing::TestLocks::over_url("tablestore://one")
        .await
        .expect("a kit over the store");
    let guard = kit
        .manager()
        .lock("scheme:k", LockOptions::new())
        .await
        .expect("free again");
    guard.release().await.expect("released");
    let err = LockManager::connect("tablestore://broken")
        .await
        .expect_err("the store refused");
    let shown = err.to_string();
    assert!(shown.contains("no table at test:0"), "{shown}");
    assert!(!err.is_retryable(), "{err:?}");
}

#[tokio::test]
async fn the_library_s_own_schemes_cannot_be_registered() {
    for scheme in ["redis", "Memory", "redis+cluster", "no scheme"] {
        let err = lock_runtime::store::register_scheme(scheme, |_url: String| async {
            Err::<Arc<dyn Store>, _>(StoreError::permanent("never"))
        })
        .expect_err("refused");
        assert!(matches!(err, LockError::Config(_)), "{scheme}: {err:?}");
    }
    assert!(
        LockManager::connect("memory://")
            .await
            .expect("still memory")
            .backend()
            .starts_with("memory")
    );
}

/// The store written here, shared by the kit's managers, passes the conformance kit (the
/// shapes it does not keep are refused with errors naming them).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_table_store_passes_the_conformance_kit() {
    let store = Arc::new(TableStore {
        tells: true,
        ..TableStore::default()
    });
    let report = lock_runtime::conformance::run_store(store).await;
    println!("{report}");
    report.assert_passed();
}

/// What a store keeps to tell a manager does not keep the manager alive.
#[tokio::test]
async fn a_store_can_tell_that_a_manager_it_tells_is_gone() {
    let store = Arc::new(TableStore::default());
    let manager = manager_over(&store).await;
    let changes = store.managers.lock().expect("not poisoned")[0].clone();
    assert!(!changes.is_gone());
    manager.shutdown().await.expect("shut down");
    drop(manager);
    let gone = lock_tests::wait_until_async(PATIENCE, || changes.is_gone()).await;
    assert!(gone, "the manager's waiters outlive it");
    changes.released("lock:{k}");
}

/// What `lockctl` does through a store's inspection side, on a store written outside the
/// crate and reached by its registered scheme: list, show, force-release (a waiter is woken at
/// once), and none where the store offers none.
#[tokio::test]
async fn a_store_s_inspection_side_lists_shows_and_unlocks_its_locks() {
    register_table_scheme();
    let holder = LockManager::connect("tablestore://inspect")
        .await
        .expect("connected");
    let ttl = Duration::from_secs(60);
    let held = holder
        .lock("inspect:order:7", LockOptions::new().ttl(ttl))
        .await
        .expect("free");
    let inspect = holder.inspect().expect("the table store can be inspected");
    let listed = inspect.list("lock:", "inspect:*").await.expect("listed");
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0].key, "inspect:order:7");
    assert_eq!(listed[0].state, LockState::Held);
    assert_eq!(listed[0].fence, Some(held.fencing_token()));
    assert!(
        listed[0].lease_ms.is_some_and(|lease| lease > 0),
        "{listed:?}"
    );
    let shown = inspect
        .show("lock:", "inspect:order:7")
        .await
        .expect("shown");
    assert_eq!(shown, listed);
    let empty = inspect.show("lock:", "").await.expect_err("no empty key");
    assert!(empty.is_config(), "{empty}");

    let other = LockManager::connect("tablestore://inspect")
        .await
        .expect("connected");
    let waiter = tokio::spawn(async move {
        let started = Instant::now();
        let guard = other
            .lock(
                "inspect:order:7",
                LockOptions::new().wait(Duration::from_secs(120)),
            )
            .await
            .expect("taken after the force-release");
        (started.elapsed(), guard.release().await)
    });
    let unlocked = inspect.unlock("lock:", &shown[0]).await.expect("unlocked");
    assert!(
        matches!(unlocked, Unlocked::Released { removed: Some(_) }),
        "{unlocked:?}"
    );
    let (waited, released) = tokio::time::timeout(PATIENCE, waiter)
        .await
        .expect("woken by the force-release, not the lease's end")
        .expect("no panic");
    released.expect("released");
    assert!(waited < ttl / 2, "waited {waited:?}");
    let gone = inspect
        .show("lock:", "inspect:order:7")
        .await
        .expect("shown");
    assert_eq!(gone[0].state, LockState::Absent, "{gone:?}");
    drop(held);

    // The test kit's layer hands the store's inspection side on.
    let kit = lock_runtime::testing::TestLocks::over_url("tablestore://inspect")
        .await
        .expect("a kit over the store");
    assert!(kit.manager().inspect().is_some());
    let plain = manager_over(&Arc::new(TableStore::default())).await;
    assert!(plain.inspect().is_none(), "a store without it offers none");
}
