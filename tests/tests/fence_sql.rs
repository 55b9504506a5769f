//! The fences on SQL (`lock_runtime::fence::postgres`, `fence::sqlite`) and the PostgreSQL
//! store's transaction lock that claims, against real servers: a PostgreSQL of its own per
//! test (PgBouncer in transaction mode in front where the test says), SQLite in a temp file.

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use lock_runtime::fence::postgres::FenceTable;
use lock_runtime::fence::{self, Fence, FenceError};
use lock_runtime::postgres::{
    SCHEMA_SQL, lock_and_claim_in_transaction, lock_and_claim_in_transaction_under,
    lock_in_transaction,
};
use lock_runtime::{LockError, LockManager, LockOptions, distributed_lock};
use lock_tests::{FaultProxy, PgBouncer, PostgresServer};
use sqlx::Connection;
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use sqlx::sqlite::{SqliteConnectOptions, SqliteConnection, SqliteJournalMode};

/// A claim waiting for another's transaction shows up as waiting within this.
const SOON: Duration = Duration::from_secs(10);

/// A pool on `url` whose connections keep no prepared statements (PgBouncer-safe).
async fn pool(url: &str) -> PgPool {
    let options: PgConnectOptions = url.parse().expect("a postgres url");
    PgPoolOptions::new()
        .max_connections(4)
        .connect_with(options.statement_cache_capacity(0))
        .await
        .expect("pool")
}

/// A server with the lock store's tables, the default fence table, an `outbox` and an `accounts` table holding account 7 at 100.
async fn server_with_tables() -> (PostgresServer, PgPool) {
    let server = PostgresServer::start();
    let pool = pool(&server.url()).await;
    let mut conn = pool.acquire().await.expect("connection");
    fence::postgres::FenceTable::default()
        .create_if_missing(&mut conn)
        .await
        .expect("fence table");
    // The lock store's tables, as a migration would make them.
    sqlx::raw_sql(SCHEMA_SQL)
        .execute(&mut *conn)
        .await
        .expect("lock tables");
    sqlx::raw_sql(
        "CREATE TABLE accounts (id bigint PRIMARY KEY, balance bigint NOT NULL, writer text);
         INSERT INTO accounts VALUES (7, 100, NULL);
         CREATE TABLE outbox (id bigserial PRIMARY KEY, topic text NOT NULL, payload text NOT NULL)",
    )
    .execute(&mut *conn)
    .await
    .expect("accounts");
    (server, pool)
}

/// Claims `fence` in a transaction of its own and commits: a holder's claim before its read.
async fn claim_committed(pool: &PgPool, fence: &Fence) -> Result<(), FenceError> {
    let mut tx = pool.begin().await.expect("begin");
    let claimed = fence::postgres::claim(&mut tx, fence).await;
    tx.commit().await.expect("commit");
    claimed
}

