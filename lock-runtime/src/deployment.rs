//! A lock URL, read once: what it connects to (one server, a Cluster, Sentinel, Redlock masters,
//! memory), the servers it names, and the URL of each node. The manager, the backends and the
//! operator's tools (through [`inspect`](crate::inspect)) all read lock URLs here.

use crate::error::LockError;
use crate::url;
use crate::url::redact as redact_url;

/// What a lock URL connects to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum DeploymentKind {
    /// `redis://`, `rediss://`, `redis+unix://`: one server.
    Single,
    /// `redis+cluster://h1:p1,h2:p2`: a Redis Cluster, reached through its seeds.
    Cluster,
    /// `redis+sentinel://s1,s2/master`: the master that the sentinels name.
    Sentinel,
    /// `redlock://h1,h2,h3`: independent masters.
    Redlock,
    /// `memory://`: a lock table inside one process, invisible from outside.
    Memory,
}

/// A lock URL, read by the same rules as [`LockManager::connect`](crate::LockManager::connect).
/// Its `Debug` never shows a password.
#[derive(Clone)]
pub struct Deployment {
    kind: DeploymentKind,
    url: String,
    /// The scheme nodes are connected with: `redis` or `rediss`.
    node_scheme: &'static str,
    userinfo: Option<String>,
    servers: Vec<String>,
    /// What follows the servers in a node's URL: `/db?query`.
    tail: String,
    master_name: Option<String>,
}

impl std::fmt::Debug for Deployment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Deployment")
            .field("kind", &self.kind)
            .field("url", &redact_url(&self.url))
            .finish()
    }
}

impl Deployment {
    /// Reads a lock URL.
    ///
    /// # Errors
    ///
    /// [`LockError::Config`] for a URL the manager would refuse; the message shows it without
    /// its password.
    pub fn parse(url: &str) -> Result<Deployment, LockError> {
        let url = url::normalized(url)?;
        let scheme = url::scheme(&url)?.to_owned();
        let (kind, node_scheme, default_port, form) = match scheme.as_str() {
            "redis" | "redis+unix" | "unix" => (DeploymentKind::Single, "redis", 0, ""),
            "rediss" => (DeploymentKind::Single, "rediss", 0, ""),
            "memory" => (DeploymentKind::Memory, "redis", 0, ""),
            "redis+cluster" | "rediss+cluster" => (
                DeploymentKind::Cluster,
                if scheme.starts_with("rediss") {
                    "rediss"
                } else {
                    "redis"
                },
                6379,
                "redis+cluster://host:port,host:port",
            ),
            "redis+sentinel" | "rediss+sentinel" => (
                DeploymentKind::Sentinel,
                if scheme.starts_with("rediss") {
                    "rediss"
                } else {
                    "redis"
                },
                26379,
                "redis+sentinel://host1:port1,host2:port2/<master-name>",
            ),
            "redlock" | "redlocks" => (
                DeploymentKind::Redlock,
                if scheme == "redlocks" {
                    "rediss"
                } else {
                    "redis"
                },
                6379,
                "redlock://host:port,host:port,host:port",
            ),
            other => {
                return Err(LockError::Config(format!(
                    "unsupported lock URL scheme `{other}` in `{}`: use redis://, rediss://, \
                     redis+unix://, redis+cluster://, redis+sentinel://, redlock:// or memory://",
                    url::redact(&url)
                )));
            }
        };
        if matches!(kind, DeploymentKind::Single | DeploymentKind::Memory) {
            let servers = vec![url::server_of(&url)];
            return Ok(Deployment {
                kind,
                node_scheme,
                userinfo: None,
                servers,
                tail: String::new(),
                master_name: None,
                url,
            });
        }
        let listed = url::host_list(&url, default_port, form)?;
        let userinfo = listed.userinfo.map(str::to_owned);
        let servers = listed.hosts.clone();
        let mut tail = listed.tail.to_owned();
        let mut master_name = None;
        if kind == DeploymentKind::Sentinel {
            let bad = |why: &str| {
                LockError::Config(format!("`{}` {why}: write {form}", url::redact(&url)))
            };
            let path = tail
                .strip_prefix('/')
                .ok_or_else(|| bad("names no master"))?;
            let (path, query) = match path.split_once('?') {
                Some((path, query)) => (path, format!("?{query}")),
                None => (path, String::new()),
            };
            let (name, db) = match path.split_once('/') {
                Some((name, db)) => (name, format!("/{db}")),
                None => (path, String::new()),
            };
            if name.is_empty() {
                return Err(bad("names no master"));
            }
            master_name = Some(name.to_owned());
            tail = format!("{db}{query}");
        }
        Ok(Deployment {
            kind,
            node_scheme,
            userinfo,
            servers,
            tail,
            master_name,
            url,
        })
    }

