//! A Redis master found through Sentinel, followed across failovers.
//!
//! Requests go to the current master through a [`RedisBackend`]. When one fails in a way a
//! failover explains (connection refused or dropped, a timeout, `READONLY` from a demoted
//! master), the sentinels are asked for the master again; if it moved, a backend for the new
//! master replaces the old one, the keys being waited for are subscribed there, and every waiter
//! is woken to look again (releases on the old master may have gone unheard). The failed request
//! itself is reported as a transient error: an acquire retries it within its wait budget, the
//! watchdog within the lease.
//!
//! Each master's backend subscribes to the notices channel when it connects, so notices follow
//! the failover with the rest; they all hand what they hear to the same managers.
//!
//! The backend also listens to every sentinel for `+switch-master` and follows a failover as
//! soon as it is announced. Without that, a demoted master that stays reachable (one that was
//! paused, or a manual `SENTINEL FAILOVER`) would go on granting locks for the seconds until
//! the sentinels turn it into a replica, and those locks are lost when it does.
//!
//! An answer from a master the backend left while the request was out is not trusted: a
//! paused master that resumes serves the requests queued in its sockets before it learns that
//! it was replaced, while the promoted replica grants the same lock to others. Such a grant is
//! given back and reported as a transient error (the acquire retries on the new master with
//! the same token), such a renewal as a transient error (the watchdog asks the new master),
//! and such a release is sent to the new master too. A client that has not heard of the
//! failover yet cannot tell; see `docs/GUARANTEES.md` and `docs/RELIABILITY.md`.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::Duration;

use futures_util::StreamExt;
use redis::IntoConnectionInfo;
use redis::sentinel::{SentinelClient, SentinelClientBuilder, SentinelServerType};
use tokio::time::Instant;

use super::connection::RedisSettings;
use super::feed::Hearers;
use super::single::RedisBackend;
use crate::backend::{
    Acquire, Ask, Booking, BoxFuture, Release, Renewal, Store, StoreError, whole,
};
use crate::background::Background;
use crate::backoff::Backoff;
use crate::deployment::Deployment;
use crate::error::{BoxError, LockError};
use crate::key::Key;
use crate::protocol::waits::WaitsUpdate;
use crate::shape::Shape;
use crate::tls::Certificates;
use crate::url;
use crate::waiters::Waiters;

/// Ask the sentinels at most this often.
const REFRESH_INTERVAL: Duration = Duration::from_millis(100);

pub(crate) struct SentinelBackend {
    /// The inspection side, connected on first use.
    inspect: super::inspect::RedisInspect,
    shared: Arc<Shared>,
    /// The `+switch-master` listeners, one per sentinel; stopped when the backend is dropped,
    /// started again on the caller's runtime when the runtime they ran on shut down.
    listeners: Mutex<Vec<(String, tokio::task::JoinHandle<()>)>>,
}

struct Shared {
    master_name: String,
    sentinels: tokio::sync::Mutex<SentinelClient>,
    master: RwLock<Arc<RedisBackend>>,
    last_refresh: Mutex<Instant>,
    /// Held by the refresh that asks the sentinels, connects and switches: one at a time.
    switching: tokio::sync::Mutex<()>,
    /// Keys with waiters, to subscribe again on a new master.
    watched: Mutex<HashSet<String>>,
    waiters: Arc<Waiters>,
    /// The managers that hear notices, through whichever master is the current one.
    hearers: Arc<Hearers>,
    nodes: NodeTemplate,
    describe: String,
    server: String,
}

/// How to connect to whichever node is the master.
struct NodeTemplate {
    /// `redis://[userinfo@]` before the master's address, `[/db][?query]` after it.
    prefix: String,
    suffix: String,
    app_name: String,
    request_timeout: Duration,
    fair_turn: Duration,
    holder_metadata: bool,
    replica_acks: Option<super::replicas::ReplicaAcks>,
    key_prefix: String,
    background: Background,
    tls: Certificates,
}

