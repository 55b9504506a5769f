//! The fence module's property, over random interleavings: holders take the lock one after
//! another, each grant overtaking the holder before it (whose lease expired while it was
//! paused, and which runs on when it wakes), and every holder, overtaken or not, claims, reads
//! and writes the resource when its turn in the interleaving comes. On each store the
//! resource accepts exactly what the rule allows, and so:
//!
//! - no read and no write of a holder whose token was overtaken (a higher token claimed the
//!   resource) is ever accepted;
//! - no update is lost: every accepted write is based on the value the resource held, so
//!   the resource ends at the number of accepted writes.
//!
//! A fenced read is a claim and a read in one transaction (one step on Redis); a fenced write
//! is a claim and the write in one transaction (one step on Redis), or on SQL a check and the
//! write. The stores are real: a PostgreSQL server, a Redis server and an SQLite file.

use std::sync::atomic::{AtomicU64, Ordering};

use lock_runtime::fence::{self, Fence, FenceError};
use lock_tests::{PostgresServer, RedisServer};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use sqlx::{Connection, PgConnection, SqliteConnection};

/// What a holder does, in the order the interleaving gives.
#[derive(Debug, Clone)]
enum Step {
    /// The lock is granted to this holder with the next token: the holder before it (if any)
    /// was paused past its lease and is overtaken, but runs on when it wakes.
    Acquire(usize),
    /// The lock is granted to this holder with the last token handed out, again: the lock
    /// store lost its counter's last write (a restart without persistence, a failover).
    Reissue(usize),
    /// A fenced read: claim, then read.
    Read(usize),
    /// A fenced write of the holder's last read plus one: claim (Redis: in the same step).
    Write(usize),
    /// A fenced write whose condition is a check (fence exactly the token) instead of a claim.
    CheckedWrite(usize),
}

const HOLDERS: usize = 3;

fn steps() -> impl Strategy<Value = Vec<Step>> {
    let step = (0..HOLDERS, 0..9u8).prop_map(|(holder, kind)| match kind {
        0 | 1 => Step::Acquire(holder),
        2 => Step::Reissue(holder),
        3 | 4 => Step::Read(holder),
        5 | 6 => Step::Write(holder),
        _ => Step::CheckedWrite(holder),
    });
    prop::collection::vec(step, 1..48)
}

/// A resource behind a fence, on one store.
trait Resource {
    /// Claims `fence` and reads the value (0 if never written), in one transaction.
    async fn read(&mut self, fence: &Fence) -> Result<i64, FenceError>;
    /// Claims `fence` and writes `value`, in one transaction.
    async fn write(&mut self, fence: &Fence, value: i64) -> Result<(), FenceError>;
    /// Checks `fence` (exactly its token) and writes `value`, in one transaction.
    async fn checked_write(&mut self, fence: &Fence, value: i64) -> Result<(), FenceError>;
    /// The value, unfenced (for the final comparison).
    async fn value(&mut self, resource: &str) -> i64;
}

/// What the rule allows, and what the resource must then hold.
#[derive(Default)]
struct Model {
    issued: u64,
    /// The resource's fence: the token and the acquisition (its number) that claimed it.
    fence: Option<(u64, u64)>,
    value: i64,
    /// Each holder's token and acquisition, while it has one.
    tokens: [Option<(u64, u64)>; HOLDERS],
    reads: [Option<i64>; HOLDERS],
    acquisitions: u64,
}

impl Model {
    /// A claim by `held` (token, acquisition) is accepted: a higher token, or the same token
    /// from the acquisition that claimed it.
    fn admits(&self, held: (u64, u64)) -> bool {
        self.fence
            .is_none_or(|fence| fence.0 < held.0 || fence == held)
    }

    fn grant(&mut self, holder: usize, token: u64) {
        self.acquisitions += 1;
        self.tokens[holder] = Some((token, self.acquisitions));
        self.reads[holder] = None;
    }
}

/// The fence of an acquisition: each has a holder id of its own.
fn fence_of(resource: &str, held: (u64, u64)) -> Fence {
    Fence::new(resource, held.0).held_by(format!("acquisition-{}", held.1))
}

/// Checks that `answer` is the refusal the model expects for `token`.
fn refused_as_expected<T: std::fmt::Debug>(
    model: &Model,
    token: u64,
    answer: &Result<T, FenceError>,
) -> Result<(), TestCaseError> {
    let fence = model.fence.map(|fence| fence.0);
    match answer {
        Err(FenceError::Stale {
            current, offered, ..
        }) => {
            prop_assert_eq!(Some(*current), fence);
            prop_assert_eq!(*offered, token);
            prop_assert!(*current >= token);
        }
        Err(FenceError::NotClaimed {
            current, offered, ..
        }) => {
            prop_assert_eq!(*current, fence);
            prop_assert_eq!(*offered, token);
            prop_assert!(current.is_none_or(|current| current < token));
        }
        other => prop_assert!(false, "expected a refusal, got {:?}", other),
    }
    Ok(())
}

