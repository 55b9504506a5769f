//! The entry point: a handle to one deployment, shared by every lock taken through it.

use std::future::Future;
use std::sync::{Arc, OnceLock};

use tracing::Instrument;

use crate::background::Background;
use crate::builder::LockManagerBuilder;
use crate::client::Inner;
use crate::error::LockError;
use crate::guard::LockGuard;
use crate::key::Key;
use crate::options::LockOptions;
use crate::section;
use crate::section::{Body, box_body};
use crate::shape::Mode;

/// A handle to one lock deployment: Redis, or memory for tests and demos.
///
/// Cheap to clone: clones share one connection, one subscription connection and one renewal
/// driver.
///
/// A manager may outlive the tokio runtime it was created on, and may be used from several
/// runtimes: each background task (connection drivers, the release subscriber, Sentinel's
/// failover listeners, the renewal driver) runs on the runtime of the call that started it, and
/// when that runtime shuts down it is started again at the next use, from the caller's runtime,
/// before any request would meet a dead connection. A global default shared by many
/// `#[tokio::test]`s (one runtime each) works that way. Where one runtime outlives the others,
/// [`LockManagerBuilder::runtime`] pins all of it there instead.
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

impl std::fmt::Debug for LockManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockManager")
            .field("backend", &self.inner.backend.describe())
            .field("prefix", &self.inner.prefix)
            .finish()
    }
}

impl LockManager {
    /// The manager of the shared state that [`LockManagerBuilder`] put together.
    pub(crate) fn with_inner(inner: Inner) -> LockManager {
        LockManager {
            inner: Arc::new(inner),
        }
    }
}

static GLOBAL: OnceLock<LockManager> = OnceLock::new();

#[cfg(feature = "testing")]
tokio::task_local! {
    /// The default of the running task, set by `testing::with_default`: before [`GLOBAL`].
    pub(crate) static SCOPED: LockManager;
}

/// The manager `testing::with_default` set for the running task, if any.
#[cfg(feature = "testing")]
fn scoped_default() -> Option<LockManager> {
    SCOPED.try_with(LockManager::clone).ok()
}

/// Makes `manager` the one `#[distributed_lock]` uses when no `manager = ...` is given.
/// Can be set once per process; a second call returns [`LockError::Config`].
pub fn set_global_default(manager: LockManager) -> Result<(), LockError> {
    GLOBAL
        .set(manager)
        .map_err(|_| LockError::Config("the global default LockManager is already set".into()))
}

/// The manager set by [`set_global_default`], if any. With the `testing` feature, a manager
/// made the default of the running task by `testing::with_default` comes first.
pub fn global_default() -> Option<LockManager> {
    #[cfg(feature = "testing")]
    if let Some(scoped) = scoped_default() {
        return Some(scoped);
    }
    GLOBAL.get().cloned()
}

