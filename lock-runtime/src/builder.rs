//! Settings for a [`LockManager`], and the connection they make.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use crate::backend::FAIR_TURN;
use crate::backend::memory::MemoryBackend;
use crate::backend::redis::cluster::ClusterBackend;
use crate::backend::redis::connection::RedisSettings;
use crate::backend::redis::redlock::RedlockBackend;
use crate::backend::redis::replicas::{ReplicaAcks, ReplicaShortage};
use crate::backend::redis::sentinel::SentinelBackend;
use crate::backend::redis::single::RedisBackend;
use crate::background::Background;
use crate::client::Inner;
use crate::deadlock::{Deadlocks, Reach};
use crate::deployment::{Deployment, DeploymentKind};
use crate::error::LockError;
use crate::manager::LockManager;
use crate::options::{Deadlock, MAX_TTL};
use crate::shown::Exact;
use crate::store::{Changes, Store};
use crate::tls::{Certificates, TlsConfig};
use crate::url;
use crate::waiters::Waiters;
use crate::watchdog::Watchdog;

/// The longest request timeout accepted.
const MAX_REQUEST_TIMEOUT: Duration = Duration::from_secs(3600);

fn next_manager_id() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

fn host_list<I: IntoIterator<Item = S>, S: AsRef<str>>(hosts: I) -> String {
    let hosts: Vec<String> = hosts.into_iter().map(|h| h.as_ref().to_owned()).collect();
    hosts.join(",")
}

/// A PostgreSQL store that could not be made, as the caller sees it: a wrong setting as
/// [`LockError::Config`], the rest as a backend error at `url` (shown without its password).
#[cfg(feature = "postgres")]
fn connect_error(url: &str, failure: crate::store::StoreError) -> LockError {
    if failure.is_config() {
        return LockError::Config(failure.to_string());
    }
    LockError::from_failure("connect", None, &url::redact(url), failure)
}

/// Settings for a [`LockManager`]. Start with [`LockManager::builder`].
#[derive(Clone)]
pub struct LockManagerBuilder {
    url: Option<String>,
    prefix: String,
    app_name: Option<String>,
    request_timeout: Duration,
    fair_turn: Duration,
    holder_metadata: bool,
    deadlock: Deadlock,
    lock_delay: Duration,
    /// `wait_for_replicas`: how many, for how long. Kept apart from the shortage policy, and
    /// put together only in [`replica_acks`](Self::replica_acks), so that the setters may come
    /// in any order.
    replicas: Option<(u32, Duration)>,
    replica_shortage: ReplicaShortage,
    runtime: Option<tokio::runtime::Handle>,
    tls: Option<TlsConfig>,
    /// A store given as is, instead of a URL.
    store: Option<Arc<dyn Store>>,
    /// An application's PostgreSQL pool, instead of a URL.
    #[cfg(feature = "postgres")]
    postgres: Option<(sqlx::PgPool, crate::postgres::PostgresOptions)>,
}

impl std::fmt::Debug for LockManagerBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockManagerBuilder")
            .field("url", &self.url.as_deref().map(url::redact))
            .field("prefix", &self.prefix)
            .field("app_name", &self.app_name)
            .field("request_timeout", &self.request_timeout)
            .field("fair_turn", &self.fair_turn)
            .field("holder_metadata", &self.holder_metadata)
            .field("deadlock", &self.deadlock)
            .field("lock_delay", &self.lock_delay)
            .field("replica_acks", &self.replica_acks())
            .field("runtime", &self.runtime.is_some())
            .field("tls", &self.tls)
            .field("store", &self.store.as_ref().map(|store| store.describe()))
            .finish()
    }
}

impl Default for LockManagerBuilder {
    fn default() -> Self {
        LockManagerBuilder {
            url: None,
            prefix: "lock:".into(),
            app_name: None,
            request_timeout: Duration::from_secs(3),
            fair_turn: FAIR_TURN,
            holder_metadata: true,
            deadlock: Deadlock::Wait,
            lock_delay: Duration::ZERO,
            replicas: None,
            replica_shortage: ReplicaShortage::Fail,
            runtime: None,
            tls: None,
            store: None,
            #[cfg(feature = "postgres")]
            postgres: None,
        }
    }
}

