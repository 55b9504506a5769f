//! One Redis server: one auto-reconnecting multiplexed connection
//! for acquire, renew and release, each a single script call, plus one subscription connection for
//! release notifications, opened when the first waiter needs it.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use redis::aio::{
    ConnectionManager, ConnectionManagerConfig, MultiplexedConnection, PubSubSink, PubSubStream,
};
use redis::{Client, Cmd, FromRedisValue, Pipeline, RedisError, RedisFuture, RedisResult, Value};
use tokio::runtime::Handle;

use super::replicas::{Pool, ReplicaAcks, Replication};
use super::subscriber::{self, Event, Feed, Subscriptions};
use super::{
    Acquire, Ask, Backend, Booking, BoxFuture, Failure, HandOff, Line, Release, Renewal,
    acquire_answer, hand_off_answer, whole,
};
use crate::background::{Background, Lifeline, Revivable};
use crate::error::LockError;
use crate::key::StoredKey;
use crate::lease::Lease;
pub(super) use crate::protocol::scripts::HANDOFF;
use crate::protocol::scripts::{
    ACQUIRE, LEAVE, Lua, PERMIT_RELEASE, RELEASE, RENEW, RW_ACQUIRE, RW_LEAVE, RW_RELEASE,
    SEMAPHORE, invoke, query_each_loading, query_loading,
};
use crate::protocol::waits::WaitsUpdate;
use crate::protocol::{self, Announce, Capabilities, lean, millis};
use crate::shape::Shape;
use crate::tls::Certificates;
use crate::url;
use crate::url::enable_tls;
use crate::waiters::Waiters;

/// One script call, with the script it calls (to cache it when the server does not know it):
/// a lock's and a semaphore's steps are different scripts behind the same backend calls.
pub(super) struct Call<'a> {
    invocation: redis::ScriptInvocation<'a>,
    script: &'static Lua,
}

impl Call<'_> {
    /// Runs the call (`EVALSHA`), caching the script first if the server does not know it.
    pub(super) async fn run<T: FromRedisValue>(
        &self,
        conn: &mut impl redis::aio::ConnectionLike,
    ) -> RedisResult<T> {
        invoke(&self.invocation, self.script, conn).await
    }
}

/// The renewal of one lease, as renew.lua takes it: a permit adds its number of permits; a
/// read share, whose member is `r:<token>`, renews through the permit branch with `r`; a write
/// hold is stored in a lock's format and renews as a lock.
pub(super) fn renew_invocation(renewal: &Renewal) -> redis::ScriptInvocation<'static> {
    let stored = &renewal.lease.stored;
    let mut invocation = RENEW.prepare_invoke();
    invocation
        .key(stored.held_at().as_ref())
        .arg(renewal.token())
        .arg(millis(renewal.ttl));
    match stored.shape {
        Shape::Semaphore { permits } => {
            invocation.arg(permits);
        }
        Shape::Read => {
            invocation.arg("r");
        }
        Shape::Lock | Shape::Write => {}
    }
    invocation
}

/// `r` or `w`, as rw_acquire.lua and rw_release.lua take the mode of a read-write lock's key.
fn rw_mode(key: &StoredKey) -> &'static str {
    match key.shape {
        Shape::Read => "r",
        Shape::Write | Shape::Lock | Shape::Semaphore { .. } => "w",
    }
}

/// What the Redis backend needs from the manager builder.
#[derive(Clone, Copy)]
pub(crate) struct RedisSettings<'a> {
    pub(crate) url: &'a str,
    pub(crate) app_name: &'a str,
    pub(crate) request_timeout: Duration,
    /// How long a lock freed for the first fair waiter waits for it.
    pub(crate) fair_turn: Duration,
    /// Record host, pid, app and time in each lock (see acquire.lua).
    pub(crate) holder_metadata: bool,
    pub(crate) replica_acks: Option<ReplicaAcks>,
    /// Prepended to lock keys, and so to the release channels.
    pub(crate) key_prefix: &'a str,
    /// Where connections' drivers and the subscriber run.
    pub(crate) background: &'a Background,
    /// Tokens follow the server clock too (`max(counter + 1, server time in µs)`), and every
    /// acquire runs the script: a Redlock master, whose token is the highest of a majority's
    /// and only comparable with the other masters' through their clocks.
    pub(crate) clocked_tokens: bool,
    /// The certificates of TLS connections (see [`TlsConfig`](crate::TlsConfig)).
    pub(crate) tls: &'a Certificates,
}

pub(crate) struct RedisBackend {
    conn: Arc<SharedConn>,
    background: Background,
    client: Client,
    server: String,
    describe: String,
    holder: Holder,
    /// With `wait_for_replicas`: the policy, and the connections acquires wait on.
    replication: Option<(Replication, Pool<(MultiplexedConnection, Lifeline)>)>,
    request_timeout: Duration,
    /// The user may publish and subscribe to lock channels (see [`probe`]): otherwise waiters
    /// wait on leases alone, and nothing asks for subscriptions the server would refuse.
    notifies: bool,
    /// What the server can do without scripts (see [`Capabilities`]); none where the backend
    /// connected lazily and never asked.
    capabilities: Capabilities,
    subscriptions: Subscriptions,
}

/// Who takes the locks, as acquire.lua records it, and how tokens are handed out: the arguments
/// of the lock scripts that are the same for every call.
pub(super) struct Holder {
    /// ` host=<h> pid=<p> app=<a>`, or empty with holder metadata off.
    metadata: String,
    /// How long a lock freed for the first fair waiter waits for it.
    fair_turn_ms: u64,
    /// See [`RedisSettings::clocked_tokens`].
    clocked_tokens: bool,
}

impl Holder {
    pub(super) fn new(settings: &RedisSettings<'_>) -> Self {
        let metadata = if settings.holder_metadata {
            let host = gethostname::gethostname();
            protocol::holder_metadata(
                &host.to_string_lossy(),
                std::process::id(),
                settings.app_name,
            )
        } else {
            String::new()
        };
        Holder {
            metadata,
            fair_turn_ms: millis(settings.fair_turn),
            clocked_tokens: settings.clocked_tokens,
        }
    }

    /// Whether an acquire of `key` asked as `ask` takes the lean path (a transaction, no
    /// script) on a server that offers `capabilities`: a plain lock, outside the line of fair
    /// waiters, where tokens come from the slot's counter alone. A Redlock master's tokens
    /// follow its clock too ([`RedisSettings::clocked_tokens`]), which only the script
    /// computes. The one gate of every deployment (a Cluster master is never clocked, a
    /// Redlock master always is).
    pub(super) fn takes_lean(
        &self,
        capabilities: &Capabilities,
        key: &StoredKey,
        ask: Ask,
    ) -> bool {
        capabilities.lean_acquire && !self.clocked_tokens && key.is_lock() && ask.line != Line::Fair
    }

