//! One Redis server: one auto-reconnecting multiplexed connection
//! for acquire, renew and release, each a single script call, plus one subscription connection for
//! release notifications and notices, subscribed to the notices channel at connect.

use std::sync::Arc;
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig, MultiplexedConnection};
use redis::{Client, RedisError};
use tokio::runtime::Handle;

use super::calls::Holder;
use super::connection::{RedisSettings, Resending, SharedConn, describe_error};
use super::feed::{self, Hearers, PubSubFeed, Subscriptions};
use super::probe::probe;
use super::replicas::{Pool, Replication};
use super::steps::{
    Link, Replicated, Steps, acquire_replicated, leave_by, release_by, renew_comparing,
    steal_replicated, written_value,
};
use crate::backend::{
    Acquire, Ask, Booking, BoxFuture, HandOff, Release, Renewal, Store, StoreError, whole,
};
use crate::background::{Background, Lifeline, Revivable};
use crate::error::LockError;
use crate::key::Key;
use crate::lease::Lease;
use crate::protocol::waits::WaitsUpdate;
use crate::protocol::{self, Announce, Capabilities, millis};
use crate::shape::Shape;
use crate::store::{Changes, Notice, Stolen};
use crate::url;
use crate::url::enable_tls;
use crate::waiters::Waiters;

pub(crate) struct RedisBackend {
    /// The inspection side, connected on first use.
    inspect: super::inspect::RedisInspect,
    conn: Arc<SharedConn>,
    background: Background,
    client: Client,
    server: String,
    describe: String,
    holder: Holder,
    /// With `wait_for_replicas`: the policy, and the connections acquires wait on.
    replication: Option<Replicated<MultiplexedConnection>>,
    request_timeout: Duration,
    /// The user may publish and subscribe to lock channels (see [`probe`]): otherwise waiters
    /// wait on leases alone, and nothing asks for subscriptions the server would refuse.
    notifies: bool,
    /// What the server can do without scripts (see [`Capabilities`]); none where the backend
    /// connected lazily and never asked.
    capabilities: Capabilities,
    subscriptions: Subscriptions,
    /// The managers that hear the notices of the notices channel (shared by the masters of a
    /// Sentinel or Redlock deployment).
    hearers: Arc<Hearers>,
}

impl RedisBackend {
    /// Deletes the lock if `token` owns it, without telling waiters: for a Redlock minority
    /// grant given back while another owner holds the majority, whose release will tell them,
    /// and for a grant from a Sentinel master that was replaced while the request was out.
    pub(super) fn give_back_quietly(
        &self,
        key: &Key,
        token: &str,
    ) -> impl Future<Output = Result<Release, StoreError>> + Send + use<> {
        self.run_release(key, token, 0, Announce::Quiet)
    }

    /// Releases as [`Store::release`] does, as a future that borrows nothing: for a request
    /// left to finish in the background.
    pub(super) fn release_owned(
        &self,
        key: &Key,
        token: &str,
        keep: Duration,
    ) -> impl Future<Output = Result<Release, StoreError>> + Send + use<> {
        let keep_ms = if keep.is_zero() { 0 } else { millis(keep) };
        self.run_release(key, token, keep_ms, Announce::Publish)
    }

    /// Leaves the line as [`Store::leave`] does, as a future that borrows nothing.
    pub(super) fn leave_owned(
        &self,
        key: &Key,
        token: &str,
    ) -> impl Future<Output = Result<(), StoreError>> + Send + use<> {
        let mut conn = self.link();
        let call = self.holder.leave(key, token, Announce::Publish);
        async move { leave_by(&mut conn, &call).await }
    }

