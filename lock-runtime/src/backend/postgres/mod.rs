//! Locks in a PostgreSQL table (feature `postgres`): leases judged by the database's clock,
//! fencing tokens from a sequence, releases told by `NOTIFY`, every step one statement sent
//! with the simple query protocol so that PgBouncer in transaction mode carries it
//! (docs/POSTGRES.md).

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use sqlx::Row;
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions, PgRow};

use crate::store::{
    Acquire, Ask, Booking, BoxFuture, Changes, HolderId, Inspect, Key, Release, Renewal, Shape,
    Store, StoreError,
};

mod errors;
mod feed;
mod inspect;
pub(crate) mod settings;
pub(crate) mod sql;

use errors::failure;
use feed::{Hearing, Stop, Told};
use settings::PostgresOptions;

/// The most leases one renewal statement renews; a larger batch is sent as several.
const RENEW_CHUNK: usize = 500;

/// Locks in a PostgreSQL table. Made by `LockManager::connect("postgres://...")`, by
/// [`LockManagerBuilder::postgres`](crate::LockManagerBuilder::postgres) over a pool of the
/// application's, or by [`PostgresStore::connect`] / [`PostgresStore::from_pool`] to share one
/// store between several managers (through
/// [`LockManagerBuilder::store`](crate::LockManagerBuilder::store)).
pub struct PostgresStore {
    pool: PgPool,
    describe: String,
    server: String,
    told: Arc<Told>,
    hearing: Hearing,
    /// Ends the listening or polling task with the store.
    _feed: Stop,
}

impl std::fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresStore")
            .field("server", &self.server)
            .field("hearing", &self.hearing)
            .finish_non_exhaustive()
    }
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
    /// not to, and starts hearing releases. Requests wait at most `request_timeout` for a
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

    /// Checks the server, makes the tables, and starts hearing releases.
    async fn open(
        pool: PgPool,
        listen: Option<PgPool>,
        options: PostgresOptions,
        server: String,
    ) -> Result<PostgresStore, StoreError> {
        let at = format!("postgres {server}");
        let probe = sqlx::raw_sql(sql::PROBE)
            .fetch_one(&pool)
            .await
            .map_err(|err| failure(&at, "connect", None, err))?;
        if probe.try_get::<bool, _>("standby").unwrap_or(false) {
            return Err(StoreError::permanent(format!(
                "{at} is a read-only standby (pg_is_in_recovery() is true): locks are written, \
                 so connect to the primary"
            )));
        }
        let tables = probe.try_get::<bool, _>("tables").unwrap_or(false);
        if options.create_tables {
            sqlx::raw_sql(&sql::create_schema())
                .execute(&pool)
                .await
                .map_err(|err| failure(&at, "create the tables", None, err))?;
        } else if !tables {
            return Err(StoreError::permanent(format!(
                "{at}: the tables {} and {} are missing and create_tables is false: create them \
                 with the SQL in docs/POSTGRES.md (lock_runtime::postgres::SCHEMA_SQL), or let \
                 connect create them",
                sql::TABLE,
                sql::SEQUENCE
            )));
        }
        let told = Arc::new(Told::default());
        let mut hearing = Hearing::Poll(options.poll_interval);
        let mut feed = None;
        if options.listen {
            let listen = listen.unwrap_or_else(|| pool.clone());
            match feed::listen(&pool, &listen, &told).await {
                Ok(Some(stop)) => {
                    hearing = Hearing::Listen;
                    feed = Some(stop);
                }
                Ok(None) => tracing::warn!(
                    server = %server,
                    "a NOTIFY sent through the store's connections is not heard on its listening \
                     connection (a pooler in transaction mode between?): waiters poll every {:?}; \
                     give a direct ?listen_url= to be told of releases",
                    options.poll_interval
                ),
                Err(err) => tracing::warn!(
                    server = %server,
                    error = %failure(&at, "listen", None, err),
                    "cannot LISTEN for lock releases: waiters poll every {:?}",
                    options.poll_interval
                ),
            }
        }
        let feed = match feed {
            Some(feed) => feed,
            None => feed::poll(pool.clone(), &told, options.poll_interval),
        };
        Ok(PostgresStore {
            describe: format!("postgres {server}"),
            pool,
            server,
            told,
            hearing,
            _feed: feed,
        })
    }

    /// Whether releases are heard by LISTEN (`true`) or by polling.
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
        sqlx::raw_sql(statement)
            .fetch_all(&self.pool)
            .await
            .map_err(|err| failure(&self.describe, operation, key, err))
    }

    async fn acquire_now(
        &self,
        key: &Key,
        token: &str,
        ttl: Duration,
    ) -> Result<Acquire, StoreError> {
        let name = key.name();
        let holder = i64::try_from(HolderId::of_token(token).get()).unwrap_or(i64::MAX);
        let rows = self
            .rows(
                "acquire",
                Some(name),
                &sql::acquire(name, token, holder, ttl),
            )
            .await?;
        let Some(row) = rows.first() else {
            // The holder's row was made while the statement ran: ask again soon.
            return Ok(Acquire::busy(Some(Duration::from_millis(5)), false));
        };
        let read = |column: &str| errors::column::<Option<i64>>(&self.describe, name, row, column);
        if let Some(fence) = read("fence")? {
            return Ok(Acquire::Acquired {
                fence: u64::try_from(fence).unwrap_or(0),
            });
        }
        let left = read("left_ms")?.unwrap_or(0);
        Ok(Acquire::Busy {
            remaining: Some(Duration::from_millis(u64::try_from(left).unwrap_or(0))),
            holder: read("holder")?
                .and_then(|holder| HolderId::from_raw(u64::try_from(holder).ok()?)),
            in_line: false,
            blocker: None,
        })
    }

    async fn release_now(
        &self,
        key: &Key,
        token: &str,
        keep: Duration,
    ) -> Result<Release, StoreError> {
        let name = key.name();
        let rows = self
            .rows("release", Some(name), &sql::release(name, token, keep))
            .await?;
        let row = rows.first().ok_or_else(|| {
            StoreError::permanent(format!(
                "{}: release of `{name}`: no answer row",
                self.describe
            ))
        })?;
        let mine = errors::column::<Option<bool>>(&self.describe, name, row, "mine")?;
        let other = errors::column::<bool>(&self.describe, name, row, "other")?;
        let answer = match mine {
            Some(true) => Release::Released,
            Some(false) => Release::Gone,
            None if other => Release::NotOwner,
            None => Release::Gone,
        };
        if answer == Release::Released && self.hearing != Hearing::Listen {
            // Where the store polls, this manager's waiters need not wait for the next look.
            self.told.released(name);
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
        &self.describe
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
        _ask: Ask,
    ) -> BoxFuture<'a, Result<Acquire, StoreError>> {
        Box::pin(self.acquire_now(key, token, ttl))
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
