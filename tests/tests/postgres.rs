//! The PostgreSQL store (lock-runtime's `postgres` feature) against real servers: a PostgreSQL
//! of its own per test, and PgBouncer in transaction mode in front of it where the test says.

use std::sync::Arc;
use std::time::{Duration, Instant};

use lock_runtime::conformance::{self, Outcome};
use lock_runtime::postgres::{PostgresOptions, PostgresStore, SCHEMA_SQL, lock_in_transaction};
use lock_runtime::store::{Acquire, Ask, Key, Release, Shape, Store};
use lock_runtime::{LockError, LockManager, LockOptions, distributed_lock};
use lock_tests::{PgBouncer, PostgresServer, encoded, wait_until_async};

/// A waiter woken by a release gets the lock within this of the release.
const SOON: Duration = Duration::from_secs(5);

/// `url` with `query` added (`listen_url=...`, `poll_ms=...`).
fn with_query(url: &str, query: &str) -> String {
    format!("{url}?{query}")
}

fn key(name: &str) -> Key {
    Key::new("lock:", name, Shape::Lock).expect("a valid key")
}

/// The last value the fencing sequence handed out: every acquire attempt, granted or busy,
/// takes one, so it moving says an attempt was made.
fn last_fence(server: &PostgresServer) -> i64 {
    server
        .psql("SELECT last_value FROM lock_runtime_fences")
        .parse()
        .expect("a number")
}

async fn passes_the_kit(name: &str, url: &str, log: impl Fn() -> String) {
    let report = conformance::run(name, || LockManager::connect(url)).await;
    println!("{report}");
    if !report.passed() {
        panic!("{report}\n{}", log());
    }
    // The plain lock's eight checks pass; semaphores and read-write locks are refused by name.
    assert!(report.count(Outcome::Passed) >= 10, "{report}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_conformance_kit_passes_on_a_direct_connection() {
    let server = PostgresServer::start();
    passes_the_kit("postgres", &server.url(), || server.log()).await;
}

/// Through PgBouncer in transaction mode, without a URL to LISTEN on: every statement goes
/// through the pooler, and waiters are told of releases by polling.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_conformance_kit_passes_through_pgbouncer_in_transaction_mode() {
    let server = PostgresServer::start();
    let bouncer = PgBouncer::start(&server);
    passes_the_kit("postgres through pgbouncer", &bouncer.url(), || {
        format!("{}\n{}", server.log(), bouncer.log())
    })
    .await;
}

#[distributed_lock(key = "invoice:<id>", ttl = "30s", manager = locks)]
async fn bill(locks: &LockManager, id: u32) -> Result<u32, LockError> {
    Ok(id * 2)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_attribute_works_over_a_postgres_url() {
    let server = PostgresServer::start();
    let locks = LockManager::connect(&server.url()).await.expect("connect");
    assert_eq!(bill(&locks, 21).await.expect("free"), 42);
    let other = LockManager::connect(&server.url()).await.expect("connect");
    let held = other
        .lock("invoice:7", LockOptions::new())
        .await
        .expect("free");
    let busy = bill(&locks, 7).await;
    assert!(busy.is_err_and(|err| err.is_busy()), "not excluded");
    held.release().await.expect("release");
    assert_eq!(bill(&locks, 7).await.expect("free again"), 14);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_released_lock_leaves_no_row() {
    let server = PostgresServer::start();
    let locks = LockManager::connect(&server.url()).await.expect("connect");
    let held = locks
        .lock("order:1", LockOptions::new())
        .await
        .expect("free");
    assert_eq!(
        server.psql("SELECT count(*) FROM lock_runtime_locks WHERE name = 'lock:{order:1}'"),
        "1"
    );
    held.release().await.expect("release");
    assert_eq!(server.psql("SELECT count(*) FROM lock_runtime_locks"), "0");
}

/// The row's end, set on the database's clock, is what counts: a lease the database says has
/// ended is taken over at once though its holder asked for a minute, and one it says runs on
/// is busy, with the remaining lease the database's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_database_clock_decides_expiry() {
    let server = PostgresServer::start();
    let store = PostgresStore::connect(&server.url(), Duration::from_secs(5))
        .await
        .expect("connect");
    let (ended, running) = (key("ended"), key("running"));
    let ask = Ask::default();
    let minute = Duration::from_secs(60);
    let first = store.acquire(&ended, "a", minute, ask).await.expect("free");
    assert!(matches!(first, Acquire::Acquired { .. }), "{first:?}");
    server.psql(
        "UPDATE lock_runtime_locks SET expires_at = clock_timestamp() - interval '1 millisecond' \
         WHERE name = 'lock:{ended}'",
    );
    let taken = store.acquire(&ended, "b", minute, ask).await.expect("ask");
    assert!(matches!(taken, Acquire::Acquired { .. }), "{taken:?}");

    let short = Duration::from_millis(200);
    store
        .acquire(&running, "a", short, ask)
        .await
        .expect("free");
    server.psql(
        "UPDATE lock_runtime_locks SET expires_at = clock_timestamp() + interval '100 seconds' \
         WHERE name = 'lock:{running}'",
    );
    tokio::time::sleep(short * 3).await;
    match store.acquire(&running, "b", short, ask).await.expect("ask") {
        Acquire::Busy {
            remaining: Some(left),
            holder,
            ..
        } => {
            assert!(left > Duration::from_secs(90), "{left:?} left");
            assert!(holder.is_some(), "no holder id");
        }
        other => panic!("expected busy, got {other:?}"),
    }
}

/// Fencing tokens come from a sequence, which is written ahead to the WAL: a SIGKILL of the
/// server and its crash recovery never hand out a token again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fencing_tokens_keep_increasing_across_a_kill_and_restart() {
    let server = PostgresServer::start();
    let locks = LockManager::connect(&server.url()).await.expect("connect");
    let mut last = 0;
    for round in 0..3 {
        // More than the 32 values a sequence logs ahead at once.
        for _ in 0..40 {
            let held = locks
                .lock("ledger", LockOptions::new())
                .await
                .unwrap_or_else(|err| panic!("round {round}: {err}\n{}", server.log()));
            let token = held.fencing_token();
            assert!(token > last, "round {round}: {token} after {last}");
            last = token;
            held.release().await.expect("release");
        }
        server.kill();
        server.restart();
    }
}