    /// The call of acquire.lua that takes `key` for `token` and `ttl` (see [`Ask`]); a fair
    /// waiter's turn is announced as `announce` says. For a semaphore, the call of
    /// semaphore.lua that takes one of its permits.
    pub(super) fn acquire<'a>(
        &'a self,
        key: &StoredKey,
        token: &str,
        ttl: Duration,
        ask: Ask,
        announce: Announce,
    ) -> Call<'a> {
        match key.shape {
            Shape::Read | Shape::Write => {
                let mut invocation = RW_ACQUIRE.prepare_invoke();
                invocation
                    .key(key.rw_readers())
                    .key(key.rw_writer())
                    .key(key.rw_writer_waiting())
                    .key(key.counter())
                    .key(key.sem_waiting())
                    .key(key.fence_of_0_2())
                    .arg(token)
                    .arg(rw_mode(key))
                    .arg(millis(ttl))
                    .arg(if ask.waited { "1" } else { "0" })
                    .arg(self.clock_arg())
                    .arg(if ask.line == Line::No { "0" } else { "1" });
                Call {
                    invocation,
                    script: &RW_ACQUIRE,
                }
            }
            Shape::Semaphore { permits } => {
                let mut invocation = SEMAPHORE.prepare_invoke();
                invocation
                    .key(&key.lock)
                    .key(key.counter())
                    .key(key.sem_waiting())
                    .key(key.fence_of_0_2())
                    .arg(token)
                    .arg(permits)
                    .arg(millis(ttl))
                    .arg(if ask.waited { "1" } else { "0" })
                    .arg(self.clock_arg());
                Call {
                    invocation,
                    script: &SEMAPHORE,
                }
            }
            Shape::Lock => {
                let mut invocation = ACQUIRE.prepare_invoke();
                invocation
                    .key(&key.lock)
                    .key(key.counter())
                    .key(key.queue())
                    .key(key.queue_expiry())
                    .key(key.fence_before_0_2())
                    .arg(token)
                    .arg(millis(ttl))
                    .arg(self.holder(ask.since_ms))
                    .arg(if ask.waited { "1" } else { "0" })
                    .arg(ask.line.as_arg())
                    .arg(self.fair_turn_ms)
                    .arg(announce.as_arg())
                    .arg(self.clock_arg());
                Call {
                    invocation,
                    script: &ACQUIRE,
                }
            }
        }
    }

    /// `clock` when tokens follow the server clock too (see [`RedisSettings::clocked_tokens`]),
    /// as the acquire scripts take it.
    fn clock_arg(&self) -> &'static str {
        if self.clocked_tokens { "clock" } else { "" }
    }

    /// What a held lock's value says of its holder (see [`protocol::held_value`]): ` since=<ms>`
    /// and ` host=<h> pid=<p> app=<a>`, or nothing with holder metadata off.
    pub(super) fn holder(&self, since_ms: u64) -> String {
        protocol::holder_part(since_ms, &self.metadata)
    }

    /// The value an attempt of `token` asking `ask` writes: marked as awaited if it waited.
    pub(super) fn attempt_value(&self, token: &str, ask: Ask) -> String {
        self.held_value(token, if ask.waited { '1' } else { '0' }, ask.since_ms)
    }

    /// The value an acquire of `token` begun at `since_ms` (wall clock) writes: see
    /// [`protocol::held_value`], whose holder part is [`Holder::holder`].
    pub(super) fn held_value(&self, token: &str, waiting: char, since_ms: u64) -> String {
        protocol::held_value(token, waiting, since_ms, &self.metadata)
    }

    /// The call of leave.lua: `token` leaves the line of fair waiters for `key`; for a
    /// read-write lock, the call of rw_leave.lua: a writer stops waiting.
    pub(super) fn leave(&self, key: &StoredKey, token: &str, announce: Announce) -> Call<'static> {
        match key.shape {
            Shape::Read | Shape::Write => {
                let mut invocation = RW_LEAVE.prepare_invoke();
                invocation
                    .key(key.rw_writer_waiting())
                    .key(key.sem_waiting())
                    .arg(token)
                    .arg(announce.as_arg())
                    .arg(&key.lock);
                Call {
                    invocation,
                    script: &RW_LEAVE,
                }
            }
            Shape::Lock | Shape::Semaphore { .. } => {
                let mut invocation = LEAVE.prepare_invoke();
                invocation
                    .key(&key.lock)
                    .key(key.queue())
                    .key(key.queue_expiry())
                    .arg(token)
                    .arg(self.fair_turn_ms)
                    .arg(announce.as_arg());
                Call {
                    invocation,
                    script: &LEAVE,
                }
            }
        }
    }

    /// The call of handoff.lua that moves `key` from `from` to `to` for `ttl`.
    pub(super) fn hand_off(
        &self,
        key: &StoredKey,
        from: &str,
        to: &str,
        ttl: Duration,
        announce: Announce,
    ) -> redis::ScriptInvocation<'static> {
        let mut invocation = HANDOFF.prepare_invoke();
        invocation
            .key(&key.lock)
            .key(key.queue())
            .key(key.queue_expiry())
            .key(key.counter())
            .arg(from)
            .arg(to)
            .arg(millis(ttl))
            .arg(self.holder(crate::protocol::now_ms()))
            .arg(announce.as_arg())
            .arg(self.fair_turn_ms);
        invocation
    }

    /// The call of release.lua that releases `key` if `token` holds it, keeping it busy for
    /// `keep_ms` more (hold_at_least) when that is not 0; for a semaphore, the call of
    /// permit_release.lua.
    pub(super) fn release(
        &self,
        key: &StoredKey,
        token: &str,
        keep_ms: u64,
        announce: Announce,
    ) -> Call<'static> {
        match key.shape {
            Shape::Read | Shape::Write => {
                let mut invocation = RW_RELEASE.prepare_invoke();
                invocation
                    .key(key.rw_readers())
                    .key(key.rw_writer())
                    .key(key.sem_waiting())
                    .arg(token)
                    .arg(rw_mode(key))
                    .arg(keep_ms)
                    .arg(announce.as_arg())
                    .arg(&key.lock);
                Call {
                    invocation,
                    script: &RW_RELEASE,
                }
            }
            Shape::Semaphore { permits } => {
                let mut invocation = PERMIT_RELEASE.prepare_invoke();
                invocation
                    .key(&key.lock)
                    .key(key.sem_waiting())
                    .arg(token)
                    .arg(permits)
                    .arg(keep_ms)
                    .arg(announce.as_arg());
                Call {
                    invocation,
                    script: &PERMIT_RELEASE,
                }
            }
            Shape::Lock => {
                let mut invocation = RELEASE.prepare_invoke();
                invocation
                    .key(&key.lock)
                    .key(key.queue())
                    .key(key.queue_expiry())
                    .arg(token)
                    .arg(keep_ms)
                    .arg(announce.as_arg())
                    .arg(self.fair_turn_ms);
                Call {
                    invocation,
                    script: &RELEASE,
                }
            }
        }
    }
}

