//! Locks in a PostgreSQL table (feature `postgres`): leases judged by the database's clock,
//! fencing tokens from a sequence, releases and notices told by `NOTIFY`, every step one statement sent
//! with the simple query protocol so that PgBouncer in transaction mode carries it
//! (docs/POSTGRES.md).

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use sqlx::Row;
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions, PgRow};

use crate::store::{
    Acquire, Ask, Booking, BoxFuture, Changes, Inspect, Key, Notice, Release, Renewal, Shape,
    Stolen, Store, StoreError, WaitsUpdate,
};

mod errors;
mod feed;
mod holder;
mod inspect;
pub(crate) mod settings;
pub(crate) mod sql;
mod steps;
pub(crate) mod transaction;

use errors::failure;
use feed::{Hearing, Stop, Told};
use holder::Holder;
use settings::Listen;
use settings::PostgresOptions;
use steps::Db;
use tokio::sync::oneshot;

/// The most leases one renewal statement renews; a larger batch is sent as several.
const RENEW_CHUNK: usize = 500;

/// Locks in a PostgreSQL table. Made by `LockManager::connect("postgres://...")`, by
/// [`LockManagerBuilder::postgres`](crate::LockManagerBuilder::postgres) over a pool of the
/// application's, or by [`PostgresStore::connect`] / [`PostgresStore::from_pool`] to share one
/// store between several managers (through
/// [`LockManagerBuilder::store`](crate::LockManagerBuilder::store)).
///
/// Each lock it takes records its holder in the row: host, process id, app name, and when the
/// holder began its attempt; a busy answer names that holder
/// ([`Blocker`](crate::store::Blocker), with its fencing token) and `lockctl` shows it. A
/// manager built over a URL or a pool records its
/// [`app_name`](crate::LockManagerBuilder::app_name), or nothing with
/// [`holder_metadata(false)`](crate::LockManagerBuilder::holder_metadata); a store made by
/// [`connect`](Self::connect) or [`from_pool`](Self::from_pool) records host and pid, no app
/// name.
pub struct PostgresStore {
    db: Db,
    server: String,
    told: Arc<Told>,
    hearing: Hearing,
    /// The channel notices are told on ([`sql::notice_channel`]).
    notices: String,
    /// Ends the listening or polling task with the store.
    _feed: Stop,
}

impl std::fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresStore")
            .field("server", &self.server)
            .field("hearing", &self.hearing)
            .field("notices", &self.notices)
            .finish_non_exhaustive()
    }
}

/// Refuses a standby, makes the tables and functions or brings them up to date when one is
/// missing (or, with `create_tables=false`, refuses to go on without them), and answers whether
/// the server is reached directly: it answers on the port connected to (over TCP), or on none
/// (over a unix socket).
async fn prepare(pool: &PgPool, options: &PostgresOptions, at: &str) -> Result<bool, StoreError> {
    let probe = sqlx::raw_sql(&sql::probe())
        .fetch_one(pool)
        .await
        .map_err(|err| failure(at, "connect", None, err))?;
    if probe.try_get::<bool, _>("standby").unwrap_or(false) {
        return Err(StoreError::permanent(format!(
            "{at} is a read-only standby (pg_is_in_recovery() is true): locks are written, so \
             connect to the primary"
        )));
    }
    let tables = probe.try_get::<bool, _>("tables").unwrap_or(false);
    let functions = probe.try_get::<bool, _>("functions").unwrap_or(false);
    if !(tables && functions) {
        if !options.create_tables {
            return Err(missing_schema(at, tables));
        }
        sqlx::raw_sql(&sql::create_schema())
            .execute(pool)
            .await
            .map_err(|err| failure(at, "create the tables and functions", None, err))?;
    }
    let answered: Option<i32> = probe.try_get("port").ok().flatten();
    let connected = pool.connect_options();
    Ok(match connected.get_socket() {
        Some(_) => answered.is_none(),
        None => answered == Some(i32::from(connected.get_port())),
    })
}

/// The channel the managers over the tables `pool` finds tell each other notices on.
async fn notice_channel(pool: &PgPool, at: &str) -> Result<String, StoreError> {
    let rows = sqlx::raw_sql(&sql::notice_channel())
        .fetch_all(pool)
        .await
        .map_err(|err| failure(at, "name the channel of notices", None, err))?;
    rows.first()
        .and_then(|row| row.try_get::<String, _>("channel").ok())
        .ok_or_else(|| {
            StoreError::permanent(format!(
                "{at}: the table {} is not on the search_path of the store's connections",
                sql::TABLE
            ))
        })
}