/// The client that asks the sentinels of `parts` for the master, and checks the master's role
/// there with the URL's credentials, database and TLS (with `tls`'s certificates, for the
/// sentinels and the master alike).
fn sentinel_client(
    parts: &SentinelUrl,
    tls: &Certificates,
) -> Result<SentinelClient, redis::RedisError> {
    // Credentials and database of the URL are for the master, whichever node that is.
    let node = format!("{}127.0.0.1:6379{}", parts.node_prefix, parts.node_suffix)
        .into_connection_info()?;
    let sentinels = parts
        .sentinels
        .iter()
        .map(|sentinel| Ok(tls.client(sentinel)?.get_connection_info().addr().clone()))
        .collect::<Result<Vec<_>, redis::RedisError>>()?;
    let settings = node.redis_settings();
    let mut builder =
        SentinelClientBuilder::new(sentinels, &parts.master_name, SentinelServerType::Master)?
            .set_client_to_redis_db(settings.db())
            .set_client_to_redis_protocol(settings.protocol());
    if let Some(username) = settings.username() {
        builder = builder.set_client_to_redis_username(username);
    }
    if let Some(password) = settings.password() {
        builder = builder.set_client_to_redis_password(password);
    }
    if matches!(node.addr(), redis::ConnectionAddr::TcpTls { .. }) {
        builder = builder.set_client_to_redis_tls_mode(redis::TlsMode::Secure);
        #[cfg(feature = "tls")]
        if let Some(certs) = tls.redis() {
            builder = builder.set_client_to_redis_certificates(certs.clone());
        }
    }
    builder.build()
}

/// The parts of `redis+sentinel://[userinfo@]s1:p1,s2:p2/<master>[/db][?query]`.
#[derive(Debug, PartialEq, Eq)]
struct SentinelUrl {
    sentinels: Vec<String>,
    master_name: String,
    node_prefix: String,
    node_suffix: String,
}

/// Reads `redis+sentinel://[user:password@]s1:p1,s2:p2/<master>[/db][?query]` (see
/// [`url::host_list`]; a sentinel without a port gets 26379). The credentials are the
/// master's.
fn parse(url: &str) -> Result<SentinelUrl, LockError> {
    let deployment = Deployment::parse(url)?;
    let Some(master_name) = deployment.master_name() else {
        return Err(LockError::Config(format!(
            "`{}` is not a sentinel URL: write redis+sentinel://host1:port1,host2:port2/<master-name>",
            url::redact(url)
        )));
    };
    let (node_prefix, node_suffix) = deployment.node_url_parts();
    Ok(SentinelUrl {
        sentinels: deployment
            .servers()
            .iter()
            .map(|server| deployment.sentinel_url(server))
            .collect(),
        master_name: master_name.to_owned(),
        node_prefix,
        node_suffix,
    })
}

impl SentinelBackend {
    /// Runs a release on the current master and, if that master was replaced meanwhile, on
    /// the new one too: the lock may have been replicated to it before the failover.
    async fn release_on_masters<'a>(
        &'a self,
        release: impl Fn(Arc<RedisBackend>) -> BoxFuture<'a, Result<Release, StoreError>> + Copy,
    ) -> Result<Release, StoreError> {
        let (master, answer) = self.shared.on_master(release).await;
        if answer.is_ok() && self.shared.left(&master) {
            return self.shared.on_master(release).await.1;
        }
        answer
    }

    pub(crate) async fn connect(
        settings: RedisSettings<'_>,
        waiters: Arc<Waiters>,
    ) -> Result<Self, LockError> {
        let parts = parse(settings.url)?;
        let server = format!(
            "{} (sentinels {})",
            parts.master_name,
            parts
                .sentinels
                .iter()
                .map(|s| url::server_of(s))
                .collect::<Vec<_>>()
                .join(",")
        );
        let config_error = |err: redis::RedisError| {
            LockError::Config(format!("cannot use `{}`: {err}", url::redact(settings.url)))
        };
        let sentinels = sentinel_client(&parts, settings.tls).map_err(config_error)?;
        let sentinels = tokio::sync::Mutex::new(sentinels);
        // The master's database, as the URL names it after the master's name.
        let db = crate::protocol::url_db(&format!(
            "{}127.0.0.1:6379{}",
            parts.node_prefix, parts.node_suffix
        ));
        let nodes = NodeTemplate {
            prefix: parts.node_prefix,
            suffix: parts.node_suffix,
            app_name: settings.app_name.to_owned(),
            request_timeout: settings.request_timeout,
            fair_turn: settings.fair_turn,
            holder_metadata: settings.holder_metadata,
            replica_acks: settings.replica_acks,
            key_prefix: settings.key_prefix.to_owned(),
            background: settings.background.clone(),
            tls: settings.tls.clone(),
        };
        let hearers = Hearers::new(&crate::protocol::notices_channel(settings.key_prefix, db));
        let master = resolve(&sentinels, &nodes, (&waiters, &hearers))
            .await
            .map_err(|err| {
                match err.downcast::<redis::RedisError>() {
                    // From the sentinels, or the master's role check: a TLS handshake says so.
                    Ok(err) => crate::backend::connect_error(&server, &err),
                    Err(err) => {
                        let transient = resolve_may_pass(&err);
                        LockError::backend_with("connect", None, &server, err, transient)
                    }
                }
            })?;
        let shared = Arc::new(Shared {
            master_name: parts.master_name,
            sentinels,
            master: RwLock::new(Arc::new(master)),
            last_refresh: Mutex::new(Instant::now()),
            switching: tokio::sync::Mutex::new(()),
            watched: Mutex::new(HashSet::new()),
            waiters,
            hearers,
            nodes,
            describe: format!("redis sentinel {server}"),
            server,
        });
        let listeners = parts
            .sentinels
            .into_iter()
            .map(|sentinel| {
                let listener = shared.listen(&sentinel);
                (sentinel, listener)
            })
            .collect();
        Ok(SentinelBackend {
            inspect: super::inspect::RedisInspect::new(&settings),
            shared,
            listeners: Mutex::new(listeners),
        })
    }

    /// Starts again, on the caller's runtime (or the pinned one), every listener whose runtime
    /// shut down: a listener ends by itself only when the backend is gone. Cheap when they
    /// run: a lock and an atomic load per sentinel.
    fn revive_listeners(&self) {
        let mut listeners = self
            .listeners
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        for (sentinel, listener) in listeners.iter_mut() {
            if listener.is_finished() {
                tracing::debug!(sentinel = %url::server_of(sentinel), "the runtime of a failover listener shut down; listening again from this one");
                *listener = self.shared.listen(sentinel);
            }
        }
    }
}

