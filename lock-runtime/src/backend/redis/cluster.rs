//! Redis Cluster: the same scripts as on one server, each sent to the master serving the lock's
//! slot, renewals grouped by slot, and release notifications over sharded pub/sub (SPUBLISH /
//! SSUBSCRIBE, Redis 7+), whose channel is the lock key itself and so lives in the lock's slot.
//!
//! Notices (a request that a holder let go, a steal) travel apart, on one channel per key prefix
//! with plain `PUBLISH` and `SUBSCRIBE` (see [`ShardedFeed`]), which every node passes on to the
//! others.
//!
//! Two cluster connections: one for the scripts, and one RESP3 connection that carries only the
//! subscriptions, subscribed to the notices channel at connect. Keeping them apart matters: a node that
//! loses a slot tells its subscribers with an unrequested `sunsubscribe` push, and on a connection
//! shared with commands that push could be taken for the answer to a command in flight.
//!
//! The cluster client follows MOVED and ASK, waits out TRYAGAIN, CLUSTERDOWN and MASTERDOWN within
//! the request timeout, and resubscribes tracked channels itself when it reconnects a node or
//! refreshes its slot map. It does not refresh the slot map of the subscription connection unless a
//! request on it fails, and it forgets a channel the server unsubscribed it from, so the subscriber
//! here resubscribes on its own after every disconnection and every unrequested `sunsubscribe`,
//! and wakes all waiters then: releases in between went unheard. The lease's PTTL stays the
//! safety net for anything missed.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future;
use redis::aio::ConnectionLike;
use redis::cluster::{ClusterClient, ClusterClientBuilder};
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, Slot, SlotAddr};
use redis::{
    Cmd, ErrorKind, Pipeline, ProtocolVersion, PushInfo, RedisError, RedisFuture, RedisResult,
    ServerErrorKind, Value,
};
use tokio::sync::mpsc;

use super::calls::Holder;
use super::connection::{RedisSettings, describe_error};
use super::feed::{self, Hearers, ShardedFeed, Subscriptions};
use super::replicas::{Pool, Replication};
use super::steps::{
    Link, Replicated, Steps, acquire_replicated, renew_comparing, steal_replicated, written_value,
};
use crate::backend::{
    Acquire, Ask, Booking, BoxFuture, HandOff, Release, Renewal, Store, StoreError,
};
use crate::background::{Background, Lifeline, Revivable};
use crate::deployment::{Deployment, DeploymentKind};
use crate::error::LockError;
use crate::key::Key;
use crate::lease::Lease;
use crate::protocol::scripts::is_noscript;
use crate::protocol::waits::WaitsUpdate;
use crate::protocol::{Announce, Capabilities};
use crate::shape::Shape;
use crate::tls::Certificates;
use crate::url;
use crate::url::enable_tls;
use crate::waiters::Waiters;

pub(crate) struct ClusterBackend {
    /// The inspection side, connected on first use.
    inspect: super::inspect::RedisInspect,
    conn: Arc<Commands>,
    server: String,
    describe: String,
    holder: Holder,
    /// What the master of the probe's slot can do for the lean paths (the masters of one
    /// cluster run one version; a master that cannot, met after a failover, answers the lean
    /// requests with errors, and the scripts take over).
    capabilities: Capabilities,
    /// With `wait_for_replicas`: the policy, and the connections acquires wait on.
    replication: Option<Replicated<ClusterConnection>>,
    /// What opens those connections: its response timeout covers a `WAIT` (see
    /// [`ReplicaAcks::response_timeout`](super::replicas::ReplicaAcks::response_timeout)).
    wait_client: ClusterClient,
    subscriptions: Subscriptions,
    /// The managers that hear the notices of the notices channel.
    hearers: Arc<Hearers>,
    /// The servers speak RESP3 (Redis 6.0), which the subscription to the notices channel
    /// needs (see [`Capabilities::resp3`]).
    announces: bool,
    background: Background,
}

