//! Control over a lock's holder on the PostgreSQL store, against real servers: a release
//! request and a steal told by NOTIFY to the holder's manager (another manager, its own pool),
//! directly and through PgBouncer in transaction mode, the steal's refusal of a transaction's
//! lock, the listening connection made again after it was cut, and the upgrade of a database
//! made by the version before steals.

use std::sync::Arc;
use std::time::{Duration, Instant};

use lock_runtime::fence::{self, Fence, FenceError};
use lock_runtime::postgres::{PostgresStore, lock_in_transaction};
use lock_runtime::store::{Acquire, Ask, HolderId, Key, Notice, NoticeKind, Shape, Store};
use lock_runtime::{LockError, LockManager, LockOptions, LostReason};
use lock_tests::{FaultProxy, PgBouncer, PostgresServer, encoded, wait_until_async};
use sqlx::postgres::{PgConnectOptions, PgListener, PgPool, PgPoolOptions};

/// How long a notice may take to reach the holder before the test fails: the measured
/// latency is printed, the bound is only patience on a loaded machine.
const PATIENCE: Duration = Duration::from_secs(10);

/// The channel of notices of the tables in the schema `public`.
const NOTICES: &str = "lock_runtime_notices.public";

/// The schema as the version before steals made it: no `lock_runtime_steal`.
const BEFORE_STEAL: &str = include_str!("postgres_schemas/before_steal.sql");

/// A lock held for longer than any test runs, renewed or not.
fn long() -> LockOptions {
    LockOptions::new().ttl(Duration::from_secs(30))
}

/// Through `bouncer`, listening on a direct connection to `server`.
fn bounced_with_listen_url(server: &PostgresServer, bouncer: &PgBouncer) -> String {
    format!(
        "{}?listen_url={}&poll_ms=600000",
        bouncer.url(),
        encoded(&server.url())
    )
}

async fn manager(url: &str, server: &PostgresServer) -> LockManager {
    LockManager::connect(url)
        .await
        .unwrap_or_else(|err| panic!("connect: {err}\n{}", server.log()))
}

/// A pool that keeps no prepared statements (PgBouncer-safe).
async fn pool(url: &str) -> PgPool {
    let options: PgConnectOptions = url.parse().expect("a postgres url");
    PgPoolOptions::new()
        .max_connections(2)
        .connect_with(options.statement_cache_capacity(0))
        .await
        .expect("pool")
}

/// Claims `fence` in a transaction of its own through the fence table, and commits.
async fn claim(pool: &PgPool, fence: &Fence) -> Result<(), FenceError> {
    let mut tx = pool.begin().await.expect("begin");
    let claimed = fence::postgres::claim(&mut tx, fence).await;
    tx.commit().await.expect("commit");
    claimed
}

/// The fencing token of the row of `key`, as the server has it.
fn row_fence(server: &PostgresServer, key: &str) -> String {
    server.psql(&format!(
        "SELECT fence FROM lock_runtime_locks WHERE name = 'lock:{{{key}}}'"
    ))
}

