//! The data servers behind a lock URL, one connection each, for inspection: the server, the
//! master a Sentinel names, every master of a Redis Cluster (each holds the locks of its slots),
//! or every Redlock master.

use std::future::Future;
use std::time::Duration;

use redis::RedisError;
use redis::aio::MultiplexedConnection;

use crate::deployment::{Deployment, DeploymentKind};
use crate::store::StoreError;
use crate::tls::Certificates;

/// One data server.
pub(super) struct Node {
    /// `host:port` (a socket path for redis+unix://): how it is named, without credentials.
    pub(super) server: String,
    pub(super) conn: MultiplexedConnection,
    /// The slot ranges it serves, on a Redis Cluster.
    slots: Vec<(u16, u16)>,
}

/// The data servers of a deployment.
pub(super) struct Nodes {
    deployment: Deployment,
    pub(super) nodes: Vec<Node>,
    timeout: Duration,
    tls: Certificates,
}

/// `what` failed on `server`: a Redis error with its context, and where the server's answer
/// was not Redis's protocol at all, what to check.
pub(super) fn failed(what: &str, server: &str, err: &RedisError) -> StoreError {
    if err.kind() == redis::ErrorKind::Parse {
        return StoreError::permanent(format!(
            "{what} on {server}: the server did not answer as Redis does ({err}): check that \
             the URL's port is the Redis server's, and that TLS matches (rediss:// for a server \
             that speaks TLS, redis:// for one that does not)"
        ));
    }
    let message = format!("{what} on {server}: {err}");
    if crate::backend::is_transient(err) {
        StoreError::transient(message)
    } else {
        StoreError::permanent(message)
    }
}

impl Nodes {
    /// Connects to every data server behind `url`.
    pub(super) async fn connect(
        url: &str,
        timeout: Duration,
        tls: Certificates,
    ) -> Result<Nodes, StoreError> {
        let deployment =
            Deployment::parse(url).map_err(|err| StoreError::config(err.to_string()))?;
        let mut nodes = Nodes {
            deployment,
            nodes: Vec::new(),
            timeout,
            tls,
        };
        let deployment = &nodes.deployment;
        match deployment.kind() {
            DeploymentKind::Redlock => {
                for server in deployment.servers().to_vec() {
                    let url = nodes.deployment.node_url(&server);
                    let node = nodes.open(&server, &url).await?;
                    nodes.nodes.push(node);
                }
            }
            DeploymentKind::Sentinel => {
                let server = nodes.master_from_sentinels().await?;
                let url = nodes.deployment.node_url(&server);
                let node = nodes.open(&server, &url).await?;
                nodes.nodes.push(node);
            }
            DeploymentKind::Cluster => nodes.connect_cluster().await?,
            _ => {
                let server = deployment.servers()[0].clone();
                let node = nodes.open(&server, &deployment.node_url(&server)).await?;
                nodes.nodes.push(node);
            }
        }
        Ok(nodes)
    }

    pub(super) fn kind(&self) -> DeploymentKind {
        self.deployment.kind()
    }