/// The script connection. Its driver task, which also owns the node connections, dies with the
/// runtime it was spawned on; the connection is then made again, from the caller's runtime (or
/// the pinned one), before a request is sent.
struct Commands {
    conn: Revivable<ClusterConnection>,
    client: ClusterClient,
    background: Background,
    /// One reconnect at a time.
    reconnecting: tokio::sync::Mutex<()>,
}

impl Commands {
    async fn live(&self) -> RedisResult<ClusterConnection> {
        if let Some(conn) = self.conn.live() {
            return Ok(conn);
        }
        let _one = self.reconnecting.lock().await;
        if let Some(conn) = self.conn.live() {
            return Ok(conn);
        }
        let client = self.client.clone();
        let conn = self
            .background
            .run(async move { client.get_async_connection().await })
            .await
            .map_err(|err| RedisError::from(std::io::Error::other(err.to_string())))??;
        self.conn.replace(conn.clone(), self.background.lifeline());
        Ok(conn)
    }
}

/// The seed nodes of a `redis+cluster://` or `rediss+cluster://` URL.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Seeds {
    /// One `redis://` (or `rediss://`) URL per seed, with the credentials, path and query of the
    /// cluster URL: what the cluster client connects with. Never shown.
    urls: Vec<String>,
    /// `h1:p1,h2:p2`: how the cluster is named in messages.
    shown: String,
    tls: bool,
}

/// Reads `redis+cluster://[user:password@]h1:p1,h2:p2,...[/db][?query]` (see
/// [`Deployment::parse`]). A seed without a port gets 6379. Errors show the URL with its password
/// hidden.
fn parse_seeds(cluster_url: &str) -> Result<Seeds, LockError> {
    let deployment = Deployment::parse(cluster_url)?;
    if deployment.kind() != DeploymentKind::Cluster {
        return Err(LockError::Config(format!(
            "`{}` is not a cluster URL: the scheme must be redis+cluster or rediss+cluster",
            deployment.shown()
        )));
    }
    Ok(Seeds {
        urls: deployment.node_urls(),
        shown: deployment.servers().join(","),
        tls: deployment.is_tls(),
    })
}

