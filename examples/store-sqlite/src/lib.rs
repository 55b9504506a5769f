//! A lock store over a SQLite file: locks shared by every process of one machine that opens the
//! same file, written outside `lock-runtime` against its public store seam
//! ([`lock_runtime::store`]) alone.
//!
//! ```no_run
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! use std::sync::Arc;
//! use lock_runtime::{LockManager, LockOptions};
//! use lock_store_sqlite::SqliteStore;
//!
//! let store = Arc::new(SqliteStore::open("/var/lib/shop/locks.db").await?);
//! let manager = LockManager::builder().store(store).build().await?;
//! let guard = manager.lock("order:42", LockOptions::new()).await?;
//! // ... the work the lock protects, with `guard.fencing_token()` for the writes it makes.
//! guard.release().await?;
//! # Ok(())
//! # }
//! ```
//!
//! What it keeps, and how:
//!
//! - **A single-machine store.** A lease is judged by the system wall clock (ms since the Unix
//!   epoch), read inside each step's write transaction: every process that opens the file runs
//!   on the machine that holds it and reads the same clock. SQLite's file locks do not hold
//!   over a network file system, and two machines' clocks disagree: do not share the file
//!   between machines. A step of the wall clock (set by hand; NTP slews it instead) moves
//!   every lease's end by as much: backwards, leases last longer; forwards, they end early,
//!   and another process may take a lock whose holder has not yet learnt it lost it (the
//!   fencing token is what the protected writes check).
//! - **Every step is one `BEGIN IMMEDIATE` transaction**: acquire, the renewal of a whole
//!   batch, release. Renew and release check the owner token. Blocking SQLite calls run on
//!   tokio's blocking pool ([`tokio::task::spawn_blocking`]), one at a time per store over its
//!   one connection; another process's transaction is waited for up to the busy timeout, then
//!   the step fails as transient and the manager retries it within the caller's wait.
//! - **Fencing tokens** come from a counter per key in a table of their own: strictly
//!   increasing, kept across releases, expiries and restarts (the database is written in WAL
//!   mode with `synchronous = FULL`, so a token is on disk before it is handed out).
//! - **Busy answers** give the holder's remaining lease and its
//!   [`HolderId::of_token`](lock_runtime::store::HolderId::of_token).
//! - **Shapes**: the plain lock and semaphores (their holders counted in one table); read-write
//!   locks are refused ([`Store::supports`]).
//! - **Releases are told** ([`Store::notifies`]): a waiter tries again at once rather than
//!   at the end of the holder's lease. A release through this store is told at once to every
//!   manager built over it; each release is also written, in the same transaction, to a feed
//!   of releases in the file, which a thread of every store over the file reads every
//!   [`POLL`] (20 ms): a release in another process wakes a waiter here within about that.
//!   An expiry is not told: the first waiter watches the lease it was told of, and tries again
//!   when it ends. Share one store between the managers of a process: each store has a
//!   thread and two connections.
//! - **Inspection** ([`Store::inspect`]): its locks and semaphores are listed, shown and
//!   force-released through `lockctl` (the `lockctl-sqlite` binary of this package, which
//!   registers the `sqlite://` scheme), its fencing token and lease read from the table; a
//!   force-release is written to the feed, so waiters in every process try again.
//! - **Not kept**: a fair line of waiters (`fair = true` is refused), handing a lock straight
//!   to a waiter, published waits for cross-process deadlock detection (each process sees its
//!   own waits).
//!
//! The rows of ended leases are deleted by the next acquire; one row per key ever locked stays
//! in `fences`, since its last token must never be handed out again.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use lock_runtime::store::{
    Acquire, Ask, Booking, BoxFuture, Changes, Inspect, Key, Release, Renewal, Shape, Store,
    StoreError, whole,
};
use rusqlite::{Connection, ErrorCode};

mod db;
mod feed;
mod inspect;

use db::Failure;
use feed::Told;

pub use feed::POLL;

/// How long a step waits for another connection's write transaction by default.
pub const DEFAULT_BUSY_TIMEOUT: Duration = Duration::from_secs(2);