impl Drop for SentinelBackend {
    fn drop(&mut self) {
        let listeners = self
            .listeners
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner);
        for (_, listener) in listeners.iter() {
            listener.abort();
        }
    }
}

/// Listens to one sentinel for `+switch-master` announcements of this master, and follows each
/// one at once. Runs until the backend is dropped; reconnects with backoff.
async fn follow_announcements(shared: std::sync::Weak<Shared>, sentinel: String) {
    let mut backoff = Backoff::connections();
    loop {
        let Some((timeout, tls)) = shared
            .upgrade()
            .map(|s| (s.nodes.request_timeout, s.nodes.tls.clone()))
        else {
            return;
        };
        if let Ok(client) = tls.client(&sentinel)
            && let Ok(Ok(mut pubsub)) =
                tokio::time::timeout(timeout, client.get_async_pubsub()).await
            && let Ok(Ok(())) =
                tokio::time::timeout(timeout, pubsub.subscribe("+switch-master")).await
        {
            backoff.reset();
            let mut messages = pubsub.on_message();
            while let Some(message) = messages.next().await {
                // "<master-name> <old-ip> <old-port> <new-ip> <new-port>"
                let payload: String = message.get_payload().unwrap_or_default();
                let Some(shared) = shared.upgrade() else {
                    return;
                };
                if payload.split(' ').next() == Some(shared.master_name.as_str()) {
                    shared.refresh(None).await;
                }
            }
        }
        if shared.strong_count() == 0 {
            return;
        }
        tokio::time::sleep(backoff.pause()).await;
    }
}

impl Shared {
    /// Spawns a `+switch-master` listener on `sentinel`.
    fn listen(self: &Arc<Self>, sentinel: &str) -> tokio::task::JoinHandle<()> {
        self.nodes.background.spawn(follow_announcements(
            Arc::downgrade(self),
            sentinel.to_owned(),
        ))
    }