impl LockManager {
    /// Connects to the deployment named by `url`:
    ///
    /// | URL | deployment |
    /// |---|---|
    /// | `redis://[user:password@]host[:port][/db]` | one Redis server |
    /// | `rediss://...` | one Redis server over TLS (feature `tls`) |
    /// | `redis+unix:///path/to/redis.sock` | one Redis server over a Unix socket |
    /// | `redis+cluster://[user:password@]h1:p1,h2:p2,...` | Redis Cluster, from seed nodes |
    /// | `redis+sentinel://[user:password@]s1:p1,s2:p2/<master-name>[/db]` | the master that Sentinel names, followed across failovers |
    /// | `redlock://[user:password@]h1:p1,h2:p2,h3:p3[/db]` | Redlock over independent masters |
    /// | `redlocks://...` | the same over TLS (feature `tls`) |
    /// | `memory://` | one lock table for this whole process: demos and tests, no server |
    /// | `memory://<name>` | the process's table called `<name>`, apart from all others: isolated tests |
    /// | `<scheme>://...` | a store of your own whose scheme was registered with [`register_scheme`](crate::store::register_scheme) |
    ///
    /// Every manager connected to the same `memory://` URL in a process shares its locks, as
    /// managers on one Redis do; a waiter is woken once per release, whichever manager it
    /// waits through.
    ///
    /// Redlock sends every request to all masters in parallel (each bounded by a tenth of the
    /// ttl, at most 250 ms) and holds the lock when a majority granted it with time to spare
    /// (`ttl - elapsed - (1 % of ttl + 2 ms)`); a lock granted by a minority is given back on all
    /// masters. Renewal needs a majority too, with the same lost-lease signal. It survives a
    /// minority of masters being down or paused. It is for availability, not for correctness:
    /// its fencing token is the highest of the majority's per-master tokens, which rises between
    /// acquisitions only as long as the masters' clocks agree better than the time between them
    /// (a master whose counter survived keeps its own tokens strictly rising, but another
    /// majority may not include it). Where correctness matters, fence with a single Redis (or a
    /// consensus store) instead.
    ///
    /// Fails if the server (for Redlock: a majority) cannot be reached or refuses the
    /// credentials. See
    /// [`LockManager::builder`] for the other settings.
    pub async fn connect(url: &str) -> Result<LockManager, LockError> {
        LockManager::builder().url(url).build().await
    }

    /// A manager with a lock table of its own, in this process's memory: same semantics as
    /// Redis (leases, renewal, waiting, fencing), no server. Its clones share the table; no
    /// other manager sees it, so unit tests running side by side do not meet. For a table
    /// that every manager of the process shares, connect to `memory://` (or
    /// `memory://<name>` for a named one).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), lock_runtime::LockError> {
    /// use lock_runtime::{LockManager, LockOptions};
    ///
    /// let mine = LockManager::memory();
    /// let shared_a = LockManager::connect("memory://").await?;
    /// let shared_b = LockManager::connect("memory://").await?;
    /// let held = shared_a.lock("job", LockOptions::new()).await?;
    /// assert!(shared_b.lock("job", LockOptions::new()).await.unwrap_err().is_busy());
    /// let also_held = mine.lock("job", LockOptions::new()).await?; // another table
    /// # drop((held, also_held));
    /// # Ok(())
    /// # }
    /// ```
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

    /// The inspection side of this manager's store: what `lockctl` lists, shows and
    /// force-releases locks through (see [`Inspect`](crate::store::Inspect)). `None` where the
    /// store cannot be inspected.
    pub fn inspect(&self) -> Option<&dyn crate::store::Inspect> {
        self.inner.backend.inspect()
    }

