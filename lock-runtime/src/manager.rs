//! The entry point: a handle to one deployment, shared by every lock taken through it.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use futures_util::FutureExt;
use tokio::time::Instant;
use tracing::Instrument;

use crate::backend::cluster::ClusterBackend;
use crate::backend::memory::MemoryBackend;
use crate::backend::redis::{RedisBackend, RedisSettings};
use crate::backend::{self, Acquire, Backend, Release};
use crate::guard::LockGuard;
use crate::key::StoredKey;
use crate::lease::Lease;
use crate::waiters::{Slot, Waiters};
use crate::watchdog::Watchdog;
use crate::{LockError, LockOptions, OnLeaseLost, current, url};

/// The shortest lease accepted: renewal runs at a third of it and needs a few milliseconds.
pub const MIN_TTL: Duration = Duration::from_millis(10);

/// Without an expiry on the busy key (set by something other than this crate) and without a
/// notification, look again this often.
const BLIND_WAIT: Duration = Duration::from_secs(1);

/// Between acquire attempts that failed on a transient error (within the wait budget).
const MIN_RETRY_BACKOFF: Duration = Duration::from_millis(20);
const MAX_RETRY_BACKOFF: Duration = Duration::from_millis(500);

/// A handle to one lock deployment: Redis, or memory for tests and demos.
///
/// Cheap to clone: clones share one connection, one subscription connection and one renewal
/// driver. A manager belongs to the tokio runtime it was created on.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), lock_runtime::LockError> {
/// use lock_runtime::{LockManager, LockOptions};
///
/// // "redis://127.0.0.1:6379" in production; memory:// keeps this example self-contained.
/// let locks = LockManager::connect("memory://").await?;
/// let guard = locks.lock("order:42", LockOptions::new()).await?;
/// guard.release().await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct LockManager {
    inner: Arc<Inner>,
}

pub(crate) struct Inner {
    id: u64,
    pub(crate) backend: Arc<dyn Backend>,
    pub(crate) watchdog: Watchdog,
    waiters: Arc<Waiters>,
    prefix: String,
    request_timeout: Duration,
}

impl std::fmt::Debug for LockManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockManager")
            .field("backend", &self.inner.backend.describe())
            .field("prefix", &self.inner.prefix)
            .finish()
    }
}

static GLOBAL: OnceLock<LockManager> = OnceLock::new();

/// Makes `manager` the one `#[distributed_lock]` uses when no `manager = ...` is given.
/// Can be set once per process; a second call returns [`LockError::Config`].
pub fn set_global_default(manager: LockManager) -> Result<(), LockError> {
    GLOBAL
        .set(manager)
        .map_err(|_| LockError::Config("the global default LockManager is already set".into()))
}

/// The manager set by [`set_global_default`], if any.
pub fn global_default() -> Option<LockManager> {
    GLOBAL.get().cloned()
}

fn next_manager_id() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

impl LockManager {
    /// Connects to the deployment named by `url`:
    ///
    /// | URL | deployment |
    /// |---|---|
    /// | `redis://[user:password@]host[:port][/db]` | one Redis server |
    /// | `rediss://...` | one Redis server over TLS (feature `tls`) |
    /// | `redis+unix:///path/to/redis.sock` | one Redis server over a Unix socket |
    /// | `memory://` | in this process only: tests and demos |
    ///
    /// Fails if the server cannot be reached or refuses the credentials. See
    /// [`LockManager::builder`] for the other settings.
    pub async fn connect(url: &str) -> Result<LockManager, LockError> {
        LockManager::builder().url(url).build().await
    }

    /// A manager whose locks live in this process only: same semantics as Redis (leases,
    /// renewal, waiting, fencing), no server. For tests, demos and single-process programs.
    pub fn memory() -> LockManager {
        LockManager::builder().build_memory()
    }

    /// Settings beyond the URL.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), lock_runtime::LockError> {
    /// use std::time::Duration;
    /// use lock_runtime::LockManager;
    ///
    /// let locks = LockManager::builder()
    ///     .url("memory://")
    ///     .key_prefix("billing:lock:")
    ///     .app_name("billing")
    ///     .request_timeout(Duration::from_secs(2))
    ///     .build()
    ///     .await?;
    /// # drop(locks);
    /// # Ok(())
    /// # }
    /// ```
    pub fn builder() -> LockManagerBuilder {
        LockManagerBuilder::default()
    }

    /// What this manager runs on, e.g. `redis 127.0.0.1:6379` or `memory`.
    pub fn backend(&self) -> &str {
        self.inner.backend.describe()
    }

