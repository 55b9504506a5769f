//! The one subscription task of a backend: it subscribes and unsubscribes the lock channels in
//! the order waiters ask, hands each release message to one waiter and each message of the
//! notices channel to every manager attached ([`Hearers`]), and after a lost connection (or, on
//! Cluster, a channel whose slot moved) wakes every waiter and subscribes again to every watched
//! channel until that succeeds, the notices channel included. One server (`SUBSCRIBE`) and
//! Cluster (`SSUBSCRIBE` for lock channels, `SUBSCRIBE` for notices) differ only in their
//! [`Feed`]; the loop is this one.

use std::collections::HashSet;
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures_util::{StreamExt, future};
use redis::aio::{PubSubSink, PubSubStream};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::{Client, PushInfo, PushKind, RedisError, RedisResult, Value};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use crate::backend::StoreError;
use crate::backoff::Backoff;
use crate::store::{Changes, Notice};
use crate::waiters::Waiters;

/// Where a backend's subscription task hands what it hears on the notices channel (see
/// [`Store::announce`](crate::store::Store::announce)): every manager attached to the backend.
/// The deployments of several servers (Sentinel's masters one after another, Redlock's masters
/// side by side) share one, so a manager attached once hears through each of them.
pub(super) struct Hearers {
    /// The notices channel (see [`protocol::notices_channel`](crate::protocol::notices_channel)).
    channel: String,
    attached: Mutex<Vec<Changes>>,
}

impl Hearers {
    pub(super) fn new(channel: &str) -> Arc<Hearers> {
        Arc::new(Hearers {
            channel: channel.to_owned(),
            attached: Mutex::default(),
        })
    }

    /// The channel notices travel on.
    pub(super) fn channel(&self) -> &str {
        &self.channel
    }

    /// A manager over the backend hears its notices from now on.
    pub(super) fn attach(&self, changes: &Changes) {
        let mut attached = self.attached.lock().unwrap_or_else(PoisonError::into_inner);
        attached.retain(|changes| !changes.is_gone());
        attached.push(changes.clone());
    }

    /// Tells every manager attached the notice `message` carries; other traffic on the channel
    /// is dropped.
    fn tell(&self, message: &[u8]) {
        let Some(notice) = std::str::from_utf8(message).ok().and_then(Notice::decode) else {
            tracing::debug!(channel = %self.channel, "a message on the notices channel is not a notice; dropped");
            return;
        };
        let attached = self
            .attached
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        for changes in attached {
            changes.heard(&notice);
        }
    }
}

/// A request to a backend's subscription task, handled in the order sent.
pub(super) enum Subscription {
    Watch(String, oneshot::Sender<Result<(), RedisError>>),
    Unwatch(String),
}

/// What a [`Feed`] heard.
pub(super) enum Event {
    /// A release announced on `channel`, naming the releaser (see release.lua) if it did.
    Release {
        channel: String,
        id: Option<Vec<u8>>,
    },
    /// The connection is gone: releases may go unheard until every channel is subscribed again.
    Lost,
    /// The server dropped `channel` unasked (its slot moved to another node).
    Moved(String),
}

/// The connection a subscription task listens on.
pub(super) trait Feed: Send + 'static {
    /// Subscribes to `channel`, connecting first if needed; resolves once the server confirmed.
    fn subscribe(&mut self, channel: &str) -> impl Future<Output = RedisResult<()>> + Send;
    /// Unsubscribes `channel`; `false` if the connection did not answer (then it counts as lost).
    fn unsubscribe(&mut self, channel: &str) -> impl Future<Output = bool> + Send;
    /// Subscribes again to every channel, reconnecting first if needed.
    fn resubscribe(
        &mut self,
        channels: &HashSet<String>,
    ) -> impl Future<Output = RedisResult<()>> + Send;
    /// The next thing heard; never resolves while there is no connection.
    fn next(&mut self) -> impl Future<Output = Event> + Send;
    /// Whether the feed still has its connection (a failed subscribe may have dropped it).
    fn connected(&self) -> bool;
}