    /// Shuts the manager down for a graceful exit (SIGTERM in a rolling deploy): stops every
    /// renewal, releases every lock held through it (and through its clones), wakes every task
    /// waiting for a lock, and makes every later `lock()` fail with [`LockError::ShutDown`].
    /// Locked sections still running are told their lease is lost
    /// ([`LostReason::ShutDown`](crate::LostReason::ShutDown)); with the default
    /// `on_lease_lost = "abort"` their bodies are dropped.
    ///
    /// It returns once the server has confirmed that nothing of this manager is left on it: no
    /// lock, permit or read share (those kept for `hold_at_least` stay until it ends), no writer's
    /// waiting mark, no place in the line of fair waiters, nothing that an acquire or a hand-over
    /// to a waiter on the wire when it was called took (it is given back as its answer comes),
    /// and no published wait (the records deadlock detection and `lockctl` read). The process
    /// may exit then. It waits for the server's answers for at most about five request
    /// timeouts (plus a `WAIT` for replicas if asked); what the server did not confirm by then
    /// expires with its lease (a published wait within 5 s).
    ///
    /// Without it, a process that exits keeps its locks until their ttl runs out: a guard
    /// dropped while the runtime shuts down cannot send its release any more. Every call
    /// returns only when that work is done, a second one (a signal handler and a drop path
    /// both calling it) as well as the first. Returns the first release of a held lock that
    /// failed (the others are logged); a lock whose release failed expires with its lease.
    ///
    /// ```no_run
    /// # async fn serve(_: lock_runtime::LockManager) {}
    /// # async fn terminate() {} // e.g. tokio::signal::unix::signal(SignalKind::terminate())
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), lock_runtime::LockError> {
    /// let locks = lock_runtime::LockManager::connect("redis://127.0.0.1:6379").await?;
    /// tokio::select! {
    ///     () = serve(locks.clone()) => {}
    ///     () = terminate() => {} // SIGTERM: tokio::signal::unix, or tokio::signal::ctrl_c()
    /// }
    /// locks.shutdown().await?; // the next instance takes the locks at once
    /// # Ok(())
    /// # }
    /// ```
    pub async fn shutdown(&self) -> Result<(), LockError> {
        let releases = self.inner.close();
        let first_call = releases.is_some();
        // Whatever the process has on the server is being taken off: the releases begun here
        // and before (a guard dropped, a handle stepping down), and what each acquire under
        // way cleans up as it ends, woken or answered (a lock its request took, a writer's
        // waiting mark, a place in the line of fair waiters). Every call waits for all of it,
        // so that returning means the server has been told, whichever call came first.
        self.inner
            .under_way
            .settled(self.inner.settle_limit())
            .await;
        // Its calls stopped waiting: what it published of their waits comes off too.
        self.inner.deadlocks.withdraw().await;
        let mut first = None;
        let releases = releases.unwrap_or_default();
        let count = releases.len();
        for (lease, release) in releases {
            let answer = match release.await {
                Ok(answer) => answer,
                // Its runtime shut down under it: nothing was confirmed.
                Err(_) => continue,
            };
            if let Err(err) = answer {
                tracing::warn!(key = %lease.key(), error = %err, "release at shutdown failed; the lock expires with its lease");
                first.get_or_insert(err);
            }
        }
        if first_call {
            tracing::info!(
                backend = self.backend(),
                released = count,
                "lock manager shut down"
            );
        }
        first.map_or(Ok(()), Err)
    }

    /// Whether [`LockManager::shutdown`] was called on this manager or a clone of it.
    pub fn is_shut_down(&self) -> bool {
        self.inner.is_closed()
    }

    /// Where this manager's background tasks run: an election's campaign runs there too.
    pub(crate) fn background(&self) -> &Background {
        &self.inner.background
    }

    /// Acquires the lock `key`, waiting up to `options.wait` for it.
    ///
    /// Inside a locked section of the same task that already holds `key` on this manager, this
    /// re-enters: the returned guard shares the outer lease and releasing it does nothing.
    ///
    /// Errors: [`LockError::Busy`] if the lock stayed taken for the whole wait,
    /// [`LockError::Backend`] if the server failed (then nothing is held), and
    /// [`LockError::Config`] for an empty key or a ttl under [`MIN_TTL`](crate::MIN_TTL).
    pub async fn lock(
        &self,
        key: impl Into<String>,
        options: LockOptions,
    ) -> Result<LockGuard, LockError> {
        let key = key.into();
        if let Some(reentered) = crate::acquire::reentered(&self.inner, &key, options) {
            return reentered;
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

    /// Takes one of the `permits` permits of the semaphore `key`, waiting up to `options.wait`
    /// for one to be given back: at most `permits` holders at any moment, across every process
    /// on this deployment. The permit is a lease like a lock's, with everything a
    /// [`LockGuard`] gives: its own owner token and fencing token, renewal by the watchdog,
    /// [`lost()`](LockGuard::lost) when renewal proves it gone, release on drop. A holder that
    /// dies gives its permit back when its lease (`options.ttl`) runs out; a release wakes a
    /// waiter at once.
    ///
    /// The semaphore `key` is apart from the lock `key`. Every call site of one semaphore must
    /// declare the same `permits`: while anyone holds a permit, a call declaring another number
    /// fails with [`LockError::Config`] naming both (once nobody holds one, the new number
    /// applies). Inside a section of this task that holds a permit of `key` (a
    /// `#[distributed_lock(.., permits = N)]` fn, [`LockGuard::scope`]), this re-enters it,
    /// taking no second permit; outside one, the task takes another permit, and is told
    /// [`LockError::HeldByThisTask`] rather than wait when it holds all `permits` itself.
    ///
    /// Errors as [`lock`](Self::lock), and [`LockError::Config`] for `permits` 0, with
    /// [`LockOptions::fair`], or on Redlock (whose independent masters could admit more
    /// holders than permits). Same as `lock(key, options.permits(permits))`.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), lock_runtime::LockError> {
    /// use lock_runtime::{LockManager, LockOptions};
    ///
    /// let locks = LockManager::memory();
    /// let first = locks.semaphore("exports", 2, LockOptions::new()).await?;
    /// let second = locks.semaphore("exports", 2, LockOptions::new()).await?;
    /// assert!(locks.semaphore("exports", 2, LockOptions::new()).await.unwrap_err().is_busy());
    /// assert!(second.fencing_token() > first.fencing_token());
    /// first.release().await?; // a waiter would be woken now
    /// # drop(second);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn semaphore(
        &self,
        key: impl Into<String>,
        permits: u32,
        options: LockOptions,
    ) -> Result<LockGuard, LockError> {
        self.lock(key, options.permits(permits)).await
    }

    /// Takes a read share of the read-write lock `key`, waiting up to `options.wait`: any number
    /// of readers hold it together, across every process on this deployment, but never while a
    /// writer does, and a reader that comes while a writer waits queues behind that writer. The
    /// share is a lease like a lock's, with everything a [`LockGuard`] gives: its own owner
    /// token and fencing token, renewal by the watchdog, [`lost()`](LockGuard::lost), release
    /// on drop; a reader that dies gives its share back when its lease (`options.ttl`) runs
    /// out.
    ///
    /// The read-write lock `key` is apart from the lock and the semaphore `key`. Inside a
    /// section of this task that holds `key` for reading or writing, this re-enters that hold.
    /// Errors as [`lock`](Self::lock), and [`LockError::Config`] with [`LockOptions::fair`] or
    /// `permits`, or on Redlock. Same as `lock(key, options.mode(Mode::Read))`.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), lock_runtime::LockError> {
    /// use lock_runtime::{LockManager, LockOptions};
    ///
    /// let locks = LockManager::memory();
    /// let one = locks.read_lock("catalog", LockOptions::new()).await?;
    /// let two = locks.read_lock("catalog", LockOptions::new()).await?;
    /// let writers = locks.clone();
    /// let writer = tokio::spawn(async move {
    ///     writers.write_lock("catalog", LockOptions::new()).await
    /// });
    /// assert!(writer.await.unwrap().unwrap_err().is_busy());
    /// one.release().await?;
    /// two.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn read_lock(
        &self,
        key: impl Into<String>,
        options: LockOptions,
    ) -> Result<LockGuard, LockError> {
        self.lock(key, options.mode(Mode::Read)).await
    }

    /// Takes the write hold of the read-write lock `key`, waiting up to `options.wait`: one
    /// writer and no reader at a time. While it waits, readers that come after it queue behind
    /// it; readers already holding finish first. Its fencing token is greater than every token
    /// handed out before it for the read-write lock `key`, to readers and writers.
    ///
    /// Inside a section of this task that holds the write hold of `key`, this re-enters it.
    /// Inside one that holds a read share of `key` (or while this task holds one through this
    /// manager), it fails at once with [`LockError::Config`]: an upgrade would wait for the
    /// task's own share. Otherwise as [`read_lock`](Self::read_lock). Same as
    /// `lock(key, options.mode(Mode::Write))`.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), lock_runtime::LockError> {
    /// use lock_runtime::{LockManager, LockOptions};
    ///
    /// let locks = LockManager::memory();
    /// let reader = locks.read_lock("catalog", LockOptions::new()).await?;
    /// let read_token = reader.fencing_token();
    /// reader.release().await?;
    /// let writer = locks.write_lock("catalog", LockOptions::new()).await?;
    /// assert!(writer.fencing_token() > read_token);
    /// assert!(locks.read_lock("catalog", LockOptions::new()).await.unwrap_err().is_busy());
    /// writer.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn write_lock(
        &self,
        key: impl Into<String>,
        options: LockOptions,
    ) -> Result<LockGuard, LockError> {
        self.lock(key, options.mode(Mode::Write)).await
    }

    /// Runs `body` while holding the lock `key`: acquires it (waiting up to `options.wait`),
    /// runs the body with [`current()`](crate::current) reporting the lock, and releases it
    /// before returning, also when the body returns an error or panics. This is what
    /// `#[distributed_lock]` expands to.
    ///
    /// The body never runs without the lock: if the acquire fails, its error is returned. With
    /// [`OnLeaseLost::Abort`](crate::OnLeaseLost::Abort) (the default) a lost lease drops the body at its next `.await` and
    /// returns [`LockError::LeaseLost`]. A failed release after the body finished is logged and
    /// the body's result is returned.
    pub fn run_locked<F, T, E>(
        &self,
        key: String,
        options: LockOptions,
        body: F,
    ) -> impl Future<Output = Result<T, E>>
    where
        F: Future<Output = Result<T, E>>,
        E: From<LockError>,
    {
        self.run_locked_boxed(key, options, |error| Err(E::from(error)), box_body(body))
    }

    /// [`LockManager::run_locked`] on a body already boxed by [`box_body`], for any output
    /// `R` that `into` can make from a lock error.
    ///
    /// Generic over `R` rather than `Result<T, E>` so that the attribute's code asks nothing
    /// of the fn's output here: its own checks, spanned in the user's code, are the only
    /// places a wrong return or error type can be reported.
    ///
    /// A plain fn returning an `async move` block rather than an `async fn`: the block uses its
    /// captures in place, where an `async fn` would keep a second copy of each argument.
    pub(crate) fn run_locked_boxed<F, R>(
        &self,
        key: String,
        options: LockOptions,
        into: impl FnOnce(LockError) -> R,
        body: Body<F>,
    ) -> impl Future<Output = R>
    where
        F: Future<Output = R>,
    {
        // Boxed: the finished acquire's state (about 1 KB) would otherwise stay part of this
        // future for as long as the body runs. Made here, so the key and options are not kept
        // beside it; it runs (and looks for an outer section of this task holding the key) only
        // when polled.
        let acquire = Box::pin(self.lock(key, options));
        section::run(acquire, options.on_lease_lost, into, body)
    }

    /// The stored name of `key` on this manager: what `lock_all` orders keys by.
    pub(crate) fn stored_key(&self, key: &str) -> Result<Key, LockError> {
        Key::lock(&self.inner.prefix, key)
    }
}

