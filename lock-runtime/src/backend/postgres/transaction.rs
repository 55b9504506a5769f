//! A lock bound to the application's own transaction: held until that transaction's COMMIT or
//! ROLLBACK, whichever ends it, with a fencing token taken in the same transaction.

use std::time::Duration;

use sqlx::postgres::PgConnection;
use sqlx::{Executor as _, Row};

use super::errors;
use super::sql;
use crate::error::LockError;
use crate::fence::{self, Fence, postgres::FenceTable};
use crate::store::{Key, Shape};

/// A lock held by a transaction of the application's ([`lock_in_transaction`]): released when
/// that transaction ends, by COMMIT or ROLLBACK, and only then; nothing to release by hand.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransactionLock {
    key: String,
    fence: u64,
    resource: String,
    holder: String,
}

impl TransactionLock {
    /// The lock key, as the caller named it.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The fencing token, taken in the transaction: above every token handed out for this key
    /// before, by a manager or another transaction.
    pub fn fencing_token(&self) -> u64 {
        self.fence
    }

    /// The fencing token on the resource the lock guards (the resource
    /// [`lock_and_claim_in_transaction_under`] claimed, or else the key), with the
    /// transaction's id as its holder id. For
    /// [`fence::postgres::check`](crate::fence::postgres::check) and the other fences.
    pub fn fence(&self) -> Fence {
        Fence::new(self.resource.as_str(), self.fence).held_by(self.holder.as_str())
    }
}

/// Takes the lock `key` (under the default prefix `lock:`) for the transaction open on `conn`
/// (`&mut *tx` of a `sqlx::Transaction<'_, Postgres>`), or fails at once with
/// [`LockError::Busy`] if a manager's lease or another transaction holds it. The lock is the
/// same one that managers over the same database take (`LockManager::lock(key)`): each
/// excludes the other.
///
/// It is released when the transaction ends, by COMMIT or ROLLBACK, and a manager's waiter is
/// told at COMMIT. A failed statement in the transaction (which then refuses everything with
/// `25P02` until it is rolled back) leaves no lock behind once it is rolled back: the lock is
/// the transaction's advisory lock (`pg_advisory_xact_lock`), never a session's.
///
/// The transaction must run at READ COMMITTED (PostgreSQL's default): at a stricter isolation
/// its snapshot could miss a lease granted while it asked. A busy answer still holds the
/// advisory lock until the transaction ends (PostgreSQL cannot release it sooner): end the
/// transaction before trying again.
///
/// ```no_run
/// # async fn run(pool: sqlx::PgPool) -> Result<(), Box<dyn std::error::Error>> {
/// use lock_runtime::postgres::lock_in_transaction;
///
/// let mut tx = pool.begin().await?;
/// let lock = lock_in_transaction(&mut tx, "order:42").await?;
/// sqlx::query("UPDATE orders SET state = 'paid', fence = $1 WHERE id = 42")
///     .bind(lock.fencing_token() as i64)
///     .execute(&mut *tx)
///     .await?;
/// tx.commit().await?; // releases the lock
/// # Ok(())
/// # }
/// ```
pub async fn lock_in_transaction(
    conn: &mut PgConnection,
    key: &str,
) -> Result<TransactionLock, LockError> {
    lock_in_transaction_under(conn, "lock:", key).await
}

/// [`lock_in_transaction`] under the key prefix `prefix` (the managers'
/// [`key_prefix`](crate::LockManagerBuilder::key_prefix)).
pub async fn lock_in_transaction_under(
    conn: &mut PgConnection,
    prefix: &str,
    key: &str,
) -> Result<TransactionLock, LockError> {
    take(conn, prefix, key, None).await
}

/// [`lock_in_transaction`] and a claim of the resource named by `key` on the fence table
/// `table` ([`fence::postgres`](crate::fence::postgres)), with the lock's fencing token, in
/// the same transaction and the same round trip (one message to the server): the lock and
/// the claim hold together until the transaction ends, and the transaction's writes commit
/// only under the claim.
///
/// A token drawn here is above every token the lock had before, so the claim is refused
/// ([`LockError::Fence`] with [`FenceError::Stale`](crate::fence::FenceError::Stale)) only
/// where the resource's fence came from elsewhere (another lock's tokens on the same resource
/// name): roll back. [`LockError::Busy`] as [`lock_in_transaction`], with no claim made.
///
/// ```no_run
/// # async fn run(pool: sqlx::PgPool) -> Result<(), Box<dyn std::error::Error>> {
/// use lock_runtime::fence::postgres::FenceTable;
/// use lock_runtime::postgres::lock_and_claim_in_transaction;
///
/// let mut tx = pool.begin().await?;
/// let lock = lock_and_claim_in_transaction(&mut tx, "order:42", &FenceTable::default()).await?;
/// sqlx::query("UPDATE orders SET state = 'paid' WHERE id = 42")
///     .execute(&mut *tx)
///     .await?;
/// tx.commit().await?; // releases the lock; `order:42`'s fence stays at lock.fencing_token()
/// # Ok(())
/// # }
/// ```
pub async fn lock_and_claim_in_transaction(
    conn: &mut PgConnection,
    key: &str,
    table: &FenceTable,
) -> Result<TransactionLock, LockError> {
    take(conn, "lock:", key, Some((key, table))).await
}