    /// A connection of its own for an acquire that waits for replicas.
    async fn wait_connection(
        &self,
        replication: &Replication,
    ) -> Result<(MultiplexedConnection, Lifeline), StoreError> {
        let config = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.request_timeout))
            .set_response_timeout(Some(
                replication.acks.response_timeout(self.request_timeout),
            ));
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
    pub(super) fn ping(&self) -> impl Future<Output = Result<(), StoreError>> + Send + use<> {
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
        key: &Key,
        token: &str,
        keep_ms: u64,
        announce: Announce,
    ) -> impl Future<Output = Result<Release, StoreError>> + Send + use<> {
        let mut conn = self.link();
        let call = self.holder.release(key, token, keep_ms, announce);
        async move { release_by(&mut conn, &call).await }
    }

    /// The shared connection (see [`SharedConn`]); also starts the subscription task again if
    /// its runtime is gone while keys are watched.
    fn shared_conn(&self) -> Arc<SharedConn> {
        self.subscriptions.revive();
        self.conn.clone()
    }

    /// The shared connection as the steps use it (see [`Resending`]).
    fn link(&self) -> Resending {
        Resending(self.shared_conn())
    }

    /// The steps of a lock on this server, whose releases are published.
    fn steps(&self) -> Steps<'_> {
        Steps {
            holder: &self.holder,
            capabilities: &self.capabilities,
            announce: Announce::Publish,
        }
    }

    /// Connects now: fails if the server cannot be reached or refuses the credentials.
    pub(crate) async fn connect(
        settings: RedisSettings<'_>,
        waiters: Arc<Waiters>,
    ) -> Result<Self, LockError> {
        let db = protocol::url_db(settings.url);
        let hearers = Hearers::new(&protocol::notices_channel(settings.key_prefix, db));
        Self::open(settings, waiters, hearers, true).await
    }

    /// Connects now (`eager`: fails if the server cannot be reached or refuses the
    /// credentials) or on first use and again whenever needed (for one node of several, which
    /// may be down when the manager starts); notices go to `hearers`, which other servers of
    /// the deployment may share.
    pub(super) async fn open(
        settings: RedisSettings<'_>,
        waiters: Arc<Waiters>,
        hearers: Arc<Hearers>,
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
        let connect_error = |err: &RedisError| crate::backend::connect_error(&server, err);
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
            let hearers = hearers.clone();
            let timeout = settings.request_timeout;
            Subscriptions::start(move |requests, watched| {
                let feed = PubSubFeed {
                    client: client.clone(),
                    conn: None,
                    server: server.clone(),
                    timeout,
                };
                background.spawn(feed::run(
                    feed,
                    requests,
                    watched,
                    (waiters.clone(), hearers.clone()),
                    server.clone(),
                ));
            })
        };
        if notifies {
            hear_notices(&subscriptions, &hearers, &server, eager).await;
        }
        let replication = settings.replica_acks.map(|acks| {
            (
                Replication::new(acks, &server, Announce::Publish),
                Pool::default(),
            )
        });
        Ok(RedisBackend {
            inspect: super::inspect::RedisInspect::new(&settings),
            conn,
            background,
            client,
            describe: format!("redis {server}"),
            server,
            holder: Holder::new(&settings, hearers.channel()),
            replication,
            request_timeout: settings.request_timeout,
            notifies,
            capabilities,
            subscriptions,
            hearers,
        })
    }
}

/// Subscribes to the notices channel for as long as the backend lives, resubscribed after
/// every lost connection: `eager`, before the connect returns (one round trip more, so that a
/// lock taken next is told of a steal or a request to let go at once); else once the server
/// answers. A server that refuses it leaves notices unheard, not the locks unusable: a holder
/// learns of a steal at its next renewal.
async fn hear_notices(subscriptions: &Subscriptions, hearers: &Hearers, server: &str, eager: bool) {
    if !eager {
        subscriptions.keep(hearers.channel());
        return;
    }
    if let Err(err) = subscriptions.watch(hearers.channel()).await {
        tracing::warn!(server, error = %err, "cannot subscribe to the notices channel; holders learn of a steal at their next renewal, and of a request to let go never");
    }
}

/// Sends each request once more if the connection dropped under it.
impl Link for Resending {}

/// A connection of its own, for an acquire that waits for replicas.
impl Link for MultiplexedConnection {}

impl Store for RedisBackend {
    /// Read through connections of its own (see [`RedisInspect`](super::inspect::RedisInspect)).
    fn inspect(&self) -> Option<&dyn crate::store::Inspect> {
        Some(&self.inspect)
    }

