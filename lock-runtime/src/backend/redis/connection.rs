//! The connection of one Redis server that acquires, renewals and releases share, and the
//! settings every Redis deployment is made with.

use std::sync::Arc;
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{Client, Cmd, Pipeline, RedisError, RedisFuture, RedisResult, Value};
use tokio::runtime::Handle;

use super::replicas::ReplicaAcks;
use crate::background::{Background, Lifeline, Revivable};
use crate::tls::Certificates;

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

/// The connection acquires, renewals and releases share, made again when the runtime its
/// driver ran on shut down (see `background`).
pub(super) struct SharedConn {
    pub(super) conn: Revivable<ConnectionManager>,
    pub(super) client: Client,
    pub(super) config: ConnectionManagerConfig,
    pub(super) background: Background,
    pub(super) server: String,
}

impl SharedConn {
    /// The shared connection; if the runtime its driver ran on has shut down, a new one that
    /// connects on first use, from the caller (so no request meets the dead one).
    pub(super) fn get(&self) -> Conn {
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
    pub(super) async fn send<T, F: Future<Output = RedisResult<T>>>(
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

/// The shared connection as the steps of a lock use it: each request is sent once more if the
/// connection dropped under it (see [`SharedConn::send`]).
pub(super) struct Resending(pub(super) Arc<SharedConn>);

impl redis::aio::ConnectionLike for Resending {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(
            self.0
                .send(move |mut conn| async move { conn.req_packed_command(cmd).await }),
        )
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(self.0.send(move |mut conn| async move {
            conn.req_packed_commands(pipeline, offset, count).await
        }))
    }

    fn get_db(&self) -> i64 {
        self.0.get().get_db()
    }
}

/// A Redis error as text, with the server's own message but never the URL or credentials.
pub(super) fn describe_error(err: &RedisError) -> String {
    err.to_string()
}
