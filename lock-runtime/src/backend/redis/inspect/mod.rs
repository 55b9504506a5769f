//! The inspection side of every Redis deployment ([`Inspect`]): the one place that reads the
//! stored layout from outside a lock's steps (SCAN over every data server, the values, leases,
//! lines, holders and published waits) and force-releases with `unlock.lua`.
//!
//! It has connections of its own, one per data server (the master a Sentinel names now, every
//! master of a Cluster, every Redlock master), opened on first use: a manager that is never
//! inspected never opens them.

mod nodes;
mod read;
mod unlock;

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use tokio::sync::OnceCell;

use super::connection::RedisSettings;
use crate::store::{Inspect, LockInfo, StoreError, Unlocked, WaitRecord};
use crate::tls::Certificates;
use nodes::Nodes;

type Answer<'a, T> = Pin<Box<dyn Future<Output = Result<T, StoreError>> + Send + 'a>>;

/// The inspection side of a Redis deployment, connected on first use.
pub(crate) struct RedisInspect {
    /// The deployment's URL (with its password: never shown).
    url: String,
    timeout: Duration,
    tls: Certificates,
    nodes: OnceCell<Nodes>,
}

impl RedisInspect {
    /// The inspection side of the deployment `settings` connect to.
    pub(crate) fn new(settings: &RedisSettings<'_>) -> RedisInspect {
        RedisInspect {
            url: settings.url.to_owned(),
            timeout: settings.request_timeout,
            tls: settings.tls.clone(),
            nodes: OnceCell::new(),
        }
    }

    /// The data servers, connected now if they were not yet.
    async fn nodes(&self) -> Result<&Nodes, StoreError> {
        self.nodes
            .get_or_try_init(|| Nodes::connect(&self.url, self.timeout, self.tls.clone()))
            .await
    }
}

impl Inspect for RedisInspect {
    fn places(&self) -> Answer<'_, Vec<String>> {
        Box::pin(async move {
            let nodes = self.nodes().await?;
            Ok(nodes.nodes.iter().map(|node| node.server.clone()).collect())
        })
    }

    fn list<'a>(&'a self, prefix: &'a str, pattern: &'a str) -> Answer<'a, Vec<LockInfo>> {
        Box::pin(async move { read::list(self.nodes().await?, prefix, pattern).await })
    }

    fn show<'a>(&'a self, prefix: &'a str, key: &'a str) -> Answer<'a, Vec<LockInfo>> {
        Box::pin(async move { read::show(self.nodes().await?, prefix, key).await })
    }

    fn unlock<'a>(&'a self, _prefix: &'a str, seen: &'a LockInfo) -> Answer<'a, Unlocked> {
        Box::pin(async move { unlock::unlock(self.nodes().await?, seen).await })
    }

    fn waits<'a>(&'a self, prefix: &'a str) -> Answer<'a, Vec<WaitRecord>> {
        Box::pin(async move { unlock::waits(self.nodes().await?, prefix).await })
    }
}