/// Takes a lock on `conn` and, once granted, waits for the replicas to acknowledge it
/// (see [`Replication::confirm`]); a shortfall gives the grant back and fails transiently. The acquire path of every
/// backend that speaks to Redis with `wait_for_replicas`.
pub(super) async fn acquire_confirmed<C: redis::aio::ConnectionLike>(
    conn: &mut C,
    holder: &Holder,
    invocation: &Call<'_>,
    key: &StoredKey,
    token: &str,
    ttl: Duration,
    replication: &Replication,
) -> Result<Acquire, Failure> {
    let answer = invocation.run(conn).await?;
    let acquired = acquire_answer(key, answer)?;
    if !matches!(acquired, Acquire::Acquired { .. }) {
        return Ok(acquired);
    }
    let Err(failure) = replication.confirm(conn, ttl).await else {
        return Ok(acquired);
    };
    let give_back = holder.release(key, token, 0, replication.announce);
    // If this fails too, the caller's clean-up of a failed attempt releases it.
    let _: RedisResult<i64> = give_back.run(conn).await;
    Err(failure)
}

/// The connection acquires, renewals and releases share, made again when the runtime its
/// driver ran on shut down (see `background`).
struct SharedConn {
    conn: Revivable<ConnectionManager>,
    client: Client,
    config: ConnectionManagerConfig,
    background: Background,
    server: String,
}

impl SharedConn {
    /// The shared connection; if the runtime its driver ran on has shut down, a new one that
    /// connects on first use, from the caller (so no request meets the dead one).
    fn get(&self) -> Conn {
        let (manager, lifeline) = self.conn.live_or(|| {
            // Whatever the manager spawns now goes to the pinned runtime, if any.
            let _entered = self.background.pinned().map(Handle::enter);
            let fresh = ConnectionManager::new_lazy_with_config(
                self.client.clone(),
                self.config.clone(),
            );
            match fresh {
                Ok(fresh) => {
                    tracing::debug!(server = %self.server, "the runtime of the lock connection shut down; connecting again from this one");
                    Some((fresh, self.background.lifeline()))
                }
                // Only push settings can fail here, and none are made; should it happen, the
                // old connection answers with its own error.
                Err(err) => {
                    tracing::warn!(server = %self.server, error = %describe_error(&err), "cannot make a new connection");
                    None
                }
            }
        });
        Conn {
            manager,
            pinned: self.background.pinned().cloned(),
            lifeline,
        }
    }

    /// Runs `request` on the connection, and once more if the connection dropped while the
    /// request was out: on a fresh one if the runtime of the first shut down (in a multi-runtime
    /// program, or a test suite whose first test made the connection), so that the caller never
    /// sees that runtime's `broken pipe`. Every request here may be sent twice: an acquire with the same token
    /// confirms its own grant, a renewal extends its own lease again, and a release that had
    /// landed answers that the lock is gone.
    async fn send<T, F: Future<Output = RedisResult<T>>>(
        &self,
        request: impl Fn(Conn) -> F,
    ) -> RedisResult<T> {
        let conn = self.get();
        let lifeline = conn.lifeline.clone();
        match request(conn).await {
            // A connection that dropped under the request: the driver of the connection ran on
            // a runtime that shut down (its own, or the one a reconnect happened to run on),
            // or the server closed it. Sent once more, on a fresh connection or the one the
            // manager makes again; a server that is gone answers that at once.
            Err(err) if lifeline.is_cut() || err.is_connection_dropped() => {
                tracing::debug!(server = %self.server, error = %describe_error(&err), "the lock connection dropped during a request; sending it again");
                request(self.get()).await
            }
            answer => answer,
        }
    }
}

/// The shared connection as requests use it. Pinned to a runtime, each request is sent from a
/// task on that runtime, so that a reconnect, which spawns the new connection's driver where
/// the request runs, lands there too: one task spawn per request, a few microseconds against a
/// round trip's tens to hundreds. Unpinned, requests go straight to the connection.
#[derive(Clone)]
pub(super) struct Conn {
    manager: ConnectionManager,
    pinned: Option<Handle>,
    lifeline: Arc<Lifeline>,
}

fn pinned_runtime_gone() -> RedisError {
    RedisError::from(std::io::Error::other(
        crate::background::RuntimeGone.to_string(),
    ))
}

impl redis::aio::ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        let Some(handle) = &self.pinned else {
            return self.manager.req_packed_command(cmd);
        };
        let mut manager = self.manager.clone();
        let cmd = cmd.clone();
        let sent = handle.spawn(async move { manager.send_packed_command(&cmd).await });
        Box::pin(async move { sent.await.map_err(|_| pinned_runtime_gone())? })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        let Some(handle) = &self.pinned else {
            return self.manager.req_packed_commands(pipeline, offset, count);
        };
        let mut manager = self.manager.clone();
        let pipeline = pipeline.clone();
        let sent = handle
            .spawn(async move { manager.send_packed_commands(&pipeline, offset, count).await });
        Box::pin(async move { sent.await.map_err(|_| pinned_runtime_gone())? })
    }

    fn get_db(&self) -> i64 {
        self.manager.get_db()
    }
}

/// The release script's answer (see release.lua).
pub(super) fn release_answer(answer: i64) -> Release {
    match answer {
        // 2: freed for the first fair waiter in line.
        1 | 2 => Release::Released,
        0 => Release::NotOwner,
        _ => Release::Gone,
    }
}

impl RedisBackend {
    /// Deletes the lock if `token` owns it, without telling waiters: for a Redlock minority
    /// grant given back while another owner holds the majority, whose release will tell them,
    /// and for a grant from a Sentinel master that was replaced while the request was out.
    pub(super) fn give_back_quietly(
        &self,
        key: &StoredKey,
        token: &str,
    ) -> impl Future<Output = Result<Release, Failure>> + Send + use<> {
        self.run_release(key, token, 0, Announce::Quiet)
    }

    /// Releases as [`Backend::release`] does, as a future that borrows nothing: for a request
    /// left to finish in the background.
    pub(super) fn release_owned(
        &self,
        key: &StoredKey,
        token: &str,
        keep: Duration,
    ) -> impl Future<Output = Result<Release, Failure>> + Send + use<> {
        let keep_ms = if keep.is_zero() { 0 } else { millis(keep) };
        self.run_release(key, token, keep_ms, Announce::Publish)
    }

    /// Leaves the line as [`Backend::leave`] does, as a future that borrows nothing.
    pub(super) fn leave_owned(
        &self,
        key: &StoredKey,
        token: &str,
    ) -> impl Future<Output = Result<(), Failure>> + Send + use<> {
        let conn = self.shared_conn();
        let invocation = self.holder.leave(key, token, Announce::Publish);
        async move {
            let invocation = &invocation;
            let _: i64 = conn
                .send(|mut conn| async move { invocation.run(&mut conn).await })
                .await?;
            Ok(())
        }
    }