/// Two stores that LISTEN and never poll (a poll interval of ten minutes): a waiter on one is
/// woken by the other's release, long before the holder's lease would end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_is_woken_by_notify() {
    let server = PostgresServer::start();
    let url = with_query(&server.url(), "poll_ms=600000");
    woken_on_release(&server, &url, &url, true, false).await;
}

/// Every connection of the stores is cut by the server (`pg_terminate_backend`) once they are
/// built: the next statements go on new connections, the listening connection is made again,
/// and a waiter is still woken on release.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_its_connections_are_cut_a_store_still_locks_and_hears_releases() {
    let server = PostgresServer::start();
    let url = with_query(&server.url(), "poll_ms=600000");
    woken_on_release(&server, &url, &url, true, true).await;
}

/// Through PgBouncer in transaction mode with a direct URL to LISTEN on: still woken by NOTIFY.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn through_pgbouncer_a_listen_url_wakes_waiters_by_notify() {
    let server = PostgresServer::start();
    let bouncer = PgBouncer::start(&server);
    let listen = encoded(&server.url());
    let url = with_query(
        &bouncer.url(),
        &format!("listen_url={listen}&poll_ms=600000"),
    );
    woken_on_release(&server, &url, &url, true, false).await;
}

/// Through PgBouncer in transaction mode without a URL to LISTEN on, the store hears nothing
/// and polls: the wait still ends soon after the release.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn through_pgbouncer_without_a_listen_url_a_wait_ends_by_polling() {
    let server = PostgresServer::start();
    let bouncer = PgBouncer::start(&server);
    woken_on_release(&server, &bouncer.url(), &bouncer.url(), false, false).await;
}

/// A holder on a store over `holder_url` releases a lock with a 30 s lease while a waiter on
/// another store over `waiter_url` waits; the waiter gets it within [`SOON`]. With `cut`, every
/// connection to the server is terminated before the lock is taken.
async fn woken_on_release(
    server: &PostgresServer,
    holder_url: &str,
    waiter_url: &str,
    listens: bool,
    cut: bool,
) {
    let timeout = Duration::from_secs(5);
    let holder_store = PostgresStore::connect(holder_url, timeout)
        .await
        .expect("connect");
    let waiter_store = PostgresStore::connect(waiter_url, timeout)
        .await
        .expect("connect");
    assert_eq!(waiter_store.listens(), listens, "{}", server.log());
    let holder = LockManager::builder()
        .store(Arc::new(holder_store))
        .build()
        .await
        .expect("build");
    let waiter = LockManager::builder()
        .store(Arc::new(waiter_store))
        .build()
        .await
        .expect("build");
    if cut {
        assert!(server.terminate_connections() > 0, "{}", server.log());
    }
    let long = LockOptions::new().ttl(Duration::from_secs(30));
    let held = holder
        .lock("report", long)
        .await
        .unwrap_or_else(|err| panic!("{err}\n{}", server.log()));
    let before = last_fence(server);
    let waiting = tokio::spawn(async move {
        let got = waiter
            .lock("report", long.wait(Duration::from_secs(20)))
            .await;
        (got, Instant::now(), waiter)
    });
    // The waiter's first attempt took a fencing value and found the lock busy: it waits now.
    let asked = wait_until_async(Duration::from_secs(10), || last_fence(server) > before).await;
    assert!(asked, "the waiter never asked\n{}", server.log());
    let released = Instant::now();
    held.release().await.expect("release");
    let (got, at, _waiter) = waiting.await.expect("the waiting task");
    let guard = got.unwrap_or_else(|err| panic!("not woken: {err}\n{}", server.log()));
    assert!(
        at - released < SOON,
        "woken {:?} after the release",
        at - released
    );
    guard.release().await.expect("release");
}

/// Whether the row of the lock `name` (stored name) is marked as waited for.
fn marked_waited(server: &PostgresServer, name: &str) -> bool {
    server.psql(&format!(
        "SELECT waited FROM lock_runtime_locks WHERE name = '{name}'"
    )) == "t"
}

/// A release is told (NOTIFY) only where someone waits: a lock nobody was told is busy goes
/// without a notification, one whose row a waiter marked with one. Notifications arrive in
/// commit order, so the first one heard after both releases names the awaited lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_is_told_only_where_someone_waits() {
    let server = PostgresServer::start();
    let holder = LockManager::connect(&server.url()).await.expect("connect");
    let waiter = LockManager::connect(&server.url()).await.expect("connect");
    let mut heard = sqlx::postgres::PgListener::connect(&server.url())
        .await
        .expect("a listener");
    heard.listen("lock_runtime_released").await.expect("LISTEN");
    let quiet = holder
        .lock("quiet", LockOptions::new())
        .await
        .expect("free");
    quiet.release().await.expect("release");
    let awaited = holder
        .lock("awaited", LockOptions::new().ttl(Duration::from_secs(30)))
        .await
        .expect("free");
    assert!(!marked_waited(&server, "lock:{awaited}"));
    let waiting = tokio::spawn(async move {
        let wait = LockOptions::new().wait(Duration::from_secs(20));
        (waiter.lock("awaited", wait).await, waiter)
    });
    let marked = wait_until_async(Duration::from_secs(10), || {
        marked_waited(&server, "lock:{awaited}")
    })
    .await;
    assert!(marked, "the waiter never marked the lock\n{}", server.log());
    awaited.release().await.expect("release");
    let told = loop {
        let told = tokio::time::timeout(SOON, heard.recv())
            .await
            .expect("a notification in time")
            .expect("the listener");
        if !told.payload().starts_with("check:") {
            break told;
        }
    };
    assert_eq!(told.payload(), "lock:{awaited}");
    let (got, _waiter) = waiting.await.expect("the waiting task");
    let guard = got.unwrap_or_else(|err| panic!("not woken: {err}\n{}", server.log()));
    // It waited for the lock: others of its manager may still wait, so its row is marked.
    assert!(marked_waited(&server, "lock:{awaited}"));
    guard.release().await.expect("release");
}