    /// Acquires the lock `key`, waiting up to `options.wait` for it.
    ///
    /// Inside a locked section of the same task that already holds `key` on this manager, this
    /// re-enters: the returned guard shares the outer lease and releasing it does nothing.
    ///
    /// Errors: [`LockError::Busy`] if the lock stayed taken for the whole wait,
    /// [`LockError::Backend`] if the server failed (then nothing is held), and
    /// [`LockError::Config`] for an empty key or a ttl under [`MIN_TTL`].
    pub async fn lock(
        &self,
        key: impl Into<String>,
        options: LockOptions,
    ) -> Result<LockGuard, LockError> {
        let key = key.into();
        if let Some(lease) = current::held(self.inner.id, &key) {
            return Ok(LockGuard::reentered(lease));
        }
        let span = tracing::info_span!(
            "lock_acquire",
            key = %key,
            waited_ms = tracing::field::Empty,
            outcome = tracing::field::Empty,
        );
        self.inner
            .clone()
            .acquire(key, options)
            .instrument(span)
            .await
    }

    /// Runs `body` while holding the lock `key`: acquires it (waiting up to `options.wait`),
    /// runs the body with [`current()`](crate::current) reporting the lock, and releases it
    /// before returning, also when the body returns an error or panics. This is what
    /// `#[distributed_lock]` expands to.
    ///
    /// The body never runs without the lock: if the acquire fails, its error is returned. With
    /// [`OnLeaseLost::Abort`] (the default) a lost lease drops the body at its next `.await` and
    /// returns [`LockError::LeaseLost`]. A failed release after the body finished is logged and
    /// the body's result is returned.
    pub async fn run_locked<F, T, E>(
        &self,
        key: String,
        options: LockOptions,
        body: F,
    ) -> Result<T, E>
    where
        F: Future<Output = Result<T, E>>,
        E: From<LockError>,
    {
        {
            if current::held(self.inner.id, &key).is_some() {
                return body.await;
            }
            let guard = self.lock(key, options).await?;
            let lease = guard.lease().clone();
            let body = AssertUnwindSafe(body).catch_unwind();
            let outcome = current::scope(lease.clone(), async {
                match options.on_lease_lost {
                    OnLeaseLost::Continue => Ok(body.await),
                    OnLeaseLost::Abort => {
                        tokio::select! {
                            biased;
                            finished = body => Ok(finished),
                            reason = lease.lost() => Err(reason),
                        }
                    }
                }
            })
            .await;
            let released = guard.release().await;
            match outcome {
                Ok(Ok(result)) => {
                    if let Err(err) = released {
                        tracing::warn!(key = %lease.key, error = %err, "locked section finished but its release failed");
                    }
                    result
                }
                Ok(Err(panic)) => std::panic::resume_unwind(panic),
                Err(reason) => Err(E::from(LockError::LeaseLost {
                    key: lease.key.clone(),
                    reason,
                })),
            }
        }
    }
}

