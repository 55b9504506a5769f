//! Locks in PostgreSQL (feature `postgres`): `LockManager::connect("postgres://...")`,
//! [`LockManagerBuilder::postgres`](crate::LockManagerBuilder::postgres) over an application's
//! `sqlx::PgPool`, or a [`PostgresStore`] shared by several managers. See `docs/POSTGRES.md`.
//!
//! - **Leases in a table** (`lock_runtime_locks`), judged by the database's clock
//!   (`clock_timestamp()`); acquire, renew (a whole batch) and release are one statement each,
//!   owner-checked; a released lock leaves no row.
//! - **Fencing tokens** from a sequence (`lock_runtime_fences`): strictly increasing across
//!   holders, restarts and crash recovery (not across a failover to an asynchronous replica
//!   that missed the last commits).
//! - **Holders named**: each row records its holder's host, pid, app name and since when; a
//!   busy answer's [`Blocker`](crate::store::Blocker) names it with its fencing token, and
//!   `lockctl` shows it (none with
//!   [`holder_metadata(false)`](crate::LockManagerBuilder::holder_metadata)).
//! - **Waiting by notification**: a release does `pg_notify` in the same statement; one
//!   listening connection per store. Through a pooler in transaction mode, give a direct
//!   `listen_url`, or waiters poll.
//! - **Pooler-safe**: the simple query protocol, no prepared statements, no session state.
//! - **A lock bound to a transaction of the application's** ([`lock_in_transaction`]):
//!   released by its COMMIT or ROLLBACK, its fencing token from the same transaction, in one
//!   round trip; with [`lock_and_claim_in_transaction`], the claim of the resource it guards on
//!   a [fence table](crate::fence::postgres) too, in the same round trip.
//! - The plain lock only: semaphores and read-write locks are refused, naming the shape.

pub use crate::backend::postgres::PostgresStore;
pub use crate::backend::postgres::settings::{
    DEFAULT_MAX_CONNECTIONS, DEFAULT_POLL_INTERVAL, PostgresOptions,
};
pub use crate::backend::postgres::transaction::{
    TransactionLock, lock_and_claim_in_transaction, lock_and_claim_in_transaction_under,
    lock_in_transaction, lock_in_transaction_under,
};

/// The tables and the functions the store's steps call (`lock_runtime_acquire`,
/// `lock_runtime_release`, `lock_runtime_renew`), as `connect` creates them when one is missing:
/// for migrations that own the schema (then connect with `create_tables=false`). Safe to run
/// again, and over the objects of an earlier version: it adds what is missing and replaces the
/// functions, keeping the rows.
pub const SCHEMA_SQL: &str = crate::backend::postgres::sql::SCHEMA;