/// Two tasks of one manager wait for a lock another manager holds for 30 s: the release wakes
/// one of them, whose own release (it waited, so it is told) wakes the other, long before the
/// lease would have ended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_of_one_manager_are_woken_in_turn() {
    let server = PostgresServer::start();
    let url = with_query(&server.url(), "poll_ms=600000");
    let holder = LockManager::connect(&url).await.expect("connect");
    let waiters = LockManager::connect(&url).await.expect("connect");
    let long = LockOptions::new().ttl(Duration::from_secs(30));
    let held = holder.lock("report", long).await.expect("free");
    let tasks: Vec<_> = (0..2)
        .map(|_| {
            let waiters = waiters.clone();
            tokio::spawn(async move {
                let guard = waiters
                    .lock("report", long.wait(Duration::from_secs(25)))
                    .await?;
                guard.release().await?;
                Ok::<_, LockError>(Instant::now())
            })
        })
        .collect();
    let marked = wait_until_async(Duration::from_secs(10), || {
        marked_waited(&server, "lock:{report}")
    })
    .await;
    assert!(marked, "no waiter marked the lock\n{}", server.log());
    let released = Instant::now();
    held.release().await.expect("release");
    for task in tasks {
        let done = task
            .await
            .expect("the task")
            .unwrap_or_else(|err| panic!("{err}\n{}", server.log()));
        assert!(
            done - released < 2 * SOON,
            "done {:?} after the release",
            done - released
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_is_refused_at_connect() {
    let server = PostgresServer::start();
    let standby = server.start_standby();
    let err = LockManager::connect(&standby.url())
        .await
        .expect_err("a standby takes no writes");
    let shown = err.to_string();
    assert!(shown.contains("standby"), "{shown}");
    assert!(shown.contains("pg_is_in_recovery"), "{shown}");
    assert!(!shown.contains(standby.password()), "{shown}");
}

/// Whatever fails at connect (a wrong password, a server that is not there, a setting it
/// refuses), the message and the error's debug form never show the password.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_password_never_appears_in_an_error() {
    let server = PostgresServer::start();
    let secret = "Wr0ng-s3cret";
    let port = server.port();
    let dead = lock_tests::free_port();
    for url in [
        format!("postgres://lock:{secret}@127.0.0.1:{port}/lock"),
        format!("postgresql://lock:{secret}@127.0.0.1:{dead}/lock"),
        format!("postgres://lock:{secret}@127.0.0.1:{port}/lock?create_tables=perhaps"),
        format!("postgres://lock:{secret}@127.0.0.1:notaport/lock"),
    ] {
        let err = LockManager::connect(&url).await.expect_err(&url);
        let shown = format!("{err} {err:?}");
        assert!(!shown.contains(secret), "{shown}");
        assert!(!shown.contains("s3cret"), "{shown}");
    }
}

/// Several processes starting at once on an empty database all create the tables (one of them
/// does; the others wait for it under the advisory lock and find them).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tables_are_created_once_when_managers_start_at_once() {
    let server = PostgresServer::start();
    let url = server.url();
    let starting: Vec<_> = (0..6)
        .map(|_| {
            let url = url.clone();
            tokio::spawn(async move { LockManager::connect(&url).await })
        })
        .collect();
    for started in starting {
        started
            .await
            .expect("the task")
            .unwrap_or_else(|err| panic!("{err}\n{}", server.log()));
    }
    assert_eq!(
        server.psql("SELECT count(*) FROM pg_class WHERE relname LIKE 'lock_runtime_%'"),
        // The locks' table and its primary key's index, the sequence, the records' table and
        // its primary key's index.
        "5"
    );
}

/// With `create_tables=false` the tables are the migrations' job: connect says so while they
/// are missing, and works once the documented SQL made them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_table_creation_connect_needs_the_documented_schema() {
    let server = PostgresServer::start();
    let url = with_query(&server.url(), "create_tables=false");
    let err = LockManager::connect(&url).await.expect_err("no tables yet");
    assert!(err.to_string().contains("docs/POSTGRES.md"), "{err}");
    server.psql(SCHEMA_SQL);
    let locks = LockManager::connect(&url).await.expect("the tables exist");
    let held = locks.lock("a", LockOptions::new()).await.expect("free");
    held.release().await.expect("release");
}

/// Tables without the store's functions (made by hand, or by a version before the functions):
/// with `create_tables=false` connect names the functions and the SQL to run, and by default it
/// adds them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_adds_the_functions_to_tables_that_lack_them() {
    let server = PostgresServer::start();
    server.psql(SCHEMA_SQL);
    server.psql("DROP FUNCTION lock_runtime_acquire, lock_runtime_release, lock_runtime_renew");
    let kept = with_query(&server.url(), "create_tables=false");
    let err = LockManager::connect(&kept).await.expect_err("no functions");
    let shown = err.to_string();
    for named in ["lock_runtime_acquire", "lock_runtime_renew", "SCHEMA_SQL"] {
        assert!(shown.contains(named), "{shown}");
    }
    let locks = LockManager::connect(&server.url())
        .await
        .expect("adds them");
    let held = locks.lock("a", LockOptions::new()).await.expect("free");
    held.release().await.expect("release");
    LockManager::connect(&kept)
        .await
        .expect("the functions exist");
}