    /// A connection of its own for an acquire that waits for replicas.
    async fn wait_connection(
        &self,
        replication: &Replication,
    ) -> Result<(MultiplexedConnection, Lifeline), Failure> {
        let config = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.request_timeout))
            .set_response_timeout(Some(self.request_timeout + replication.acks.timeout));
        let client = self.client.clone();
        let conn = self
            .background
            .run(async move {
                client
                    .get_multiplexed_async_connection_with_config(&config)
                    .await
            })
            .await??;
        Ok((conn, self.background.lifeline()))
    }

    /// One `PING`: whether the server answers at all.
    pub(super) fn ping(&self) -> impl Future<Output = Result<(), Failure>> + Send + use<> {
        let conn = self.shared_conn();
        async move {
            conn.send(
                |mut conn| async move { redis::cmd("PING").query_async::<()>(&mut conn).await },
            )
            .await?;
            Ok(())
        }
    }

    /// Runs release.lua.
    fn run_release(
        &self,
        key: &StoredKey,
        token: &str,
        keep_ms: u64,
        announce: Announce,
    ) -> impl Future<Output = Result<Release, Failure>> + Send + use<> {
        let conn = self.shared_conn();
        let invocation = self.holder.release(key, token, keep_ms, announce);
        async move {
            let invocation = &invocation;
            let answer: i64 = conn
                .send(|mut conn| async move { invocation.run(&mut conn).await })
                .await?;
            Ok(release_answer(answer))
        }
    }

    /// The shared connection (see [`SharedConn`]); also starts the subscription task again if
    /// its runtime is gone while keys are watched.
    fn shared_conn(&self) -> Arc<SharedConn> {
        self.subscriptions.revive();
        self.conn.clone()
    }

    /// Connects now: fails if the server cannot be reached or refuses the credentials.
    pub(crate) async fn connect(
        settings: RedisSettings<'_>,
        waiters: Arc<Waiters>,
    ) -> Result<Self, LockError> {
        Self::open(settings, waiters, true).await
    }

    /// Connects on first use (and again whenever needed): for one node of several, which may be
    /// down when the manager starts.
    pub(crate) async fn connect_lazily(
        settings: RedisSettings<'_>,
        waiters: Arc<Waiters>,
    ) -> Result<Self, LockError> {
        Self::open(settings, waiters, false).await
    }

    async fn open(
        settings: RedisSettings<'_>,
        waiters: Arc<Waiters>,
        eager: bool,
    ) -> Result<Self, LockError> {
        let server = url::server_of(settings.url);
        if url::scheme(settings.url)? == "rediss" {
            enable_tls(settings.url)?;
        }
        let client = settings.tls.client(settings.url).map_err(|err| {
            LockError::Config(format!(
                "cannot use `{}`: {}",
                url::redact(settings.url),
                describe_error(&err)
            ))
        })?;
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(settings.request_timeout))
            .set_response_timeout(Some(settings.request_timeout))
            .set_number_of_retries(2);
        let background = settings.background.clone();
        let connect_error = |err: &RedisError| super::connect_error(&server, err);
        let conn = if eager {
            // The driver task belongs to the runtime the connect runs on.
            background
                .run(ConnectionManager::new_with_config(
                    client.clone(),
                    config.clone(),
                ))
                .await
                .map_err(|err| LockError::from_failure("connect", None, &server, err.into()))?
        } else {
            let _entered = background.pinned().map(Handle::enter);
            ConnectionManager::new_lazy_with_config(client.clone(), config.clone())
        }
        .map_err(|err| connect_error(&err))?;
        let conn = Arc::new(SharedConn {
            conn: Revivable::new(conn, background.lifeline()),
            client: client.clone(),
            config,
            background: background.clone(),
            server: server.clone(),
        });
        let (notifies, capabilities) = if eager {
            probe(&mut conn.get(), &server, settings.key_prefix).await?
        } else {
            (true, Capabilities::default())
        };
        protocol::slots::prepare();
        let subscriptions = {
            let (client, server, background) = (client.clone(), server.clone(), background.clone());
            let timeout = settings.request_timeout;
            Subscriptions::start(move |requests, watched| {
                let feed = PubSubFeed {
                    client: client.clone(),
                    conn: None,
                    server: server.clone(),
                    timeout,
                };
                background.spawn(subscriber::run(
                    feed,
                    requests,
                    watched,
                    waiters.clone(),
                    server.clone(),
                ));
            })
        };
        let replication = settings.replica_acks.map(|acks| {
            (
                Replication::new(acks, &server, Announce::Publish),
                Pool::default(),
            )
        });
        Ok(RedisBackend {
            conn,
            background,
            client,
            describe: format!("redis {server}"),
            server,
            holder: Holder::new(&settings),
            replication,
            request_timeout: settings.request_timeout,
            notifies,
            capabilities,
            subscriptions,
        })
    }
}

/// Checks once, at connect, what would otherwise fail on every call or silently: that the
/// connection is authenticated, that the server runs scripts, that it does not evict lock keys,
/// and whether the user may publish to lock channels (a Redis 7 ACL user is created without channel rights).
/// Returns whether release notifications can flow, and what the server offers beyond scripts.
async fn probe(
    conn: &mut Conn,
    server: &str,
    key_prefix: &str,
) -> Result<(bool, Capabilities), LockError> {
    if let Err(err) = redis::cmd("PING").query_async::<()>(conn).await {
        if !speaks_redis(&err) {
            return Err(super::connect_error(server, &err));
        }
        let reason = if err.code() == Some("NOAUTH") {
            "authentication required: the server asks for a password and the URL gives none; \
             write redis://:PASSWORD@host:port, or redis://USER:PASSWORD@host:port for an ACL \
             user"
                .to_owned()
        } else {
            describe_error(&err)
        };
        // Bad credentials recur; a server that is not up yet may come up.
        let transient = err.code() != Some("NOAUTH") && super::is_transient(&err);
        return Err(LockError::backend_with(
            "connect",
            None,
            server,
            reason.into(),
            transient,
        ));
    }
    check_rights(conn, server, key_prefix).await?;
    // Managed services may refuse CONFIG: then there is nothing to tell.
    let policy: RedisResult<Vec<String>> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("maxmemory-policy")
        .query_async(conn)
        .await;
    if let Some(policy) = policy.ok().as_ref().and_then(|answer| answer.get(1))
        && evicts_lock_keys(policy)
    {
        tracing::warn!(
            server,
            policy = %policy,
            "maxmemory-policy {policy} lets the server evict held locks under memory pressure, \
             and a second holder then gets in: run locks on a server with maxmemory-policy \
             noeviction"
        );
    }
    let capabilities = Capabilities::probe(conn, key_prefix).await;
    tracing::debug!(server, protocol = %capabilities.describe(), "lock protocol");
    // Last, so that the connection's last command says a lock client connected (tools and
    // tests look for it in CLIENT LIST).
    let channel = format!("{key_prefix}{{lock-runtime:permission-probe}}");
    let published: RedisResult<i64> = redis::cmd("PUBLISH")
        .arg(&channel)
        .arg("")
        .query_async(conn)
        .await;
    match published {
        Err(err) if err.code() == Some("NOPERM") => {
            tracing::warn!(
                server,
                "this user may not publish to lock channels (`{key_prefix}*`): releases are not \
                 announced and waiters wait for leases to run out; grant the channels, e.g. \
                 ACL SETUSER <user> &{key_prefix}*"
            );
            Ok((false, capabilities))
        }
        _ => Ok((true, capabilities)),
    }
}