impl ClusterBackend {
    pub(crate) async fn connect(
        settings: RedisSettings<'_>,
        waiters: Arc<Waiters>,
    ) -> Result<Self, LockError> {
        let seeds = parse_seeds(settings.url)?;
        if seeds.tls {
            enable_tls(settings.url)?;
        }
        let timeout = settings.request_timeout;
        let background = settings.background.clone();
        let tls = settings.tls;
        let commands_client = build_client(&seeds, settings.url, timeout, tls, |builder| builder)?;
        let wait_timeout = settings
            .replica_acks
            .map_or(timeout, |acks| acks.response_timeout(timeout));
        let wait_client = build_client(&seeds, settings.url, timeout, tls, |builder| {
            builder.response_timeout(wait_timeout)
        })?;
        // Fails now on a configuration it cannot use, rather than in the subscription task.
        build_client(&seeds, settings.url, timeout, tls, |builder| {
            builder
                .use_protocol(ProtocolVersion::RESP3)
                .push_sender(mpsc::unbounded_channel::<PushInfo>().0)
        })?;
        let connecting = commands_client.clone();
        let conn = background
            .run(async move { connecting.get_async_connection().await })
            .await
            .map_err(|err| LockError::from_failure("connect", None, &seeds.shown, err.into()))?
            .map_err(|err| crate::backend::connect_error(&seeds.shown, &err))?;
        // Cluster has database 0 alone.
        let hearers = Hearers::new(&crate::protocol::notices_channel(settings.key_prefix, 0));
        let subscriptions = sharded_subscriptions(&seeds, &settings, waiters, &hearers);
        let replication = settings.replica_acks.map(|acks| {
            (
                Replication::new(acks, &seeds.shown, Announce::Sharded),
                Pool::default(),
            )
        });
        let commands = Arc::new(Commands {
            conn: Revivable::new(conn, background.lifeline()),
            client: commands_client,
            background: background.clone(),
            reconnecting: tokio::sync::Mutex::new(()),
        });
        let probe = format!("{}{{lock-runtime:probe}}", settings.key_prefix);
        let capabilities = Capabilities::probe(
            &mut SlotConnection {
                conn: SlotConn::Shared(commands.clone()),
                route: Route::with_key(&probe, SlotAddr::Master),
            },
            settings.key_prefix,
        )
        .await;
        tracing::debug!(server = %seeds.shown, protocol = %capabilities.describe(), "lock protocol");
        // Before the manager is returned, so that a lock taken next hears a steal at once.
        let announces = capabilities.resp3;
        if !announces {
            tracing::warn!(server = %seeds.shown, "Redis Cluster before 6.0 has no RESP3, which its subscriptions need: requests to let go are refused, and a holder learns of a steal at its next renewal");
        } else if let Err(err) = subscriptions.watch(hearers.channel()).await {
            tracing::warn!(server = %seeds.shown, error = %err, "cannot subscribe to the notices channel yet; holders learn of a steal at their next renewal meanwhile");
        }
        Ok(ClusterBackend {
            inspect: super::inspect::RedisInspect::new(&settings),
            conn: commands,
            capabilities,
            background,
            describe: format!("redis cluster {}", seeds.shown),
            server: seeds.shown,
            holder: Holder::new(&settings, hearers.channel()),
            replication,
            wait_client,
            subscriptions,
            hearers,
            announces,
        })
    }

    /// The script connection, with every request sent to the master serving `key`'s slot.
    fn routed(&self, key: &str) -> SlotConnection {
        SlotConnection {
            conn: SlotConn::Shared(self.conn.clone()),
            route: Route::with_key(key, SlotAddr::Master),
        }
    }
}

/// The subscription task of a Cluster: a RESP3 cluster connection of its own, whose pushes
/// tell of sharded messages, dropped node connections and channels whose slot moved.
fn sharded_subscriptions(
    seeds: &Seeds,
    settings: &RedisSettings<'_>,
    waiters: Arc<Waiters>,
    hearers: &Arc<Hearers>,
) -> Subscriptions {
    let hearers = hearers.clone();
    let (seeds, url, background, tls) = (
        seeds.clone(),
        settings.url.to_owned(),
        settings.background.clone(),
        settings.tls.clone(),
    );
    let timeout = settings.request_timeout;
    Subscriptions::start(move |requests, watched| {
        // Each task has a push channel of its own, so a client of its own.
        let (pushes, pushed) = mpsc::unbounded_channel();
        let client = build_client(&seeds, &url, timeout, &tls, |builder| {
            builder
                .use_protocol(ProtocolVersion::RESP3)
                .push_sender(pushes)
        });
        match client {
            Ok(client) => {
                let feed = ShardedFeed {
                    client,
                    conn: None,
                    pushes: pushed,
                    server: seeds.shown.clone(),
                    broadcast: hearers.channel().to_owned(),
                };
                background.spawn(feed::run(
                    feed,
                    requests,
                    watched,
                    (waiters.clone(), hearers.clone()),
                    seeds.shown.clone(),
                ));
            }
            // Checked at connect; should it fail anyway, waiters wait on leases.
            Err(err) => {
                tracing::warn!(error = %err, "cannot start the release subscription")
            }
        }
    })
}