/// The schema of the first functions, whose acquire recorded no holder.
const FIRST_FUNCTIONS: &str = include_str!("postgres_schemas/first_functions.sql");

/// A database made with the first functions (no holder columns, an acquire of another
/// signature) and holding a live lock: with `create_tables=false` connect asks for the
/// current functions; by default it adds the columns, drops the old acquire for the new one
/// and keeps the row, whose holder is still busy and recorded nothing; a lock taken afterwards
/// records its holder.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_upgrades_a_database_of_the_first_functions() {
    let server = PostgresServer::start();
    server.psql(FIRST_FUNCTIONS);
    server
        .psql("SELECT * FROM lock_runtime_acquire('lock:{old}', 'an-old-token', 5, 100000, 0, 0)");
    let kept = with_query(&server.url(), "create_tables=false");
    let err = LockManager::connect(&kept)
        .await
        .expect_err("old functions");
    assert!(err.to_string().contains("lock_runtime_acquire("), "{err}");
    let locks = LockManager::connect(&server.url())
        .await
        .unwrap_or_else(|err| panic!("{err}\n{}", server.log()));
    assert_eq!(
        server.psql("SELECT count(*) FROM pg_proc WHERE proname = 'lock_runtime_acquire'"),
        "1",
        "the old acquire is dropped"
    );
    let err = busy(&locks, "old", LockOptions::new()).await;
    assert_eq!(blocker_of(&err), None, "the old row recorded nobody");
    let holder = LockManager::builder()
        .url(server.url())
        .app_name("billing")
        .build()
        .await
        .expect("build");
    let guard = holder.lock("new", LockOptions::new()).await.expect("free");
    let err = busy(&locks, "new", LockOptions::new()).await;
    let blocker = blocker_of(&err).unwrap_or_else(|| panic!("names its holder: {err:?}"));
    assert_eq!(blocker.app.as_deref(), Some("billing"));
    assert_eq!(blocker.fencing_token, Some(guard.fencing_token()));
    guard.release().await.expect("release");
    LockManager::connect(&kept)
        .await
        .expect("the functions are current");
}

/// The upgrade of a database of the first functions, by several processes starting at once:
/// each connects, one upgrades under the advisory lock, and the others find the schema current.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn managers_starting_at_once_upgrade_a_database_once() {
    let server = PostgresServer::start();
    server.psql(FIRST_FUNCTIONS);
    let starting: Vec<_> = (0..6)
        .map(|_| {
            let url = server.url();
            tokio::spawn(async move { LockManager::connect(&url).await })
        })
        .collect();
    for started in starting {
        started
            .await
            .expect("the task")
            .unwrap_or_else(|err| panic!("{err}\n{}", server.log()));
    }
    assert_eq!(
        server.psql(
            "SELECT count(*) FROM pg_proc WHERE proname IN \
             ('lock_runtime_acquire', 'lock_runtime_release', 'lock_runtime_renew')"
        ),
        "3"
    );
}

/// A pool of the application's, given to the builder.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_builder_takes_an_applications_pool() {
    let server = PostgresServer::start();
    let pool = sqlx::PgPool::connect(&server.url()).await.expect("pool");
    let locks = LockManager::builder()
        .postgres(pool.clone())
        .build()
        .await
        .expect("build");
    let other = LockManager::builder()
        .postgres_with(pool, PostgresOptions::new().poll_only())
        .build()
        .await
        .expect("build");
    let held = locks.lock("a", LockOptions::new()).await.expect("free");
    assert!(
        other
            .lock("a", LockOptions::new())
            .await
            .is_err_and(|err| err.is_busy())
    );
    held.release().await.expect("release");
    let again = other
        .lock("a", LockOptions::new())
        .await
        .expect("free again");
    again.release().await.expect("release");
}

/// Release, renewal and inspection check the owner: another token's release leaves the lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_checks_the_owner() {
    let server = PostgresServer::start();
    let store = PostgresStore::connect(&server.url(), Duration::from_secs(5))
        .await
        .expect("connect");
    let k = key("owned");
    let ttl = Duration::from_secs(30);
    store
        .acquire(&k, "mine", ttl, Ask::default())
        .await
        .expect("free");
    let theirs = store
        .release(&k, "theirs", Duration::ZERO)
        .await
        .expect("ask");
    assert_eq!(theirs, Release::NotOwner);
    let mine = store
        .release(&k, "mine", Duration::ZERO)
        .await
        .expect("ask");
    assert_eq!(mine, Release::Released);
    let again = store
        .release(&k, "mine", Duration::ZERO)
        .await
        .expect("ask");
    assert_eq!(again, Release::Gone);
}

/// lockctl's side of the store: a held lock listed and shown with its fencing token, and
/// force-released by the hold seen, which wakes a waiter on another manager.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspection_lists_shows_and_force_releases_a_lock() {
    use lock_runtime::store::{LockState, Unlocked};

    let server = PostgresServer::start();
    let locks = LockManager::connect(&server.url()).await.expect("connect");
    let held = locks
        .lock("order:42", LockOptions::new().ttl(Duration::from_secs(30)))
        .await
        .expect("free");
    let inspect = locks.inspect().expect("an inspection side");
    let listed = inspect.list("lock:", "order:*").await.expect("list");
    assert_eq!(listed.len(), 1, "{listed:?}");
    let seen = &listed[0];
    assert_eq!(seen.key, "order:42");
    assert_eq!(seen.state, LockState::Held);
    assert_eq!(seen.fence, Some(held.fencing_token()));
    assert!(seen.lease_ms.is_some_and(|left| left > 20_000), "{seen:?}");
    let shown = inspect.show("lock:", "order:42").await.expect("show");
    assert_eq!(shown[0].fence, seen.fence);
    let unlocked = inspect.unlock("lock:", seen).await.expect("unlock");
    assert!(
        matches!(unlocked, Unlocked::Released { .. }),
        "{unlocked:?}"
    );
    assert_eq!(server.psql("SELECT count(*) FROM lock_runtime_locks"), "0");
    let again = inspect.unlock("lock:", seen).await.expect("unlock");
    assert!(matches!(again, Unlocked::AlreadyFree), "{again:?}");
    let absent = inspect.show("lock:", "order:42").await.expect("show");
    assert_eq!(absent[0].state, LockState::Absent);
    assert!(
        held.release().await.is_err(),
        "the forced-out holder's release succeeded"
    );
}