/// The commands the library runs on the lock keys besides `EVAL` (which the connect runs to ask
/// about them): those of the `ACL SETUSER` line of docs/SERVERS.md ("ACL rights"), which a unit
/// test compares this with.
const NEEDED: &[&str] = &[
    "evalsha",
    "get",
    "set",
    "del",
    "incr",
    "pexpire",
    "pttl",
    "persist",
    "exists",
    "time",
    "type",
    "hget",
    "zadd",
    "zrem",
    "zrange",
    "zrangebyscore",
    "zremrangebyscore",
    "zcard",
    "zscore",
    "hset",
    "hdel",
    "hgetall",
    "multi",
    "exec",
    "info",
    "ping",
];

/// Answers which of the commands in `ARGV[2..]` this user may not run on the key `ARGV[1]`
/// (`redis.acl_check_cmd`, Redis 7.0 and later and Valkey); nothing where the server cannot
/// say. `EVALSHA` is asked about with its key count: Redis 7.0 reads the count of a command
/// whose keys follow one even where it is missing, and crashes.
const RIGHTS_SCRIPT: &str = "local check = redis.acl_check_cmd
if not check then return {} end
local refused = {}
for i = 2, #ARGV do
  local allowed
  if ARGV[i] == 'evalsha' then
    allowed = check('evalsha', '0', '1', ARGV[1])
  else
    allowed = check(ARGV[i], ARGV[1])
  end
  if not allowed then refused[#refused + 1] = ARGV[i] end
end
return refused";

/// Checks at connect that the server runs scripts (nothing can be locked without them: an
/// error now, not at every acquire), and asks it which of the rights the library needs this
/// user lacks: logged once, naming them and the grant, since only the calls that need them
/// fail (plain locks need no sorted sets, say).
async fn check_rights(conn: &mut Conn, server: &str, key_prefix: &str) -> Result<(), LockError> {
    // Not the permission probe's channel, whose publish marks one connect (tools and tests
    // count them).
    let probe_key = format!("{key_prefix}{{lock-runtime:rights}}");
    let asked: RedisResult<Vec<String>> = redis::cmd("EVAL")
        .arg(RIGHTS_SCRIPT)
        .arg(0)
        .arg(&probe_key)
        .arg(NEEDED)
        .query_async(conn)
        .await;
    match asked {
        Err(err) if refuses_command(&err) => Err(LockError::backend(
            "connect",
            None,
            server,
            format!(
                "the server refuses Lua scripts ({}); locks need EVALSHA and EVAL: grant them \
                 (ACL SETUSER <user> +evalsha +eval) or use a server that allows scripting",
                describe_error(&err)
            ),
        )),
        Ok(refused) if !refused.is_empty() => {
            let names = refused.join(" ").to_ascii_uppercase();
            let grant: String = refused
                .iter()
                .map(|command| format!(" +{command}"))
                .collect();
            tracing::warn!(
                server,
                refused = %names,
                "this user may not run {names} on the lock keys (`{key_prefix}*`): the calls \
                 that need them fail, naming the command (plain locks need GET SET DEL INCR \
                 PEXPIRE PTTL TIME; fair locks, semaphores and read-write locks the sorted-set \
                 commands; deadlock detection across processes HSET HDEL HGETALL); grant them \
                 with ACL SETUSER <user>{grant} (docs/SERVERS.md, \"ACL rights\")"
            );
            Ok(())
        }
        // Granted, a server that cannot say, or one that failed otherwise: the first call tells.
        _ => Ok(()),
    }
}

/// Whether the server refused a command as such (an ACL without it, a service that disabled or
/// renamed it), rather than failing to run it. Told by the error's kind where it has one of its
/// own (`NOPERM`); an unknown command has none (`ERR`, on Redis and Valkey alike), so only
/// there is the server's own message read, from its start and in any case (Redis 6.0 wrote
/// "Unknown subcommand", 6.2 and later "unknown subcommand"). An error a script raised (its
/// text changed across servers: Valkey 8.0, 9.1) never counts.
fn refuses_command(err: &RedisError) -> bool {
    use redis::{ErrorKind, ServerErrorKind};
    match err.kind() {
        ErrorKind::Server(ServerErrorKind::NoPerm) => true,
        ErrorKind::Server(ServerErrorKind::ResponseError) => {
            let detail = err.detail().unwrap_or_default().trim_start();
            ["unknown command", "unknown subcommand"]
                .iter()
                .any(|start| {
                    detail
                        .get(..start.len())
                        .is_some_and(|head| head.eq_ignore_ascii_case(start))
                })
        }
        _ => false,
    }
}

/// Whether a `maxmemory-policy` can evict a lock key: every policy but `noeviction` can, since
/// lock keys carry an expiry (`volatile-*`) and are keys like any other (`allkeys-*`).
fn evicts_lock_keys(policy: &str) -> bool {
    policy != "noeviction"
}

/// A Redis error as text, with the server's own message but never the URL or credentials.
/// What a lean attempt answers the acquire: granted, or busy; `None` where the script is asked
/// (after the caller gave back what [`lean::Took::GiveBack`] may have taken).
pub(super) fn lean_answer(took: &lean::Took) -> Option<Acquire> {
    match took {
        lean::Took::Acquired { fence } => Some(Acquire::Acquired { fence: *fence }),
        lean::Took::Busy {
            holder,
            pttl,
            blocker,
        } => Some(Acquire::Busy {
            remaining: Some(Duration::from_millis(*pttl)),
            holder: Some(*holder),
            in_line: false,
            blocker: blocker.clone(),
        }),
        lean::Took::Script | lean::Took::GiveBack => None,
    }
}

pub(super) fn describe_error(err: &RedisError) -> String {
    err.to_string()
}

/// Whether the answer behind `err` was in Redis's protocol at all: not when the bytes that came
/// back could not be read as one (an HTTP server, a TLS server spoken to in plain text).
fn speaks_redis(err: &RedisError) -> bool {
    err.kind() != redis::ErrorKind::Parse
}

impl Backend for RedisBackend {
    fn describe(&self) -> &str {
        &self.describe
    }

    fn server(&self) -> &str {
        &self.server
    }

    fn acquire<'a>(
        &'a self,
        key: &'a StoredKey,
        token: &'a str,
        ttl: Duration,
        ask: Ask,
    ) -> BoxFuture<'a, Result<Acquire, Failure>> {
        Box::pin(async move {
            // The script's call is built only where it is sent: a free lock taken by the
            // transaction never needs it, and building it (five key names, the holder text)
            // was a good part of the client's work per acquire.
            let invocation = || self.holder.acquire(key, token, ttl, ask, Announce::Publish);
            let Some((replication, pool)) = &self.replication else {
                if self.holder.takes_lean(&self.capabilities, key, ask)
                    && let Some(answer) = self.acquire_lean(key, token, ttl, ask).await?
                {
                    return Ok(answer);
                }
                let invocation = &invocation();
                let answer = self
                    .shared_conn()
                    .send(|mut conn| async move { invocation.run(&mut conn).await })
                    .await?;
                return acquire_answer(key, answer);
            };
            // WAIT blocks the connection it is sent on: never the shared one.
            // An idle one whose runtime shut down is dropped.
            let idle = std::iter::from_fn(|| pool.take()).find(|(_, lifeline)| !lifeline.is_cut());
            let (mut conn, lifeline) = match idle {
                Some(idle) => idle,
                None => self.wait_connection(replication).await?,
            };
            self.subscriptions.revive();
            let answer = acquire_confirmed(
                &mut conn,
                &self.holder,
                &invocation(),
                key,
                token,
                ttl,
                replication,
            )
            .await;
            if answer.is_ok() {
                pool.put((conn, lifeline));
            }
            answer
        })
    }

    fn renew<'a>(&'a self, batch: &'a [Renewal], book: Booking<'a>) -> BoxFuture<'a, ()> {
        // One server, one round trip: the whole batch is answered at once.
        Box::pin(async move { book(&whole(batch), self.renew_pipelined(batch).await) })
    }

    fn release<'a>(
        &'a self,
        key: &'a StoredKey,
        token: &'a str,
        keep: Duration,
    ) -> BoxFuture<'a, Result<Release, Failure>> {
        Box::pin(self.release_owned(key, token, keep))
    }

    fn release_lease<'a>(
        &'a self,
        lease: &'a Lease,
        keep: Duration,
    ) -> BoxFuture<'a, Result<Release, Failure>> {
        Box::pin(self.release_lease_here(lease, keep))
    }

    fn leave<'a>(
        &'a self,
        key: &'a StoredKey,
        token: &'a str,
    ) -> BoxFuture<'a, Result<(), Failure>> {
        Box::pin(self.leave_owned(key, token))
    }

    fn waits<'a>(
        &'a self,
        key: &'a str,
        update: &'a WaitsUpdate,
    ) -> BoxFuture<'a, Result<Vec<(String, String)>, Failure>> {
        let conn = self.shared_conn();
        Box::pin(async move {
            let pipe = &update.pipeline(key);
            let reply: Vec<redis::Value> = conn
                .send(|mut conn| async move { pipe.query_async(&mut conn).await })
                .await?;
            Ok(update.answer(reply)?)
        })
    }

    fn hands_off(&self) -> bool {
        self.replication.is_none()
    }

    fn hand_off<'a>(
        &'a self,
        from: &'a Lease,
        to: &'a Lease,
    ) -> BoxFuture<'a, Result<HandOff, Failure>> {
        let conn = self.shared_conn();
        Box::pin(async move {
            let (capabilities, holder) = (&self.capabilities, &self.holder);
            let native = conn
                .send(|mut conn| async move {
                    native_hand_off(capabilities, holder, from, to, &mut conn).await
                })
                .await?;
            let shared = &conn;
            let give_back = move |to_value: String| async move {
                self.give_back_lean(shared, &from.stored, &to.token, &to_value)
                    .await
            };
            if let Some(answer) = settle_native(native, give_back).await? {
                return Ok(answer);
            }
            let ttl = to.options.ttl;
            let invocation =
                self.holder
                    .hand_off(&from.stored, &from.token, &to.token, ttl, Announce::Publish);
            let invocation = &invocation;
            let answer = conn
                .send(|mut conn| async move { invoke(invocation, &HANDOFF, &mut conn).await })
                .await?;
            hand_off_answer(answer)
        })
    }

    fn watch<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<(), Failure>> {
        if !self.notifies {
            // Reported once at connect; waiters wake at the end of the lease they were told.
            return Box::pin(std::future::ready(Ok(())));
        }
        Box::pin(self.subscriptions.watch(key))
    }

    fn unwatch(&self, key: &str) {
        self.subscriptions.unwatch(key);
    }

    fn notifies(&self) -> bool {
        self.notifies
    }
}