/// The refusal of a database that lacks the tables, or (`tables` true) the functions of this
/// version, with `create_tables=false`: what to run.
fn missing_schema(at: &str, tables: bool) -> StoreError {
    let missing = if tables {
        format!(
            "the functions {} or the table {} are missing (the tables were made by an earlier \
             version, or by hand)",
            sql::FUNCTIONS.join(", "),
            sql::RECORDS
        )
    } else {
        format!(
            "the tables {} and {} are missing",
            sql::TABLE,
            sql::SEQUENCE
        )
    };
    StoreError::permanent(format!(
        "{at}: {missing} and create_tables is false: run the SQL in docs/POSTGRES.md \
         (lock_runtime::postgres::SCHEMA_SQL; it keeps existing rows and is safe to run again), \
         or let connect create them"
    ))
}

/// The connect options of `url` as this store uses them: no statement cache (nothing named is
/// prepared) and no `extra_float_digits` startup parameter, which PgBouncer refuses unless it
/// is told to ignore it.
fn connect_options(url: &str, shown: &str) -> Result<PgConnectOptions, StoreError> {
    let options =
        PgConnectOptions::from_str(url).map_err(|err| errors::connect_failure(shown, url, &err))?;
    Ok(options.statement_cache_capacity(0).extra_float_digits(None))
}

impl PostgresStore {
    /// Connects to the database at `url` (`postgres://` or `postgresql://`, with the query
    /// parameters of [`PostgresOptions`]), refuses a standby, creates the tables unless told
    /// not to, and starts hearing releases and notices. Requests wait at most `request_timeout` for a
    /// connection of the pool.
    pub async fn connect(
        url: &str,
        request_timeout: Duration,
    ) -> Result<PostgresStore, StoreError> {
        let shown = crate::url::redact(url);
        let read = settings::read(url)?;
        let options = connect_options(&read.url, &shown)?;
        let pool = PgPoolOptions::new()
            .max_connections(read.options.max_connections)
            .acquire_timeout(request_timeout)
            // No ping before each statement (one round trip per step): a connection the
            // server closed fails its statement, which is sent again on another (Db::rows).
            .test_before_acquire(false)
            .connect_with(options.clone())
            .await
            .map_err(|err| errors::connect_failure(&shown, url, &err))?;
        let listen = match &read.options.listen_url {
            Some(listen_url) => connect_options(listen_url, &crate::url::redact(listen_url))?,
            None => options,
        };
        // One connection, kept: the listener's (made again by the listener if it breaks).
        let listen = PgPoolOptions::new()
            .max_connections(1)
            .max_lifetime(None)
            .idle_timeout(None)
            .connect_lazy_with(listen);
        Self::open(pool, Some(listen), read.options, settings::server_of(url)).await
    }

    /// A store over a pool of the application's. The listening connection is taken from the
    /// pool and kept, unless [`PostgresOptions::listen_url`] names another server.
    pub async fn from_pool(
        pool: PgPool,
        options: PostgresOptions,
    ) -> Result<PostgresStore, StoreError> {
        let connected = pool.connect_options();
        let server = format!("{}:{}", connected.get_host(), connected.get_port());
        let listen = match &options.listen_url {
            Some(listen_url) => {
                let listen = connect_options(listen_url, &crate::url::redact(listen_url))?;
                Some(
                    PgPoolOptions::new()
                        .max_connections(1)
                        .connect_lazy_with(listen),
                )
            }
            None => None,
        };
        Self::open(pool, listen, options, server).await
    }

