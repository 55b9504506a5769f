//! Seeing from outside that a call waits for a lock, semaphore or read-write lock: what a test
//! needs before it releases what the call waits for, instead of a sleep that hopes the call
//! got there first.

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::prelude::PATIENCE;
use crate::resp::Reply;
use crate::{Deployment, wait_until_async};

impl Deployment {
    /// How many managers listen now for the releases announced on `channel` (a lock's stored
    /// name, a semaphore's holders key, a read-write lock's channel; see
    /// [`lock_runtime::inspect`]): a manager subscribes once one of its callers is told busy,
    /// before it asks again, and stays subscribed while one waits. `None` on memory and
    /// Redlock, which have no one server to ask.
    pub fn listeners(&self, channel: &str) -> Option<usize> {
        let server = self.server_of(channel)?;
        let count = if self.redis_cluster().is_some() {
            "SHARDNUMSUB"
        } else {
            "NUMSUB"
        };
        match server.try_cmd(&["PUBSUB", count, channel]) {
            Ok(Reply::Array(items)) => match items.as_slice() {
                [_, Reply::Integer(n)] => usize::try_from(*n).ok(),
                _ => Some(0),
            },
            _ => Some(0),
        }
    }

    /// Polls `call` and, once it waits for what is announced on `channel`, runs `meanwhile`
    /// beside it in this task; returns what `call` returned and what `meanwhile` did.
    ///
    /// "It waits": on a server, `listeners` managers listen on `channel` (the caller's among
    /// them, so it was told busy); on memory and Redlock, `call` went to sleep once.
    ///
    /// # Panics
    ///
    /// If `call` finishes before it waits, or does not wait within the tests' patience.
    pub async fn while_waiting<T, U>(
        &self,
        channel: &str,
        listeners: usize,
        call: impl Future<Output = T>,
        meanwhile: impl Future<Output = U>,
    ) -> (T, U) {
        let asked = AtomicBool::new(false);
        let mut call = pin!(call);
        let watched = std::future::poll_fn(|cx| {
            let polled = call.as_mut().poll(cx);
            if polled.is_pending() {
                asked.store(true, Ordering::SeqCst);
            }
            polled
        });
        let mut watched = pin!(watched);
        let waits = wait_until_async(PATIENCE, || {
            self.is_waiting(channel, listeners, asked.load(Ordering::SeqCst))
        });
        tokio::select! {
            _ = watched.as_mut() => {
                panic!("the call returned before it waited on {channel}\n{}", self.log())
            }
            waits = waits => assert!(waits, "the call never waited on {channel}\n{}", self.log()),
        }
        tokio::join!(watched, meanwhile)
    }

    /// Spawns `call` and returns its task once the call waits for what is announced on
    /// `channel` (see [`while_waiting`](Self::while_waiting)).
    ///
    /// # Panics
    ///
    /// If `call` finishes before it waits, or does not wait within the tests' patience.
    pub async fn spawn_waiting<T: Send + 'static>(
        &self,
        channel: &str,
        listeners: usize,
        call: impl Future<Output = T> + Send + 'static,
    ) -> tokio::task::JoinHandle<T> {
        let asked = Arc::new(AtomicBool::new(false));
        let flag = asked.clone();
        let task = tokio::spawn(async move {
            let mut call = pin!(call);
            std::future::poll_fn(|cx| {
                let polled = call.as_mut().poll(cx);
                if polled.is_pending() {
                    flag.store(true, Ordering::SeqCst);
                }
                polled
            })
            .await
        });
        let waits = wait_until_async(PATIENCE, || {
            task.is_finished() || self.is_waiting(channel, listeners, asked.load(Ordering::SeqCst))
        })
        .await;
        assert!(
            !task.is_finished(),
            "the call returned before it waited on {channel}\n{}",
            self.log()
        );
        assert!(waits, "the call never waited on {channel}\n{}", self.log());
        task
    }

    fn is_waiting(&self, channel: &str, listeners: usize, asked: bool) -> bool {
        match self.listeners(channel) {
            Some(now) => asked && now >= listeners,
            None => asked,
        }
    }
}