/// A lock bound to the application's transaction and a manager's lock of the same key exclude
/// each other; COMMIT releases it, and fencing tokens keep increasing across both kinds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transaction_lock_excludes_managers_until_commit() {
    let server = PostgresServer::start();
    let locks = LockManager::connect(&server.url()).await.expect("connect");
    let pool = sqlx::PgPool::connect(&server.url()).await.expect("pool");
    let before = locks
        .lock("order:7", LockOptions::new())
        .await
        .expect("free");
    let first = before.fencing_token();
    let mut tx = pool.begin().await.expect("begin");
    let busy = lock_in_transaction(&mut tx, "order:7").await;
    assert!(
        busy.is_err_and(|err| err.is_busy()),
        "the manager's lease was ignored"
    );
    tx.rollback().await.expect("rollback");
    before.release().await.expect("release");

    let mut tx = pool.begin().await.expect("begin");
    let held = lock_in_transaction(&mut tx, "order:7").await.expect("free");
    assert!(
        held.fencing_token() > first,
        "{} after {first}",
        held.fencing_token()
    );
    let busy = locks.lock("order:7", LockOptions::new()).await;
    assert!(
        busy.is_err_and(|err| err.is_busy()),
        "the transaction's lock was ignored"
    );
    let mut other = pool.begin().await.expect("begin");
    let busy = lock_in_transaction(&mut other, "order:7").await;
    assert!(
        busy.is_err_and(|err| err.is_busy()),
        "two transactions held it"
    );
    other.rollback().await.expect("rollback");
    tx.commit().await.expect("commit");
    let after = locks
        .lock("order:7", LockOptions::new())
        .await
        .expect("free after COMMIT");
    assert!(after.fencing_token() > held.fencing_token());
    after.release().await.expect("release");
}

/// The `25P02` case: a statement fails in the transaction that holds the lock, so that every
/// later statement is refused until ROLLBACK; the ROLLBACK leaves no lock behind (a session
/// advisory lock would stay, its unlock refused with `25P02`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_statement_in_the_transaction_leaves_no_lock_behind() {
    let server = PostgresServer::start();
    let locks = LockManager::connect(&server.url()).await.expect("connect");
    let pool = sqlx::PgPool::connect(&server.url()).await.expect("pool");
    let mut tx = pool.begin().await.expect("begin");
    lock_in_transaction(&mut tx, "migration")
        .await
        .expect("free");
    let failed = sqlx::raw_sql("SELECT 1 / 0").execute(&mut *tx).await;
    assert!(failed.is_err(), "division by zero succeeded");
    let refused = sqlx::raw_sql("SELECT 1").execute(&mut *tx).await;
    let code = refused.err().and_then(|err| {
        err.as_database_error()
            .and_then(|db| db.code().map(|code| code.into_owned()))
    });
    assert_eq!(
        code.as_deref(),
        Some("25P02"),
        "the transaction was not aborted"
    );
    tx.rollback().await.expect("rollback");
    let free = locks
        .lock("migration", LockOptions::new())
        .await
        .expect("nothing left behind");
    free.release().await.expect("release");
}

/// A waiter on a manager gets a lock that a transaction held once the transaction commits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_manager_waiter_gets_the_lock_when_the_transaction_commits() {
    let server = PostgresServer::start();
    let locks = LockManager::connect(&server.url()).await.expect("connect");
    let pool = sqlx::PgPool::connect(&server.url()).await.expect("pool");
    let mut tx = pool.begin().await.expect("begin");
    lock_in_transaction(&mut tx, "report").await.expect("free");
    let waiting = tokio::spawn(async move {
        let got = locks
            .lock("report", LockOptions::new().wait(Duration::from_secs(20)))
            .await;
        (got, Instant::now())
    });
    let committed = Instant::now();
    tx.commit().await.expect("commit");
    let (got, at) = waiting.await.expect("the waiting task");
    let guard = got.expect("woken after COMMIT");
    assert!(at.saturating_duration_since(committed) < SOON);
    guard.release().await.expect("release");
}

/// Several keys at once and an election, over two managers on one database.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_all_and_election_work_over_postgres() {
    use lock_runtime::ElectionOptions;

    let server = PostgresServer::start();
    let a = LockManager::connect(&server.url()).await.expect("connect");
    let b = LockManager::connect(&server.url()).await.expect("connect");
    let both = a
        .lock_all(["account:1", "account:2"], LockOptions::new())
        .await
        .expect("free");
    let busy = b.lock("account:2", LockOptions::new()).await;
    assert!(
        busy.is_err_and(|err| err.is_busy()),
        "lock_all did not hold account:2"
    );
    both.release().await.expect("release");
    let free = b.lock("account:2", LockOptions::new()).await.expect("free");
    free.release().await.expect("release");

    let options = ElectionOptions::new().ttl(Duration::from_secs(5));
    let first = a.elect("scheduler", options).expect("elect");
    let term = first.elected().await.expect("elected");
    let second = b.elect("scheduler", options).expect("elect");
    assert!(first.is_leader() && !second.is_leader());
    first.step_down().await.expect("step down");
    let next = tokio::time::timeout(Duration::from_secs(10), second.elected())
        .await
        .expect("the other manager took over within 10 s")
        .expect("elected");
    assert!(next > term, "term {next} after {term}");
    second.step_down().await.expect("step down");
}

