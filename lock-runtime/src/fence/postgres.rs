//! Fences on PostgreSQL (feature `fence-postgres`): a claim on a resource and a check of it,
//! made inside the application's own transaction through sqlx, so that the transaction's writes
//! commit only while the resource's fence is the holder's token.
//!
//! The fences live in one table, `lock_fences` by default ([`SCHEMA`], for the application's
//! migrations, or [`FenceTable::create_if_missing`]): one row per resource, its `fence` the
//! highest token that claimed it and `holder` the holder id of that claim (see [`Fence`]).
//!
//! * [`claim`] raises the resource's fence to the token, or refuses with
//!   [`FenceError::Stale`] when it is already higher; either way the row stays locked
//!   (`FOR UPDATE`) until the transaction ends, so no other holder's claim gets between the
//!   claim and the transaction's COMMIT. Claim before the first read of the resource.
//! * [`check`] locks the row and refuses unless the fence is the token: a write decided in an
//!   earlier transaction (after a claim there) is made conditional on it.
//!
//! Each is one statement, sent with the simple query protocol (no prepared statement, no session
//! state): it works through PgBouncer in transaction mode. Values go into the text as literals
//! (text as its UTF-8 bytes in hex), the table's name only once checked to be a plain
//! identifier ([`FenceTable::new`]).
//!
//! ```no_run
//! # async fn run(pool: sqlx::PgPool) -> Result<(), Box<dyn std::error::Error>> {
//! use lock_runtime::LockOptions;
//! use lock_runtime::fence::{self, Fence};
//!
//! # let locks = lock_runtime::LockManager::connect("memory://").await?;
//! let guard = locks.lock("account:7", LockOptions::new()).await?;
//! let mut tx = pool.begin().await?;
//! fence::postgres::claim(&mut tx, &Fence::of(&guard)).await?; // before the first read
//! let balance: i64 = sqlx::query_scalar("SELECT balance FROM accounts WHERE id = 7")
//!     .fetch_one(&mut *tx)
//!     .await?;
//! sqlx::query("UPDATE accounts SET balance = $1 WHERE id = 7")
//!     .bind(balance + 10)
//!     .execute(&mut *tx)
//!     .await?;
//! tx.commit().await?; // committed only if no newer holder claimed `account:7`
//! guard.release().await?;
//! # Ok(())
//! # }
//! ```

use std::fmt::Write as _;

use sqlx::postgres::{PgConnection, PgRow};
use sqlx::{Executor as _, Row};

use super::table::{self, TableName};
use super::{Fence, FenceError};
use crate::error::LockError;

/// The default fence table, `lock_fences`, for the application's migrations (PostgreSQL and
/// SQLite alike). [`FenceTable::schema`] gives it under another name.
pub const SCHEMA: &str = table::SCHEMA;