impl RedisBackend {
    /// Takes a free plain lock in one transaction (see [`lean::acquire`]), or answers busy
    /// where that needs no script; `None` where the script must decide.
    async fn acquire_lean(
        &self,
        key: &StoredKey,
        token: &str,
        ttl: Duration,
        ask: Ask,
    ) -> Result<Option<Acquire>, Failure> {
        let value = self.holder.attempt_value(token, ask);
        let counter = key.counter();
        let (value, counter) = (&value, &counter);
        let conn = self.shared_conn();
        let (waits, joins) = (ask.waits, ask.joins());
        let took = conn
            .send(|mut conn| async move {
                lean::take(
                    &mut conn,
                    key,
                    counter,
                    token,
                    value,
                    millis(ttl),
                    waits,
                    joins,
                )
                .await
            })
            .await?;
        let answer = lean_answer(&took);
        if took == lean::Took::GiveBack {
            self.give_back_lean(&conn, key, token, value).await?;
        }
        Ok(answer)
    }

    /// Gives back what a transaction of `token` may have taken as `value`: deleted if it still
    /// holds that value; if it holds ours marked since (a waiter told it is busy, a fair waiter
    /// that joined the line), released by the script, which frees it for the first in line or
    /// announces it, so that the attempt that follows cannot re-enter past them. Whether
    /// anything of `token`'s was there to give back.
    async fn give_back_lean(
        &self,
        conn: &SharedConn,
        key: &StoredKey,
        token: &str,
        value: &str,
    ) -> Result<bool, Failure> {
        let native = self.capabilities.native_delete;
        let lock = &key.lock;
        let deleted = conn
            .send(|mut conn| async move { lean::release(&mut conn, lock, value, native).await })
            .await?;
        if deleted {
            return Ok(true);
        }
        let released = self.release_owned(key, token, Duration::ZERO).await?;
        Ok(released == Release::Released)
    }