/// The test kit over a PostgreSQL URL: a scripted busy answer comes first, then the real
/// lock in the table, recorded in order with its fencing token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_test_kit_scripts_faults_over_a_postgres_store() {
    use lock_runtime::testing::TestLocks;

    let server = PostgresServer::start();
    let kit = TestLocks::over_url(&server.url()).await.expect("connects");
    kit.on("report:*").busy(1, Duration::from_millis(50));
    let options = LockOptions::new().wait(Duration::from_secs(10));
    let guard = kit
        .manager()
        .lock("report:7", options)
        .await
        .expect("taken after the scripted busy answer");
    kit.assert_acquired_in_order(&["report:7"]);
    assert_eq!(kit.fencing_tokens("report:7"), vec![guard.fencing_token()]);
    let rows = server.psql("SELECT count(*) FROM lock_runtime_locks");
    assert_eq!(rows.trim(), "1", "the real lock is in the table");
    guard.release().await.expect("release");
    kit.assert_not_held("report:7");
}

/// Two tasks of one process that take two locks in opposite orders over PostgreSQL: with
/// `Deadlock::Fail` one of them gives up (across processes: `--test deadlock`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deadlock_in_one_process_is_detected_over_postgres() {
    let server = PostgresServer::start();
    let locks = LockManager::connect(&server.url()).await.expect("connect");
    let fail = LockOptions::new()
        .wait(Duration::from_secs(20))
        .deadlock(lock_runtime::Deadlock::Fail);
    let managers = [locks.clone(), locks.clone()];
    let gave_up = lock_tests::deadlocks::opposite_orders(managers, "acct:1", "acct:2", fail).await;
    assert_eq!(gave_up, 1);
}

/// The `Busy` of `waiter` asking for `key` under `options`, from a task of its own (the
/// holding task would be told it waits for itself).
async fn busy(waiter: &LockManager, key: &'static str, options: LockOptions) -> LockError {
    let waiter = waiter.clone();
    let err = tokio::spawn(async move { waiter.lock(key, options).await })
        .await
        .expect("task")
        .expect_err("held by another");
    assert!(err.is_busy(), "{err}");
    err
}

fn blocker_of(err: &LockError) -> Option<&lock_runtime::store::Blocker> {
    match err {
        LockError::Busy { blocker, .. } => blocker.as_deref(),
        other => panic!("expected Busy, got {other}"),
    }
}

/// What the row of the one lock in the table records: `(token, host, pid, app, since_ms)`.
fn recorded_row(server: &PostgresServer) -> Vec<String> {
    server
        .psql(
            "SELECT concat_ws('|', token, coalesce(host, '-'), coalesce(pid::text, '-'), \
             coalesce(app, '-'), coalesce((extract(epoch FROM since) * 1000)::bigint::text, '-')) \
             FROM lock_runtime_locks",
        )
        .trim()
        .split('|')
        .map(str::to_owned)
        .collect()
}

/// A busy answer names the holder as its row records it: host, pid, app, since when, its
/// fencing token, and the same 12-digit holder id a Redis lock and `lockctl` give.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_answer_names_the_holder_as_its_row_records_it() {
    let server = PostgresServer::start();
    let holder = LockManager::builder()
        .url(server.url())
        .app_name("billing")
        .build()
        .await
        .expect("build");
    let waiter = LockManager::connect(&server.url()).await.expect("connect");
    let before = std::time::SystemTime::now();
    let guard = holder
        .lock("invoice:7", LockOptions::new())
        .await
        .expect("free");
    let after = std::time::SystemTime::now();
    let row = recorded_row(&server);
    let [token, host, pid, app, since_ms] = row.as_slice() else {
        panic!("one row: {row:?}");
    };
    assert_eq!(pid, &std::process::id().to_string());
    assert_eq!(app, "billing");
    for options in [
        LockOptions::new(),
        LockOptions::new().wait(Duration::from_millis(300)),
    ] {
        let err = busy(&waiter, "invoice:7", options).await;
        let blocker = blocker_of(&err).unwrap_or_else(|| panic!("names its holder: {err:?}"));
        assert_eq!(blocker.holder_id, lock_runtime::inspect::token_id(token));
        assert_eq!(blocker.holder_id.len(), 12);
        assert_eq!(blocker.host.as_ref(), Some(host));
        assert!(host != "-" && !host.is_empty(), "{row:?}");
        assert_eq!(blocker.pid, Some(std::process::id()));
        assert_eq!(blocker.app.as_deref(), Some("billing"));
        let since = blocker.since.expect("since");
        let since_ms: u64 = since_ms.parse().expect("since recorded");
        assert_eq!(
            since,
            std::time::UNIX_EPOCH + Duration::from_millis(since_ms)
        );
        // Recorded when the holder began its attempt, to the millisecond.
        assert!(
            since + Duration::from_millis(1) >= before && since <= after,
            "{since:?}"
        );
        // The row keeps the holder's fencing token.
        assert_eq!(blocker.fencing_token, Some(guard.fencing_token()));
        let shown = err.to_string();
        assert!(shown.contains("app \"billing\""), "{shown}");
        assert!(
            shown.contains(&format!("[fencing token {}]", guard.fencing_token())),
            "{shown}"
        );
        for text in [&shown, &format!("{err:?}")] {
            assert!(
                !text.contains(token.as_str()),
                "the owner token shown: {text}"
            );
        }
    }
    let inspect = holder.inspect().expect("an inspection side");
    let listed = inspect.list("lock:", "invoice:*").await.expect("list");
    let err = busy(&waiter, "invoice:7", LockOptions::new()).await;
    assert_eq!(
        listed[0].holder_id.as_ref(),
        blocker_of(&err).map(|blocker| &blocker.holder_id)
    );
    guard.release().await.expect("release");
}