    /// How a release is announced: SPUBLISH on a cluster (sharded pub/sub, as the cluster
    /// store listens), PUBLISH elsewhere.
    pub(super) fn announce(&self) -> &'static str {
        if self.kind() == DeploymentKind::Cluster {
            "sharded"
        } else {
            ""
        }
    }

    /// The servers that may hold the key stored at `stored_key`: on a cluster the master of
    /// its slot, elsewhere every node.
    pub(super) async fn for_key(&self, stored_key: &str) -> Result<Vec<&Node>, StoreError> {
        if self.kind() != DeploymentKind::Cluster {
            return Ok(self.nodes.iter().collect());
        }
        let first = &self.nodes[0];
        let slot: u16 = self
            .query(
                first,
                "CLUSTER KEYSLOT",
                redis::cmd("CLUSTER").arg("KEYSLOT").arg(stored_key),
            )
            .await?;
        self.nodes
            .iter()
            .find(|node| node.slots.iter().any(|&(a, b)| a <= slot && slot <= b))
            .map(|node| vec![node])
            .ok_or_else(|| {
                StoreError::transient(format!(
                    "no master of the cluster serves slot {slot} of `{stored_key}`"
                ))
            })
    }

    /// Sends `cmd` to `node` within the timeout; `what` names it in errors.
    pub(super) async fn query<T: redis::FromRedisValue>(
        &self,
        node: &Node,
        what: &str,
        cmd: &redis::Cmd,
    ) -> Result<T, StoreError> {
        let mut conn = node.conn.clone();
        self.within(&node.server, what, cmd.query_async(&mut conn))
            .await
    }

    /// `request` within the timeout, its failure named as `what` on `server`.
    pub(super) async fn within<T>(
        &self,
        server: &str,
        what: &str,
        request: impl Future<Output = redis::RedisResult<T>>,
    ) -> Result<T, StoreError> {
        self.within_raw(server, what, request)
            .await?
            .map_err(|err| failed(what, server, &err))
    }

    /// `request` within the timeout: its Redis error as it came, for the caller to read.
    pub(super) async fn within_raw<T>(
        &self,
        server: &str,
        what: &str,
        request: impl Future<Output = redis::RedisResult<T>>,
    ) -> Result<redis::RedisResult<T>, StoreError> {
        tokio::time::timeout(self.timeout, request)
            .await
            .map_err(|_| {
                StoreError::transient(format!(
                    "{what} on {server}: no answer within {}",
                    humantime::format_duration(self.timeout)
                ))
            })
    }

    async fn open(&self, server: &str, url: &str) -> Result<Node, StoreError> {
        let client = self.tls.client(url).map_err(|err| {
            StoreError::config(format!("cannot use `{}`: {err}", self.deployment.shown()))
        })?;
        let conn = self
            .within(
                server,
                "connecting to the server",
                client.get_multiplexed_async_connection(),
            )
            .await?;
        Ok(Node {
            server: server.to_owned(),
            conn,
            slots: Vec::new(),
        })
    }

    /// `host:port` of the master the first answering sentinel names.
    async fn master_from_sentinels(&self) -> Result<String, StoreError> {
        let name = self.deployment.master_name().unwrap_or_default();
        let mut why = Vec::new();
        for sentinel in self.deployment.servers() {
            let asked = async {
                let node = self
                    .open(sentinel, &self.deployment.sentinel_url(sentinel))
                    .await?;
                let addr: Option<(String, u16)> = self
                    .query(
                        &node,
                        "SENTINEL get-master-addr-by-name",
                        redis::cmd("SENTINEL")
                            .arg("get-master-addr-by-name")
                            .arg(name),
                    )
                    .await?;
                addr.ok_or_else(|| {
                    StoreError::transient(format!("sentinel {sentinel} knows no master `{name}`"))
                })
            };
            match asked.await {
                Ok((host, port)) if host.contains(':') => return Ok(format!("[{host}]:{port}")),
                Ok((host, port)) => return Ok(format!("{host}:{port}")),
                Err(err) => why.push(err.to_string()),
            }
        }
        Err(StoreError::transient(format!(
            "no sentinel named the master `{name}`: {}",
            why.join("; ")
        )))
    }

    /// Connects to every master of the cluster, as the first answering seed lists them.
    async fn connect_cluster(&mut self) -> Result<(), StoreError> {
        let mut why = Vec::new();
        let mut listing = None;
        for seed in self.deployment.servers() {
            let asked = async {
                let node = self.open(seed, &self.deployment.node_url(seed)).await?;
                self.query::<String>(&node, "CLUSTER NODES", redis::cmd("CLUSTER").arg("NODES"))
                    .await
            };
            match asked.await {
                Ok(text) => {
                    listing = Some(text);
                    break;
                }
                Err(err) => why.push(err.to_string()),
            }
        }
        let Some(listing) = listing else {
            return Err(StoreError::transient(format!(
                "no cluster seed answered: {}",
                why.join("; ")
            )));
        };
        for (server, slots) in masters(&listing) {
            let url = self.deployment.node_url(&server);
            let mut node = self.open(&server, &url).await?;
            node.slots = slots;
            self.nodes.push(node);
        }
        if self.nodes.is_empty() {
            return Err(StoreError::transient(format!(
                "the cluster at {} lists no master that serves slots",
                self.deployment.servers().join(",")
            )));
        }
        Ok(())
    }
}

/// The masters serving slots in a `CLUSTER NODES` listing, with their slot ranges.
fn masters(listing: &str) -> Vec<(String, Vec<(u16, u16)>)> {
    listing
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let flags = fields.get(2)?;
            if !flags.split(',').any(|flag| flag == "master")
                || flags
                    .split(',')
                    .any(|flag| matches!(flag, "fail" | "noaddr"))
            {
                return None;
            }
            // ip:port@cport[,hostname]
            let addr = fields.get(1)?.split(['@', ',']).next()?.to_owned();
            let slots: Vec<(u16, u16)> = fields
                .get(8..)?
                .iter()
                .filter(|range| !range.starts_with('['))
                .filter_map(|range| match range.split_once('-') {
                    Some((a, b)) => Some((a.parse().ok()?, b.parse().ok()?)),
                    None => range.parse().ok().map(|slot| (slot, slot)),
                })
                .collect();
            (!slots.is_empty()).then_some((addr, slots))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::masters;

    #[test]
    fn cluster_masters_come_with_their_slots() {
        let listing = "\
a 127.0.0.1:7000@17000 myself,master - 0 0 1 connected 0-5460 7000
b 127.0.0.1:7001@17001,host master - 0 0 2 connected 5461-10922 [5461->-c]
c 127.0.0.1:7002@17002 slave a 0 0 1 connected
d 127.0.0.1:7003@17003 master,fail - 0 0 3 connected 10923-16383
";
        assert_eq!(
            masters(listing),
            vec![
                ("127.0.0.1:7000".to_owned(), vec![(0, 5460), (7000, 7000)]),
                ("127.0.0.1:7001".to_owned(), vec![(5461, 10922)]),
            ]
        );
    }
}