fn build_client(
    seeds: &Seeds,
    cluster_url: &str,
    timeout: Duration,
    tls: &Certificates,
    configure: impl FnOnce(ClusterClientBuilder) -> ClusterClientBuilder,
) -> Result<ClusterClient, LockError> {
    let builder = ClusterClient::builder(seeds.urls.iter().map(String::as_str))
        .connection_timeout(timeout)
        .response_timeout(timeout);
    let builder = tls.cluster(builder);
    configure(builder).build().map_err(|err| {
        LockError::Config(format!(
            "cannot use `{}`: {}",
            url::redact(cluster_url),
            describe_error(&err)
        ))
    })
}

/// The cluster connection with every request sent to the master serving one slot (following MOVED
/// and ASK from there). Scripts go there anyway; what this changes is `SCRIPT LOAD`, which the
/// cluster client would send to every node, failing while any one of them is down (a failover),
/// and not necessarily reaching the node that answered NOSCRIPT.
struct SlotConnection {
    conn: SlotConn,
    route: Route,
}

/// The shared script connection (made again when its runtime is gone), or one of its own.
enum SlotConn {
    Shared(Arc<Commands>),
    Own(ClusterConnection),
}

impl SlotConn {
    async fn get(&self) -> RedisResult<ClusterConnection> {
        match self {
            SlotConn::Shared(commands) => commands.live().await,
            SlotConn::Own(conn) => Ok(conn.clone()),
        }
    }
}

impl ConnectionLike for SlotConnection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        let routing = RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(self.route));
        Box::pin(async move {
            let mut conn = self.conn.get().await?;
            conn.route_command(cmd.clone(), routing).await
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        let routing = SingleNodeRoutingInfo::SpecificNode(self.route);
        Box::pin(async move {
            let mut conn = self.conn.get().await?;
            conn.route_pipeline(pipeline.clone(), offset, count, routing)
                .await
        })
    }

    fn get_db(&self) -> i64 {
        0
    }
}

/// A script the node forgot again is told as a slot that moved (see [`settle_noscript`]).
impl Link for SlotConnection {
    fn settle<T>(answer: RedisResult<T>) -> RedisResult<T> {
        settle_noscript(answer)
    }
}

/// A NOSCRIPT that survived loading the script means the slot moved between the load and the
/// retry (a failover in progress): say so as TRYAGAIN, which callers retry like any other
/// transient cluster error.
fn settle_noscript<T>(answer: RedisResult<T>) -> RedisResult<T> {
    answer.map_err(|err| {
        if is_noscript(&err) {
            RedisError::from((
                ErrorKind::Server(ServerErrorKind::TryAgain),
                "the script was loaded but the node serving the slot changed",
                describe_error(&err),
            ))
        } else {
            err
        }
    })
}

impl ClusterBackend {
    /// The steps of a lock on the master of its slot, whose releases are announced on the
    /// lock's own sharded channel.
    fn steps(&self) -> Steps<'_> {
        Steps {
            holder: &self.holder,
            capabilities: &self.capabilities,
            announce: Announce::Sharded,
        }
    }

    /// A connection of its own for an acquire that waits for replicas.
    async fn wait_connection(&self) -> Result<(ClusterConnection, Lifeline), StoreError> {
        let client = self.wait_client.clone();
        let conn = self
            .background
            .run(async move { client.get_async_connection().await })
            .await??;
        Ok((conn, self.background.lifeline()))
    }

    /// Renews the leases of `batch` at `indices`, which share one slot, in one pipeline sent to
    /// the master serving it: a lock whose value is still the one its acquire wrote by
    /// `SET ... IFEQ` where the masters have it, the others by renew.lua (see
    /// [`renew_comparing`]).
    async fn renew_slot(
        &self,
        batch: &[Renewal],
        indices: &[usize],
    ) -> RedisResult<Vec<Option<bool>>> {
        let Some(&first) = indices.first() else {
            return Ok(Vec::new());
        };
        let renewals: Vec<&Renewal> = indices.iter().map(|&i| &batch[i]).collect();
        let written: Vec<Option<String>> = renewals
            .iter()
            .map(|renewal| written_value(&self.capabilities, &self.holder, &renewal.lease))
            .collect();
        let mut conn = self.routed(batch[first].key());
        settle_noscript(renew_comparing(&renewals, &written, &mut conn).await)
    }
}