/// A holder built with `holder_metadata(false)` records nothing: a busy answer names nobody,
/// the row's columns are NULL, and inspection shows no host, pid or app.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_answer_names_nobody_when_the_holder_records_nothing() {
    let server = PostgresServer::start();
    let holder = LockManager::builder()
        .url(server.url())
        .app_name("billing")
        .holder_metadata(false)
        .build()
        .await
        .expect("build");
    let waiter = LockManager::connect(&server.url()).await.expect("connect");
    let guard = holder
        .lock("invoice:8", LockOptions::new())
        .await
        .expect("free");
    let row = recorded_row(&server);
    assert_eq!(row[1..], ["-", "-", "-", "-"], "{row:?}");
    for options in [
        LockOptions::new(),
        LockOptions::new().wait(Duration::from_millis(300)),
    ] {
        let err = busy(&waiter, "invoice:8", options).await;
        assert!(blocker_of(&err).is_none(), "{err:?}");
        assert!(!err.to_string().contains("held by"), "{err}");
    }
    let inspect = holder.inspect().expect("an inspection side");
    let listed = inspect.list("lock:", "invoice:*").await.expect("list");
    let seen = &listed[0];
    assert_eq!((&seen.host, seen.pid, &seen.app), (&None, None, &None));
    assert_eq!(seen.since_ms, None);
    assert!(seen.holder_id.is_some(), "{seen:?}");
    guard.release().await.expect("release");
}

/// Inspection shows what the holder recorded (host, pid, app, since) and the holder id of 12
/// hex digits that a Redis lock gives for the same owner token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspection_shows_what_the_holder_recorded() {
    let server = PostgresServer::start();
    let locks = LockManager::builder()
        .url(server.url())
        .app_name("orders")
        .build()
        .await
        .expect("build");
    let held = locks
        .lock("order:43", LockOptions::new())
        .await
        .expect("free");
    let row = recorded_row(&server);
    let inspect = locks.inspect().expect("an inspection side");
    let listed = inspect.list("lock:", "order:*").await.expect("list");
    let shown = inspect.show("lock:", "order:43").await.expect("show");
    for seen in [&listed[0], &shown[0]] {
        assert_eq!(
            seen.holder_id,
            Some(lock_runtime::inspect::token_id(&row[0])),
            "{seen:?}"
        );
        assert_eq!(seen.host.as_ref(), Some(&row[1]), "{seen:?}");
        assert_eq!(seen.pid, Some(u64::from(std::process::id())), "{seen:?}");
        assert_eq!(seen.app.as_deref(), Some("orders"), "{seen:?}");
        assert_eq!(seen.since_ms.map(|ms| ms.to_string()), Some(row[4].clone()));
        assert!(seen.age_ms.is_some_and(|age| age < 60_000), "{seen:?}");
    }
    held.release().await.expect("release");
}

/// A store made by `PostgresStore::connect` records this process's host and pid, no app, and
/// the time the attempt began as the caller gave it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_made_directly_records_host_and_pid() {
    let server = PostgresServer::start();
    let store = PostgresStore::connect(&server.url(), Duration::from_secs(5))
        .await
        .expect("connect");
    let k = key("direct");
    let since_ms = 1_764_045_123_456;
    let ask = Ask {
        since_ms,
        ..Ask::default()
    };
    let ttl = Duration::from_secs(30);
    let fence = match store.acquire(&k, "mine", ttl, ask).await.expect("free") {
        Acquire::Acquired { fence } => fence,
        other => panic!("not taken: {other:?}"),
    };
    let busy = store
        .acquire(&k, "theirs", ttl, Ask::default())
        .await
        .expect("ask");
    let Acquire::Busy {
        blocker: Some(blocker),
        ..
    } = busy
    else {
        panic!("names no holder: {busy:?}");
    };
    assert_eq!(blocker.holder_id, lock_runtime::inspect::token_id("mine"));
    assert_eq!(blocker.pid, Some(std::process::id()));
    assert!(blocker.host.is_some(), "{blocker:?}");
    assert_eq!(blocker.app, None);
    assert_eq!(
        blocker.since,
        Some(std::time::UNIX_EPOCH + Duration::from_millis(since_ms))
    );
    assert_eq!(blocker.fencing_token, Some(fence));
}

/// The watchdog's renewals move the lease's end and keep what the row records of its holder.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewal_keeps_the_holder_record() {
    let server = PostgresServer::start();
    let locks = LockManager::builder()
        .url(server.url())
        .app_name("orders")
        .build()
        .await
        .expect("build");
    let held = locks
        .lock("order:44", LockOptions::new().ttl(Duration::from_secs(2)))
        .await
        .expect("free");
    let recorded = recorded_row(&server);
    let ends = || -> i64 {
        server
            .psql("SELECT (extract(epoch FROM expires_at) * 1000)::bigint FROM lock_runtime_locks")
            .trim()
            .parse()
            .expect("a number")
    };
    let first = ends();
    let renewed = wait_until_async(Duration::from_secs(20), || ends() > first).await;
    assert!(renewed, "the lease was never renewed");
    assert_eq!(recorded_row(&server), recorded);
    held.release().await.expect("release");
}

/// A manager over an application's pool records its `app_name` too, and a waiter over the same
/// pool is told who holds the lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_manager_over_an_applications_pool_records_its_app_name() {
    let server = PostgresServer::start();
    let pool = sqlx::PgPool::connect(&server.url()).await.expect("pool");
    let holder = LockManager::builder()
        .postgres(pool.clone())
        .app_name("reports")
        .build()
        .await
        .expect("build");
    let waiter = LockManager::builder()
        .postgres(pool)
        .build()
        .await
        .expect("build");
    let guard = holder
        .lock("report:1", LockOptions::new())
        .await
        .expect("free");
    let err = busy(&waiter, "report:1", LockOptions::new()).await;
    let blocker = blocker_of(&err).unwrap_or_else(|| panic!("names its holder: {err:?}"));
    assert_eq!(blocker.app.as_deref(), Some("reports"));
    assert_eq!(blocker.pid, Some(std::process::id()));
    guard.release().await.expect("release");
}