    /// Releases `lease` by comparing the whole value its acquire wrote, where nobody was told
    /// it is busy (see [`lean::release`]); otherwise, or if the value changed, by the script.
    /// The script's call is built only when it is sent: most releases never need it.
    pub(super) async fn release_lease_here(
        &self,
        lease: &Lease,
        keep: Duration,
    ) -> Result<Release, Failure> {
        if keep.is_zero()
            && lease.stored.is_lock()
            && let Some(since_ms) = lease.written_plain()
        {
            let value = &self.holder.held_value(&lease.token, '0', since_ms);
            let (lock, native) = (&lease.stored.lock, self.capabilities.native_delete);
            let deleted = self
                .shared_conn()
                .send(|mut conn| async move { lean::release(&mut conn, lock, value, native).await })
                .await?;
            if deleted {
                return Ok(Release::Released);
            }
        }
        self.release_owned(&lease.stored, &lease.token, keep).await
    }

    /// The whole batch in one pipeline, answered together (see [`renew_comparing`]): for
    /// [`Backend::renew`], and for the deployments built of several servers (Redlock,
    /// Sentinel), which weigh each server's answers before booking them.
    pub(super) async fn renew_pipelined(
        &self,
        batch: &[Renewal],
    ) -> Result<Vec<Option<bool>>, Failure> {
        let mut conn = self.shared_conn().get();
        let renewals: Vec<&Renewal> = batch.iter().collect();
        let written: Vec<Option<String>> = batch
            .iter()
            .map(|renewal| written_value(&self.capabilities, &self.holder, &renewal.lease))
            .collect();
        Ok(renew_comparing(&renewals, &written, &mut conn).await?)
    }
}

/// The value the acquire of `lease` wrote, where a renewal can compare it natively: a lock
/// nobody was told is busy (see [`Lease::written_plain`]), on a server with `SET ... IFEQ`.
pub(super) fn written_value(
    capabilities: &Capabilities,
    holder: &Holder,
    lease: &Lease,
) -> Option<String> {
    if !capabilities.set_ifeq || !lease.stored.is_lock() {
        return None;
    }
    let since_ms = lease.written_plain()?;
    Some(holder.held_value(&lease.token, '0', since_ms))
}

/// The hand-over of the lock of `from` to `to` without a script, where the server has `SET ...
/// IFEQ` and the holder's value is still the one its acquire wrote (see [`lean::hand_off`]):
/// `None` if it cannot be; otherwise what it came to, with the value it wrote for `to` (which
/// [`lean::Passed::GiveBack`] gives back). A lock handed over so holds the plain value of
/// `to`, which its renewals and release compare in turn.
pub(super) async fn native_hand_off(
    capabilities: &Capabilities,
    holder: &Holder,
    from: &Lease,
    to: &Lease,
    conn: &mut impl redis::aio::ConnectionLike,
) -> RedisResult<Option<(lean::Passed, String)>> {
    let Some(from_value) = written_value(capabilities, holder, from) else {
        return Ok(None);
    };
    let since_ms = protocol::now_ms();
    let to_value = holder.held_value(&to.token, '0', since_ms);
    let key = &from.stored;
    let passed = lean::hand_off(
        conn,
        &key.lock,
        &key.counter(),
        &from_value,
        &to_value,
        millis(to.options.ttl),
    )
    .await?;
    if let lean::Passed::Handed { .. } = passed {
        to.record_attempt(since_ms, true);
    }
    Ok(Some((passed, to_value)))
}

/// What a [`native_hand_off`] came to, as the hand-over's answer: handed; or its value given
/// back by `give_back` (see [`lean::Passed::GiveBack`]), which says whether anything of the
/// waiter's was there, and then the waiter asks itself. `None`: the hand-over script decides
/// (nothing was tried, the value changed, or nothing was written and the lock is still the
/// holder's).
pub(super) async fn settle_native<F>(
    native: Option<(lean::Passed, String)>,
    give_back: impl FnOnce(String) -> F,
) -> Result<Option<HandOff>, Failure>
where
    F: Future<Output = Result<bool, Failure>>,
{
    Ok(match native {
        Some((lean::Passed::Handed { fence }, _)) => Some(HandOff::Handed { fence }),
        Some((lean::Passed::GiveBack, to_value)) => {
            give_back(to_value).await?.then_some(HandOff::Released)
        }
        Some((lean::Passed::Script, _)) | None => None,
    })
}

/// Renews `renewals` on `conn` in one pipeline: those whose `written` value is known (see
/// [`written_value`]) by `SET ... IFEQ` (see [`lean::renew`]), the others by renew.lua. A
/// compare that finds another value (a waiter marked the lock as awaited, or it is gone) is
/// settled by renew.lua in a second pipeline of those alone: a marked lock is still renewed, a
/// lost one is found lost, as by the script alone. `Some(true)` renewed, `Some(false)` not
/// ours, in order.
pub(super) async fn renew_comparing(
    renewals: &[&Renewal],
    written: &[Option<String>],
    conn: &mut impl redis::aio::ConnectionLike,
) -> RedisResult<Vec<Option<bool>>> {
    if written.iter().all(Option::is_none) {
        return renew_by_script(renewals.iter().copied(), conn).await;
    }
    let mut pipe = redis::pipe();
    // Each answer apart: a key of another type fails its own compare, not the batch.
    pipe.ignore_errors();
    for (renewal, value) in renewals.iter().zip(written) {
        match value {
            Some(value) => {
                let lock = &renewal.lease.stored.lock;
                pipe.add_command(lean::renew(lock, value, millis(renewal.ttl)));
            }
            None => {
                pipe.invoke_script(&renew_invocation(renewal));
            }
        }
    }
    let answers = query_each_loading(&pipe, &RENEW, conn).await?;
    if answers.len() != renewals.len() {
        return Err(RedisError::from((
            redis::ErrorKind::UnexpectedReturnType,
            "renewal pipeline answered with the wrong number of results",
        )));
    }
    let mut renewed = Vec::with_capacity(renewals.len());
    let mut changed = Vec::new();
    for (i, (answer, value)) in answers.into_iter().zip(written).enumerate() {
        if value.is_some() {
            if lean::renewed(&answer) {
                renewed.push(Some(true));
            } else {
                renewed.push(None);
                changed.push(i);
            }
            continue;
        }
        let answer: i64 = match answer {
            Value::ServerError(err) => return Err(RedisError::from(err)),
            answer => redis::from_redis_value(answer)?,
        };
        renewed.push(Some(answer == 1));
    }
    if !changed.is_empty() {
        let by_script = renew_by_script(changed.iter().map(|&i| renewals[i]), conn).await?;
        for (&i, answer) in changed.iter().zip(by_script) {
            if answer == Some(true) {
                // Still ours, marked: the next renewals and the release go to the script.
                renewals[i].lease.value_changed();
            }
            renewed[i] = answer;
        }
    }
    Ok(renewed)
}