/// Locks in a SQLite file, shared by every process of this machine that opens it. Give it to
/// [`LockManagerBuilder::store`](lock_runtime::LockManagerBuilder::store) in an `Arc`; several
/// managers over one `Arc` tell each other their releases (see the [crate] docs).
pub struct SqliteStore {
    conn: Arc<Mutex<Connection>>,
    /// The file, as messages name it.
    path: String,
    describe: String,
    /// The managers over this store, told of releases; the feed's thread holds it weakly and
    /// ends with the store.
    told: Arc<Told>,
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl SqliteStore {
    /// Opens the database at `path`, creating the file and its tables if need be, with the
    /// [`DEFAULT_BUSY_TIMEOUT`].
    pub async fn open(path: impl AsRef<Path>) -> Result<SqliteStore, StoreError> {
        SqliteStore::open_with_busy_timeout(path, DEFAULT_BUSY_TIMEOUT).await
    }

    /// Opens the database at `path` as [`open`](Self::open) does; a step waits up to `busy`
    /// for another connection's write transaction before it fails (as transient). Keep it
    /// below the manager's request timeout.
    pub async fn open_with_busy_timeout(
        path: impl AsRef<Path>,
        busy: Duration,
    ) -> Result<SqliteStore, StoreError> {
        let file: PathBuf = path.as_ref().to_owned();
        let shown = file.display().to_string();
        let opened = tokio::task::spawn_blocking(move || {
            let conn = db::open(&file, busy)?;
            Ok((conn, db::open_feed(&file, busy)?))
        })
        .await;
        let (conn, (feed, seen)) = match opened {
            Ok(Ok(opened)) => opened,
            Ok(Err(failure)) => return Err(error(&shown, "open", None, failure)),
            Err(gone) => {
                return Err(StoreError::permanent(format!(
                    "sqlite {shown}: open: {gone}"
                )));
            }
        };
        let told = Arc::new(Told::new());
        feed::start(feed, seen, Arc::downgrade(&told)).map_err(|err| {
            StoreError::permanent(format!(
                "sqlite {shown}: open: cannot start the thread that reads releases: {err}"
            ))
        })?;
        Ok(SqliteStore {
            conn: Arc::new(Mutex::new(conn)),
            describe: format!("sqlite {shown}"),
            path: shown,
            told,
        })
    }

    /// Runs `step` on the connection, on tokio's blocking pool; its failure named with
    /// `operation` and `key`.
    async fn run<T: Send + 'static>(
        &self,
        operation: &'static str,
        key: Option<&str>,
        step: impl FnOnce(&mut Connection) -> db::Step<T> + Send + 'static,
    ) -> Result<T, StoreError> {
        let conn = self.conn.clone();
        let done = tokio::task::spawn_blocking(move || {
            let mut conn = conn.lock().unwrap_or_else(PoisonError::into_inner);
            step(&mut conn)
        })
        .await;
        match done {
            Ok(Ok(answer)) => Ok(answer),
            Ok(Err(failure)) => Err(error(&self.path, operation, key, failure)),
            // The runtime is shutting down (or the step panicked): no answer will come.
            Err(gone) => Err(StoreError::permanent(format!(
                "sqlite {}: {operation}{}: {gone}",
                self.path,
                of_key(key)
            ))),
        }
    }
}

fn of_key(key: Option<&str>) -> String {
    key.map(|key| format!(" of `{key}`")).unwrap_or_default()
}

/// `failure` as the library's error: busy or locked database, transient; the rest permanent.
/// Names the file, the step and the key; never an owner token.
fn error(path: &str, operation: &str, key: Option<&str>, failure: Failure) -> StoreError {
    let at = format!("sqlite {path}: {operation}{}", of_key(key));
    match failure {
        Failure::PermitsDiffer { held, asked } => StoreError::config(format!(
            "{at}: the semaphore is held with {held} permits, this call declares {asked}: \
             declare one number of permits wherever it is taken"
        )),
        Failure::Unsupported(noun) => {
            StoreError::permanent(format!("{at}: the SQLite store does not keep a {noun}"))
        }
        Failure::Sqlite(err) => {
            let busy = matches!(
                err.sqlite_error_code(),
                Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked)
            );
            if busy {
                StoreError::transient(format!("{at}: {err}"))
            } else {
                StoreError::permanent(format!("{at}: {err}"))
            }
        }
    }
}

impl Store for SqliteStore {
    fn describe(&self) -> &str {
        &self.describe
    }

    /// The file's path: no credentials in it.
    fn server(&self) -> &str {
        &self.path
    }

    /// Plain locks and semaphores; read-write locks are refused.
    fn supports(&self, shape: Shape) -> Result<(), &'static str> {
        match shape {
            Shape::Lock | Shape::Semaphore { .. } => Ok(()),
            Shape::Read | Shape::Write => Err("the SQLite store does not keep read-write locks"),
            // A shape added to the library later: not kept until this store learns it.
            _ => Err("the SQLite store does not keep this kind of lock"),
        }
    }

    /// Releases made through this store are told to every manager over it; releases in other
    /// processes are learnt at the lease's end.
    fn notifies(&self) -> bool {
        true
    }

    fn attach(&self, changes: &Changes) {
        self.told.attach(changes);
    }

    /// Its locks and semaphores as `lockctl` lists, shows and force-releases them.
    fn inspect(&self) -> Option<&dyn Inspect> {
        Some(self)
    }

    /// No line is kept, so what the caller asks besides the lock changes nothing here: every
    /// release is told anyway.
    fn acquire<'a>(
        &'a self,
        key: &'a Key,
        token: &'a str,
        ttl: Duration,
        _ask: Ask,
    ) -> BoxFuture<'a, Result<Acquire, StoreError>> {
        let (owned, token) = (key.clone(), token.to_owned());
        Box::pin(self.run("acquire", Some(key.name()), move |conn| {
            db::acquire(conn, &owned, &token, ttl)
        }))
    }

    fn renew<'a>(&'a self, batch: &'a [Renewal], book: Booking<'a>) -> BoxFuture<'a, ()> {
        let leases: Vec<(String, String, Duration)> = batch
            .iter()
            .map(|renewal| {
                (
                    renewal.key().to_owned(),
                    renewal.token().to_owned(),
                    renewal.ttl(),
                )
            })
            .collect();
        Box::pin(async move {
            let renewed = self
                .run("renew", None, move |conn| db::renew(conn, &leases))
                .await;
            book(
                &whole(batch),
                renewed.map(|renewed| renewed.into_iter().map(Some).collect()),
            );
        })
    }

    fn release<'a>(
        &'a self,
        key: &'a Key,
        token: &'a str,
        keep: Duration,
    ) -> BoxFuture<'a, Result<Release, StoreError>> {
        let (owned, token, me) = (key.clone(), token.to_owned(), self.told.me().to_owned());
        Box::pin(async move {
            let answer = self
                .run("release", Some(key.name()), move |conn| {
                    db::release(conn, &owned, &token, keep, &me)
                })
                .await?;
            if answer == Release::Released {
                // Kept by `hold_at_least` too: waiters look again and learn the shorter lease.
                // Other stores over the file read it from the feed.
                self.told.released(key.name());
            }
            Ok(answer)
        })
    }
}
