//! The hand-rolled lock that waits the way the library does, as a reference for waiting:
//! `SET key token NX PX ttl` to take it; a script that deletes it if the token still holds it
//! and then `PUBLISH`es on the key's channel to give it back; a waiter subscribes to that
//! channel and tries again on the release message, or when the lease it saw (`PTTL`) runs out.
//!
//! Written as one would by hand: one subscriber connection per process, a channel subscribed
//! while this process has a waiter on the key, every local waiter woken by a release (they all
//! try again; one wins), no hand-off, no watchdog.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use futures_util::StreamExt;
use redis::aio::{ConnectionManager, PubSubSink};
use redis::{Client, Script};
use tokio::sync::watch;

use super::LEASE;
use super::hand_rolled::SetNx;
use crate::BenchError;

/// KEYS[1]: the lock; ARGV[1]: the holder's token; ARGV[2]: the channel to announce the release
/// on. Returns 1 if the lock was ours and is now free (and announced), 0 otherwise.
const RELEASE: &str = r#"
if redis.call("GET", KEYS[1]) == ARGV[1] then
  redis.call("DEL", KEYS[1])
  redis.call("PUBLISH", ARGV[2], "")
  return 1
else
  return 0
end
"#;

pub struct HandRolledPubSub {
    conn: ConnectionManager,
    release: Script,
    waiters: Arc<Waiters>,
    /// The task that reads release messages, ended on drop.
    reader: tokio::task::JoinHandle<()>,
}

impl Drop for HandRolledPubSub {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

/// The local waiters per channel, and the subscriber connection's sending half.
struct Waiters {
    /// Held while a channel is subscribed or unsubscribed, so that those commands reach the
    /// server in the order the counts changed.
    sink: tokio::sync::Mutex<PubSubSink>,
    /// Per channel: the count of releases seen (waiters watch it) and of local waiters.
    channels: Mutex<HashMap<String, (watch::Sender<u64>, usize)>>,
}

impl Waiters {
    fn channels(&self) -> std::sync::MutexGuard<'_, HashMap<String, (watch::Sender<u64>, usize)>> {
        self.channels.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Counts a waiter in, subscribing to `channel` if it is the first; returns its view of
    /// the releases.
    async fn join(&self, channel: &str) -> Result<watch::Receiver<u64>, BenchError> {
        let mut sink = self.sink.lock().await;
        let (releases, first) = {
            let mut channels = self.channels();
            let (sender, count) = channels
                .entry(channel.to_owned())
                .or_insert_with(|| (watch::Sender::new(0), 0));
            *count += 1;
            (sender.subscribe(), *count == 1)
        };
        if first && let Err(err) = sink.subscribe(channel).await {
            drop(sink);
            self.leave(channel).await;
            return Err(err.into());
        }
        Ok(releases)
    }

    /// Counts a waiter out, unsubscribing if it was the last.
    async fn leave(&self, channel: &str) {
        let mut sink = self.sink.lock().await;
        let last = {
            let mut channels = self.channels();
            match channels.get_mut(channel) {
                Some((_, count)) if *count > 1 => {
                    *count -= 1;
                    false
                }
                Some(_) => {
                    channels.remove(channel);
                    true
                }
                None => false,
            }
        };
        if last {
            // A failure leaves a subscription nobody listens to; messages on it are ignored.
            let _ = sink.unsubscribe(channel).await;
        }
    }

    fn released(&self, channel: &str) {
        if let Some((sender, _)) = self.channels().get(channel) {
            sender.send_modify(|seen| *seen += 1);
        }
    }
}

impl HandRolledPubSub {
    pub const NAME: &'static str = "hand-rolled pub/sub";

    pub async fn connect(url: &str) -> Result<Self, BenchError> {
        let client = Client::open(url)?;
        let conn = ConnectionManager::new(client.clone()).await?;
        let (sink, mut messages) = client.get_async_pubsub().await?.split();
        let waiters = Arc::new(Waiters {
            sink: tokio::sync::Mutex::new(sink),
            channels: Mutex::new(HashMap::new()),
        });
        let reader = {
            let waiters = Arc::downgrade(&waiters);
            tokio::spawn(async move {
                while let Some(message) = messages.next().await {
                    let Some(waiters) = waiters.upgrade() else {
                        return;
                    };
                    waiters.released(message.get_channel_name());
                }
            })
        };
        Ok(HandRolledPubSub {
            conn,
            release: Script::new(RELEASE),
            waiters,
            reader,
        })
    }

    fn channel(key: &str) -> String {
        format!("{key}:released")
    }

    async fn wait(
        &self,
        key: &str,
        token: &str,
        releases: &mut watch::Receiver<u64>,
    ) -> Result<(), BenchError> {
        loop {
            // Marked seen before trying, so a release between the try and the wait wakes it.
            releases.borrow_and_update();
            if self.try_take(key, token, LEASE).await? {
                return Ok(());
            }
            let left: i64 = redis::cmd("PTTL")
                .arg(key)
                .query_async(&mut self.conn.clone())
                .await?;
            let lease_left = match left {
                // Gone since the try: try again at once.
                -2 => continue,
                // No expiry (not one of ours): only a release message ends it.
                -1 => LEASE,
                ms => Duration::from_millis(ms.max(1) as u64),
            };
            let _ = tokio::time::timeout(lease_left, releases.changed()).await;
        }
    }
}

#[async_trait]
impl SetNx for HandRolledPubSub {
    const NAME: &'static str = HandRolledPubSub::NAME;

    fn conn(&self) -> ConnectionManager {
        self.conn.clone()
    }

    /// Takes `key`, waiting for a release message or the lease it saw to run out.
    async fn take_waiting(&self, key: &str, token: &str) -> Result<(), BenchError> {
        if self.try_take(key, token, LEASE).await? {
            return Ok(());
        }
        let channel = Self::channel(key);
        let mut releases = self.waiters.join(&channel).await?;
        let taken = self.wait(key, token, &mut releases).await;
        self.waiters.leave(&channel).await;
        taken
    }

    async fn give_back(&self, key: &str, token: &str) -> Result<(), BenchError> {
        let released: i64 = self
            .release
            .key(key)
            .arg(token)
            .arg(Self::channel(key))
            .invoke_async(&mut self.conn.clone())
            .await?;
        if released != 1 {
            return Err(BenchError::new(format!(
                "{}: `{key}` was no longer ours at release",
                Self::NAME
            )));
        }
        Ok(())
    }
}