/// Renews `renewals` by renew.lua, in one pipeline: `Some(true)` renewed, `Some(false)` not
/// ours, in order.
async fn renew_by_script<'a>(
    renewals: impl Iterator<Item = &'a Renewal>,
    conn: &mut impl redis::aio::ConnectionLike,
) -> RedisResult<Vec<Option<bool>>> {
    let invocations: Vec<_> = renewals.map(renew_invocation).collect();
    let mut pipe = redis::pipe();
    for invocation in &invocations {
        pipe.invoke_script(invocation);
    }
    let answers: Vec<i64> = query_loading(&pipe, &RENEW, conn).await?;
    Ok(answers
        .into_iter()
        .map(|answer| Some(answer == 1))
        .collect())
}

/// The subscription connection of one server (`SUBSCRIBE`), for [`subscriber::run`].
struct PubSubFeed {
    client: Client,
    conn: Option<(PubSubSink, PubSubStream)>,
    server: String,
    timeout: Duration,
}

impl Feed for PubSubFeed {
    /// Leaves no connection when it failed or did not answer within the request timeout (a
    /// server's refusal keeps it).
    async fn subscribe(&mut self, channel: &str) -> RedisResult<()> {
        let timed_out = || RedisError::from(std::io::Error::from(std::io::ErrorKind::TimedOut));
        if self.conn.is_none() {
            let connected = tokio::time::timeout(self.timeout, self.client.get_async_pubsub())
                .await
                .map_err(|_| timed_out())??;
            self.conn = Some(connected.split());
        }
        let Some((sink, _)) = self.conn.as_mut() else {
            unreachable!("connected just above")
        };
        let answer = match tokio::time::timeout(self.timeout, sink.subscribe(channel)).await {
            Ok(answer) => answer,
            Err(_) => Err(timed_out()),
        };
        if let Err(err) = &answer
            && (err.is_io_error() || err.is_timeout() || err.is_connection_dropped())
        {
            self.conn = None;
        }
        answer
    }

    async fn unsubscribe(&mut self, channel: &str) -> bool {
        let Some((sink, _)) = self.conn.as_mut() else {
            return true;
        };
        let answered = matches!(
            tokio::time::timeout(self.timeout, sink.unsubscribe(channel)).await,
            Ok(Ok(()))
        );
        if !answered {
            // No answer: treat the connection as lost.
            self.conn = None;
        }
        answered
    }

    async fn resubscribe(&mut self, channels: &HashSet<String>) -> RedisResult<()> {
        for channel in channels {
            if let Err(err) = self.subscribe(channel).await {
                self.conn = None;
                return Err(err);
            }
        }
        Ok(())
    }

    async fn next(&mut self) -> Event {
        let Some((_, stream)) = self.conn.as_mut() else {
            return std::future::pending().await;
        };
        match stream.next().await {
            Some(message) => Event::Release {
                channel: message.get_channel_name().to_owned(),
                id: Some(message.get_payload_bytes().to_vec()),
            },
            None => {
                tracing::warn!(
                    server = self.server,
                    "release subscription lost; waiters fall back to lease expiry until it is back"
                );
                self.conn = None;
                Event::Lost
            }
        }
    }

    fn connected(&self) -> bool {
        self.conn.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_plain_lock_outside_the_fair_line_with_counted_tokens_takes_the_lean_path() {
        let holder = |clocked_tokens| Holder {
            metadata: String::new(),
            fair_turn_ms: 0,
            clocked_tokens,
        };
        let lean = Capabilities {
            lean_acquire: true,
            native_delete: None,
            set_ifeq: false,
        };
        let scripts = Capabilities {
            lean_acquire: false,
            ..lean
        };
        let lock = StoredKey::of("lock:", "k", Shape::Lock).expect("key");
        let permit = StoredKey::of("lock:", "k", Shape::Semaphore { permits: 2 }).expect("key");
        let plain = Ask::default();
        let fair = Ask {
            line: Line::Fair,
            ..plain
        };
        assert!(holder(false).takes_lean(&lean, &lock, plain));
        // A Redlock master: its token follows its clock, which the script reads.
        assert!(!holder(true).takes_lean(&lean, &lock, plain));
        assert!(!holder(false).takes_lean(&scripts, &lock, plain));
        assert!(!holder(false).takes_lean(&lean, &permit, plain));
        assert!(!holder(false).takes_lean(&lean, &lock, fair));
    }

    #[test]
    fn the_rights_asked_at_connect_are_the_documented_ones() {
        let doc = include_str!("../../../docs/SERVERS.md");
        let section = doc.split_once("## ACL rights").expect("the section").1;
        let line = section
            .lines()
            .find(|line| line.starts_with("ACL SETUSER"))
            .expect("the line");
        let mut documented: Vec<&str> = line
            .split_whitespace()
            .filter_map(|word| word.strip_prefix('+'))
            .filter(|command| *command != "eval")
            // Run by the subscription and the release announcements, asked about apart.
            .filter(|command| !["publish", "subscribe", "unsubscribe"].contains(command))
            .collect();
        let mut asked = NEEDED.to_vec();
        documented.sort_unstable();
        asked.sort_unstable();
        assert_eq!(asked, documented);
    }

    fn error(reply: &[u8]) -> RedisError {
        redis::parse_redis_value(reply)
            .and_then(Value::extract_error)
            .expect_err("an error reply")
    }

    #[test]
    fn a_refused_command_is_told_by_its_kind_on_every_server() {
        for reply in [
            // Redis 7 and Valkey 8 and 9: the ACL.
            &b"-NOPERM this user has no permissions to run the 'eval' command\r\n"[..],
            b"-NOPERM User u has no permissions to run the 'eval' command\r\n",
            // Disabled or renamed, on Redis and Valkey alike.
            b"-ERR unknown command 'EVAL', with args beginning with: 'return 1' '0' \r\n",
            b"-ERR unknown subcommand 'SHARDNUMSUB'. Try PUBSUB HELP.\r\n",
            // Redis 6.0.
            b"-ERR Unknown subcommand or wrong number of arguments for 'X'. Try PUBSUB HELP.\r\n",
        ] {
            assert!(
                refuses_command(&error(reply)),
                "{}",
                String::from_utf8_lossy(reply)
            );
        }
        for reply in [
            // What a script raises, as Redis 7 and as Redis 6 and Valkey word it.
            &b"-ERR user_script:1: Script attempted to access nonexistent global variable 'x' script: 1, on @user_script:1.\r\n"[..],
            b"-ERR Error running script (call to f_0123): @user_script:1: unknown command\r\n",
            b"-NOSCRIPT No matching script. Please use EVAL.\r\n",
            b"-BUSY Redis is busy running a script.\r\n",
        ] {
            assert!(!refuses_command(&error(reply)), "{}", String::from_utf8_lossy(reply));
        }
    }
}