    /// Every shape: one server counts a semaphore's holders and sees a read-write lock's.
    fn supports(&self, shape: Shape) -> Result<(), &'static str> {
        match shape {
            Shape::Lock | Shape::Semaphore { .. } | Shape::Read | Shape::Write => Ok(()),
        }
    }

    /// One server orders the line of fair waiters.
    fn fair(&self) -> bool {
        true
    }

    /// Published waits are kept beside the locks.
    fn keeps_waits(&self) -> bool {
        true
    }

    fn describe(&self) -> &str {
        &self.describe
    }

    fn server(&self) -> &str {
        &self.server
    }

    fn acquire<'a>(
        &'a self,
        key: &'a Key,
        token: &'a str,
        ttl: Duration,
        ask: Ask,
    ) -> BoxFuture<'a, Result<Acquire, StoreError>> {
        Box::pin(async move {
            let Some(replicated @ (replication, _)) = &self.replication else {
                let mut conn = self.link();
                return self.steps().acquire(&mut conn, key, token, ttl, ask).await;
            };
            self.subscriptions.revive();
            let open = self.wait_connection(replication);
            acquire_replicated(
                replicated,
                open,
                MultiplexedConnection::clone,
                &self.holder,
                key,
                token,
                ttl,
                ask,
            )
            .await
        })
    }

    fn renew<'a>(&'a self, batch: &'a [Renewal], book: Booking<'a>) -> BoxFuture<'a, ()> {
        // One server, one round trip: the whole batch is answered at once.
        Box::pin(async move { book(&whole(batch), self.renew_pipelined(batch).await) })
    }

    fn release<'a>(
        &'a self,
        key: &'a Key,
        token: &'a str,
        keep: Duration,
    ) -> BoxFuture<'a, Result<Release, StoreError>> {
        Box::pin(self.release_owned(key, token, keep))
    }

    fn release_lease<'a>(
        &'a self,
        lease: &'a Lease,
        keep: Duration,
    ) -> BoxFuture<'a, Result<Release, StoreError>> {
        Box::pin(self.release_lease_here(lease, keep))
    }

    fn leave<'a>(&'a self, key: &'a Key, token: &'a str) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(self.leave_owned(key, token))
    }

    fn waits<'a>(
        &'a self,
        key: &'a str,
        update: &'a WaitsUpdate,
    ) -> BoxFuture<'a, Result<Vec<(String, String)>, StoreError>> {
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
    ) -> BoxFuture<'a, Result<HandOff, StoreError>> {
        let mut conn = self.link();
        Box::pin(async move { self.steps().hand_off(&mut conn, from, to).await })
    }

    fn watch<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<(), StoreError>> {
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

    /// On the notices channel, where the user may publish and subscribe.
    fn announces(&self) -> bool {
        self.notifies
    }

    fn attach(&self, changes: &Changes) {
        self.hearers.attach(changes);
    }

    fn announce<'a>(&'a self, notice: &'a Notice) -> BoxFuture<'a, Result<(), StoreError>> {
        let mut conn = self.link();
        Box::pin(async move { self.steps().announce(&mut conn, notice).await })
    }

    fn steals(&self) -> bool {
        true
    }

    fn steal<'a>(
        &'a self,
        key: &'a Key,
        token: &'a str,
        ttl: Duration,
        from: &'a str,
    ) -> BoxFuture<'a, Result<Stolen, StoreError>> {
        Box::pin(async move {
            let Some(replicated @ (replication, _)) = &self.replication else {
                let mut conn = self.link();
                return self.steps().steal(&mut conn, key, token, ttl, from).await;
            };
            self.subscriptions.revive();
            let open = self.wait_connection(replication);
            let routed = MultiplexedConnection::clone;
            steal_replicated(
                replicated,
                open,
                routed,
                &self.holder,
                key,
                token,
                ttl,
                from,
            )
            .await
        })
    }
}

impl RedisBackend {
    /// Releases `lease` as [`Store::release_lease`] does (see [`Steps::release_lease`]).
    pub(super) async fn release_lease_here(
        &self,
        lease: &Lease,
        keep: Duration,
    ) -> Result<Release, StoreError> {
        self.steps()
            .release_lease(&mut self.link(), lease, keep)
            .await
    }

    /// The whole batch in one pipeline, answered together (see [`renew_comparing`]): for
    /// [`Store::renew`], and for the deployments built of several servers (Redlock,
    /// Sentinel), which weigh each server's answers before booking them.
    pub(super) async fn renew_pipelined(
        &self,
        batch: &[Renewal],
    ) -> Result<Vec<Option<bool>>, StoreError> {
        let mut conn = self.shared_conn().get();
        let renewals: Vec<&Renewal> = batch.iter().collect();
        let written: Vec<Option<String>> = batch
            .iter()
            .map(|renewal| written_value(&self.capabilities, &self.holder, &renewal.lease))
            .collect();
        Ok(renew_comparing(&renewals, &written, &mut conn).await?)
    }
}