    fn current(&self) -> Arc<RedisBackend> {
        self.master
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// `failed` gave an error a failover explains, or (`None`) a sentinel announced a new
    /// master: if the sentinels name another master now, switch to it.
    async fn refresh(&self, failed: Option<&Arc<RedisBackend>>) {
        {
            let mut last = self
                .last_refresh
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            if let Some(failed) = failed
                && (last.elapsed() < REFRESH_INTERVAL || !Arc::ptr_eq(failed, &self.current()))
            {
                return;
            }
            *last = Instant::now();
        }
        // Every sentinel announces a failover, and the announcements come together: a refresh
        // that waited for another one finds below the master that one switched to, instead of
        // connecting to it once more only to drop the connection.
        let switching = self.switching.lock().await;
        if let Some(failed) = failed
            && !Arc::ptr_eq(failed, &self.current())
        {
            // Followed a failover away from it while this refresh waited.
            return;
        }
        let not_reachable = |err: &dyn std::fmt::Display| {
            tracing::warn!(server = %self.server, error = %err, "sentinels did not name a reachable master");
        };
        let node_url = match master_addr(&self.sentinels).await {
            Ok(addr) => self.nodes.url(&addr),
            Err(err) => return not_reachable(&err),
        };
        if url::server_of(&node_url) == self.current().server() {
            return;
        }
        let master = match self
            .nodes
            .connect(&node_url, (&self.waiters, &self.hearers))
            .await
        {
            Ok(master) => Arc::new(master),
            Err(err) => return not_reachable(&err),
        };
        {
            // Compared once more with the master of now, as it is replaced. Refreshes take
            // turns, but were a refresh to find the master another one switched to while it
            // connected, switching again would leave the first switch's master, and fail as
            // "answered by an old master" whatever was sent to it since.
            let mut current = self.master.write().unwrap_or_else(PoisonError::into_inner);
            if master.server() == current.server() {
                return;
            }
            tracing::warn!(
                from = current.server(),
                to = master.server(),
                "lock backend follows a failover"
            );
            *current = master.clone();
        }
        drop(switching);
        let watched: Vec<String> = self
            .watched
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .cloned()
            .collect();
        for key in watched {
            if let Err(err) = master.watch(&key).await {
                tracing::warn!(error = %err, "cannot subscribe on the new master; waiting on leases alone");
            }
        }
        // Releases on the old master may have gone unheard.
        self.waiters.wake_all();
    }

    /// Runs `request` on the current master and returns its answer with that master; on an
    /// error a failover explains, looks for a new master before returning the error.
    async fn on_master<'a, T>(
        &'a self,
        request: impl FnOnce(Arc<RedisBackend>) -> BoxFuture<'a, Result<T, StoreError>>,
    ) -> (Arc<RedisBackend>, Result<T, StoreError>) {
        let master = self.current();
        let answer = request(master.clone()).await;
        if let Err(err) = &answer
            && err.is_transient()
        {
            self.refresh(Some(&master)).await;
        }
        (master, answer)
    }

    /// Whether the backend followed a failover away from `master` (while a request to it was
    /// out, say).
    fn left(&self, master: &Arc<RedisBackend>) -> bool {
        !Arc::ptr_eq(master, &self.current())
    }

    /// The transient error for an answer that came from a master the backend has left.
    fn answered_by_old_master(&self, master: &RedisBackend) -> StoreError {
        StoreError::transient(format!(
            "answered by {}, which failed over while the request was out and is no longer the \
             master of {}",
            master.server(),
            self.master_name
        ))
    }
}

impl NodeTemplate {
    /// The URL of the node at `addr` (`host:port`), with the credentials and database of the
    /// sentinel URL.
    fn url(&self, addr: &str) -> String {
        format!("{}{addr}{}", self.prefix, self.suffix)
    }

    /// Connects to the node at `node_url` (see [`url`](Self::url)), subscribed to the
    /// notices channel for `hearers`.
    async fn connect(
        &self,
        node_url: &str,
        (waiters, hearers): (&Arc<Waiters>, &Arc<Hearers>),
    ) -> Result<RedisBackend, LockError> {
        let settings = RedisSettings {
            url: node_url,
            app_name: &self.app_name,
            request_timeout: self.request_timeout,
            fair_turn: self.fair_turn,
            holder_metadata: self.holder_metadata,
            replica_acks: self.replica_acks,
            key_prefix: &self.key_prefix,
            background: &self.background,
            clocked_tokens: false,
            tls: &self.tls,
        };
        RedisBackend::open(settings, waiters.clone(), hearers.clone(), true).await
    }
}

/// Asks the sentinels which node is the master: its `host:port`.
async fn master_addr(
    sentinels: &tokio::sync::Mutex<SentinelClient>,
) -> Result<String, redis::RedisError> {
    let client = sentinels.lock().await.async_get_client().await?;
    Ok(client.get_connection_info().addr().to_string())
}

/// Asks the sentinels for the master and connects to it.
async fn resolve(
    sentinels: &tokio::sync::Mutex<SentinelClient>,
    nodes: &NodeTemplate,
    hear: (&Arc<Waiters>, &Arc<Hearers>),
) -> Result<RedisBackend, BoxError> {
    let addr = master_addr(sentinels).await?;
    Ok(nodes.connect(&nodes.url(&addr), hear).await?)
}