/// Runs `steps` on `resource` (a name no other case uses) and compares every answer with the
/// model.
async fn run_case<R: Resource>(
    store: &mut R,
    resource: &str,
    steps: &[Step],
) -> Result<(), TestCaseError> {
    let mut model = Model::default();
    let mut accepted_writes = 0;
    for step in steps {
        match *step {
            Step::Acquire(h) => {
                model.issued += 1;
                model.grant(h, model.issued);
            }
            Step::Reissue(h) => {
                if model.issued > 0 {
                    model.grant(h, model.issued);
                }
            }
            Step::Read(h) => {
                let Some(held) = model.tokens[h] else {
                    continue;
                };
                let answer = store.read(&fence_of(resource, held)).await;
                if model.admits(held) {
                    let value = answer.map_err(|err| TestCaseError::fail(err.to_string()))?;
                    prop_assert_eq!(value, model.value, "a fenced read saw another value");
                    model.fence = Some(held);
                    model.reads[h] = Some(value);
                } else {
                    // An overtaken holder's read is refused: it learns nothing it could write back.
                    refused_as_expected(&model, held.0, &answer)?;
                }
            }
            Step::Write(h) | Step::CheckedWrite(h) => {
                let (Some(held), Some(read)) = (model.tokens[h], model.reads[h]) else {
                    continue;
                };
                let fence = fence_of(resource, held);
                let checked = matches!(step, Step::CheckedWrite(_));
                let answer = if checked {
                    store.checked_write(&fence, read + 1).await
                } else {
                    store.write(&fence, read + 1).await
                };
                let allowed = if checked {
                    model.fence == Some(held)
                } else {
                    model.admits(held)
                };
                if allowed {
                    answer.map_err(|err| TestCaseError::fail(err.to_string()))?;
                    // The rule's point: an accepted write was based on the current value.
                    prop_assert_eq!(read, model.value, "an accepted write lost an update");
                    model.fence = Some(held);
                    model.value = read + 1;
                    model.reads[h] = Some(read + 1);
                    accepted_writes += 1;
                } else {
                    refused_as_expected(&model, held.0, &answer)?;
                }
            }
        }
    }
    prop_assert_eq!(store.value(resource).await, model.value);
    prop_assert_eq!(model.value, accepted_writes);
    Ok(())
}

/// Runs the property `cases` times on the store `connect` makes, one fresh resource per case.
fn check_property<R: Resource>(cases: u32, connect: impl AsyncFnOnce() -> R) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let store = std::cell::RefCell::new(runtime.block_on(connect()));
    static CASE: AtomicU64 = AtomicU64::new(0);
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    });
    runner
        .run(&steps(), |steps| {
            let resource = format!("account:{}", CASE.fetch_add(1, Ordering::Relaxed));
            runtime.block_on(run_case(&mut *store.borrow_mut(), &resource, &steps))
        })
        .unwrap_or_else(|failure| panic!("{failure}"));
}

/// The data table beside the fence table: one row per resource.
const DATA: &str =
    "CREATE TABLE IF NOT EXISTS balances (resource TEXT PRIMARY KEY, value BIGINT NOT NULL)";

struct Postgres(PgConnection);

impl Resource for Postgres {
    async fn read(&mut self, fence: &Fence) -> Result<i64, FenceError> {
        let mut tx = self.0.begin().await.expect("BEGIN");
        fence::postgres::claim(&mut tx, fence).await?;
        let value: Option<i64> =
            sqlx::query_scalar("SELECT value FROM balances WHERE resource = $1")
                .bind(fence.resource())
                .fetch_optional(&mut *tx)
                .await
                .expect("a read");
        tx.commit().await.expect("COMMIT");
        Ok(value.unwrap_or(0))
    }

    async fn write(&mut self, fence: &Fence, value: i64) -> Result<(), FenceError> {
        let mut tx = self.0.begin().await.expect("BEGIN");
        fence::postgres::claim(&mut tx, fence).await?;
        pg_upsert(&mut tx, fence.resource(), value).await;
        tx.commit().await.expect("COMMIT");
        Ok(())
    }

    async fn checked_write(&mut self, fence: &Fence, value: i64) -> Result<(), FenceError> {
        let mut tx = self.0.begin().await.expect("BEGIN");
        fence::postgres::check(&mut tx, fence).await?;
        pg_upsert(&mut tx, fence.resource(), value).await;
        tx.commit().await.expect("COMMIT");
        Ok(())
    }

    async fn value(&mut self, resource: &str) -> i64 {
        sqlx::query_scalar::<_, i64>("SELECT value FROM balances WHERE resource = $1")
            .bind(resource)
            .fetch_optional(&mut self.0)
            .await
            .expect("a read")
            .unwrap_or(0)
    }
}

async fn pg_upsert(conn: &mut PgConnection, resource: &str, value: i64) {
    sqlx::query(
        "INSERT INTO balances (resource, value) VALUES ($1, $2) \
         ON CONFLICT (resource) DO UPDATE SET value = excluded.value",
    )
    .bind(resource)
    .bind(value)
    .execute(conn)
    .await
    .expect("a write");
}

struct Sqlite(SqliteConnection);

impl Sqlite {
    async fn begin(&mut self) -> sqlx::Transaction<'_, sqlx::Sqlite> {
        self.0.begin().await.expect("BEGIN")
    }
}