async fn current(pool: &PgPool, resource: &str) -> Option<u64> {
    let mut conn = pool.acquire().await.expect("connection");
    fence::postgres::FenceTable::default()
        .current(&mut conn, resource)
        .await
        .expect("read the fence")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_raises_the_fence_and_a_lower_token_is_refused_as_stale() {
    let (_server, pool) = server_with_tables().await;
    assert_eq!(current(&pool, "account:7").await, None);
    claim_committed(&pool, &Fence::new("account:7", 5))
        .await
        .expect("first claim");
    assert_eq!(current(&pool, "account:7").await, Some(5));
    claim_committed(&pool, &Fence::new("account:7", 5))
        .await
        .expect("the same token again");
    let refused = claim_committed(&pool, &Fence::new("account:7", 3)).await;
    assert!(
        matches!(&refused, Err(FenceError::Stale { resource, current: 5, offered: 3 })
            if resource == "account:7"),
        "{refused:?}"
    );
    assert_eq!(
        current(&pool, "account:7").await,
        Some(5),
        "a refusal lowers nothing"
    );
    claim_committed(&pool, &Fence::new("account:7", 8))
        .await
        .expect("a newer holder");
    assert_eq!(current(&pool, "account:7").await, Some(8));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_handed_out_twice_claims_once() {
    let (_server, pool) = server_with_tables().await;
    let first = Fence::new("account:7", 5).held_by("first");
    let again = Fence::new("account:7", 5).held_by("again");
    claim_committed(&pool, &first).await.expect("first claim");
    claim_committed(&pool, &first)
        .await
        .expect("its own claim, again");
    let refused = claim_committed(&pool, &again).await;
    assert!(
        matches!(
            refused,
            Err(FenceError::Stale {
                current: 5,
                offered: 5,
                ..
            })
        ),
        "{refused:?}"
    );
    let mut tx = pool.begin().await.expect("begin");
    fence::postgres::check(&mut tx, &first)
        .await
        .expect("the first's");
    let refused = fence::postgres::check(&mut tx, &again).await;
    assert!(
        matches!(refused, Err(FenceError::Stale { .. })),
        "{refused:?}"
    );
    tx.rollback().await.expect("rollback");
    claim_committed(&pool, &Fence::new("account:7", 6).held_by("again"))
        .await
        .expect("a newer token takes it over");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_check_holds_only_at_the_claimed_token() {
    let (_server, pool) = server_with_tables().await;
    let check = |token: u64| {
        let pool = pool.clone();
        async move {
            let mut tx = pool.begin().await.expect("begin");
            let checked = fence::postgres::check(&mut tx, &Fence::new("account:7", token)).await;
            tx.rollback().await.expect("rollback");
            checked
        }
    };
    let never = check(5).await;
    assert!(
        matches!(
            never,
            Err(FenceError::NotClaimed {
                current: None,
                offered: 5,
                ..
            })
        ),
        "{never:?}"
    );
    claim_committed(&pool, &Fence::new("account:7", 5))
        .await
        .expect("claim");
    check(5).await.expect("claimed by 5");
    let lower = check(4).await;
    assert!(
        matches!(
            lower,
            Err(FenceError::Stale {
                current: 5,
                offered: 4,
                ..
            })
        ),
        "{lower:?}"
    );
    let higher = check(6).await;
    assert!(
        matches!(
            higher,
            Err(FenceError::NotClaimed {
                current: Some(5),
                offered: 6,
                ..
            })
        ),
        "{higher:?}"
    );
}

/// Backends of the server waiting on a row lock.
async fn waiting_on_a_lock(pool: &PgPool) -> i64 {
    sqlx::raw_sql(
        "SELECT count(*) AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock' \
         AND datname = current_database()",
    )
    .fetch_one(pool)
    .await
    .map(|row| sqlx::Row::get::<i64, _>(&row, "n"))
    .expect("pg_stat_activity")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_claim_waits_for_the_first_commit_then_is_refused_if_lower() {
    let (_server, pool) = server_with_tables().await;
    let mut first = pool.begin().await.expect("begin");
    fence::postgres::claim(&mut first, &Fence::new("account:7", 10))
        .await
        .expect("first claim");

    let second_pool = pool.clone();
    let second = tokio::spawn(async move {
        let mut tx = second_pool.begin().await.expect("begin");
        let claimed = fence::postgres::claim(&mut tx, &Fence::new("account:7", 9)).await;
        tx.rollback().await.expect("rollback");
        claimed
    });
    let deadline = Instant::now() + SOON;
    while waiting_on_a_lock(&pool).await == 0 {
        assert!(
            Instant::now() < deadline,
            "the second claim did not wait on the first's row"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        !second.is_finished(),
        "the second claim went through the first's row lock"
    );
    sqlx::query("UPDATE accounts SET balance = 110 WHERE id = 7")
        .execute(&mut *first)
        .await
        .expect("write");
    first.commit().await.expect("commit");
    let refused = second.await.expect("second task");
    assert!(
        matches!(
            refused,
            Err(FenceError::Stale {
                current: 10,
                offered: 9,
                ..
            })
        ),
        "{refused:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_above_bigint_is_refused_before_reaching_the_database() {
    let (_server, pool) = server_with_tables().await;
    let huge = Fence::new("account:7", u64::MAX);
    let mut tx = pool.begin().await.expect("begin");
    for answer in [
        fence::postgres::claim(&mut tx, &huge).await,
        fence::postgres::check(&mut tx, &huge).await,
    ] {
        assert!(
            matches!(
                answer,
                Err(FenceError::TokenRange {
                    offered: u64::MAX,
                    ..
                })
            ),
            "{answer:?}"
        );
    }
    tx.commit().await.expect("the transaction is untouched");
    assert_eq!(current(&pool, "account:7").await, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_table_name_that_could_reach_the_sql_is_refused_and_a_qualified_one_works() {
    for bad in [
        "fences; DROP TABLE accounts",
        "\"fences\"",
        "Fences",
        "a.b.c",
        "fen ces",
    ] {
        let err = FenceTable::new(bad).expect_err(bad);
        assert!(matches!(err, LockError::Config(_)), "{bad}: {err}");
        assert!(err.to_string().contains("refused"), "{err}");
    }
    let (_server, pool) = server_with_tables().await;
    let mut conn = pool.acquire().await.expect("connection");
    sqlx::raw_sql("CREATE SCHEMA billing")
        .execute(&mut *conn)
        .await
        .expect("schema");
    let table = FenceTable::new("billing.fences").expect("qualified");
    table.create_if_missing(&mut conn).await.expect("create");
    let fence = Fence::new("invoice:1", 3);
    table.claim(&mut conn, &fence).await.expect("claim");
    assert_eq!(
        table.current(&mut conn, "invoice:1").await.expect("read"),
        Some(3)
    );
    assert_eq!(
        current(&pool, "invoice:1").await,
        None,
        "the default table is another one"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_error_is_a_store_error_naming_the_resource_and_step() {
    let server = PostgresServer::start();
    let pool = pool(&server.url()).await;
    let mut tx = pool.begin().await.expect("begin");
    let err = fence::postgres::claim(&mut tx, &Fence::new("cart:1", 1))
        .await
        .expect_err("no fence table");
    assert!(
        matches!(&err, FenceError::Store { resource, store, .. }
            if resource == "cart:1" && store == "postgres: claim"),
        "{err:?}"
    );
    assert!(err.to_string().contains("lock_fences"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_and_checks_work_through_pgbouncer_in_transaction_mode() {
    let (server, _direct) = server_with_tables().await;
    let bouncer = PgBouncer::start(&server);
    let pool = pool(&bouncer.url()).await;
    let log = || format!("{}\n{}", server.log(), bouncer.log());
    for token in 1..=20u64 {
        let fence = Fence::new("account:7", token);
        let mut tx = pool.begin().await.expect("begin");
        fence::postgres::claim(&mut tx, &fence)
            .await
            .unwrap_or_else(|err| panic!("claim {token}: {err}\n{}", log()));
        fence::postgres::check(&mut tx, &fence)
            .await
            .unwrap_or_else(|err| panic!("check {token}: {err}\n{}", log()));
        tx.commit().await.expect("commit");
        // Outside a transaction too: each statement is one message.
        let mut conn = pool.acquire().await.expect("connection");
        let stale = fence::postgres::claim(&mut conn, &Fence::new("account:7", token - 1)).await;
        assert!(
            matches!(stale, Err(FenceError::Stale { .. })),
            "{stale:?}\n{}",
            log()
        );
    }
    // In a task of its own: the futures are `Send`.
    let spawned = pool.clone();
    let lock = tokio::spawn(async move {
        let mut tx = spawned.begin().await.expect("begin");
        let lock = lock_and_claim_in_transaction(&mut tx, "account:8", &Default::default()).await;
        tx.commit().await.expect("commit");
        lock
    })
    .await
    .expect("task")
    .unwrap_or_else(|err| panic!("transaction lock: {err}\n{}", log()));
    assert_eq!(
        current(&pool, "account:8").await,
        Some(lock.fencing_token())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transaction_lock_claims_its_key_with_its_token() {
    let (server, pool) = server_with_tables().await;
    let locks = LockManager::connect(&server.url()).await.expect("connect");
    let mut tx = pool.begin().await.expect("begin");
    let table = fence::postgres::FenceTable::default();
    let lock = lock_and_claim_in_transaction(&mut tx, "account:7", &table)
        .await
        .expect("free");
    let fence = lock.fence();
    assert_eq!(
        (fence.resource(), fence.token()),
        ("account:7", lock.fencing_token())
    );
    assert!(
        fence.holder().is_some_and(|id| id.starts_with("xact:")),
        "{fence:?}"
    );
    let busy = locks.lock("account:7", LockOptions::new()).await;
    assert!(
        busy.is_err_and(|err| err.is_busy()),
        "the transaction's lock was ignored"
    );
    fence::postgres::check(&mut tx, &lock.fence())
        .await
        .expect("claimed");
    tx.commit().await.expect("commit");
    assert_eq!(
        current(&pool, "account:7").await,
        Some(lock.fencing_token())
    );

    // A resource of another name, under another prefix.
    let mut tx = pool.begin().await.expect("begin");
    let other = lock_and_claim_in_transaction_under(&mut tx, "app:", "acct", "accounts/7", &table)
        .await
        .expect("free");
    tx.commit().await.expect("commit");
    assert!(other.fencing_token() > lock.fencing_token());
    assert_eq!(
        current(&pool, "accounts/7").await,
        Some(other.fencing_token())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transaction_lock_is_refused_as_stale_where_a_higher_fence_is_there() {
    let (_server, pool) = server_with_tables().await;
    claim_committed(&pool, &Fence::new("account:7", 1_000_000))
        .await
        .expect("claim");
    let mut tx = pool.begin().await.expect("begin");
    let refused = lock_and_claim_in_transaction(&mut tx, "account:7", &Default::default()).await;
    assert!(
        matches!(
            &refused,
            Err(LockError::Fence(FenceError::Stale {
                current: 1_000_000,
                ..
            }))
        ),
        "{refused:?}"
    );
    tx.rollback().await.expect("rollback");
    assert_eq!(current(&pool, "account:7").await, Some(1_000_000));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_transaction_lock_claims_nothing() {
    let (server, pool) = server_with_tables().await;
    let locks = LockManager::connect(&server.url()).await.expect("connect");
    let held = locks
        .lock("account:7", LockOptions::new())
        .await
        .expect("free");
    let mut tx = pool.begin().await.expect("begin");
    let busy = lock_and_claim_in_transaction(&mut tx, "account:7", &Default::default()).await;
    assert!(
        busy.is_err_and(|err| err.is_busy()),
        "the manager's lease was ignored"
    );
    tx.commit().await.expect("commit");
    assert_eq!(current(&pool, "account:7").await, None);
    held.release().await.expect("release");
}

/// How long `lock_and_claim_in_transaction` and `lock_in_transaction` take with each way of
/// the network delayed by `delay`: each round trip costs at least twice it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transaction_lock_and_its_claim_take_one_round_trip() {
    let (server, _direct) = server_with_tables().await;
    let proxy = FaultProxy::start(server.addr());
    let pool = pool(&PostgresServer::url_at(proxy.addr())).await;
    let delay = Duration::from_millis(500);
    let round_trip = delay * 2;
    let mut tx = pool.begin().await.expect("begin");
    proxy.set_delay(delay);
    let started = Instant::now();
    let lock = lock_and_claim_in_transaction(&mut tx, "account:7", &Default::default())
        .await
        .expect("free");
    let claim_took = started.elapsed();
    let started = Instant::now();
    lock_in_transaction(&mut tx, "account:9")
        .await
        .expect("free");
    let lock_took = started.elapsed();
    proxy.set_delay(Duration::ZERO);
    tx.commit().await.expect("commit");
    println!(
        "lock and claim: {claim_took:?}, lock alone: {lock_took:?}, round trip {round_trip:?}"
    );
    for took in [claim_took, lock_took] {
        assert!(
            took >= round_trip && took < round_trip * 2,
            "{took:?}: not one round trip of {round_trip:?}"
        );
    }
    assert_eq!(
        current(&pool, "account:7").await,
        Some(lock.fencing_token())
    );
}

/// The attribute's body gets its fence and claims in two lines.
#[distributed_lock(key = "account:<id>", ttl = "30s", manager = locks)]
async fn deposit(
    locks: &LockManager,
    pool: &PgPool,
    id: i64,
    amount: i64,
) -> Result<i64, Box<dyn std::error::Error + Send + Sync>> {
    let mut tx = pool.begin().await?;
    let fence = Fence::current()?; // `account:<id>`, this section's token
    fence::postgres::claim(&mut tx, &fence).await?; // before the first read
    let balance: i64 = sqlx::query_scalar("SELECT balance FROM accounts WHERE id = $1")
        .bind(id)
        .fetch_one(&mut *tx)
        .await?;
    sqlx::query("UPDATE accounts SET balance = $1 WHERE id = $2")
        .bind(balance + amount)
        .bind(id)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(balance + amount)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_attribute_body_claims_with_the_current_fence() {
    let (server, _direct) = server_with_tables().await;
    let pool = pool(&server.url()).await;
    let locks = LockManager::connect(&server.url()).await.expect("connect");
    assert_eq!(deposit(&locks, &pool, 7, 5).await.expect("deposit"), 105);
    assert_eq!(deposit(&locks, &pool, 7, 5).await.expect("deposit"), 110);
    assert!(
        current(&pool, "account:7")
            .await
            .is_some_and(|fence| fence > 0)
    );
    // A holder overtaken by a higher token (another lock's, here) is refused, and writes nothing.
    claim_committed(&pool, &Fence::new("account:7", 1 << 40))
        .await
        .expect("claim");
    let refused = deposit(&locks, &pool, 7, 5).await.expect_err("stale");
    let refused = refused.downcast_ref::<FenceError>().expect("a fence error");
    assert!(matches!(refused, FenceError::Stale { .. }), "{refused}");
    let balance: i64 = sqlx::query_scalar("SELECT balance FROM accounts WHERE id = 7")
        .fetch_one(&pool)
        .await
        .expect("read");
    assert_eq!(balance, 110);
}

/// A side effect (an email) fenced by way of an outbox: written in the fenced transaction, sent
/// by another process from the table once committed.
#[distributed_lock(key = "account:<id>", ttl = "30s", manager = locks)]
async fn refund(
    locks: &LockManager,
    pool: &PgPool,
    id: i64,
    amount: i64,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let mut tx = pool.begin().await?;
    fence::postgres::claim(&mut tx, &Fence::current()?).await?;
    sqlx::query("UPDATE accounts SET balance = balance + $1 WHERE id = $2")
        .bind(amount)
        .bind(id)
        .execute(&mut *tx)
        .await?;
    sqlx::query("INSERT INTO outbox (topic, payload) VALUES ('email', $1)")
        .bind(format!("account {id}: refunded {amount}"))
        .execute(&mut *tx)
        .await?;
    tx.commit().await?; // the email is sent only if the refund committed
    Ok(())
}

async fn outbox_rows(pool: &PgPool) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM outbox")
        .fetch_one(pool)
        .await
        .expect("count")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outbox_row_commits_with_the_fenced_write_and_only_with_it() {
    let (server, pool) = server_with_tables().await;
    let locks = LockManager::connect(&server.url()).await.expect("connect");
    refund(&locks, &pool, 7, 3).await.expect("refund");
    assert_eq!(outbox_rows(&pool).await, 1);
    claim_committed(&pool, &Fence::new("account:7", 1 << 40))
        .await
        .expect("claim");
    refund(&locks, &pool, 7, 3).await.expect_err("stale");
    assert_eq!(
        outbox_rows(&pool).await,
        1,
        "a refused refund sends nothing"
    );
}

/// The lock's own store: the lock, its token and the claim in one round trip.
async fn pay(pool: &PgPool, id: i64) -> Result<u64, Box<dyn std::error::Error + Send + Sync>> {
    let mut tx = pool.begin().await?;
    let key = format!("account:{id}");
    let lock = lock_and_claim_in_transaction(&mut tx, &key, &FenceTable::default()).await?;
    sqlx::query("UPDATE accounts SET writer = 'pay' WHERE id = $1")
        .bind(id)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?; // releases the lock; the fence stays at its token
    Ok(lock.fencing_token())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_payment_under_a_transaction_lock_leaves_its_token_as_the_fence() {
    let (_server, pool) = server_with_tables().await;
    let first = pay(&pool, 7).await.expect("pay");
    let second = pay(&pool, 7).await.expect("pay again");
    assert!(second > first);
    assert_eq!(current(&pool, "account:7").await, Some(second));
}

// ---- a real holder paused past its lease ----

const HOLDER_URL: &str = "FENCE_HOLDER_URL";

/// The holder's side of [`a_paused_holders_write_is_refused_after_it_was_overtaken`], run in
/// a child process (this test binary again): takes the lock `account:7` on the PostgreSQL
/// store with a 1 s lease, claims the account and reads it in one transaction, prints
/// `HOLDER read <balance> <token>`, then (once a line comes on stdin; the parent stops it in
/// between) claims again and writes what it decided from its read, printing
/// `HOLDER stale <current> <offered>` or `HOLDER wrote`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "the child process of a_paused_holders_write_is_refused_after_it_was_overtaken"]
async fn fence_holder_child() {
    let url = std::env::var(HOLDER_URL).expect("run by the paused-holder test");
    let locks = LockManager::connect(&url).await.expect("connect");
    let guard = locks
        .lock("account:7", LockOptions::new().ttl(Duration::from_secs(1)))
        .await
        .expect("free");
    let pool = pool(&url).await;
    let fence = Fence::of(&guard);
    let mut tx = pool.begin().await.expect("begin");
    fence::postgres::claim(&mut tx, &fence)
        .await
        .expect("claim");
    let balance: i64 = sqlx::query_scalar("SELECT balance FROM accounts WHERE id = 7")
        .fetch_one(&mut *tx)
        .await
        .expect("read");
    tx.commit().await.expect("commit");
    println!("HOLDER read {balance} {}", fence.token());
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).expect("stdin");

    let mut tx = pool.begin().await.expect("begin");
    match fence::postgres::claim(&mut tx, &fence).await {
        Err(FenceError::Stale {
            current, offered, ..
        }) => {
            tx.rollback().await.expect("rollback");
            println!("HOLDER stale {current} {offered}");
        }
        other => {
            other.expect("claim");
            sqlx::query("UPDATE accounts SET balance = $1, writer = 'paused' WHERE id = 7")
                .bind(balance + 50)
                .execute(&mut *tx)
                .await
                .expect("write");
            tx.commit().await.expect("commit");
            println!("HOLDER wrote");
        }
    }
}

/// The child, killed on drop (and resumed first, should a failed test leave it stopped).
struct Holder {
    child: Child,
    lines: mpsc::Receiver<String>,
}

impl Holder {
    fn start(url: &str) -> Holder {
        let mut child = Command::new(std::env::current_exe().expect("this test binary"))
            .args(["--ignored", "--exact", "fence_holder_child", "--nocapture"])
            .env(HOLDER_URL, url)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn the holder");
        let stdout = child.stdout.take().expect("stdout");
        let (send, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(said) = line.strip_prefix("HOLDER ") {
                    let _ = send.send(said.to_owned());
                }
            }
        });
        Holder { child, lines }
    }

    fn said(&self) -> String {
        self.lines
            .recv_timeout(Duration::from_secs(60))
            .expect("the holder says what it did")
    }

    fn signal(&self, signal: &str) {
        let sent = Command::new("kill")
            .args([signal, &self.child.id().to_string()])
            .status()
            .expect("kill");
        assert!(sent.success(), "kill {signal}");
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_holders_write_is_refused_after_it_was_overtaken() {
    let (server, pool) = server_with_tables().await;
    let mut holder = Holder::start(&server.url());
    let read = holder.said();
    let parts: Vec<u64> = read
        .split(' ')
        .skip(1)
        .map(|n| n.parse().expect("a number"))
        .collect();
    let (balance, first_token) = (parts[0], parts[1]);
    assert_eq!(balance, 100, "{read}");

    // Paused (a GC, a stopped VM) with the lock held: its watchdog stops renewing.
    holder.signal("-STOP");
    let locks = LockManager::connect(&server.url()).await.expect("connect");
    let overtaking = locks
        .lock(
            "account:7",
            LockOptions::new().wait(Duration::from_secs(30)),
        )
        .await
        .unwrap_or_else(|err| panic!("the paused holder's lease did not lapse: {err}"));
    let fence = Fence::of(&overtaking);
    assert!(fence.token() > first_token);
    let mut tx = pool.begin().await.expect("begin");
    fence::postgres::claim(&mut tx, &fence)
        .await
        .expect("claim");
    let balance: i64 = sqlx::query_scalar("SELECT balance FROM accounts WHERE id = 7")
        .fetch_one(&mut *tx)
        .await
        .expect("read");
    sqlx::query("UPDATE accounts SET balance = $1, writer = 'second' WHERE id = 7")
        .bind(balance + 1)
        .execute(&mut *tx)
        .await
        .expect("write");
    tx.commit().await.expect("commit");

    // Resumed, it goes on to write what it decided from its read of 100.
    holder.signal("-CONT");
    let stdin = holder.child.stdin.as_mut().expect("stdin");
    stdin.write_all(b"go\n").expect("tell the holder to go on");
    let answer = holder.said();
    assert_eq!(answer, format!("stale {} {first_token}", fence.token()));
    let (balance, writer): (i64, String) =
        sqlx::query_as("SELECT balance, writer FROM accounts WHERE id = 7")
            .fetch_one(&pool)
            .await
            .expect("read");
    assert_eq!((balance, writer.as_str()), (101, "second"));
    overtaking.release().await.expect("release");
}

// ---- SQLite ----

/// A database file of its own, removed with its WAL files on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let path =
            std::env::temp_dir().join(format!("fence-sql-{name}-{}.sqlite", std::process::id()));
        let scratch = Scratch(path);
        scratch.remove();
        scratch
    }

    fn remove(&self) {
        for suffix in ["", "-wal", "-shm"] {
            let mut path = self.0.clone().into_os_string();
            path.push(suffix);
            let _ = std::fs::remove_file(path);
        }
    }

    async fn connect(&self) -> SqliteConnection {
        let options = SqliteConnectOptions::new()
            .filename(&self.0)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .busy_timeout(Duration::from_secs(30));
        SqliteConnection::connect_with(&options)
            .await
            .expect("open")
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        self.remove();
    }
}

async fn sqlite_with_table(name: &str) -> (Scratch, SqliteConnection) {
    let file = Scratch::new(name);
    let mut conn = file.connect().await;
    fence::sqlite::FenceTable::default()
        .create_if_missing(&mut conn)
        .await
        .expect("fence table");
    (file, conn)
}

/// A fenced SQLite transaction: `BEGIN IMMEDIATE`, claim, read, write, commit.
async fn take_one(
    conn: &mut SqliteConnection,
    fence: &Fence,
) -> Result<i64, Box<dyn std::error::Error + Send + Sync>> {
    let mut tx = conn.begin_with("BEGIN IMMEDIATE").await?;
    fence::sqlite::claim(&mut tx, fence).await?; // before the first read
    let left: i64 = sqlx::query_scalar("SELECT quantity FROM stock WHERE sku = 'tea'")
        .fetch_one(&mut *tx)
        .await?;
    sqlx::query("UPDATE stock SET quantity = ?1 WHERE sku = 'tea'")
        .bind(left - 1)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(left - 1)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_a_fenced_transaction_commits_only_under_its_claim() {
    let (_file, mut conn) = sqlite_with_table("take-one").await;
    sqlx::raw_sql(
        "CREATE TABLE stock (sku TEXT PRIMARY KEY, quantity INTEGER NOT NULL);
         INSERT INTO stock VALUES ('tea', 5)",
    )
    .execute(&mut conn)
    .await
    .expect("stock");
    assert_eq!(
        take_one(&mut conn, &Fence::new("stock:tea", 2))
            .await
            .expect("take"),
        4
    );
    let stale = take_one(&mut conn, &Fence::new("stock:tea", 1))
        .await
        .expect_err("stale");
    assert!(
        matches!(
            stale.downcast_ref::<FenceError>(),
            Some(FenceError::Stale { current: 2, .. })
        ),
        "{stale}"
    );
    let left: i64 = sqlx::query_scalar("SELECT quantity FROM stock")
        .fetch_one(&mut conn)
        .await
        .expect("read");
    assert_eq!(left, 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_claims_and_checks_refuse_as_on_postgres() {
    let (_file, mut conn) = sqlite_with_table("semantics").await;
    let check = |token| Fence::new("stock:tea", token);
    let never = fence::sqlite::check(&mut conn, &check(5)).await;
    assert!(
        matches!(never, Err(FenceError::NotClaimed { current: None, .. })),
        "{never:?}"
    );
    let mut tx = conn.begin_with("BEGIN IMMEDIATE").await.expect("begin");
    fence::sqlite::claim(&mut tx, &check(5))
        .await
        .expect("claim");
    fence::sqlite::check(&mut tx, &check(5))
        .await
        .expect("check");
    tx.commit().await.expect("commit");
    let stale = fence::sqlite::claim(&mut conn, &check(4)).await;
    assert!(
        matches!(
            stale,
            Err(FenceError::Stale {
                current: 5,
                offered: 4,
                ..
            })
        ),
        "{stale:?}"
    );
    let lower = fence::sqlite::check(&mut conn, &check(4)).await;
    assert!(
        matches!(lower, Err(FenceError::Stale { current: 5, .. })),
        "{lower:?}"
    );
    let higher = fence::sqlite::check(&mut conn, &check(6)).await;
    assert!(
        matches!(
            higher,
            Err(FenceError::NotClaimed {
                current: Some(5),
                ..
            })
        ),
        "{higher:?}"
    );
    let (mine, twice) = (check(7).held_by("a"), check(7).held_by("b"));
    fence::sqlite::claim(&mut conn, &mine).await.expect("claim");
    let refused = fence::sqlite::claim(&mut conn, &twice).await;
    assert!(
        matches!(
            refused,
            Err(FenceError::Stale {
                current: 7,
                offered: 7,
                ..
            })
        ),
        "a token handed out twice claims once: {refused:?}"
    );
    fence::sqlite::check(&mut conn, &mine)
        .await
        .expect("the first's");
    let huge = fence::sqlite::claim(&mut conn, &Fence::new("stock:tea", u64::MAX)).await;
    assert!(
        matches!(huge, Err(FenceError::TokenRange { .. })),
        "{huge:?}"
    );
    let table = fence::sqlite::FenceTable::default();
    assert_eq!(
        table.current(&mut conn, "stock:tea").await.expect("read"),
        Some(7)
    );
    assert!(fence::sqlite::FenceTable::new("main.fences").is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_a_deferred_transaction_that_read_first_is_busy_at_its_claim() {
    let (file, mut first) = sqlite_with_table("deferred").await;
    let mut second = file.connect().await;
    let mut deferred = first.begin().await.expect("BEGIN");
    // A read first: the transaction holds a snapshot.
    fence::sqlite::FenceTable::default()
        .current(&mut deferred, "stock:tea")
        .await
        .expect("read");
    let mut other = second.begin_with("BEGIN IMMEDIATE").await.expect("begin");
    fence::sqlite::claim(&mut other, &Fence::new("stock:tea", 2))
        .await
        .expect("claim");
    other.commit().await.expect("commit");
    let busy = fence::sqlite::claim(&mut deferred, &Fence::new("stock:tea", 1)).await;
    let Err(err @ FenceError::Store { .. }) = busy else {
        panic!("not busy: {busy:?}");
    };
    assert!(err.to_string().contains("BEGIN IMMEDIATE"), "{err}");
    deferred.rollback().await.expect("rollback");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_begin_immediate_waits_for_the_other_claim_then_is_refused_if_lower() {
    let (file, mut first) = sqlite_with_table("immediate").await;
    let mut holding = first.begin_with("BEGIN IMMEDIATE").await.expect("begin");
    fence::sqlite::claim(&mut holding, &Fence::new("stock:tea", 3))
        .await
        .expect("claim");

    let (began, begun) = tokio::sync::oneshot::channel();
    let waiter = tokio::spawn(async move {
        let mut conn = file.connect().await;
        let _ = began.send(());
        let mut tx = conn
            .begin_with("BEGIN IMMEDIATE")
            .await
            .expect("begin waits, then goes");
        let claimed = fence::sqlite::claim(&mut tx, &Fence::new("stock:tea", 2)).await;
        tx.rollback().await.expect("rollback");
        (claimed, file)
    });
    begun.await.expect("the waiter started");
    tokio::task::yield_now().await;
    assert!(
        !waiter.is_finished(),
        "BEGIN IMMEDIATE went through another's write lock"
    );
    holding.commit().await.expect("commit");
    let (claimed, _file) = waiter.await.expect("waiter");
    // Its claim ran after the commit: it met token 3.
    assert!(
        matches!(
            claimed,
            Err(FenceError::Stale {
                current: 3,
                offered: 2,
                ..
            })
        ),
        "{claimed:?}"
    );
}