impl Inner {
    async fn acquire(
        self: Arc<Self>,
        key: String,
        options: LockOptions,
    ) -> Result<LockGuard, LockError> {
        if options.ttl < MIN_TTL {
            return Err(LockError::Config(format!(
                "ttl {:?} for lock `{key}` is shorter than the minimum {MIN_TTL:?}",
                options.ttl
            )));
        }
        let stored = StoredKey::new(&self.prefix, &key)?;
        let token = uuid::Uuid::new_v4().to_string();
        let start = Instant::now();
        let give_up = start + options.wait;
        let mut lease = Arc::new(Lease::new(key, stored, token, self.id, options, start));
        let mut waiting: Option<Waiting> = None;
        let mut retry_backoff = MIN_RETRY_BACKOFF;
        loop {
            lease.restart(Instant::now());
            let watch_id = self.watchdog.register(&lease);
            let guard = LockGuard::pending(self.clone(), lease, watch_id);
            let lease_ref = guard.lease();
            // Never longer than the lease itself: an answer after that would be stale.
            let limit = self.request_timeout.min(options.ttl);
            let answer = tokio::time::timeout(
                limit,
                self.backend
                    .acquire(&lease_ref.stored, &lease_ref.token, options.ttl),
            )
            .await;
            let remaining = match answer {
                Ok(Ok(Acquire::Acquired { fence })) => {
                    lease_ref.mark_held(fence);
                    self.watchdog.activate(watch_id);
                    record(start, "acquired");
                    return Ok(guard);
                }
                Ok(Ok(Acquire::Busy { remaining })) => remaining,
                failed => {
                    let (err, transient) = match failed {
                        Ok(Err(err)) => {
                            let transient = backend::is_transient(&err);
                            (err, transient)
                        }
                        _ => (format!("no answer within {limit:?}").into(), true),
                    };
                    // Within the wait budget a dropped connection or a failover is waited out
                    // like a busy lock. The retry reuses the owner token, so an attempt that
                    // landed unseen is simply confirmed.
                    if transient && Instant::now() + retry_backoff < give_up {
                        tracing::debug!(key = %lease_ref.key, error = %err, "acquire failed; retrying");
                        lease = guard.disarm();
                        tokio::time::sleep(retry_backoff).await;
                        retry_backoff = (retry_backoff * 2).min(MAX_RETRY_BACKOFF);
                        continue;
                    }
                    record(start, "error");
                    // Dropping the guard releases whatever an attempt may have taken.
                    return Err(self.error("acquire", Some(&lease_ref.key), err));
                }
            };
            lease = guard.disarm();
            let now = Instant::now();
            if now >= give_up {
                record(start, "busy");
                return Err(LockError::Busy {
                    key: lease.key.clone(),
                    waited: now - start,
                });
            }
            let Some(waiting) = waiting.as_ref() else {
                // Subscribe first, then try again at once: a release between the busy answer and
                // the subscription would otherwise go unnoticed.
                waiting = Some(Waiting::join(&self, &lease.stored.lock, give_up).await);
                continue;
            };
            let wake_at = match remaining {
                Some(remaining) => now + remaining + Duration::from_millis(1),
                None => now + BLIND_WAIT,
            }
            .min(give_up);
            tokio::select! {
                () = waiting.slot.released() => {}
                () = tokio::time::sleep_until(wake_at) => {}
            }
        }
    }

    /// One release round trip, bounded by the request timeout.
    pub(crate) async fn release(&self, lease: &Lease) -> Result<Release, LockError> {
        let keep = lease
            .options
            .hold_at_least
            .saturating_sub(lease.started().elapsed());
        let answer = tokio::time::timeout(
            self.request_timeout,
            self.backend.release(&lease.stored, &lease.token, keep),
        )
        .await;
        match answer {
            Ok(Ok(release)) => Ok(release),
            Ok(Err(err)) => Err(self.error("release", Some(&lease.key), err)),
            Err(_) => Err(self.error(
                "release",
                Some(&lease.key),
                format!("no answer within {:?}", self.request_timeout),
            )),
        }
    }

    fn error(
        &self,
        operation: &'static str,
        key: Option<&str>,
        source: impl Into<crate::BoxError>,
    ) -> LockError {
        LockError::backend(operation, key, self.backend.server(), source)
    }
}

fn record(start: Instant, outcome: &'static str) {
    let span = tracing::Span::current();
    span.record("waited_ms", start.elapsed().as_millis() as u64);
    span.record("outcome", outcome);
    tracing::debug!(outcome, "lock acquire finished");
}

/// A task's place in line for one key while it waits; leaving the line (on drop) stops the
/// notifications when it was the last waiter.
struct Waiting {
    manager: Arc<Inner>,
    key: String,
    slot: Arc<Slot>,
}

impl Waiting {
    async fn join(manager: &Arc<Inner>, key: &str, give_up: Instant) -> Waiting {
        let (slot, watched) = manager.waiters.join(key);
        let waiting = Waiting {
            manager: manager.clone(),
            key: key.to_owned(),
            slot,
        };
        let subscribe = watched.get_or_init(|| async {
            match manager.backend.watch(key).await {
                Ok(()) => true,
                Err(err) => {
                    tracing::warn!(key, error = %err, "cannot subscribe to lock releases; waiting on the lease alone");
                    false
                }
            }
        });
        // Waiting on the lease alone is still correct, only slower: never let a slow subscription
        // eat the caller's wait budget.
        let limit = manager.request_timeout.min(give_up - Instant::now());
        let _ = tokio::time::timeout(limit, subscribe).await;
        waiting
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        if self.manager.waiters.leave(&self.key, &self.slot) {
            self.manager.backend.unwatch(&self.key);
        }
    }
}

/// Settings for a [`LockManager`]. Start with [`LockManager::builder`].
#[derive(Debug, Clone)]
pub struct LockManagerBuilder {
    url: Option<String>,
    prefix: String,
    app_name: Option<String>,
    request_timeout: Duration,
    fence_retention: Duration,
    replica_acks: Option<(u32, Duration)>,
}