/// A manager's shared state: what the `testing` kit, `control.rs` and the elections need of it.
impl LockManager {
    pub(crate) fn client(&self) -> &Arc<Inner> {
        &self.inner
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::time::Instant;

    use super::*;
    use crate::backend::Acquire;
    use crate::lease::Lease;
    use crate::pending::Pending;

    fn lease_of(locks: &LockManager, key: &str) -> Lease {
        let stored = Key::lock("lock:", key).expect("valid key");
        Lease::new(
            stored,
            crate::lease::Token::new_v4(),
            locks.inner.id,
            LockOptions::new(),
            Instant::now(),
        )
    }

    #[tokio::test]
    async fn a_timeout_reads_the_same_whichever_side_gave_up_first() {
        let locks = LockManager::builder()
            .request_timeout(Duration::from_millis(200))
            .build_memory();
        let lease = lease_of(&locks, "slow");
        let connection_gave_up =
            ::redis::RedisError::from(std::io::Error::from(std::io::ErrorKind::TimedOut));
        let err = locks
            .inner
            .error("acquire", &lease, connection_gave_up.into())
            .to_string();
        assert!(err.contains("no answer within 200ms"), "{err}");
        let other =
            ::redis::RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
        let err = locks
            .inner
            .error("acquire", &lease, other.into())
            .to_string();
        assert!(!err.contains("no answer"), "{err}");
    }

    #[tokio::test]
    async fn an_error_that_echoes_the_owner_token_does_not_show_it() {
        let locks = LockManager::memory();
        let lease = lease_of(&locks, "k");
        let echoed = ::redis::RedisError::from((
            ::redis::ErrorKind::Server(::redis::ServerErrorKind::ResponseError),
            "ERR unknown command",
            format!(
                "'EVALSHA', with args beginning with: 'abc' '2' 'lock:{{k}}' '{}'",
                lease.token.as_str()
            ),
        ));
        let err = locks.inner.error("acquire", &lease, echoed.into());
        let shown = format!("{err} {err:?}");
        assert!(!shown.contains(lease.token.as_str()), "{shown}");
        assert!(shown.contains("<owner token>"), "{shown}");
    }

    /// The watchdog can declare an acquire's lease lost while its answer is still out (the
    /// answer comes after the lease would have ended). The attempt then fails, but the request
    /// may have landed: it is taken back at once, never kept for `hold_at_least`, since nobody
    /// held the lock.
    #[tokio::test]
    async fn a_lease_lost_before_its_acquire_was_answered_is_not_kept_for_hold_at_least() {
        let locks = LockManager::memory();
        let options = LockOptions::new()
            .ttl(Duration::from_millis(300))
            .hold_at_least(Duration::from_secs(10));
        let mut lease = lease_of(&locks, "nightly-job");
        lease.options = options;
        let lease = Arc::new(lease);
        let inner = locks.inner.clone();
        let watch_id = inner.watchdog.register(&lease);
        let attempt = Pending::new(inner.clone(), lease.clone(), watch_id);
        // The stalled acquire lands on the server ...
        let landed = inner
            .backend
            .acquire(&lease.stored, &lease.token, options.ttl, Default::default())
            .await
            .expect("memory answers");
        assert!(matches!(landed, Acquire::Acquired { .. }));
        // ... after the holder's deadline passed, and the attempt gives up.
        lease.mark_lost(crate::error::LostReason::Expired);
        drop(attempt);
        let other = LockManager {
            inner: locks.inner.clone(),
        };
        let taken = tokio::time::timeout(
            Duration::from_secs(1),
            other.lock(
                "nightly-job",
                LockOptions::new().wait(Duration::from_secs(1)),
            ),
        )
        .await
        .expect("within a second")
        .expect("free again: a lock never held is not kept");
        taken.release().await.expect("release");
    }

    /// What a locked call costs while its body runs, apart from the body: every task waiting in
    /// a locked fn keeps this much, so it is worth a test. The body is kept once, on the heap.
    #[tokio::test]
    async fn a_locked_section_keeps_its_body_once_and_little_else() {
        let locks = LockManager::memory();
        let big = [7u8; 4096];
        let section = locks.run_locked("k".into(), LockOptions::new(), async move {
            tokio::task::yield_now().await;
            Ok::<_, LockError>(big[1])
        });
        let size = std::mem::size_of_val(&section);
        // 784 since `LockError::Backend` says whether its failure may pass: a bool, which
        // takes the error from 80 to 88 bytes, and the section, which holds errors, to 784.
        assert!(size <= 784, "a locked section's own state is {size} bytes");
        assert_eq!(section.await.ok(), Some(7));
    }
}