/// Whether a failure of [`resolve`] may pass by itself: sentinels or a master not reachable yet,
/// a failover under way.
fn resolve_may_pass(err: &BoxError) -> bool {
    if let Some(err) = err.downcast_ref::<LockError>() {
        return err.is_retryable();
    }
    err.downcast_ref::<redis::RedisError>()
        .is_some_and(crate::backend::is_transient)
}

impl Store for SentinelBackend {
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
        &self.shared.describe
    }

    fn server(&self) -> &str {
        &self.shared.server
    }

    fn acquire<'a>(
        &'a self,
        key: &'a Key,
        token: &'a str,
        ttl: Duration,
        ask: Ask,
    ) -> BoxFuture<'a, Result<Acquire, StoreError>> {
        self.revive_listeners();
        Box::pin(async move {
            let (master, answer) = self
                .shared
                .on_master(move |master| {
                    Box::pin(async move { master.acquire(key, token, ttl, ask).await })
                })
                .await;
            if matches!(answer, Ok(Acquire::Acquired { .. })) && self.shared.left(&master) {
                // A grant from a master that was failed over while the request was out: a
                // paused master that resumes serves what it had queued before it learns it was
                // replaced, while the promoted replica grants the same lock to others, and
                // whatever it granted is wiped when it turns replica. Give it back; the caller
                // retries on the new master with the same token.
                let _ = tokio::time::timeout(
                    self.shared.nodes.request_timeout,
                    master.give_back_quietly(key, token),
                )
                .await;
                return Err(self.shared.answered_by_old_master(&master));
            }
            answer
        })
    }

    fn renew<'a>(&'a self, batch: &'a [Renewal], book: Booking<'a>) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            let (master, answer) = self
                .shared
                .on_master(move |master| {
                    Box::pin(async move { master.renew_pipelined(batch).await })
                })
                .await;
            // Booked only once the master is known to still count: one master, one answer.
            let answer = match answer {
                // Renewed on a master that no longer counts: the watchdog asks the new one.
                Ok(_) if self.shared.left(&master) => {
                    Err(self.shared.answered_by_old_master(&master))
                }
                answer => answer,
            };
            book(&whole(batch), answer);
        })
    }

    fn release<'a>(
        &'a self,
        key: &'a Key,
        token: &'a str,
        keep: Duration,
    ) -> BoxFuture<'a, Result<Release, StoreError>> {
        self.revive_listeners();
        Box::pin(async move {
            let release = move |master: Arc<RedisBackend>| -> BoxFuture<'a, _> {
                Box::pin(async move { master.release(key, token, keep).await })
            };
            self.release_on_masters(release).await
        })
    }

    fn release_lease<'a>(
        &'a self,
        lease: &'a crate::lease::Lease,
        keep: Duration,
    ) -> BoxFuture<'a, Result<Release, StoreError>> {
        self.revive_listeners();
        Box::pin(async move {
            let release = move |master: Arc<RedisBackend>| -> BoxFuture<'a, _> {
                Box::pin(async move { master.release_lease_here(lease, keep).await })
            };
            self.release_on_masters(release).await
        })
    }

    fn leave<'a>(&'a self, key: &'a Key, token: &'a str) -> BoxFuture<'a, Result<(), StoreError>> {
        self.revive_listeners();
        Box::pin(async move {
            self.shared
                .on_master(move |master| Box::pin(async move { master.leave(key, token).await }))
                .await
                .1
        })
    }

    fn waits<'a>(
        &'a self,
        key: &'a str,
        update: &'a WaitsUpdate,
    ) -> BoxFuture<'a, Result<Vec<(String, String)>, StoreError>> {
        self.revive_listeners();
        Box::pin(async move {
            self.shared
                .on_master(move |master| Box::pin(async move { master.waits(key, update).await }))
                .await
                .1
        })
    }

    fn watch<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<(), StoreError>> {
        self.revive_listeners();
        Box::pin(async move {
            self.shared
                .watched
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .insert(key.to_owned());
            self.shared
                .on_master(move |master| Box::pin(async move { master.watch(key).await }))
                .await
                .1
        })
    }

    fn unwatch(&self, key: &str) {
        self.shared
            .watched
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(key);
        self.shared.current().unwatch(key);
    }

    fn notifies(&self) -> bool {
        self.shared.current().notifies()
    }

    fn announces(&self) -> bool {
        self.shared.current().announces()
    }

    fn attach(&self, changes: &crate::store::Changes) {
        self.shared.hearers.attach(changes);
    }

    /// On the current master: its replicas pass it on to their subscribers too.
    fn announce<'a>(
        &'a self,
        notice: &'a crate::store::Notice,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        self.revive_listeners();
        Box::pin(async move {
            self.shared
                .on_master(move |master| Box::pin(async move { master.announce(notice).await }))
                .await
                .1
        })
    }

    fn steals(&self) -> bool {
        true
    }

    /// On the current master; a steal answered by a master the backend left while it was out
    /// fails transiently, as a grant would (stealing again is safe).
    fn steal<'a>(
        &'a self,
        key: &'a Key,
        token: &'a str,
        ttl: Duration,
        from: &'a str,
    ) -> BoxFuture<'a, Result<crate::store::Stolen, StoreError>> {
        self.revive_listeners();
        Box::pin(async move {
            let (master, answer) = self
                .shared
                .on_master(move |master| {
                    Box::pin(async move { master.steal(key, token, ttl, from).await })
                })
                .await;
            if answer.is_ok() && self.shared.left(&master) {
                let _ = tokio::time::timeout(
                    self.shared.nodes.request_timeout,
                    master.give_back_quietly(key, token),
                )
                .await;
                return Err(self.shared.answered_by_old_master(&master));
            }
            answer
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sentinel_urls_name_sentinels_master_and_node_settings() {
        let parts = parse("redis+sentinel://:pw@s1:26379,s2:26380/mymaster/2?protocol=resp3")
            .expect("valid");
        assert_eq!(parts.sentinels, ["redis://s1:26379", "redis://s2:26380"]);
        assert_eq!(parts.master_name, "mymaster");
        assert_eq!(parts.node_prefix, "redis://:pw@");
        assert_eq!(parts.node_suffix, "/2?protocol=resp3");
    }

    #[test]
    fn a_password_with_a_slash_is_not_read_as_the_master_name() {
        let parts = parse("redis+sentinel://user:2024/s3cret@s1:26379/mymaster").expect("valid");
        assert_eq!(parts.sentinels, ["redis://s1:26379"]);
        assert_eq!(parts.master_name, "mymaster");
        assert_eq!(parts.node_prefix, "redis://user:2024/s3cret@");
    }

    #[test]
    fn sentinel_urls_without_master_or_sentinels_are_config_errors() {
        for bad in [
            "redis+sentinel://s1:26379",
            "redis+sentinel://s1:26379/",
            "redis+sentinel://user:s3cret@/mymaster",
        ] {
            let err = parse(bad).expect_err(bad);
            assert!(!err.to_string().contains("s3cret"), "{err}");
        }
    }

    /// A short fuzz run (see `url::fuzz`).
    mod fuzz {
        use proptest::prelude::*;

        use super::super::parse;
        use crate::error::LockError;
        use crate::url::fuzz::{FUZZ_CASES, url_like, url_with_password};
        use crate::url::server_of;

        const SENTINEL: &[&str] = &["redis+sentinel://", "rediss+sentinel://"];

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(FUZZ_CASES))]

            #[test]
            fn reading_any_string_never_panics(url in url_like()) {
                match parse(&url) {
                    Ok(parts) => {
                        prop_assert!(!parts.sentinels.is_empty());
                        prop_assert!(!parts.master_name.is_empty());
                        for sentinel in &parts.sentinels {
                            prop_assert!(
                                sentinel.starts_with("redis://") || sentinel.starts_with("rediss://"),
                                "{}", sentinel
                            );
                        }
                    }
                    Err(LockError::Config(_)) => {}
                    Err(other) => prop_assert!(false, "not a config error: {other:?}"),
                }
            }

            /// The master name and the sentinels' addresses name the backend in every message, as
            /// `SentinelBackend::connect` puts them together.
            #[test]
            fn what_is_shown_never_contains_the_password(secret in url_with_password(SENTINEL)) {
                let shown = match parse(&secret.url) {
                    Ok(parts) => format!(
                        "{} (sentinels {})",
                        parts.master_name,
                        parts.sentinels.iter().map(|s| server_of(s)).collect::<Vec<_>>().join(",")
                    ),
                    Err(err) => format!("{err} {err:?}"),
                };
                prop_assert!(!secret.leaked_in(&shown), "{:?} shown as {}", secret.url, shown);
            }
        }
    }
}