impl LockManagerBuilder {
    /// The deployment, as for [`LockManager::connect`]. Required by [`build`](Self::build).
    pub fn url(mut self, url: impl Into<String>) -> Self {
        self.url = Some(url.into());
        self
    }

    /// The store to keep locks in, instead of a URL: a store of your own (see
    /// [`store`](crate::store)), or one shared by several managers (each stands for a process
    /// that shares the store). Every feature works over it as far as the store's capabilities
    /// go; an option that needs one the store lacks (`fair = true` without
    /// [`Store::fair`](crate::store::Store::fair), a semaphore the store does not keep) is
    /// refused with an error that names it.
    ///
    /// ```no_run
    /// # async fn run(my_store: std::sync::Arc<dyn lock_runtime::store::Store>) -> Result<(), lock_runtime::LockError> {
    /// use lock_runtime::{LockManager, LockOptions};
    ///
    /// let manager = LockManager::builder().store(my_store).build().await?;
    /// let guard = manager.lock("order:42", LockOptions::new()).await?;
    /// guard.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn store(mut self, store: Arc<dyn Store>) -> Self {
        self.store = Some(store);
        self
    }

    /// Locks in the PostgreSQL database of the application's pool `pool`, with the default
    /// [`PostgresOptions`](crate::postgres::PostgresOptions): the tables are created at build
    /// if missing, and one connection of the pool is kept to LISTEN for releases. Through
    /// PgBouncer in transaction mode, use [`postgres_with`](Self::postgres_with) and a direct
    /// `listen_url`. See `docs/POSTGRES.md`.
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// use lock_runtime::{LockManager, LockOptions};
    ///
    /// let pool = sqlx::PgPool::connect("postgres://app:secret@db-1/shop").await?;
    /// let manager = LockManager::builder().postgres(pool).build().await?;
    /// let guard = manager.lock("order:42", LockOptions::new()).await?;
    /// guard.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    #[cfg(feature = "postgres")]
    #[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
    pub fn postgres(self, pool: sqlx::PgPool) -> Self {
        self.postgres_with(pool, crate::postgres::PostgresOptions::new())
    }

    /// Locks in the PostgreSQL database of `pool`, with `options` (a direct URL to LISTEN on,
    /// tables left to migrations, ...).
    #[cfg(feature = "postgres")]
    #[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
    pub fn postgres_with(
        mut self,
        pool: sqlx::PgPool,
        options: crate::postgres::PostgresOptions,
    ) -> Self {
        self.postgres = Some((pool, options));
        self
    }

    /// Redis Cluster from seed nodes given as `host:port`; the same as the URL
    /// `redis+cluster://h1:p1,h2:p2,...`. For credentials or TLS, use [`url`](Self::url).
    pub fn cluster<I: IntoIterator<Item = S>, S: AsRef<str>>(self, seeds: I) -> Self {
        self.url(format!("redis+cluster://{}", host_list(seeds)))
    }

    /// The master named `master_name` by the sentinels at `host:port`; the same as
    /// `redis+sentinel://s1:p1,s2:p2/<master_name>`. For credentials or TLS, use
    /// [`url`](Self::url).
    pub fn sentinel<I: IntoIterator<Item = S>, S: AsRef<str>>(
        self,
        sentinels: I,
        master_name: &str,
    ) -> Self {
        self.url(format!(
            "redis+sentinel://{}/{master_name}",
            host_list(sentinels)
        ))
    }

    /// Redlock over independent masters given as `host:port`; the same as
    /// `redlock://h1:p1,h2:p2,h3:p3`. For credentials or TLS, use [`url`](Self::url).
    pub fn redlock<I: IntoIterator<Item = S>, S: AsRef<str>>(self, masters: I) -> Self {
        self.url(format!("redlock://{}", host_list(masters)))
    }

    /// Prepended to every lock key in Redis (default `lock:`): the lock `order:42` is stored at
    /// `lock:{order:42}`.
    pub fn key_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// Recorded in each lock's value (with host, pid and acquisition time) so a person looking
    /// at Redis can tell who holds a lock; on PostgreSQL, in the lock's row (its `app`
    /// column). A busy answer's [`Blocker`](crate::store::Blocker) and `lockctl` show it.
    pub fn app_name(mut self, name: impl Into<String>) -> Self {
        self.app_name = Some(name.into());
        self
    }

    /// How long one request to the server may take before it counts as failed (default 3 s).
    /// An acquire is also never given longer than its ttl.
    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }

    /// Has no effect: nothing is left to keep. A semaphore's and a read-write lock's fencing
    /// tokens come, as a lock's do, from a counter per Redis Cluster slot that never expires
    /// ([`inspect::fence_counter_key`](crate::inspect::fence_counter_key)), so a released lock,
    /// semaphore or read-write lock leaves no key. Earlier versions kept a semaphore's and a
    /// read-write lock's last token for this long after each grant; the next grant takes such a
    /// key over and deletes it. Kept so that code that calls it still compiles.
    #[deprecated(
        note = "has no effect: fencing tokens come from a counter per cluster slot that never \
                expires, and a released lock leaves no key; remove the call"
    )]
    pub fn fence_retention(self, _retention: Duration) -> Self {
        self
    }

    /// How long a lock freed for the first fair waiter in line (`fair = true`) waits for it
    /// (default 250 ms) before that waiter loses its place and the next one's turn begins. A
    /// waiter that is alive comes within one round trip of its turn's announcement; this is
    /// what a waiter that died in line costs the others, once. Raise it where a round trip
    /// to the server can take longer (a distant server, heavily loaded clients); lower it where
    /// dead waiters must cost less. Applies to Redis, Sentinel and Cluster (`memory://` keeps
    /// the default; Redlock has no fair mode).
    pub fn fair_turn(mut self, turn: Duration) -> Self {
        self.fair_turn = turn;
        self
    }

    /// Whether each lock records who holds it (default `true`): ` since=<ms> host=<h> pid=<p>
    /// app=<a>` after its token, so that `GET lock:{key}` (or `lockctl`) names the holder. Off,
    /// a lock is only `held token=<T> waiting=<0|1>`: about 60 bytes less to send and
    /// store per acquisition, and the holder cannot be told apart but by its token. On
    /// PostgreSQL the lock's row records them in its `host`, `pid`, `app` and `since` columns,
    /// NULL when off.
    pub fn holder_metadata(mut self, record: bool) -> Self {
        self.holder_metadata = record;
        self
    }

    /// What calls that set no [`LockOptions::deadlock`](crate::LockOptions::deadlock) do when
    /// their wait is part of a deadlock (default [`Deadlock::Wait`]: keep waiting until their
    /// wait budget runs out). With [`Deadlock::Fail`], the youngest wait of a cycle gives up
    /// within about a second with [`LockError::Deadlock`]. Deadlocks are found and logged
    /// either way.
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), lock_runtime::LockError> {
    /// use lock_runtime::{Deadlock, LockManager};
    ///
    /// let locks = LockManager::builder()
    ///     .url("redis://127.0.0.1:6379")
    ///     .deadlock(Deadlock::Fail)
    ///     .build()
    ///     .await?;
    /// # let _ = locks;
    /// # Ok(())
    /// # }
    /// ```
    pub fn deadlock(mut self, deadlock: Deadlock) -> Self {
        self.deadlock = deadlock;
        self
    }

    /// The lock-delay of the calls that set none
    /// ([`LockOptions::lock_delay`](crate::LockOptions::lock_delay), default none): after a
    /// lease lost without a release, nobody is granted the lock for `delay` more, while a
    /// release still hands it over at once. For a service whose locks all guard resources that
    /// cannot check fencing tokens; it applies to its elections' terms too.
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), lock_runtime::LockError> {
    /// use std::time::Duration;
    /// use lock_runtime::LockManager;
    ///
    /// let locks = LockManager::builder()
    ///     .url("redis://127.0.0.1:6379")
    ///     .lock_delay(Duration::from_secs(15))
    ///     .build()
    ///     .await?;
    /// # let _ = locks;
    /// # Ok(())
    /// # }
    /// ```
    pub fn lock_delay(mut self, delay: Duration) -> Self {
        self.lock_delay = delay;
        self
    }

    /// After each acquisition, wait until `replicas` replicas have acknowledged it (Redis
    /// `WAIT`), for at most `timeout` (and at most half the lease). Default: off.
    ///
    /// The acquire and its `WAIT` run on a connection of their own (from a small pool), since
    /// `WAIT` blocks the connection it is sent on: renewals and other locks never queue behind
    /// it. `WAIT` is sent only after a grant. If fewer replicas acknowledge, the grant is given
    /// back and the acquire retries within its `wait` budget, then fails with
    /// [`LockError::Backend`]; when fewer replicas are *connected* than asked for (after a
    /// failover, say), [`replica_shortage`](Self::replica_shortage) decides. A `timeout` of
    /// zero (which `WAIT` reads as "forever") or over a minute is refused at
    /// [`build`](Self::build), and so is Redlock, whose masters have no replicas to wait for.
    ///
    /// This narrows the window in which a failover loses a fresh lock: once acknowledged, the
    /// lock is in the memory of that many replicas, and a replica promoted by Sentinel or
    /// Cluster will normally be one of them. It does not make the lock durable or consistent:
    /// a replica can still be behind when it is promoted if it acknowledged a different write,
    /// replicas that restart without persistence forget it, renewals and releases are not
    /// waited for, and a granted acquire takes one replication round trip longer.
    pub fn wait_for_replicas(mut self, replicas: u32, timeout: Duration) -> Self {
        self.replicas = (replicas > 0).then_some((replicas, timeout));
        self
    }

    /// What [`wait_for_replicas`](Self::wait_for_replicas) does when fewer replicas are
    /// connected than it asks for: [`ReplicaShortage::Fail`] (the default) or
    /// [`ReplicaShortage::UseConnected`]. Before or after `wait_for_replicas`, alike.
    pub fn replica_shortage(mut self, policy: ReplicaShortage) -> Self {
        self.replica_shortage = policy;
        self
    }

    /// The replica settings, put together from both setters.
    fn replica_acks(&self) -> Option<ReplicaAcks> {
        self.replicas.map(|(count, timeout)| ReplicaAcks {
            count,
            timeout,
            shortage: self.replica_shortage,
        })
    }

    /// Runs all of the manager's background I/O on `runtime`: the connections' drivers, the
    /// release subscriber, Sentinel's failover listeners, Redlock's probes of silent masters,
    /// the renewal driver and the releases of dropped guards. Default: none, see below.
    ///
    /// Use it when one runtime outlives the others that use the manager: a dedicated runtime
    /// for I/O, or the main runtime of a program that also runs short-lived ones. Then a held
    /// lock keeps being renewed, and waiters keep hearing of releases, whichever other runtime
    /// shuts down. The pinned runtime must run as long as the manager is used; once it has
    /// shut down, requests fail with [`LockError::Backend`].
    ///
    /// The cost: each request is sent from a task spawned on that runtime (so that a reconnect
    /// lands there too), a few microseconds and one cross-thread wake-up per request on top of
    /// the round trip. Without it, requests go straight to the connection, and every background
    /// task runs on the runtime of the call that started it and is started again on the
    /// caller's runtime at its next use after that runtime shut down (as with one runtime per
    /// `#[tokio::test]`); a lock held on one runtime while another, which ran the renewal
    /// driver, shuts down is renewed again only once the manager is next used.
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use lock_runtime::{LockManager, LockOptions};
    ///
    /// // A runtime of its own for the lock manager's I/O, alive as long as the program.
    /// let io = tokio::runtime::Builder::new_multi_thread()
    ///     .worker_threads(1)
    ///     .enable_all()
    ///     .build()?;
    /// let locks = io.block_on(
    ///     LockManager::builder()
    ///         .url("memory://")
    ///         .runtime(io.handle().clone())
    ///         .build(),
    /// )?;
    /// // Any other runtime, however short-lived, uses it.
    /// let short_lived = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    /// short_lived.block_on(async {
    ///     let guard = locks.lock("report", LockOptions::new()).await?;
    ///     guard.release().await
    /// })?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn runtime(mut self, runtime: tokio::runtime::Handle) -> Self {
        self.runtime = Some(runtime);
        self
    }

    /// The certificates for a TLS URL (`rediss://`, `rediss+cluster://`, `rediss+sentinel://`,
    /// `redlocks://`): a private CA to trust instead of the system's store, and a client
    /// certificate for servers with `tls-auth-clients yes` (see [`TlsConfig`]). They apply to
    /// every server of the deployment (for Sentinel, to the sentinels and the masters alike).
    /// The URL can name the same files instead, in its query: `?tls_ca=PATH` and
    /// `&tls_cert=PATH&tls_key=PATH` (percent-encoded); not both ways at once.
    /// Read and checked at [`build`](Self::build); refused there with a URL that is not a TLS
    /// one (the connection would go out in plain text) and without the `tls` feature, ignored
    /// for `memory://` (no connection to secure: a program may point its URL there in tests).
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), lock_runtime::LockError> {
    /// use lock_runtime::{LockManager, TlsConfig};
    ///
    /// let ca = std::fs::read("/etc/redis/tls/ca.crt").expect("the CA");
    /// let locks = LockManager::builder()
    ///     .url("rediss://redis.internal:6380")
    ///     .tls(TlsConfig::new().root_ca_pem(ca))
    ///     .build()
    ///     .await?;
    /// # let _ = locks;
    /// # Ok(())
    /// # }
    /// ```
    pub fn tls(mut self, tls: TlsConfig) -> Self {
        self.tls = Some(tls);
        self
    }

    /// The certificates given (with [`tls`](Self::tls) or in the URL's query), read and
    /// checked, for `deployment`.
    fn certificates(&self, deployment: &Deployment) -> Result<Certificates, LockError> {
        let in_url = url::tls_files(deployment.url())?;
        let tls = match (&self.tls, in_url) {
            (None, None) => return Ok(Certificates::default()),
            (Some(_), Some(_)) => {
                return Err(LockError::Config(format!(
                    "TLS certificates were given both in `{}` (tls_ca, tls_cert, tls_key) and \
                     with LockManagerBuilder::tls: give them one way",
                    deployment.shown()
                )));
            }
            (Some(tls), None) => tls.clone(),
            (None, Some(tls)) => tls,
        };
        if !deployment.is_tls() {
            return Err(LockError::Config(format!(
                "TLS certificates were given, but `{}` is not a TLS URL and would connect in \
                 plain text: use rediss://, rediss+cluster://, rediss+sentinel:// or redlocks://",
                deployment.shown()
            )));
        }
        tls.load()
    }

    /// Connects and returns the manager.
    pub async fn build(mut self) -> Result<LockManager, LockError> {
        self.validate()?;
        #[cfg(feature = "postgres")]
        if let Some((pool, options)) = self.postgres.take() {
            return self.over_pool(pool, options).await;
        }
        if let Some(store) = self.store.take() {
            if self.url.is_some() {
                return Err(LockError::Config(format!(
                    "the manager over the store `{}` cannot be built: a URL was given too: give \
                     either a URL or a store",
                    store.describe()
                )));
            }
            return self.over_store(store);
        }
        let url = self
            .url
            .as_deref()
            .ok_or_else(|| LockError::Config("no URL given to LockManager::builder".into()))?;
        if let Some(store) = crate::store::scheme::connect(url).await {
            return self.over_store(store?);
        }
        if url::is_postgres(url) {
            let url = url.to_owned();
            return self.over_postgres_url(&url).await;
        }
        let deployment = Deployment::parse(url)?;
        if self.replicas.is_some() && deployment.kind() == DeploymentKind::Redlock {
            return Err(LockError::Config(
                "wait_for_replicas does not apply to Redlock: its masters are independent and \
                 have no replicas to wait for; remove it, or use Sentinel or Cluster"
                    .into(),
            ));
        }
        let background = Background::pinned_to(self.runtime.clone());
        if deployment.kind() == DeploymentKind::Memory {
            let backend = MemoryBackend::named(deployment.memory_table());
            let waiters = backend.waiters();
            return Ok(self.finish(backend, waiters));
        }
        deployment.prepare_tls()?;
        let certificates = self.certificates(&deployment)?;
        let waiters = Arc::new(Waiters::with_fair_turn(self.fair_turn));
        let settings = self.redis_settings(deployment.url(), &background, &certificates);
        let backend: Arc<dyn Store> = match deployment.kind() {
            DeploymentKind::Sentinel => {
                Arc::new(SentinelBackend::connect(settings, waiters.clone()).await?)
            }
            DeploymentKind::Redlock => {
                Arc::new(RedlockBackend::connect(settings, waiters.clone()).await?)
            }
            DeploymentKind::Cluster => {
                Arc::new(ClusterBackend::connect(settings, waiters.clone()).await?)
            }
            _ => Arc::new(RedisBackend::connect(settings, waiters.clone()).await?),
        };
        Ok(self.finish(backend, waiters))
    }

    /// A manager over a store given as is: the settings that only a URL's deployment can use
    /// are refused.
    fn over_store(self, store: Arc<dyn Store>) -> Result<LockManager, LockError> {
        let refused = if self.replicas.is_some() {
            Some("wait_for_replicas applies to Redis Sentinel and Cluster only")
        } else if self.tls.is_some() {
            Some("TLS certificates go to the store itself, not to the builder")
        } else {
            None
        };
        if let Some(refused) = refused {
            return Err(LockError::Config(format!(
                "the manager over the store `{}` cannot be built: {refused}",
                store.describe()
            )));
        }
        let waiters = Arc::new(Waiters::with_fair_turn(self.fair_turn));
        Ok(self.finish(store, waiters))
    }

    /// A manager over the PostgreSQL database at `url`.
    #[cfg(feature = "postgres")]
    async fn over_postgres_url(self, url: &str) -> Result<LockManager, LockError> {
        let store = crate::postgres::PostgresStore::connect(url, self.request_timeout)
            .await
            .map_err(|failure| connect_error(url, failure))?
            .recording(self.app_name.as_deref(), self.holder_metadata);
        self.over_store(Arc::new(store))
    }

    /// Without the feature, a `postgres://` URL is refused, naming the feature.
    #[cfg(not(feature = "postgres"))]
    async fn over_postgres_url(self, url: &str) -> Result<LockManager, LockError> {
        Err(LockError::Config(format!(
            "`{}` names a PostgreSQL database: enable the `postgres` feature of lock-runtime",
            url::redact(url)
        )))
    }

    /// A manager over the PostgreSQL database of an application's pool.
    #[cfg(feature = "postgres")]
    async fn over_pool(
        self,
        pool: sqlx::PgPool,
        options: crate::postgres::PostgresOptions,
    ) -> Result<LockManager, LockError> {
        if self.url.is_some() || self.store.is_some() {
            return Err(LockError::Config(
                "the manager cannot be built: a PostgreSQL pool was given, and a URL or a store \
                 too: give one of them"
                    .into(),
            ));
        }
        let store = crate::postgres::PostgresStore::from_pool(pool, options)
            .await
            .map_err(|failure| connect_error("postgres pool", failure))?
            .recording(self.app_name.as_deref(), self.holder_metadata);
        self.over_store(Arc::new(store))
    }

    /// The settings that are wrong whatever the deployment, with the reason.
    fn validate(&self) -> Result<(), LockError> {
        if self.fair_turn < Duration::from_millis(1) || self.fair_turn > MAX_TTL {
            return Err(LockError::Config(format!(
                "fair_turn {} is outside 1ms..={}: a waiter needs at least a millisecond to \
                 take its turn",
                Exact(self.fair_turn),
                Exact(MAX_TTL)
            )));
        }
        if self.request_timeout.is_zero() {
            return Err(LockError::Config(
                "request_timeout is zero: no request could ever be answered in time; give it \
                 a bound such as 3s"
                    .into(),
            ));
        }
        if self.request_timeout > MAX_REQUEST_TIMEOUT {
            return Err(LockError::Config(format!(
                "request_timeout {} is longer than {}: a server that takes longer to answer is \
                 down",
                Exact(self.request_timeout),
                Exact(MAX_REQUEST_TIMEOUT)
            )));
        }
        if let Some(acks) = &self.replica_acks() {
            acks.validate().map_err(LockError::Config)?;
        }
        if self.prefix.contains(['{', '}']) {
            return Err(LockError::Config(format!(
                "key_prefix `{}` contains a brace: the lock key's hash tag `{{...}}` must be the \
                 first braces in the stored key, or a lock and its fence counter could land in \
                 different cluster slots; choose a prefix without braces",
                self.prefix.escape_debug()
            )));
        }
        Ok(())
    }

    fn redis_settings<'a>(
        &'a self,
        url: &'a str,
        background: &'a Background,
        tls: &'a Certificates,
    ) -> RedisSettings<'a> {
        RedisSettings {
            tls,
            background,
            url,
            app_name: self.app_name.as_deref().unwrap_or(""),
            request_timeout: self.request_timeout,
            fair_turn: self.fair_turn,
            holder_metadata: self.holder_metadata,
            replica_acks: self.replica_acks(),
            key_prefix: &self.prefix,
            clocked_tokens: false,
        }
    }

    /// A manager with a lock table of its own (see [`LockManager::memory`]).
    pub(crate) fn build_memory(self) -> LockManager {
        let waiters = Arc::new(Waiters::default());
        let backend = MemoryBackend::new(waiters.clone());
        self.finish(Arc::new(backend), waiters)
    }

    fn finish(self, backend: Arc<dyn Store>, waiters: Arc<Waiters>) -> LockManager {
        let backend = crate::metrics::layer::measured(crate::store::delay::delayed(backend));
        let notices = Arc::new(crate::notices::Notices::new());
        let hears: std::sync::Weak<dyn crate::store::Hears> = Arc::downgrade(&notices) as _;
        backend.attach(&Changes::new(&waiters, hears));
        tracing::info!(backend = backend.describe(), prefix = %self.prefix, "lock manager ready");
        let background = Background::pinned_to(self.runtime);
        let watchdog = Watchdog::new(backend.clone(), background.clone());
        notices.serve(&watchdog);
        let closed = Arc::new(AtomicBool::new(false));
        let reach = Reach {
            backend: backend.clone(),
            watchdog: watchdog.clone(),
            background: background.clone(),
            request_timeout: self.request_timeout,
            closed: closed.clone(),
        };
        let deadlocks =
            Deadlocks::new(self.deadlock, &self.prefix, self.app_name.as_deref(), reach);
        LockManager::with_inner(Inner {
            id: next_manager_id(),
            closed,
            watchdog,
            background,
            backend,
            waiters,
            prefix: self.prefix,
            request_timeout: self.request_timeout,
            replica_wait: self.replicas.map_or(Duration::ZERO, |(_, timeout)| timeout),
            under_way: Default::default(),
            deadlocks: Arc::new(deadlocks),
            lock_delay: self.lock_delay,
            notices,
            app_name: self.app_name,
            holder_metadata: self.holder_metadata,
        })
    }
}

