//! Fences on SQLite (feature `fence-sqlite`): a claim on a resource and a check of it, made
//! inside the application's own transaction through sqlx, as on PostgreSQL
//! ([`fence`](super) says the rule); the same table, [`SCHEMA`].
//!
//! SQLite locks the whole database, not a row: a claim or a check is a write, so from it on the
//! transaction holds the database's write lock until it ends, and no other claim gets between.
//!
//! **Begin the transaction with `BEGIN IMMEDIATE`** (`conn.begin_with("BEGIN IMMEDIATE")`, or
//! `pool.begin_with(..)`): it takes the write lock at once, waiting for another writer up to the
//! connection's busy timeout (sqlx sets 5 s; `SqliteConnectOptions::busy_timeout`). A
//! transaction begun with a plain `BEGIN` (DEFERRED) that reads before its claim holds a read
//! snapshot, and the claim's upgrade to a write fails at once with `SQLITE_BUSY` when another
//! connection wrote since, busy timeout or not: the claim then answers [`FenceError::Store`]
//! with that advice, and the transaction must be rolled back.
//!
//! ```no_run
//! # async fn run(pool: sqlx::SqlitePool, fence: lock_runtime::fence::Fence) -> Result<(), Box<dyn std::error::Error>> {
//! use lock_runtime::fence;
//!
//! let mut tx = pool.begin_with("BEGIN IMMEDIATE").await?;
//! fence::sqlite::claim(&mut tx, &fence).await?; // before the first read
//! let stock: i64 = sqlx::query_scalar("SELECT quantity FROM stock WHERE sku = 'tea'")
//!     .fetch_one(&mut *tx)
//!     .await?;
//! sqlx::query("UPDATE stock SET quantity = ?1 WHERE sku = 'tea'")
//!     .bind(stock - 1)
//!     .execute(&mut *tx)
//!     .await?;
//! tx.commit().await?; // committed only if no newer holder claimed the resource
//! # Ok(())
//! # }
//! ```

use sqlx::sqlite::SqliteConnection;

use super::table::{self, TableName};
use super::{Fence, FenceError};
use crate::error::LockError;

/// The default fence table, `lock_fences`, for the application's migrations (the same SQL as
/// on PostgreSQL). [`FenceTable::schema`] gives it under another name.
pub const SCHEMA: &str = table::SCHEMA;

/// SQLite's primary result code for a busy database (extended codes keep it in the low byte).
const SQLITE_BUSY: i64 = 5;

/// A table of fences on SQLite: `lock_fences` by [`Default`], or one named with
/// [`new`](FenceTable::new).
///
/// ```
/// use lock_runtime::fence::sqlite::FenceTable;
///
/// let table = FenceTable::new("shop_fences")?;
/// assert!(table.schema().contains("\"shop_fences\""));
/// assert!(FenceTable::new("main.fences").is_err()); // one identifier on SQLite
/// # Ok::<(), lock_runtime::LockError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct FenceTable {
    name: TableName,
}

impl Default for FenceTable {
    fn default() -> FenceTable {
        FenceTable {
            name: TableName::default_table(),
        }
    }
}

impl FenceTable {
    /// The fence table `name`: a plain lowercase identifier (ASCII letters, digits, `_`, not
    /// starting with a digit, up to 63 characters). Anything else is refused with
    /// [`LockError::Config`] naming the rule.
    pub fn new(name: &str) -> Result<FenceTable, LockError> {
        Ok(FenceTable {
            name: TableName::parse(name, false)?,
        })
    }

    /// The table's name, as given.
    pub fn name(&self) -> &str {
        self.name.given()
    }

    /// The table's `CREATE TABLE IF NOT EXISTS` statement, for a migration: [`SCHEMA`] under
    /// this table's name (quoted).
    pub fn schema(&self) -> String {
        self.name.schema()
    }

    /// Creates the table if it does not exist.
    pub async fn create_if_missing(&self, conn: &mut SqliteConnection) -> Result<(), FenceError> {
        sqlx::query(&self.schema())
            .execute(&mut *conn)
            .await
            .map_err(|err| failed(self.name(), "create the fence table", err))?;
        Ok(())
    }