    /// What the URL connects to.
    pub fn kind(&self) -> DeploymentKind {
        self.kind
    }

    /// The servers the URL names, as `host:port` (a socket path for `redis+unix://`), without
    /// credentials: the server, the cluster's seeds, the sentinels, or the Redlock masters.
    pub fn servers(&self) -> &[String] {
        &self.servers
    }

    /// The master name of a Sentinel URL.
    pub fn master_name(&self) -> Option<&str> {
        self.master_name.as_deref()
    }

    /// The URL a client connects to the data node `server` (`host:port`) with: the URL's
    /// credentials, database and query around `server`. For a single server, the URL itself
    /// whatever `server` is. Carries the password: never show it; show `server`.
    pub fn node_url(&self, server: &str) -> String {
        if self.kind == DeploymentKind::Single {
            return self.url.clone();
        }
        let (before, after) = self.node_url_parts();
        format!("{before}{server}{after}")
    }

    /// What comes before and after the server in [`node_url`](Self::node_url).
    pub(crate) fn node_url_parts(&self) -> (String, String) {
        let credentials = self
            .userinfo
            .as_deref()
            .map_or(String::new(), |userinfo| format!("{userinfo}@"));
        (
            format!("{}://{credentials}", self.node_scheme),
            self.tail.clone(),
        )
    }

    /// The URL a client connects to the sentinel `server` with (sentinels take no credentials
    /// from a Sentinel URL: those are the master's).
    pub fn sentinel_url(&self, server: &str) -> String {
        format!("{}://{server}", self.node_scheme)
    }

    /// Readies TLS for a `rediss` deployment, as the manager does at connect: with the `tls`
    /// feature it installs the ring crypto provider (unless the program installed one), without
    /// it a `rediss` URL is refused. Does nothing for plain connections.
    ///
    /// # Errors
    ///
    /// [`LockError::Config`] for a `rediss` URL without the `tls` feature.
    pub fn prepare_tls(&self) -> Result<(), LockError> {
        if self.node_scheme == "rediss" {
            crate::url::enable_tls(&self.url)?;
        }
        Ok(())
    }

    /// The URL as given, scheme in lower case. Carries the password: never show it.
    pub(crate) fn url(&self) -> &str {
        &self.url
    }

    /// Whether nodes are reached over TLS (`rediss`).
    pub(crate) fn is_tls(&self) -> bool {
        self.node_scheme == "rediss"
    }

    /// The URL of every server the URL names, by [`node_url`](Self::node_url): the Cluster's
    /// seeds, the Redlock masters. Carry the password: never show them.
    pub(crate) fn node_urls(&self) -> Vec<String> {
        self.servers
            .iter()
            .map(|server| self.node_url(server))
            .collect()
    }

    /// The name of a `memory://<name>` table (`""` for `memory://`).
    pub(crate) fn memory_table(&self) -> &str {
        self.url.split_once("://").map_or("", |(_, name)| name)
    }

    /// The URL as it may be shown: without its password.
    pub fn shown(&self) -> String {
        url::redact(&self.url)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deployments_name_their_servers_without_passwords() {
        let single = Deployment::parse("redis://u:s3cret@h:1/2").expect("valid");
        assert_eq!(single.kind(), DeploymentKind::Single);
        assert_eq!(single.servers(), ["h:1"]);
        assert_eq!(single.node_url("x"), "redis://u:s3cret@h:1/2");
        let cluster = Deployment::parse("redis+cluster://:s3cret@a:1,b:2").expect("valid");
        assert_eq!(cluster.kind(), DeploymentKind::Cluster);
        assert_eq!(cluster.servers(), ["a:1", "b:2"]);
        assert_eq!(cluster.node_url("c:3"), "redis://:s3cret@c:3");
        let sentinel = Deployment::parse("redis+sentinel://:pw@s1,s2:5/mymaster/1").expect("ok");
        assert_eq!(sentinel.servers(), ["s1:26379", "s2:5"]);
        assert_eq!(sentinel.master_name(), Some("mymaster"));
        assert_eq!(sentinel.node_url("m:6"), "redis://:pw@m:6/1");
        assert_eq!(sentinel.sentinel_url("s1:26379"), "redis://s1:26379");
        let redlock = Deployment::parse("redlocks://a,b,c").expect("valid");
        assert_eq!(redlock.kind(), DeploymentKind::Redlock);
        assert_eq!(redlock.node_url("a:6379"), "rediss://a:6379");
        for deployment in [single, cluster, sentinel, redlock] {
            let shown = format!("{} {deployment:?}", deployment.shown());
            assert!(
                !shown.contains("s3cret") && !shown.contains("pw"),
                "{shown}"
            );
        }
        assert!(Deployment::parse("ftp://h").is_err());
        assert!(Deployment::parse("redis+sentinel://s1/").is_err());
    }
}