impl Store for ClusterBackend {
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

    /// Every release is told to this process's waiters.
    fn notifies(&self) -> bool {
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
            // Every key carries the same hash tag, so they share the slot the call is routed by.
            self.subscriptions.revive();
            let Some(replicated) = &self.replication else {
                let mut conn = self.routed(&key.lock);
                return self.steps().acquire(&mut conn, key, token, ttl, ask).await;
            };
            let open = self.wait_connection();
            let routed = |conn: &ClusterConnection| SlotConnection {
                conn: SlotConn::Own(conn.clone()),
                route: Route::with_key(&key.lock, SlotAddr::Master),
            };
            acquire_replicated(replicated, open, routed, &self.holder, key, token, ttl, ask).await
        })
    }

    fn renew<'a>(&'a self, batch: &'a [Renewal], book: Booking<'a>) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            // One pipeline per slot, all in flight at once: a pipeline must not span slots (a
            // redirect moves it whole), and requests to one node share its multiplexed
            // connection, so the groups of a node still travel together.
            let mut groups: HashMap<Slot, Vec<usize>> = HashMap::new();
            for (i, renewal) in batch.iter().enumerate() {
                groups
                    .entry(Slot::for_key(renewal.key()))
                    .or_default()
                    .push(i);
            }
            // Each group is booked the moment its node answers: a stalled shard (frozen, or
            // failing over) holds back its own leases only, and the watchdog retries those until
            // their own deadlines.
            future::join_all(groups.into_values().map(|indices| async move {
                let answer = self.renew_slot(batch, &indices).await;
                book(&indices, answer.map_err(StoreError::from));
            }))
            .await;
        })
    }

    fn release<'a>(
        &'a self,
        key: &'a Key,
        token: &'a str,
        keep: Duration,
    ) -> BoxFuture<'a, Result<Release, StoreError>> {
        Box::pin(async move {
            let mut conn = self.routed(&key.lock);
            self.steps().release(&mut conn, key, token, keep).await
        })
    }

    fn release_lease<'a>(
        &'a self,
        lease: &'a crate::lease::Lease,
        keep: Duration,
    ) -> BoxFuture<'a, Result<Release, StoreError>> {
        Box::pin(async move {
            let mut conn = self.routed(&lease.stored.lock);
            self.steps().release_lease(&mut conn, lease, keep).await
        })
    }

    fn leave<'a>(&'a self, key: &'a Key, token: &'a str) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            let mut conn = self.routed(&key.lock);
            self.steps().leave(&mut conn, key, token).await
        })
    }

    fn waits<'a>(
        &'a self,
        key: &'a str,
        update: &'a WaitsUpdate,
    ) -> BoxFuture<'a, Result<Vec<(String, String)>, StoreError>> {
        Box::pin(async move {
            let mut conn = self.routed(key);
            let reply: Vec<redis::Value> = update.pipeline(key).query_async(&mut conn).await?;
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
        Box::pin(async move {
            let mut conn = self.routed(&from.stored.lock);
            self.steps().hand_off(&mut conn, from, to).await
        })
    }

    fn watch<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(self.subscriptions.watch(key))
    }

    fn unwatch(&self, key: &str) {
        self.subscriptions.unwatch(key);
    }

    /// With `PUBLISH`, which every node passes on (see [`ShardedFeed`]), from Redis 6.0 on.
    fn announces(&self) -> bool {
        self.announces
    }

    fn attach(&self, changes: &crate::store::Changes) {
        self.hearers.attach(changes);
    }

    fn announce<'a>(
        &'a self,
        notice: &'a crate::store::Notice,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            // Any node would do; the master of the channel's slot is the one its subscribers
            // are most likely on.
            let mut conn = self.routed(self.hearers.channel());
            self.steps().announce(&mut conn, notice).await
        })
    }

    fn steals(&self) -> bool {
        true
    }

    /// On the master of the lock's slot; the script's `PUBLISH` of the notice reaches every node.
    fn steal<'a>(
        &'a self,
        key: &'a Key,
        token: &'a str,
        ttl: Duration,
        from: &'a str,
    ) -> BoxFuture<'a, Result<crate::store::Stolen, StoreError>> {
        Box::pin(async move {
            self.subscriptions.revive();
            let Some(replicated) = &self.replication else {
                let mut conn = self.routed(&key.lock);
                return self.steps().steal(&mut conn, key, token, ttl, from).await;
            };
            let open = self.wait_connection();
            let routed = |conn: &ClusterConnection| SlotConnection {
                conn: SlotConn::Own(conn.clone()),
                route: Route::with_key(&key.lock, SlotAddr::Master),
            };
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

#[cfg(test)]
mod tests {
    use super::*;

    fn seeds(url: &str) -> Seeds {
        parse_seeds(url).unwrap_or_else(|err| panic!("{url}: {err}"))
    }

    #[test]
    fn seeds_become_one_node_url_each_with_credentials_path_and_query() {
        let parsed = seeds("redis+cluster://app:s3cret@10.0.0.1:7000,10.0.0.2:7001/?protocol=2");
        assert_eq!(
            parsed.urls,
            [
                "redis://app:s3cret@10.0.0.1:7000/?protocol=2",
                "redis://app:s3cret@10.0.0.2:7001/?protocol=2",
            ]
        );
        assert_eq!(parsed.shown, "10.0.0.1:7000,10.0.0.2:7001");
        assert!(!parsed.tls);
    }

    #[test]
    fn the_shown_seeds_never_carry_credentials() {
        let parsed = seeds("redis+cluster://:s3cret@a:1,b:2");
        assert!(!parsed.shown.contains("s3cret"), "{}", parsed.shown);
        assert_eq!(parsed.shown, "a:1,b:2");
    }

    #[test]
    fn a_seed_without_port_gets_the_default_one() {
        let parsed = seeds("redis+cluster://a,b:7000,[::1],[::1]:7001");
        assert_eq!(parsed.shown, "a:6379,b:7000,[::1]:6379,[::1]:7001");
        assert_eq!(parsed.urls[0], "redis://a:6379");
    }

    #[test]
    fn rediss_cluster_means_tls_on_every_node() {
        let parsed = seeds("rediss+cluster://a:1,b:2");
        assert!(parsed.tls);
        assert_eq!(parsed.urls, ["rediss://a:1", "rediss://b:2"]);
    }

    #[test]
    fn empty_seeds_are_config_errors_that_hide_the_password() {
        for url in [
            "redis+cluster://u:s3cret@",
            "redis+cluster://u:s3cret@a:1,,b:2",
            "redis+cluster://u:s3cret@a:1, /0",
        ] {
            match parse_seeds(url) {
                Err(LockError::Config(message)) => {
                    assert!(
                        message.contains("names no servers") || message.contains("empty server"),
                        "{message}"
                    );
                    assert!(!message.contains("s3cret"), "{message}");
                }
                other => panic!("{url}: expected a config error, got {other:?}"),
            }
        }
    }

    #[test]
    fn other_schemes_are_not_cluster_urls() {
        assert!(matches!(
            parse_seeds("redis://a:1"),
            Err(LockError::Config(_))
        ));
    }

    #[test]
    fn a_noscript_that_survived_loading_is_reported_as_transient() {
        let noscript = RedisError::from((
            ErrorKind::Server(ServerErrorKind::NoScript),
            "NOSCRIPT No matching script",
        ));
        let settled = settle_noscript::<()>(Err(noscript)).expect_err("still an error");
        assert!(crate::backend::is_transient(&settled));
    }
}