/// Owns `feed` until the backend is gone (its requests' sender dropped). `watched`: the keys a
/// task started again subscribes to at once (the notices channel among them).
pub(super) async fn run(
    mut feed: impl Feed,
    mut commands: mpsc::UnboundedReceiver<Subscription>,
    watched: HashSet<String>,
    (waiters, hearers): (Arc<Waiters>, Arc<Hearers>),
    server: String,
) {
    let mut retry_at = (!watched.is_empty()).then(Instant::now);
    let mut channels = watched;
    let mut backoff = Backoff::connections();
    loop {
        tokio::select! {
            command = commands.recv() => {
                let Some(command) = command else { return };
                match command {
                    Subscription::Watch(channel, ack) => {
                        let answer = feed.subscribe(&channel).await;
                        match &answer {
                            Ok(()) => {
                                channels.insert(channel);
                            }
                            // The connection is gone, or the shard unreachable or failing
                            // over: subscribe this key too once it answers.
                            Err(err) if crate::backend::is_transient(err) || !feed.connected() => {
                                tracing::debug!(server, error = %err, "cannot subscribe to lock releases yet");
                                channels.insert(channel);
                                if !feed.connected() {
                                    // Every channel of the lost connection went deaf.
                                    waiters.wake_all();
                                }
                                retry_at.get_or_insert(Instant::now() + backoff.peek());
                            }
                            // Refused for this key alone (an ACL, say): it waits on its lease,
                            // and the others keep working.
                            Err(_) => {}
                        }
                        let _ = ack.send(answer);
                    }
                    Subscription::Unwatch(channel) => {
                        if channels.remove(&channel) && !feed.unsubscribe(&channel).await {
                            waiters.wake_all();
                            retry_at.get_or_insert(Instant::now() + backoff.peek());
                        }
                    }
                }
            }
            event = feed.next() => match event {
                Event::Release { channel, id } if channel == hearers.channel => {
                    hearers.tell(id.as_deref().unwrap_or_default());
                }
                Event::Release { channel, id } => waiters.wake_one(&channel, id.as_deref()),
                Event::Lost => {
                    waiters.wake_all();
                    if !channels.is_empty() {
                        retry_at.get_or_insert(Instant::now() + backoff.peek());
                    }
                }
                Event::Moved(channel) if channels.contains(&channel) => {
                    tracing::debug!(server, "a subscribed slot moved; resubscribing");
                    waiters.wake_all();
                    retry_at.get_or_insert(Instant::now() + backoff.peek());
                }
                Event::Moved(_) => {}
            },
            () = sleep_until(retry_at), if retry_at.is_some() => {
                retry_at = None;
                if channels.is_empty() {
                    continue;
                }
                match feed.resubscribe(&channels).await {
                    Ok(()) => {
                        backoff.reset();
                        // Releases before the subscriptions were back went unheard.
                        waiters.wake_all();
                    }
                    Err(err) => {
                        tracing::debug!(server, error = %err, "cannot resubscribe to lock releases yet; waiters fall back to lease expiry meanwhile");
                        retry_at = Some(Instant::now() + backoff.pause());
                    }
                }
            }
        }
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// The way to a backend's subscription task. The task dies with the runtime it was spawned on;
/// it is started again on the caller's runtime at the next use, subscribed at once to every key
/// still watched (its waiters, on other runtimes, may still be waiting for a release).
pub(super) struct Subscriptions {
    state: Mutex<SubscriptionState>,
    /// Spawns a subscription task that takes its requests from the receiver and starts out
    /// subscribed to the given keys.
    start: Box<dyn Fn(mpsc::UnboundedReceiver<Subscription>, HashSet<String>) + Send + Sync>,
}

struct SubscriptionState {
    requests: mpsc::UnboundedSender<Subscription>,
    /// Every key watched and not unwatched since, for a task started again.
    watched: HashSet<String>,
}

impl Subscriptions {
    /// Starts the task with `start`, as it will be started again when needed.
    pub(super) fn start(
        start: impl Fn(mpsc::UnboundedReceiver<Subscription>, HashSet<String>) + Send + Sync + 'static,
    ) -> Self {
        let (requests, receiver) = mpsc::unbounded_channel();
        start(receiver, HashSet::new());
        Subscriptions {
            state: Mutex::new(SubscriptionState {
                requests,
                watched: HashSet::new(),
            }),
            start: Box::new(start),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, SubscriptionState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The task's requests, starting the task again first if it stopped (its runtime shut
    /// down: the receiver was dropped with it).
    fn requests(&self, state: &mut SubscriptionState) -> mpsc::UnboundedSender<Subscription> {
        if state.requests.is_closed() {
            let (requests, receiver) = mpsc::unbounded_channel();
            (self.start)(receiver, state.watched.clone());
            state.requests = requests;
        }
        state.requests.clone()
    }

    /// Starts the task again if it stopped while keys are watched: waiters that subscribed
    /// before hear of releases again (and are woken once, since some may have gone unheard).
    /// Cheap when the task runs: a lock and an atomic load.
    pub(super) fn revive(&self) {
        let mut state = self.state();
        if !state.watched.is_empty() && state.requests.is_closed() {
            self.requests(&mut state);
        }
    }

    /// Asks the task to deliver releases of `key`; resolves once it is subscribed.
    pub(super) async fn watch(&self, key: &str) -> Result<(), StoreError> {
        // A task that dies between the send and its answer (its runtime shut down just then)
        // is started again, once.
        for _ in 0..2 {
            let requests = {
                let mut state = self.state();
                state.watched.insert(key.to_owned());
                self.requests(&mut state)
            };
            let (ack, acked) = oneshot::channel();
            if requests
                .send(Subscription::Watch(key.to_owned(), ack))
                .is_err()
            {
                continue;
            }
            match acked.await {
                Ok(Ok(())) => return Ok(()),
                Ok(Err(err)) => {
                    if !crate::backend::is_transient(&err) {
                        // Refused for this key: a task started again must not ask again.
                        self.state().watched.remove(key);
                    }
                    return Err(err.into());
                }
                Err(_) => continue,
            }
        }
        Err(StoreError::transient("the subscription task has stopped"))
    }

    /// Asks the task to subscribe to `channel` and to stay subscribed to it, without waiting
    /// for the answer: for a server that may be down now (the task subscribes once it answers).
    pub(super) fn keep(&self, channel: &str) {
        let mut state = self.state();
        state.watched.insert(channel.to_owned());
        let (ack, _unheard) = oneshot::channel();
        let _ = self
            .requests(&mut state)
            .send(Subscription::Watch(channel.to_owned(), ack));
    }

    /// Asks the task to stop delivering releases of `key`. Never blocks.
    pub(super) fn unwatch(&self, key: &str) {
        let mut state = self.state();
        state.watched.remove(key);
        let _ = state.requests.send(Subscription::Unwatch(key.to_owned()));
    }
}

/// The subscription connection of one server (`SUBSCRIBE`), for [`run`].
pub(super) struct PubSubFeed {
    pub(super) client: Client,
    pub(super) conn: Option<(PubSubSink, PubSubStream)>,
    pub(super) server: String,
    pub(super) timeout: Duration,
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

/// The subscription connection of a Cluster (`SSUBSCRIBE`, routed by each channel's slot), for
/// [`run`]. The client tells of messages, dropped node connections and channels
/// the server dropped through `pushes`.
///
/// The notices channel (`broadcast`) is subscribed with `SUBSCRIBE` instead: a notice is sent
/// with `PUBLISH`, which every node passes on to every other, so a manager hears it on whichever
/// node it subscribed to, whatever slot the publisher wrote in. That matters for a steal, whose
/// script publishes from the lock's node and could not `SPUBLISH` outside the lock's slot; and
/// no notice is lost while the channel's own slot fails over.
pub(super) struct ShardedFeed {
    pub(super) client: ClusterClient,
    pub(super) conn: Option<ClusterConnection>,
    pub(super) pushes: mpsc::UnboundedReceiver<PushInfo>,
    pub(super) server: String,
    pub(super) broadcast: String,
}

/// Subscribes `conn` to `channel`: `SUBSCRIBE` for the notices channel `broadcast`,
/// `SSUBSCRIBE` for a lock's.
async fn subscribe_on(
    conn: &mut ClusterConnection,
    channel: &str,
    broadcast: &str,
) -> RedisResult<()> {
    if channel == broadcast {
        conn.subscribe(channel).await
    } else {
        conn.ssubscribe(channel).await
    }
}

impl Feed for ShardedFeed {
    /// Resolves once the node serving the channel's slot confirmed the subscription.
    async fn subscribe(&mut self, channel: &str) -> RedisResult<()> {
        let conn = connection(&self.client, &mut self.conn).await?;
        subscribe_on(conn, channel, &self.broadcast).await
    }

    async fn unsubscribe(&mut self, channel: &str) -> bool {
        if let Some(conn) = self.conn.as_mut() {
            // A node that does not answer drops the channel with its connection anyway.
            let _ = if channel == self.broadcast {
                conn.unsubscribe(channel).await
            } else {
                conn.sunsubscribe(channel).await
            };
        }
        true
    }

    /// All at once (SSUBSCRIBE is idempotent, and one command cannot span slots).
    async fn resubscribe(&mut self, channels: &HashSet<String>) -> RedisResult<()> {
        let conn = connection(&self.client, &mut self.conn).await?;
        let broadcast = self.broadcast.as_str();
        future::try_join_all(channels.iter().map(|channel| {
            let mut conn = conn.clone();
            async move { subscribe_on(&mut conn, channel, broadcast).await }
        }))
        .await?;
        Ok(())
    }

    async fn next(&mut self) -> Event {
        loop {
            let Some(push) = self.pushes.recv().await else {
                return std::future::pending().await;
            };
            match push.kind {
                PushKind::SMessage | PushKind::Message => {
                    if let Some(channel) = channel_of(&push) {
                        let id = release_id(&push).map(<[u8]>::to_vec);
                        return Event::Release { channel, id };
                    }
                }
                PushKind::Disconnection => {
                    tracing::debug!(
                        server = self.server,
                        "a subscription connection dropped; resubscribing"
                    );
                    return Event::Lost;
                }
                // Unrequested: the node no longer serves the channel's slot.
                PushKind::SUnsubscribe => {
                    if let Some(channel) = channel_of(&push) {
                        return Event::Moved(channel);
                    }
                }
                _ => {}
            }
        }
    }

    fn connected(&self) -> bool {
        self.conn.is_some()
    }
}

/// The channel a pub/sub push is about: its first element.
fn channel_of(push: &PushInfo) -> Option<String> {
    match push.data.first() {
        Some(Value::BulkString(bytes)) => Some(String::from_utf8_lossy(bytes).into_owned()),
        _ => None,
    }
}

/// What a message carries, its second element: a release's id (see release.lua), or a notice.
fn release_id(push: &PushInfo) -> Option<&[u8]> {
    match push.data.get(1) {
        Some(Value::BulkString(bytes)) => Some(bytes),
        _ => None,
    }
}

async fn connection<'a>(
    client: &ClusterClient,
    conn: &'a mut Option<ClusterConnection>,
) -> RedisResult<&'a mut ClusterConnection> {
    if conn.is_none() {
        *conn = Some(client.get_async_connection().await?);
    }
    match conn.as_mut() {
        Some(conn) => Ok(conn),
        None => unreachable!("connected just above"),
    }
}