/// A table of fences on PostgreSQL: `lock_fences` by [`Default`], or one named with
/// [`new`](FenceTable::new).
///
/// ```
/// use lock_runtime::fence::postgres::FenceTable;
///
/// let table = FenceTable::new("billing.fences")?;
/// assert!(table.schema().starts_with("CREATE TABLE IF NOT EXISTS \"billing\".\"fences\""));
/// assert!(FenceTable::new("fences; DROP TABLE users").is_err());
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
    /// The fence table `name`: `table` or `schema.table`, each part a plain lowercase
    /// identifier (ASCII letters, digits, `_`, not starting with a digit, up to 63 characters).
    /// Anything else, whatever could change the statement it goes into, is refused with
    /// [`LockError::Config`] naming the rule.
    pub fn new(name: &str) -> Result<FenceTable, LockError> {
        Ok(FenceTable {
            name: TableName::parse(name, true)?,
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

    /// Creates the table if it does not exist (its schema must, for a qualified name).
    pub async fn create_if_missing(&self, conn: &mut PgConnection) -> Result<(), FenceError> {
        conn.execute(sqlx::raw_sql(&self.schema()))
            .await
            .map_err(|err| {
                FenceError::store(self.name(), "postgres: create the fence table", err)
            })?;
        Ok(())
    }

    /// Claims `fence.resource()` for `fence.token()` in the transaction open on `conn`
    /// (`&mut *tx`): raises the resource's fence to the token, and keeps its row locked until the
    /// transaction ends. [`FenceError::Stale`] if the fence is higher: a newer holder claimed it;
    /// roll back. A claim at the fence's own token holds for the holder that made it (its
    /// holder id, see [`Fence`]; or either claim without one), and is refused as `Stale` with
    /// `current == offered` for another holder given the same token again.
    pub async fn claim(&self, conn: &mut PgConnection, fence: &Fence) -> Result<(), FenceError> {
        let token = fence.sql_token()?;
        let statement = self.claim_from(&format!(
            "VALUES ({}, {token}::bigint, {})",
            text(fence.resource()),
            holder_literal(fence.holder())
        ));
        let row = self.one(conn, &statement, fence, "claim").await?;
        let (current, holder) = columns(&row, fence, "claim")?;
        table::claimed(fence, current, holder.as_deref())
    }

    /// Checks in the transaction open on `conn` that `fence.resource()` is still claimed by
    /// `fence.token()`, and locks its row until the transaction ends, so that the transaction's
    /// writes commit only under that fence. [`FenceError::Stale`] if the fence is higher (or
    /// the token's claim is another holder's), [`FenceError::NotClaimed`] if lower or never
    /// claimed.
    pub async fn check(&self, conn: &mut PgConnection, fence: &Fence) -> Result<(), FenceError> {
        fence.sql_token()?;
        let statement = format!(
            "SELECT fence, holder FROM {} WHERE resource = {} FOR UPDATE",
            self.name.quoted(),
            text(fence.resource())
        );
        let found = self.optional(conn, &statement, fence, "check").await?;
        let (current, holder) = found.map_or((None, None), |(fence, holder)| (Some(fence), holder));
        table::checked(fence, current, holder.as_deref())
    }

    /// The fence of `resource` (the highest token that claimed it), `None` if never claimed; a
    /// plain read, without a lock.
    pub async fn current(
        &self,
        conn: &mut PgConnection,
        resource: &str,
    ) -> Result<Option<u64>, FenceError> {
        let statement = format!(
            "SELECT fence, holder FROM {} WHERE resource = {}",
            self.name.quoted(),
            text(resource)
        );
        let fence = Fence::new(resource, 0);
        let current = self
            .optional(conn, &statement, &fence, "read the fence")
            .await?;
        Ok(current.map(|(value, _)| u64::try_from(value).unwrap_or(0)))
    }

    /// The claim statement with `source` (`VALUES (resource, token, holder)`, or a `SELECT` of
    /// them): inserts the fence or raises it to the token, and returns it (higher than the token
    /// when refused) with the holder that claimed it. The row is locked either way (an `ON CONFLICT DO UPDATE` locks the row it
    /// meets), by its latest committed version: a claim waits for a concurrent claim's
    /// transaction to end, and then sees what it committed.
    pub(crate) fn claim_from(&self, source: &str) -> String {
        format!(
            "INSERT INTO {} AS f (resource, fence, holder) {source}
ON CONFLICT (resource) DO UPDATE SET fence = greatest(f.fence, excluded.fence),
    holder = {}
RETURNING f.fence, f.holder",
            self.name.quoted(),
            table::holder_update("f.")
        )
    }

    // The steps call the connection's `Executor` methods, whose futures are boxed and `Send`:
    // `RawSql`'s own `fetch_one` would make every caller's future fail the check of
    // `tokio::spawn` ("implementation of `Send` is not general enough").
    async fn one(
        &self,
        conn: &mut PgConnection,
        statement: &str,
        fence: &Fence,
        step: &str,
    ) -> Result<PgRow, FenceError> {
        conn.fetch_one(sqlx::raw_sql(statement))
            .await
            .map_err(|err| failed(fence, step, err))
    }

    async fn optional(
        &self,
        conn: &mut PgConnection,
        statement: &str,
        fence: &Fence,
        step: &str,
    ) -> Result<Option<(i64, Option<String>)>, FenceError> {
        // `RawSql::fetch_optional` of sqlx 0.8 fails on no row, as `fetch_one` does.
        let rows = conn
            .fetch_all(sqlx::raw_sql(statement))
            .await
            .map_err(|err| failed(fence, step, err))?;
        rows.first()
            .map(|row| columns(row, fence, step))
            .transpose()
    }
}

/// Claims `fence` on the default table ([`FenceTable::claim`]).
///
/// ```no_run
/// # async fn run(pool: sqlx::PgPool) -> Result<(), lock_runtime::LockError> {
/// use lock_runtime::fence::{self, Fence};
///
/// # let mut tx = pool.begin().await.expect("begin");
/// let fence = Fence::current()?; // inside a #[distributed_lock] body
/// fence::postgres::claim(&mut tx, &fence).await?;
/// # Ok(())
/// # }
/// ```
pub async fn claim(conn: &mut PgConnection, fence: &Fence) -> Result<(), FenceError> {
    FenceTable::default().claim(conn, fence).await
}

/// Checks `fence` on the default table ([`FenceTable::check`]).
///
/// ```no_run
/// # async fn run(pool: sqlx::PgPool, fence: lock_runtime::fence::Fence) -> Result<(), lock_runtime::LockError> {
/// # let mut tx = pool.begin().await.expect("begin");
/// lock_runtime::fence::postgres::check(&mut tx, &fence).await?; // then write, then commit
/// # Ok(())
/// # }
/// ```
pub async fn check(conn: &mut PgConnection, fence: &Fence) -> Result<(), FenceError> {
    FenceTable::default().check(conn, fence).await
}

fn failed(fence: &Fence, step: &str, err: sqlx::Error) -> FenceError {
    FenceError::store(fence.resource(), format!("postgres: {step}"), err)
}

/// A fence row's `fence` and `holder`.
fn columns(row: &PgRow, fence: &Fence, step: &str) -> Result<(i64, Option<String>), FenceError> {
    let current = row
        .try_get::<i64, _>("fence")
        .map_err(|err| failed(fence, step, err))?;
    let holder = row
        .try_get::<Option<String>, _>("holder")
        .map_err(|err| failed(fence, step, err))?;
    Ok((current, holder))
}

/// A holder id as a literal, `NULL` without one.
pub(crate) fn holder_literal(holder: Option<&str>) -> String {
    holder.map_or_else(|| "NULL::text".to_owned(), text)
}

/// `text` as a literal that reads back as exactly `text`, whatever it holds: its UTF-8 bytes in
/// hex, decoded by the server.
pub(crate) fn text(text: &str) -> String {
    let mut hex = String::with_capacity(text.len() * 2 + 40);
    hex.push_str("convert_from(decode('");
    for byte in text.bytes() {
        // Writing to a String does not fail.
        let _ = write!(hex, "{byte:02x}");
    }
    hex.push_str("', 'hex'), 'UTF8')");
    hex
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_table_is_the_schema_constant() {
        let table = FenceTable::default();
        assert_eq!(table.name(), "lock_fences");
        assert_eq!(table.schema().replace('"', ""), SCHEMA);
    }

    #[test]
    fn a_claim_names_the_table_quoted_and_the_resource_in_hex() {
        let table = FenceTable::new("app.fences").expect("valid");
        let statement = table.claim_from(&format!("VALUES ({}, 3)", text("a'b")));
        assert!(
            statement.starts_with("INSERT INTO \"app\".\"fences\" AS f"),
            "{statement}"
        );
        assert!(!statement.contains("a'b"), "{statement}");
    }
}