    /// Checks the server, makes the tables, and starts hearing releases and notices.
    async fn open(
        pool: PgPool,
        listen: Option<PgPool>,
        options: PostgresOptions,
        server: String,
    ) -> Result<PostgresStore, StoreError> {
        let at = format!("postgres {server}");
        let direct = prepare(&pool, &options, &at).await?;
        let notices = notice_channel(&pool, &at).await?;
        let told = Arc::new(Told::default());
        // A listen URL names a server to LISTEN on directly; without one, the store's own.
        let listen_here =
            options.listen_url.is_some() || options.listen == Listen::Always || direct;
        let listen = match listen {
            _ if options.listen == Listen::Never => None,
            listen if listen_here => Some(listen.unwrap_or_else(|| pool.clone())),
            _ => {
                tracing::warn!(
                    server = %server,
                    "the server answers on another port than the one connected to (a pooler \
                     between?): waiters poll every {:?} rather than LISTEN; give a direct \
                     ?listen_url= to be told of releases",
                    options.poll_interval
                );
                None
            }
        };
        let heard = match listen {
            Some(listen) => match feed::listen(&pool, &listen, &told, &notices).await {
                Ok(Some(stop)) => Some(stop),
                Ok(None) => {
                    tracing::warn!(
                        server = %server,
                        "a notification sent to the server was not heard back on the LISTEN \
                         connection (a pooler in transaction mode between?): waiters poll every \
                         {:?}, and notices (release requests, steals) go unheard; give a direct \
                         ?listen_url= to be told of them",
                        options.poll_interval
                    );
                    None
                }
                Err(err) => {
                    tracing::warn!(
                        server = %server,
                        error = %failure(&at, "listen", None, err),
                        "cannot LISTEN for lock releases: waiters poll every {:?}, and notices \
                         (release requests, steals) go unheard",
                        options.poll_interval
                    );
                    None
                }
            },
            None => None,
        };
        let (hearing, feed) = match heard {
            Some(stop) => (Hearing::Listen, stop),
            None => (
                Hearing::Poll(options.poll_interval),
                feed::poll(pool.clone(), &told, options.poll_interval),
            ),
        };
        Ok(PostgresStore {
            db: Db {
                pool,
                describe: at.into(),
                holder: Some(Arc::new(Holder::here(None))),
            },
            server,
            told,
            hearing,
            notices,
            _feed: feed,
        })
    }

    /// What the rows this store writes record of their holder: this process's host and pid,
    /// and `app` (none if `None` or empty), or with `record` false nothing (the columns NULL).
    /// A manager's builder passes its [`app_name`](crate::LockManagerBuilder::app_name) and
    /// [`holder_metadata`](crate::LockManagerBuilder::holder_metadata).
    pub(crate) fn recording(mut self, app: Option<&str>, record: bool) -> Self {
        self.db.holder = record.then(|| Arc::new(Holder::here(app)));
        self
    }

    /// Whether releases are heard by LISTEN (`true`) or by polling. Notices (release
    /// requests, steals) are heard only by LISTEN.
    pub fn listens(&self) -> bool {
        self.hearing == Hearing::Listen
    }

    /// Runs `statement` and answers its rows; a failure named with `operation` and `key`.
    async fn rows(
        &self,
        operation: &str,
        key: Option<&str>,
        statement: &str,
    ) -> Result<Vec<PgRow>, StoreError> {
        self.db.rows(operation, key, statement).await
    }

    /// Sends the acquire from a task of its own, which finishes the statement even if the
    /// caller stops waiting for it, and then gives back what it took: the statement runs on one
    /// connection of the pool and the caller's give-back on another, which could otherwise
    /// overtake it and find nothing to release.
    fn acquire_in_task(
        &self,
        key: &Key,
        token: &str,
        ttl: Duration,
        ask: Ask,
    ) -> BoxFuture<'static, Result<Acquire, StoreError>> {
        let (db, name, token) = (self.db.clone(), key.name().to_owned(), token.to_owned());
        let (answer, answered) = oneshot::channel();
        tokio::spawn(async move {
            let got = db.acquire(&name, &token, ttl, ask).await;
            if let Err(Ok(Acquire::Acquired { .. })) = answer.send(got) {
                // Nobody waits for it any more: give it back, after the grant.
                let _ = db.release(&name, &token, Duration::ZERO).await;
            }
        });
        let describe = self.db.describe.clone();
        let name = key.name().to_owned();
        Box::pin(async move {
            answered.await.unwrap_or_else(|_| {
                Err(StoreError::permanent(format!(
                    "{describe}: acquire of `{name}`: the task that sent it ended without an answer \
                     (the runtime is shutting down)"
                )))
            })
        })
    }

    async fn release_now(
        &self,
        key: &Key,
        token: &str,
        keep: Duration,
    ) -> Result<Release, StoreError> {
        let answer = self.db.release(key.name(), token, keep).await?;
        if answer == Release::Released && self.hearing != Hearing::Listen {
            // Where the store polls, this manager's waiters need not wait for the next look.
            self.told.released(key.name());
        }
        Ok(answer)
    }

    async fn renew_chunk(&self, batch: &[Renewal], from: usize, book: Booking<'_>) {
        let indices: Vec<usize> = (from..from + batch.len()).collect();
        let statement = sql::renew(
            batch
                .iter()
                .enumerate()
                .map(|(index, renewal)| (index, renewal.key(), renewal.token(), renewal.ttl())),
        );
        let renewed = self.rows("renew", None, &statement).await.map(|rows| {
            let mut answers = vec![Some(false); batch.len()];
            for row in rows {
                let index = row
                    .try_get::<i64, _>(0)
                    .ok()
                    .and_then(|index| usize::try_from(index).ok());
                if let Some(answer) = index.and_then(|index| answers.get_mut(index)) {
                    *answer = Some(true);
                }
            }
            answers
        });
        book(&indices, renewed);
    }
}