impl Resource for Sqlite {
    async fn read(&mut self, fence: &Fence) -> Result<i64, FenceError> {
        let mut tx = self.begin().await;
        fence::sqlite::claim(&mut tx, fence).await?;
        let value: Option<i64> =
            sqlx::query_scalar("SELECT value FROM balances WHERE resource = ?1")
                .bind(fence.resource())
                .fetch_optional(&mut *tx)
                .await
                .expect("a read");
        tx.commit().await.expect("COMMIT");
        Ok(value.unwrap_or(0))
    }

    async fn write(&mut self, fence: &Fence, value: i64) -> Result<(), FenceError> {
        let mut tx = self.begin().await;
        fence::sqlite::claim(&mut tx, fence).await?;
        sqlite_upsert(&mut tx, fence.resource(), value).await;
        tx.commit().await.expect("COMMIT");
        Ok(())
    }

    async fn checked_write(&mut self, fence: &Fence, value: i64) -> Result<(), FenceError> {
        let mut tx = self.begin().await;
        fence::sqlite::check(&mut tx, fence).await?;
        sqlite_upsert(&mut tx, fence.resource(), value).await;
        tx.commit().await.expect("COMMIT");
        Ok(())
    }

    async fn value(&mut self, resource: &str) -> i64 {
        sqlx::query_scalar::<_, i64>("SELECT value FROM balances WHERE resource = ?1")
            .bind(resource)
            .fetch_optional(&mut self.0)
            .await
            .expect("a read")
            .unwrap_or(0)
    }
}

async fn sqlite_upsert(conn: &mut SqliteConnection, resource: &str, value: i64) {
    sqlx::query(
        "INSERT INTO balances (resource, value) VALUES (?1, ?2) \
         ON CONFLICT (resource) DO UPDATE SET value = excluded.value",
    )
    .bind(resource)
    .bind(value)
    .execute(conn)
    .await
    .expect("a write");
}

/// Redis-held data: a fenced read is the claim and the GET in one step, a fenced write the
/// claim and the SET in one step. Redis has no check-and-write of its own here: a checked
/// write is a check followed by the fenced write, both of which must pass.
struct Redis(redis::aio::MultiplexedConnection);

impl Resource for Redis {
    async fn read(&mut self, fence: &Fence) -> Result<i64, FenceError> {
        let value: Option<Vec<u8>> = fence::redis::claim_get(&mut self.0, fence).await?;
        Ok(value.map_or(0, |bytes| parse(&bytes)))
    }

    async fn write(&mut self, fence: &Fence, value: i64) -> Result<(), FenceError> {
        fence::redis::set(&mut self.0, fence, value, None)
            .await
            .map(drop)
    }

    async fn checked_write(&mut self, fence: &Fence, value: i64) -> Result<(), FenceError> {
        fence::redis::check(&mut self.0, fence).await?;
        fence::redis::set(&mut self.0, fence, value, None)
            .await
            .map(drop)
    }

    async fn value(&mut self, resource: &str) -> i64 {
        let value: Option<Vec<u8>> = redis::cmd("GET")
            .arg(resource)
            .query_async(&mut self.0)
            .await
            .expect("a GET");
        value.map_or(0, |bytes| parse(&bytes))
    }
}

fn parse(bytes: &[u8]) -> i64 {
    std::str::from_utf8(bytes)
        .ok()
        .and_then(|text| text.parse().ok())
        .expect("a number")
}

#[test]
fn on_postgres_no_overtaken_holder_reads_or_writes_and_no_update_is_lost() {
    let server = PostgresServer::start();
    let url = server.url();
    check_property(96, async move || {
        let mut conn = PgConnection::connect(&url).await.expect("a connection");
        sqlx::raw_sql(fence::postgres::SCHEMA)
            .execute(&mut conn)
            .await
            .expect("the fence table");
        sqlx::raw_sql(DATA)
            .execute(&mut conn)
            .await
            .expect("the data table");
        Postgres(conn)
    });
}

#[test]
fn on_sqlite_no_overtaken_holder_reads_or_writes_and_no_update_is_lost() {
    let dir = std::env::temp_dir().join(format!("fence-property-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temp dir");
    let path = dir.join("resource.db");
    let _ = std::fs::remove_file(&path);
    let url = format!("sqlite://{}?mode=rwc", path.display());
    check_property(256, async move || {
        let mut conn = SqliteConnection::connect(&url).await.expect("a connection");
        sqlx::raw_sql(fence::sqlite::SCHEMA)
            .execute(&mut conn)
            .await
            .expect("the fence table");
        sqlx::raw_sql(DATA)
            .execute(&mut conn)
            .await
            .expect("the data table");
        Sqlite(conn)
    });
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn on_redis_no_overtaken_holder_reads_or_writes_and_no_update_is_lost() {
    let server = RedisServer::start();
    let url = server.url();
    check_property(192, async move || {
        let client = redis::Client::open(url).expect("a client");
        Redis(
            client
                .get_multiplexed_async_connection()
                .await
                .expect("a connection"),
        )
    });
}