/// [`lock_and_claim_in_transaction`] under the key prefix `prefix`, claiming `resource`
/// (which need not be the key: one lock may guard a resource of another name).
pub async fn lock_and_claim_in_transaction_under(
    conn: &mut PgConnection,
    prefix: &str,
    key: &str,
    resource: &str,
    table: &FenceTable,
) -> Result<TransactionLock, LockError> {
    take(conn, prefix, key, Some((resource, table))).await
}

/// The lock `key` under `prefix` for the transaction open on `conn`, and the claim of
/// `claim`'s resource on its table if given: one message, two statements
/// ([`sql::lock_in_transaction`]).
async fn take(
    conn: &mut PgConnection,
    prefix: &str,
    key: &str,
    claim: Option<(&str, &FenceTable)>,
) -> Result<TransactionLock, LockError> {
    let stored = Key::new(prefix, key, Shape::Lock)?;
    let name = stored.name();
    let failed = |err: sqlx::Error| {
        let failure = errors::failure("postgres transaction", "acquire", Some(name), err);
        LockError::from_failure("acquire", Some(key), "postgres transaction", failure)
    };
    let claim_sql = claim.map(|(resource, table)| {
        table.claim_from(&format!(
            "SELECT {}, fence, holder FROM drawn",
            sql::text(resource)
        ))
    });
    let statement = sql::lock_in_transaction(name, claim_sql.as_deref());
    // The connection's `Executor` method (a boxed `Send` future), not `RawSql::fetch_all`: with
    // that, a caller's future could not be given to `tokio::spawn`.
    let rows = conn
        .fetch_all(sqlx::raw_sql(&statement))
        .await
        .map_err(failed)?;
    let [first, second] = rows.as_slice() else {
        return Err(failed(sqlx::Error::Protocol(format!(
            "the transaction lock's two statements answered {} rows, not 2",
            rows.len()
        ))));
    };
    let isolation: String = first.try_get("isolation").map_err(failed)?;
    if isolation != "read committed" {
        return Err(LockError::Config(format!(
            "lock `{key}` cannot be taken in a transaction at {isolation}: its snapshot could \
             miss a lease granted while it asked; take it in a READ COMMITTED transaction"
        )));
    }
    let busy = |retry_after: Option<Duration>| LockError::Busy {
        key: key.to_owned(),
        waited: Duration::ZERO,
        retry_after,
        blocker: None,
        deadlock: None,
    };
    if !first.try_get::<bool, _>("ok").map_err(failed)? {
        return Err(busy(None));
    }
    let Some(token) = second.try_get::<Option<i64>, _>("fence").map_err(failed)? else {
        let left: Option<i64> = second.try_get("left_ms").map_err(failed)?;
        return Err(busy(
            left.and_then(|ms| u64::try_from(ms).ok())
                .map(Duration::from_millis),
        ));
    };
    let token = u64::try_from(token).unwrap_or(0);
    let holder: Option<String> = second.try_get("holder").map_err(failed)?;
    let lock = TransactionLock {
        key: key.to_owned(),
        fence: token,
        resource: claim.map_or(key, |(resource, _)| resource).to_owned(),
        holder: holder.unwrap_or_default(),
    };
    if claim.is_some() {
        let claimed: Option<i64> = second.try_get("claimed").map_err(failed)?;
        // The claim's row comes back whenever a token was drawn; none would be a bug here.
        let claimed = claimed.ok_or_else(|| {
            failed(sqlx::Error::Protocol(
                "the claim answered no fence".to_owned(),
            ))
        })?;
        let claimed_by: Option<String> = second.try_get("claimed_by").map_err(failed)?;
        fence::table::claimed(&lock.fence(), claimed, claimed_by.as_deref())?;
    }
    Ok(lock)
}