impl Store for PostgresStore {
    fn describe(&self) -> &str {
        &self.db.describe
    }

    fn server(&self) -> &str {
        &self.server
    }

    /// The plain lock only: semaphores and read-write locks are refused, naming the shape.
    fn supports(&self, shape: Shape) -> Result<(), &'static str> {
        match shape {
            Shape::Lock => Ok(()),
            Shape::Semaphore { .. } => Err("the PostgreSQL store does not keep semaphores yet"),
            Shape::Read | Shape::Write => {
                Err("the PostgreSQL store does not keep read-write locks yet")
            }
        }
    }

    fn acquire<'a>(
        &'a self,
        key: &'a Key,
        token: &'a str,
        ttl: Duration,
        ask: Ask,
    ) -> BoxFuture<'a, Result<Acquire, StoreError>> {
        self.acquire_in_task(key, token, ttl, ask)
    }

    /// No: an acquire whose caller stopped waiting gives back what it took once its statement
    /// is done, which could remove a retry's grant under the same token.
    fn retry_with_same_token(&self) -> bool {
        false
    }

    fn renew<'a>(&'a self, batch: &'a [Renewal], book: Booking<'a>) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            let chunks = batch
                .chunks(RENEW_CHUNK)
                .enumerate()
                .map(|(at, chunk)| self.renew_chunk(chunk, at * RENEW_CHUNK, book));
            futures_util::future::join_all(chunks).await;
        })
    }

    fn release<'a>(
        &'a self,
        key: &'a Key,
        token: &'a str,
        keep: Duration,
    ) -> BoxFuture<'a, Result<Release, StoreError>> {
        Box::pin(self.release_now(key, token, keep))
    }

    /// Every release is told: by NOTIFY where the store listens, else found by polling.
    fn notifies(&self) -> bool {
        true
    }

    /// Where the store LISTENs (see [`listens`](Self::listens)): a store that polls hears
    /// no notices, so it does not say it carries them.
    fn announces(&self) -> bool {
        self.hearing == Hearing::Listen
    }

    /// One `pg_notify` on the channel of notices, heard by every manager that LISTENs on the
    /// same database and schema.
    fn announce<'a>(&'a self, notice: &'a Notice) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(self.db.announce(&self.notices, notice))
    }

    /// Also where the store polls: the steal is one statement either way, and a victim that
    /// does not hear it loses its lease at its next renewal.
    fn steals(&self) -> bool {
        true
    }

    /// One statement (`lock_runtime_steal`): takes the row, draws the fencing token from the
    /// sequence, and tells the victim by `pg_notify`, delivered at its commit. Refused where a
    /// transaction holds the lock ([`lock_in_transaction`](crate::postgres::lock_in_transaction)).
    fn steal<'a>(
        &'a self,
        key: &'a Key,
        token: &'a str,
        ttl: Duration,
        from: &'a str,
    ) -> BoxFuture<'a, Result<Stolen, StoreError>> {
        Box::pin(self.db.steal(key.name(), token, ttl, &self.notices, from))
    }

    /// In the table `lock_runtime_records`, by the database's clock.
    fn keeps_waits(&self) -> bool {
        true
    }

    /// One call of `lock_runtime_records_update` (one statement, one round trip, one
    /// transaction): the writers of one name take turns on an advisory lock, a write moves
    /// the expiry of every record of the name to `keep` from now, and a read answers the
    /// records not expired.
    fn waits<'a>(
        &'a self,
        key: &'a str,
        update: &'a WaitsUpdate,
    ) -> BoxFuture<'a, Result<Vec<(String, String)>, StoreError>> {
        Box::pin(self.db.records(key, update))
    }

    fn attach(&self, changes: &Changes) {
        self.told.attach(changes);
    }

    fn watch<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<(), StoreError>> {
        self.told.watch(key);
        Box::pin(std::future::ready(Ok(())))
    }

    fn unwatch(&self, key: &str) {
        self.told.unwatch(key);
    }

    fn inspect(&self) -> Option<&dyn Inspect> {
        Some(self)
    }
}