/// A holder over `holder_url` is asked to release by a manager over `asker_url`: its
/// `release_requested()` resolves with who asked.
async fn request_reaches_holder(
    server: &PostgresServer,
    holder_url: &str,
    asker_url: &str,
    route: &str,
) {
    let holder = manager(holder_url, server).await;
    let asker = manager(asker_url, server).await;
    let guard = holder.lock("report", long()).await.expect("free");
    let began = Instant::now();
    asker
        .request_release("report", "deploying 2.4")
        .await
        .unwrap_or_else(|err| panic!("request: {err}\n{}", server.log()));
    let asked = Instant::now();
    let request = tokio::time::timeout(PATIENCE, guard.release_requested())
        .await
        .unwrap_or_else(|_| panic!("the holder never heard the request\n{}", server.log()));
    eprintln!(
        "{route}: release request heard by the holder {:?} after request_release returned \
         ({:?} after it was called)",
        asked.elapsed(),
        began.elapsed()
    );
    assert_eq!(request.key(), "report");
    assert!(request.from().ends_with("deploying 2.4"), "{request}");
    assert!(
        request
            .from()
            .contains(&format!("pid {}", std::process::id())),
        "{request}"
    );
    assert!(guard.is_held(), "a request leaves the lock held");
    guard.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_request_from_another_manager_reaches_the_holder() {
    let server = PostgresServer::start();
    request_reaches_holder(&server, &server.url(), &server.url(), "direct").await;
}

/// The connection the holder's store LISTENs on is slow (over a second each way, as on a
/// loaded machine or a long link): connect still hears its own check notification on it, so
/// the store listens, and hears notices, rather than falling back to polling for good.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_listening_connection_still_hears_release_requests() {
    let server = PostgresServer::start();
    let slow = FaultProxy::start(server.addr());
    slow.set_delay(Duration::from_millis(1200));
    let holder_url = format!(
        "{}?listen_url={}",
        server.url(),
        encoded(&PostgresServer::url_at(slow.addr()))
    );
    request_reaches_holder(&server, &holder_url, &server.url(), "slow listen").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn through_pgbouncer_with_a_listen_url_a_release_request_reaches_the_holder() {
    let server = PostgresServer::start();
    let bouncer = PgBouncer::start(&server);
    let url = bounced_with_listen_url(&server, &bouncer);
    request_reaches_holder(&server, &url, &url, "pgbouncer with listen_url").await;
}

/// A victim over `url` holds `report` and claimed its fence; a thief over `url` steals it: a
/// greater fencing token, the victim's lease lost as stolen at once, its release refused
/// without touching the thief's row, a third manager busy, the victim's fenced write stale.
async fn steal_takes_the_lock_from_its_holder(server: &PostgresServer, url: &str, route: &str) {
    let (victim, thief, third) = (
        manager(url, server).await,
        manager(url, server).await,
        manager(url, server).await,
    );
    let data = pool(&server.url()).await;
    fence::postgres::FenceTable::default()
        .create_if_missing(&mut data.acquire().await.expect("connection"))
        .await
        .expect("fence table");
    let held = victim.lock("report", long()).await.expect("free");
    let victims = Fence::new("report", held.fencing_token());
    claim(&data, &victims).await.expect("the victim's claim");

    let began = Instant::now();
    let stolen = thief
        .steal("report", long(), "stuck for an hour")
        .await
        .unwrap_or_else(|err| panic!("steal: {err}\n{}", server.log()));
    let took = Instant::now();
    assert!(stolen.fencing_token() > held.fencing_token());
    let reason = tokio::time::timeout(PATIENCE, held.lost())
        .await
        .unwrap_or_else(|_| panic!("the victim never heard the steal\n{}", server.log()));
    eprintln!(
        "{route}: steal heard by the victim {:?} after steal returned ({:?} after it was \
         called)",
        took.elapsed(),
        began.elapsed()
    );
    assert_eq!(reason, LostReason::Stolen);

    let released = held.release().await;
    assert!(
        matches!(released, Err(LockError::LeaseLost { .. })),
        "{released:?}"
    );
    assert_eq!(
        row_fence(server, "report"),
        stolen.fencing_token().to_string(),
        "the thief's row stays"
    );
    let busy = third.lock("report", LockOptions::new()).await;
    assert!(
        busy.is_err_and(|err| err.is_busy()),
        "a third manager is let in"
    );

    claim(&data, &Fence::new("report", stolen.fencing_token()))
        .await
        .expect("the thief's claim");
    let late = claim(&data, &victims).await;
    assert!(matches!(late, Err(FenceError::Stale { .. })), "{late:?}");
    stolen.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_steal_from_another_manager_takes_the_lock_and_the_victim_loses_it_at_once() {
    let server = PostgresServer::start();
    steal_takes_the_lock_from_its_holder(&server, &server.url(), "direct").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn through_pgbouncer_with_a_listen_url_a_steal_is_heard_at_once() {
    let server = PostgresServer::start();
    let bouncer = PgBouncer::start(&server);
    let url = bounced_with_listen_url(&server, &bouncer);
    steal_takes_the_lock_from_its_holder(&server, &url, "pgbouncer with listen_url").await;
}

/// Through PgBouncer in transaction mode without a URL to LISTEN on, the store hears no
/// notices and says so: a release request is refused as a configuration error. A steal still
/// takes the lock; its victim loses its lease at its next renewal instead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn through_pgbouncer_without_a_listen_url_notices_are_not_carried_and_a_victim_loses_at_renewal()
 {
    let server = PostgresServer::start();
    let bouncer = PgBouncer::start(&server);
    let store = PostgresStore::connect(&bouncer.url(), Duration::from_secs(5))
        .await
        .expect("connect");
    assert!(!store.listens());
    assert!(!store.announces() && store.steals());
    let (victim, thief) = (
        manager(&bouncer.url(), &server).await,
        manager(&bouncer.url(), &server).await,
    );
    let short = LockOptions::new().ttl(Duration::from_secs(3));
    let held = victim.lock("report", short).await.expect("free");
    let refused = thief.request_release("report", "deploying").await;
    assert!(
        matches!(&refused, Err(LockError::Config(said)) if said.contains("carries no notices")),
        "{refused:?}"
    );
    let stolen = thief
        .steal("report", long(), "stuck")
        .await
        .unwrap_or_else(|err| panic!("steal: {err}\n{}", server.log()));
    let took = Instant::now();
    assert!(stolen.fencing_token() > held.fencing_token());
    let reason = tokio::time::timeout(PATIENCE, held.lost())
        .await
        .unwrap_or_else(|_| panic!("the victim never lost its lease\n{}", server.log()));
    eprintln!(
        "pgbouncer without listen_url: the victim lost its lease ({reason:?}) {:?} after the steal, at its renewal",
        took.elapsed()
    );
    stolen.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transaction_lock_cannot_be_stolen() {
    let server = PostgresServer::start();
    let thief = manager(&server.url(), &server).await;
    let app = pool(&server.url()).await;
    let mut tx = app.begin().await.expect("begin");
    lock_in_transaction(&mut tx, "ledger:7")
        .await
        .expect("the transaction's lock");
    let refused = thief
        .steal("ledger:7", long(), "stuck")
        .await
        .expect_err("a transaction's lock is not stolen");
    let said = refused.to_string();
    assert!(
        said.contains("lock:{ledger:7}") && said.contains("transaction"),
        "{said}"
    );
    tx.commit().await.expect("commit");
    let stolen = thief
        .steal("ledger:7", long(), "free now")
        .await
        .expect("once the transaction ended");
    stolen.release().await.expect("release");
}

/// Whether the server shows a connection that LISTENs on the channel of notices and is idle
/// (its LISTEN done).
fn listening(server: &PostgresServer, before: &str) -> bool {
    let pids = server.psql(&format!(
        "SELECT string_agg(pid::text, ',') FROM pg_stat_activity \
         WHERE state = 'idle' AND query LIKE 'LISTEN%{NOTICES}%' \
         AND pid::text <> ALL (string_to_array('{before}', ','))"
    ));
    !pids.is_empty()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listening_connection_that_was_cut_hears_notices_again_once_made_again() {
    let server = PostgresServer::start();
    let holder = manager(&server.url(), &server).await;
    let asker = manager(&server.url(), &server).await;
    let guard = holder.lock("report", long()).await.expect("free");
    let before = server.psql(&format!(
        "SELECT string_agg(pid::text, ',') FROM pg_stat_activity WHERE query LIKE 'LISTEN%{NOTICES}%'"
    ));
    assert!(!before.is_empty(), "nothing listens\n{}", server.log());
    assert!(server.terminate_connections() > 0);
    let again = wait_until_async(PATIENCE, || listening(&server, &before)).await;
    assert!(again, "the feed never listened again\n{}", server.log());
    asker
        .request_release("report", "after the cut")
        .await
        .unwrap_or_else(|err| panic!("request: {err}\n{}", server.log()));
    let asked = Instant::now();
    let request = tokio::time::timeout(PATIENCE, guard.release_requested())
        .await
        .unwrap_or_else(|_| panic!("not heard after the feed reconnected\n{}", server.log()));
    eprintln!(
        "direct, after the reconnect: release request heard {:?} after request_release returned",
        asked.elapsed()
    );
    assert!(request.from().ends_with("after the cut"), "{request}");
    guard.release().await.expect("release");
}

/// A key with spaces and characters of more than one byte, whose length in the notice is in
/// bytes.
fn odd_key() -> Key {
    Key::new("lock:", "stück 7", Shape::Lock).expect("a valid key")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_notice_the_database_writes_for_a_steal_reads_back_with_notice_decode() {
    let server = PostgresServer::start();
    let store = PostgresStore::connect(&server.url(), Duration::from_secs(5))
        .await
        .expect("connect");
    let mut listener = PgListener::connect(&server.url()).await.expect("listener");
    listener.listen(NOTICES).await.expect("listen");
    let key = odd_key();
    let minute = Duration::from_secs(60);
    let taken = store
        .acquire(&key, "the victim's token", minute, Ask::default())
        .await
        .expect("free");
    assert!(matches!(taken, Acquire::Acquired { .. }), "{taken:?}");
    let text = "ops on web-1 pid 7: stück";
    let stolen = store
        .steal(&key, "the thief's token", minute, text)
        .await
        .expect("steal");
    let victim = HolderId::of_token("the victim's token");
    assert_eq!(stolen.victim, Some(victim));
    let note = tokio::time::timeout(PATIENCE, listener.recv())
        .await
        .expect("a notification")
        .expect("the listener");
    let expected = Notice::new(NoticeKind::Stolen, key.name(), Some(victim), text);
    assert_eq!(note.payload(), expected.encode());
    assert_eq!(Notice::decode(note.payload()), Some(expected));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_notice_too_long_for_a_notification_is_refused_with_a_store_error() {
    let server = PostgresServer::start();
    let store = PostgresStore::connect(&server.url(), Duration::from_secs(5))
        .await
        .expect("connect");
    let key = Key::new("lock:", &"k".repeat(8000), Shape::Lock).expect("a valid key");
    let minute = Duration::from_secs(60);
    let taken = store
        .acquire(&key, "holder", minute, Ask::default())
        .await
        .expect("free");
    assert!(matches!(taken, Acquire::Acquired { .. }), "{taken:?}");
    let notice = Notice::new(NoticeKind::ReleaseRequested, key.name(), None, "ops");
    let refused = store.announce(&notice).await.expect_err("too long");
    assert!(refused.to_string().contains("7999 bytes"), "{refused}");
    let refused = store
        .steal(&key, "thief", minute, "ops")
        .await
        .expect_err("too long to tell");
    assert!(refused.to_string().contains("shorter key"), "{refused}");
    let still = store
        .acquire(&key, "holder", minute, Ask::default())
        .await
        .expect("ask");
    assert!(
        matches!(still, Acquire::Acquired { .. }),
        "a refused steal took nothing: {still:?}"
    );
}

/// A database of the version before steals, holding a live lock: with `create_tables=false`
/// connect asks for the new function; by default it adds it, and the old row is stolen from
/// its holder, named by the id the old acquire recorded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_upgrades_a_database_of_the_version_before_steals() {
    let server = PostgresServer::start();
    server.psql(BEFORE_STEAL);
    let victim = HolderId::of_token("an-old-token");
    server.psql(&format!(
        "SELECT * FROM lock_runtime_acquire('lock:{{old}}', 'an-old-token', {}, 100000, 0, 0, \
         NULL, NULL, NULL, NULL, false, false)",
        victim.get()
    ));
    let kept = format!("{}?create_tables=false", server.url());
    let err = LockManager::connect(&kept).await.expect_err("no steal");
    assert!(err.to_string().contains("lock_runtime_steal("), "{err}");
    let store = PostgresStore::connect(&server.url(), Duration::from_secs(5))
        .await
        .unwrap_or_else(|err| panic!("{err}\n{}", server.log()));
    let key = Key::new("lock:", "old", Shape::Lock).expect("a valid key");
    let stolen = store
        .steal(&key, "a-new-token", Duration::from_secs(60), "ops")
        .await
        .expect("steal");
    assert_eq!(stolen.victim, Some(victim));
    let store = Arc::new(store);
    let locks = LockManager::builder()
        .store(store)
        .build()
        .await
        .expect("build");
    let busy = locks.lock("old", LockOptions::new()).await;
    assert!(busy.is_err_and(|err| err.is_busy()));
    LockManager::connect(&kept)
        .await
        .expect("the functions are current");
}