    /// Claims `fence.resource()` for `fence.token()` in the transaction open on `conn`
    /// (`&mut *tx`, begun with `BEGIN IMMEDIATE`): raises the resource's fence to the token;
    /// the transaction holds the database's write lock from here. [`FenceError::Stale`] if the
    /// fence is higher: a newer holder claimed it (or, at the same token, another holder: a
    /// token handed out twice, see [`Fence`]); roll back.
    pub async fn claim(
        &self,
        conn: &mut SqliteConnection,
        fence: &Fence,
    ) -> Result<(), FenceError> {
        let token = fence.sql_token()?;
        let statement = format!(
            "INSERT INTO {} (resource, fence, holder) VALUES (?1, ?2, ?3)
ON CONFLICT (resource) DO UPDATE SET fence = max(fence, excluded.fence), holder = {}
RETURNING fence, holder",
            self.name.quoted(),
            table::holder_update("")
        );
        let (current, holder): (i64, Option<String>) = sqlx::query_as(&statement)
            .bind(fence.resource())
            .bind(token)
            .bind(fence.holder())
            .fetch_one(&mut *conn)
            .await
            .map_err(|err| failed(fence.resource(), "claim", err))?;
        table::claimed(fence, current, holder.as_deref())
    }

    /// Checks in the transaction open on `conn` that `fence.resource()` is still claimed by
    /// `fence.token()`, taking the database's write lock (the check is a write that changes
    /// nothing), so that the transaction's writes commit only under that fence.
    /// [`FenceError::Stale`] if the fence is higher, [`FenceError::NotClaimed`] if lower or
    /// never claimed.
    pub async fn check(
        &self,
        conn: &mut SqliteConnection,
        fence: &Fence,
    ) -> Result<(), FenceError> {
        fence.sql_token()?;
        let statement = format!(
            "UPDATE {} SET fence = fence WHERE resource = ?1 RETURNING fence, holder",
            self.name.quoted()
        );
        let found: Option<(i64, Option<String>)> = sqlx::query_as(&statement)
            .bind(fence.resource())
            .fetch_optional(&mut *conn)
            .await
            .map_err(|err| failed(fence.resource(), "check", err))?;
        let (current, holder) = found.map_or((None, None), |(fence, holder)| (Some(fence), holder));
        table::checked(fence, current, holder.as_deref())
    }

    /// The fence of `resource` (the highest token that claimed it), `None` if never claimed; a
    /// plain read.
    pub async fn current(
        &self,
        conn: &mut SqliteConnection,
        resource: &str,
    ) -> Result<Option<u64>, FenceError> {
        let statement = format!(
            "SELECT fence FROM {} WHERE resource = ?1",
            self.name.quoted()
        );
        let current: Option<i64> = sqlx::query_scalar(&statement)
            .bind(resource)
            .fetch_optional(&mut *conn)
            .await
            .map_err(|err| failed(resource, "read the fence", err))?;
        Ok(current.map(|value| u64::try_from(value).unwrap_or(0)))
    }
}

/// Claims `fence` on the default table ([`FenceTable::claim`]).
///
/// ```no_run
/// # async fn run(pool: sqlx::SqlitePool) -> Result<(), lock_runtime::LockError> {
/// use lock_runtime::fence::{self, Fence};
///
/// # let mut tx = pool.begin_with("BEGIN IMMEDIATE").await.expect("begin");
/// let fence = Fence::current()?; // inside a #[distributed_lock] body
/// fence::sqlite::claim(&mut tx, &fence).await?;
/// # Ok(())
/// # }
/// ```
pub async fn claim(conn: &mut SqliteConnection, fence: &Fence) -> Result<(), FenceError> {
    FenceTable::default().claim(conn, fence).await
}

/// Checks `fence` on the default table ([`FenceTable::check`]).
///
/// ```no_run
/// # async fn run(pool: sqlx::SqlitePool, fence: lock_runtime::fence::Fence) -> Result<(), lock_runtime::LockError> {
/// # let mut tx = pool.begin_with("BEGIN IMMEDIATE").await.expect("begin");
/// lock_runtime::fence::sqlite::check(&mut tx, &fence).await?; // then write, then commit
/// # Ok(())
/// # }
/// ```
pub async fn check(conn: &mut SqliteConnection, fence: &Fence) -> Result<(), FenceError> {
    FenceTable::default().check(conn, fence).await
}

/// The driver's error as [`FenceError::Store`], with what to do about a busy database.
fn failed(resource: &str, step: &str, err: sqlx::Error) -> FenceError {
    let busy = err
        .as_database_error()
        .and_then(|db| db.code())
        .and_then(|code| code.parse::<i64>().ok())
        .is_some_and(|code| code & 0xff == SQLITE_BUSY);
    let store = if busy {
        format!(
            "sqlite: {step} (database busy: another connection writes; begin the transaction \
             with BEGIN IMMEDIATE so that it waits for the write lock, and roll this one back)"
        )
    } else {
        format!("sqlite: {step}")
    };
    FenceError::store(resource, store, err)
}