impl Default for LockManagerBuilder {
    fn default() -> Self {
        LockManagerBuilder {
            url: None,
            prefix: "lock:".into(),
            app_name: None,
            request_timeout: Duration::from_secs(3),
            fence_retention: Duration::from_secs(24 * 3600),
            replica_acks: None,
        }
    }
}

impl LockManagerBuilder {
    /// The deployment, as for [`LockManager::connect`]. Required by [`build`](Self::build).
    pub fn url(mut self, url: impl Into<String>) -> Self {
        self.url = Some(url.into());
        self
    }

    /// Prepended to every lock key in Redis (default `lock:`): the lock `order:42` is stored at
    /// `lock:{order:42}`.
    pub fn key_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// Recorded in each lock's value (with host, pid and acquisition time) so a person looking
    /// at Redis can tell who holds a lock.
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

    /// How long a key's fence counter outlives its last acquisition (default 24 h). Fencing
    /// tokens of a key rise strictly while the counter exists; after it expired they rise with
    /// the server clock, so this is how far the server clock may step back without breaking the
    /// order. One small key per lock key used within this period stays in Redis.
    pub fn fence_retention(mut self, retention: Duration) -> Self {
        self.fence_retention = retention;
        self
    }

    /// After each acquisition, wait until `replicas` replicas have acknowledged it (Redis `WAIT`,
    /// sent in the same round trip as the acquire), for at most `timeout`. If fewer acknowledge,
    /// the lock is released again and the acquire fails with [`LockError::Backend`].
    ///
    /// This narrows the window in which a failover loses a fresh lock: once acknowledged, the
    /// lock is in the memory of that many replicas, and a replica promoted by Sentinel or Cluster
    /// will normally be one of them. It does not make the lock durable or consistent: a replica
    /// can still be behind when it is promoted if it acknowledged a different write, replicas
    /// that restart without persistence forget it, renewals and releases are not waited for, and
    /// the acquire takes longer by a replication round trip.
    pub fn wait_for_replicas(mut self, replicas: u32, timeout: Duration) -> Self {
        self.replica_acks = (replicas > 0).then_some((replicas, timeout));
        self
    }

    /// Connects and returns the manager.
    pub async fn build(self) -> Result<LockManager, LockError> {
        let url = self
            .url
            .clone()
            .ok_or_else(|| LockError::Config("no URL given to LockManager::builder".into()))?;
        match url::scheme(&url)? {
            "memory" => Ok(self.build_memory()),
            "redis" | "rediss" | "redis+unix" | "unix" => {
                let waiters = Arc::new(Waiters::default());
                let settings = RedisSettings {
                    url: &url,
                    app_name: self.app_name.as_deref().unwrap_or(""),
                    request_timeout: self.request_timeout,
                    fence_retention: self.fence_retention,
                    replica_acks: self.replica_acks,
                };
                let backend = RedisBackend::connect(settings, waiters.clone()).await?;
                Ok(self.finish(Arc::new(backend), waiters))
            }
            "redis+cluster" | "rediss+cluster" => {
                let waiters = Arc::new(Waiters::default());
                let settings = RedisSettings {
                    url: &url,
                    app_name: self.app_name.as_deref().unwrap_or(""),
                    request_timeout: self.request_timeout,
                    fence_retention: self.fence_retention,
                    replica_acks: self.replica_acks,
                };
                let backend = ClusterBackend::connect(settings, waiters.clone()).await?;
                Ok(self.finish(Arc::new(backend), waiters))
            }
            other => Err(LockError::Config(format!(
                "unsupported lock URL scheme `{other}` in `{}`: use redis://, rediss://, \
                 redis+unix:// or memory://",
                url::redact(&url)
            ))),
        }
    }

    fn build_memory(self) -> LockManager {
        let waiters = Arc::new(Waiters::default());
        let backend = MemoryBackend::new(waiters.clone());
        self.finish(Arc::new(backend), waiters)
    }

    fn finish(self, backend: Arc<dyn Backend>, waiters: Arc<Waiters>) -> LockManager {
        tracing::info!(backend = backend.describe(), prefix = %self.prefix, "lock manager ready");
        LockManager {
            inner: Arc::new(Inner {
                id: next_manager_id(),
                watchdog: Watchdog::new(backend.clone()),
                backend,
                waiters,
                prefix: self.prefix,
                request_timeout: self.request_timeout,
            }),
        }
    }
}