/// The published records under `name` on `server`, as `id` per line, in id order.
fn record_ids(server: &PostgresServer, name: &str) -> String {
    server.psql(&format!(
        "SELECT string_agg(id, ',' ORDER BY id) FROM lock_runtime_records WHERE name = '{name}'"
    ))
}

/// One step of the records function, as a store's `waits` sends it: `set` as `(id, record)`,
/// kept `keep_ms`, read back or not.
fn records_step(server: &PostgresServer, name: &str, set: &[(&str, &str)], keep_ms: u64) {
    let ids: Vec<String> = set.iter().map(|(id, _)| format!("'{id}'")).collect();
    let records: Vec<String> = set.iter().map(|(_, text)| format!("'{text}'")).collect();
    server.psql(&format!(
        "SELECT count(*) FROM lock_runtime_records_update('{name}', 1, 1, \
         ARRAY[{}]::text[], ARRAY[{}]::text[], ARRAY[]::text[], {keep_ms}, false)",
        ids.join(", "),
        records.join(", ")
    ));
}

/// A published wait whose process stops writing it is no longer answered once its `keep` has
/// passed by the database's clock, though the record's own deadline is far off; the next
/// write under the name deletes it rather than keeping it alive.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn published_records_expire_when_not_written_again() {
    let server = PostgresServer::start();
    let locks = LockManager::connect(&server.url())
        .await
        .unwrap_or_else(|err| panic!("{err}\n{}", server.log()));
    let far = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after the epoch")
        .as_millis()
        + 600_000;
    let name = "lock:waits:{waits}";
    let record = format!("waits=lock:{{a}} since=1 at=1 until={far} fail=0");
    records_step(&server, name, &[("00aa", &record)], 1_500);
    let inspect = locks.inspect().expect("inspectable");
    let listed = inspect.waits("lock:").await.expect("read the waits");
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0].waits_for, "lock:{a}");
    let deadline = Instant::now() + Duration::from_secs(20);
    while !inspect.waits("lock:").await.expect("read").is_empty() {
        assert!(Instant::now() < deadline, "the record stands on");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    records_step(&server, name, &[("00bb", &record)], 60_000);
    assert_eq!(
        record_ids(&server, name),
        "00bb",
        "the expired record is gone"
    );
    let listed = inspect.waits("lock:").await.expect("read the waits");
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0].waiter, "00bb");
}

/// A write under a name moves the expiry of every record of the name, as the Redis hash's
/// PEXPIRE does; of two records of one id in one write, the last is kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_keeps_every_record_of_its_name() {
    let server = PostgresServer::start();
    LockManager::connect(&server.url())
        .await
        .unwrap_or_else(|err| panic!("{err}\n{}", server.log()));
    records_step(&server, "n", &[("1", "first")], 20_000);
    records_step(&server, "n", &[("2", "second"), ("2", "again")], 60_000);
    assert_eq!(
        server.psql(
            "SELECT count(*) FROM lock_runtime_records WHERE name = 'n' \
             AND expires > clock_timestamp() + interval '40 seconds'"
        ),
        "2",
        "the first record's expiry moved with the second write"
    );
    assert_eq!(
        server.psql(
            "SELECT string_agg(id || '=' || record, ',' ORDER BY id) FROM \
             lock_runtime_records_update('n', 1, 1, ARRAY[]::text[], ARRAY[]::text[], \
             ARRAY['3']::text[], 0, true)"
        ),
        "1=first,2=again",
        "both stand; the last of one id was kept"
    );
}

/// The schema of the version before published records: no `lock_runtime_records`.
const BEFORE_RECORDS: &str = include_str!("postgres_schemas/before_records.sql");

/// A database of the version before published records, holding a live lock: with
/// `create_tables=false` connect asks for the records' function; by default it adds the table
/// and the function, keeps the row busy, and elections list their candidates by priority.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_upgrades_a_database_of_the_version_before_records() {
    let server = PostgresServer::start();
    server.psql(BEFORE_RECORDS);
    server.psql(
        "SELECT * FROM lock_runtime_acquire('lock:{old}', 'an-old-token', 5, 100000, 0, 0, \
         NULL, NULL, NULL, NULL, false, false)",
    );
    let kept = with_query(&server.url(), "create_tables=false");
    let err = LockManager::connect(&kept).await.expect_err("no records");
    assert!(
        err.to_string().contains("lock_runtime_records_update("),
        "{err}"
    );
    let connect = |app: &'static str| {
        let url = server.url();
        async move {
            LockManager::builder()
                .url(url)
                .app_name(app)
                .build()
                .await
                .expect("connect")
        }
    };
    let (low, high) = (connect("low").await, connect("high").await);
    let err = busy(&low, "old", LockOptions::new()).await;
    assert!(err.is_busy(), "{err}");
    let options = lock_runtime::ElectionOptions::new().ttl(Duration::from_secs(30));
    let first = low.elect("jobs", options.priority(1)).expect("campaign");
    let second = high.elect("jobs", options.priority(7)).expect("campaign");
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let listed = low.candidates("jobs").await.expect("read the candidates");
        let apps: Vec<_> = listed.iter().map(|c| (c.app.clone(), c.priority)).collect();
        if apps == [(Some("high".to_owned()), 7), (Some("low".to_owned()), 1)] {
            break;
        }
        assert!(Instant::now() < deadline, "{apps:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    drop((first, second));
    LockManager::connect(&kept)
        .await
        .expect("the schema is current");
}