/// The `testing` kit's manager over its fault layer.
#[cfg(feature = "testing")]
impl LockManager {
    /// A manager of its own (its id, watchdog and shutdown), with this one's settings, runtime
    /// and waiters, over `backend`: a layer around this manager's store, which is measured
    /// already (answers the layer scripts never reach the store and are not store calls).
    pub(crate) fn over_backend(&self, backend: Arc<dyn Store>) -> LockManager {
        let inner = self.client();
        let watchdog = Watchdog::new(backend.clone(), inner.background.clone());
        // The store tells this manager's notices: its leases are found there too.
        inner.notices.serve(&watchdog);
        let closed = Arc::new(AtomicBool::new(false));
        let reach = Reach {
            backend: backend.clone(),
            watchdog: watchdog.clone(),
            background: inner.background.clone(),
            request_timeout: inner.request_timeout,
            closed: closed.clone(),
        };
        LockManager::with_inner(Inner {
            id: next_manager_id(),
            closed,
            watchdog,
            background: inner.background.clone(),
            backend,
            waiters: inner.waiters.clone(),
            prefix: inner.prefix.clone(),
            request_timeout: inner.request_timeout,
            replica_wait: inner.replica_wait,
            under_way: Default::default(),
            deadlocks: Arc::new(inner.deadlocks.alike(reach)),
            lock_delay: inner.lock_delay,
            notices: inner.notices.clone(),
            app_name: inner.app_name.clone(),
            holder_metadata: inner.holder_metadata,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Messages are written over several source lines: none may carry the indentation along.
    #[tokio::test]
    async fn settings_refused_at_build_are_explained_in_plain_sentences() {
        let refused = [
            LockManager::builder()
                .url("memory://")
                .request_timeout(Duration::ZERO),
            LockManager::builder()
                .url("memory://")
                .request_timeout(Duration::from_secs(7200)),
            LockManager::builder().url("memory://").key_prefix("a{b}:"),
            LockManager::builder()
                .url("memory://")
                .fair_turn(Duration::ZERO),
            LockManager::builder().url("redis://127.0.0.1:1/?password=secret"),
        ];
        for builder in refused {
            let err = builder.build().await.expect_err("refused");
            let shown = err.to_string();
            assert!(!shown.contains("  "), "{shown}");
            assert!(!shown.contains("secret"), "{shown}");
        }
    }

    #[cfg(not(feature = "postgres"))]
    #[tokio::test]
    async fn a_postgres_url_without_the_feature_names_the_feature() {
        for url in [
            "postgres://app:s3cret@db/shop",
            "PostgreSQL://app:s3cret@db/shop",
        ] {
            let err = LockManager::connect(url).await.expect_err("not built in");
            let shown = format!("{err} {err:?}");
            assert!(matches!(err, LockError::Config(_)), "{shown}");
            assert!(shown.contains("`postgres` feature"), "{shown}");
            assert!(!shown.contains("s3cret"), "{shown}");
        }
    }

    #[cfg(feature = "postgres")]
    #[tokio::test]
    async fn a_postgres_url_with_a_wrong_setting_is_a_config_error() {
        let err = LockManager::connect("postgres://app:s3cret@db/shop?poll_ms=0")
            .await
            .expect_err("refused");
        let shown = format!("{err} {err:?}");
        assert!(matches!(err, LockError::Config(_)), "{shown}");
        assert!(shown.contains("poll_ms"), "{shown}");
        assert!(!shown.contains("s3cret"), "{shown}");
    }

    #[cfg(feature = "postgres")]
    #[test]
    fn the_postgres_schemes_cannot_be_registered() {
        for scheme in ["postgres", "PostgreSQL"] {
            let taken = crate::store::register_scheme(scheme, |_url: String| async {
                Err(crate::store::StoreError::permanent("never"))
            });
            assert!(taken.is_err(), "{scheme}");
        }
    }
}
