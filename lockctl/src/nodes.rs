//! The data servers behind a lock URL, one connection each: the server, the master a Sentinel
//! names, every master of a Redis Cluster (each holds the locks of its slots), or every Redlock
//! master.

use std::future::Future;
use std::time::Duration;

use lock_runtime::inspect::{Deployment, DeploymentKind};
use redis::aio::MultiplexedConnection;

use crate::failure::Failure;

/// One data server.
pub(crate) struct Node {
    /// `host:port` (a socket path for redis+unix://): how it is named in output, without
    /// credentials.
    pub(crate) server: String,
    pub(crate) conn: MultiplexedConnection,
    /// The slot ranges it serves, on a Redis Cluster.
    slots: Vec<(u16, u16)>,
}

/// The data servers of a deployment.
pub(crate) struct Nodes {
    deployment: Deployment,
    pub(crate) nodes: Vec<Node>,
    timeout: Duration,
}

impl Nodes {
    /// Connects to every data server behind `url`.
    pub(crate) async fn connect(url: &str, timeout: Duration) -> Result<Nodes, Failure> {
        let deployment = Deployment::parse(url).map_err(|err| Failure::usage(err.to_string()))?;
        deployment
            .prepare_tls()
            .map_err(|err| Failure::usage(err.to_string()))?;
        let mut nodes = Nodes {
            deployment,
            nodes: Vec::new(),
            timeout,
        };
        let deployment = &nodes.deployment;
        match deployment.kind() {
            DeploymentKind::Single => {
                let server = deployment.servers()[0].clone();
                let node = nodes.open(&server, &deployment.node_url(&server)).await?;
                nodes.nodes.push(node);
            }
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
            DeploymentKind::Memory => {
                return Err(Failure::usage(
                    "memory:// locks live inside one process: there is nothing to look at from \
                     outside; give the Redis deployment the application uses",
                ));
            }
            _ => {
                return Err(Failure::usage(format!(
                    "`{}` is a deployment lockctl does not know",
                    nodes.deployment.shown()
                )));
            }
        }
        Ok(nodes)
    }

    /// The URL as it may be shown.
    pub(crate) fn shown(&self) -> String {
        self.deployment.shown()
    }

    pub(crate) fn kind(&self) -> DeploymentKind {
        self.deployment.kind()
    }

    /// How a release is announced: SPUBLISH on a cluster (sharded pub/sub, as the runtime's
    /// cluster backend listens), PUBLISH elsewhere.
    pub(crate) fn announce(&self) -> &'static str {
        if self.kind() == DeploymentKind::Cluster {
            "sharded"
        } else {
            ""
        }
    }

    /// The servers that may hold the lock stored at `stored_key`: on a cluster the master of
    /// its slot, elsewhere every node.
    pub(crate) async fn for_key(&self, stored_key: &str) -> Result<Vec<&Node>, Failure> {
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
                Failure::failed(format!(
                    "no master of the cluster serves slot {slot} of `{stored_key}`"
                ))
            })
    }

    /// Sends `cmd` to `node` within the timeout; `what` names it in errors.
    pub(crate) async fn query<T: redis::FromRedisValue>(
        &self,
        node: &Node,
        what: &str,
        cmd: &redis::Cmd,
    ) -> Result<T, Failure> {
        let mut conn = node.conn.clone();
        self.within(&node.server, what, cmd.query_async(&mut conn))
            .await
    }

    /// `request` within the timeout, its failure named as `what` on `server`.
    pub(crate) async fn within<T>(
        &self,
        server: &str,
        what: &str,
        request: impl Future<Output = redis::RedisResult<T>>,
    ) -> Result<T, Failure> {
        match tokio::time::timeout(self.timeout, request).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(err)) => Err(Failure::redis(what, server, &err)),
            Err(_) => Err(Failure::failed(format!(
                "{what} on {server}: no answer within {}",
                humantime::format_duration(self.timeout)
            ))),
        }
    }

    async fn open(&self, server: &str, url: &str) -> Result<Node, Failure> {
        let client = redis::Client::open(url).map_err(|err| {
            Failure::usage(format!("cannot use `{}`: {err}", self.deployment.shown()))
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
    async fn master_from_sentinels(&self) -> Result<String, Failure> {
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
                    Failure::failed(format!("sentinel {sentinel} knows no master `{name}`"))
                })
            };
            match asked.await {
                Ok((host, port)) if host.contains(':') => return Ok(format!("[{host}]:{port}")),
                Ok((host, port)) => return Ok(format!("{host}:{port}")),
                Err(err) => why.push(err.to_string()),
            }
        }
        Err(Failure::failed(format!(
            "no sentinel named the master `{name}`: {}",
            why.join("; ")
        )))
    }

    /// Connects to every master of the cluster, as the first answering seed lists them.
    async fn connect_cluster(&mut self) -> Result<(), Failure> {
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
            return Err(Failure::failed(format!(
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
            return Err(Failure::failed(format!(
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
