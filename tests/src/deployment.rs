//! One deployment of each kind the library runs on, with a manager connected to it: the fixture
//! of the suites that run the same behaviour on every backend ([`on_backends!`](crate::on_backends)).

use std::sync::atomic::{AtomicUsize, Ordering};

use lock_runtime::{LockManager, LockOptions, TlsConfig};

use crate::{RedisCluster, RedisServer, SentinelSetup, TestCerts};

/// A deployment, the URL more managers connect to, a manager connected to it, and the servers
/// behind it (kept alive for as long as the deployment).
pub struct Deployment {
    /// A manager connected to the deployment.
    pub locks: LockManager,
    url: String,
    /// One server, or Redlock's independent masters.
    servers: Vec<RedisServer>,
    sentinel: Option<SentinelSetup>,
    cluster: Option<RedisCluster>,
    /// The certificates every manager is given, and the CA they come from.
    tls: Option<(TlsConfig, TestCerts)>,
}

impl Deployment {
    /// A `memory://` table of this deployment's own, which more managers can connect to.
    pub async fn memory() -> Deployment {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let url = format!(
            "memory://deployment-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        Deployment::on(url, Vec::new(), None, None).await
    }

    /// One redis-server.
    pub async fn redis() -> Deployment {
        let server = tokio::task::spawn_blocking(RedisServer::start)
            .await
            .expect("server start");
        Deployment::on(server.url(), vec![server], None, None).await
    }

    /// One redis-server over TLS (`rediss://`) that asks clients for a certificate
    /// (`--tls-auth-clients yes`); every manager is given its private CA and a client
    /// certificate (needs the `tls` feature of lock-runtime).
    pub async fn redis_tls() -> Deployment {
        let (server, certs) = tokio::task::spawn_blocking(|| {
            let certs = TestCerts::new();
            (RedisServer::start_tls(&certs, true), certs)
        })
        .await
        .expect("server start");
        Deployment::over_tls(server.tls_url(), vec![server], None, certs).await
    }

    /// A Redis Cluster of three masters over TLS (see [`RedisCluster::start_tls`]); every
    /// manager is given its private CA and a client certificate (needs the `tls` feature of
    /// lock-runtime).
    pub async fn cluster_tls() -> Deployment {
        let (cluster, certs) = tokio::task::spawn_blocking(|| {
            let certs = TestCerts::new();
            (RedisCluster::start_tls(3, &certs), certs)
        })
        .await
        .expect("cluster start");
        Deployment::over_tls(cluster.tls_url(), Vec::new(), Some(cluster), certs).await
    }

    async fn over_tls(
        url: String,
        servers: Vec<RedisServer>,
        cluster: Option<RedisCluster>,
        certs: TestCerts,
    ) -> Deployment {
        let (cert, key) = certs.client_files();
        let tls = TlsConfig::new()
            .root_ca_file(certs.ca_file())
            .client_cert_files(cert, key);
        let mut deployment = Deployment {
            locks: LockManager::memory(),
            url,
            servers,
            sentinel: None,
            cluster,
            tls: Some((tls, certs)),
        };
        deployment.locks = deployment.connect().await;
        deployment
    }

    /// A master with one replica behind three sentinels.
    pub async fn sentinel() -> Deployment {
        let setup = tokio::task::spawn_blocking(|| SentinelSetup::start(1, 3))
            .await
            .expect("sentinel start");
        Deployment::on(setup.url(), Vec::new(), Some(setup), None).await
    }

    /// A Redis Cluster of three masters.
    pub async fn cluster() -> Deployment {
        let cluster = tokio::task::spawn_blocking(|| RedisCluster::start(3, 0))
            .await
            .expect("cluster start");
        Deployment::on(cluster.url(), Vec::new(), None, Some(cluster)).await
    }

    /// Redlock over three independent redis-servers.
    pub async fn redlock() -> Deployment {
        let servers = tokio::task::spawn_blocking(|| {
            (0..3).map(|_| RedisServer::start()).collect::<Vec<_>>()
        })
        .await
        .expect("servers start");
        let hosts: Vec<String> = servers.iter().map(|s| s.addr().to_string()).collect();
        Deployment::on(
            format!("redlock://{}", hosts.join(",")),
            servers,
            None,
            None,
        )
        .await
    }

    async fn on(
        url: String,
        servers: Vec<RedisServer>,
        sentinel: Option<SentinelSetup>,
        cluster: Option<RedisCluster>,
    ) -> Deployment {
        let mut deployment = Deployment {
            locks: LockManager::memory(),
            url,
            servers,
            sentinel,
            cluster,
            tls: None,
        };
        deployment.locks = deployment.connect().await;
        deployment
    }

    /// The URL managers connect with.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Another manager on the same deployment, as another process would have.
    ///
    /// # Panics
    ///
    /// If it cannot connect (the message carries the servers' logs).
    pub async fn connect(&self) -> LockManager {
        self.connect_with(|builder| builder).await
    }

    /// The server that stores `stored_key`, for a command from outside: the one server, the
    /// Sentinel master, or the cluster master of its slot; none on memory and Redlock.
    pub fn server_of(&self, stored_key: &str) -> Option<&RedisServer> {
        if self.is_redlock() {
            return None;
        }
        self.servers
            .first()
            .or(self.sentinel.as_ref().map(SentinelSetup::master))
            .or(self
                .cluster
                .as_ref()
                .map(|cluster| cluster.master_for_key(stored_key)))
    }

    /// The servers that hold the locks' data: the one server, the Sentinel master, the
    /// cluster's masters, or Redlock's masters; none on memory.
    pub fn data_servers(&self) -> Vec<&RedisServer> {
        let mut servers: Vec<&RedisServer> = self.servers.iter().collect();
        servers.extend(self.sentinel.as_ref().map(SentinelSetup::master));
        if let Some(cluster) = &self.cluster {
            servers.extend(cluster.masters());
        }
        servers
    }

    /// The lock stored at `stored_key` (`lock:{key}`) as the server holds it (on Redlock, as
    /// the first master that holds it does: a majority's masters hold the same value); `None`
    /// on memory and where no server holds it.
    pub fn stored_lock(&self, stored_key: &str) -> Option<crate::StoredLock> {
        if self.is_redlock() {
            return self
                .servers
                .iter()
                .find_map(|server| server.stored_lock(stored_key));
        }
        self.server_of(stored_key)?.stored_lock(stored_key)
    }

    /// A manager on this deployment built by `build` from a builder that already has its URL
    /// (and its certificates, over TLS): one with settings of its own, as another process would
    /// have.
    ///
    /// # Panics
    ///
    /// If it cannot connect (the message carries the servers' logs).
    pub async fn connect_with(
        &self,
        build: impl FnOnce(lock_runtime::LockManagerBuilder) -> lock_runtime::LockManagerBuilder,
    ) -> LockManager {
        let mut builder = LockManager::builder().url(&self.url);
        if let Some((tls, _)) = &self.tls {
            builder = builder.tls(tls.clone());
        }
        build(builder)
            .build()
            .await
            .unwrap_or_else(|err| panic!("connect: {err}\n{}", self.log()))
    }

    /// The cluster, on a cluster deployment.
    pub fn redis_cluster(&self) -> Option<&RedisCluster> {
        self.cluster.as_ref()
    }

    /// Whether this is Redlock over independent masters.
    pub fn is_redlock(&self) -> bool {
        self.url.starts_with("redlock://")
    }

    /// Whether `key` is free now: another task (not this one, whose re-entry would say yes)
    /// takes and releases it at once.
    pub async fn is_free(&self, key: &str) -> bool {
        let locks = self.locks.clone();
        let key = key.to_owned();
        tokio::spawn(async move {
            match locks.lock(key, LockOptions::new()).await {
                Ok(guard) => guard.release().await.is_ok(),
                Err(_) => false,
            }
        })
        .await
        .expect("task")
    }

    /// Runs a section of `key` under `options` whose body sleeps a minute, and cancels it after
    /// 200 ms by dropping its future: what a timeout or an aborted request does to a holder.
    pub async fn cancel_a_section(&self, key: &str, options: LockOptions) {
        let locks = self.locks.clone();
        let holder = async move {
            locks
                .run_locked(key.to_owned(), options, async {
                    tokio::time::sleep(std::time::Duration::from_secs(60)).await;
                    Ok::<_, lock_runtime::LockError>(())
                })
                .await
        };
        let timed_out = tokio::time::timeout(std::time::Duration::from_millis(200), holder).await;
        assert!(timed_out.is_err(), "the body sleeps a minute");
    }

    /// Runs a section of `key` under `options` whose body panics, on a task of its own, and
    /// checks that the panic went on past the section.
    pub async fn panic_in_a_section(&self, key: &str, options: LockOptions) {
        let locks = self.locks.clone();
        let key = key.to_owned();
        let panicked = tokio::spawn(async move {
            locks
                .run_locked(key, options, async {
                    panic!("the body failed");
                    #[allow(unreachable_code)]
                    Ok::<(), lock_runtime::LockError>(())
                })
                .await
        })
        .await;
        assert!(panicked.expect_err("the task panicked").is_panic());
    }

    /// The logs of every server behind the deployment, for assertion messages.
    pub fn log(&self) -> String {
        let servers = self.servers.iter().map(RedisServer::log);
        servers
            .chain(self.sentinel.as_ref().map(SentinelSetup::log))
            .chain(self.cluster.as_ref().map(RedisCluster::log))
            .collect()
    }
}

/// Instantiates behaviours once per backend: for each backend named in the first list (any of
/// `memory`, `redis`, `redis_tls`, `sentinel`, `cluster`, `cluster_tls`, `redlock`; the `_tls`
/// ones need the `tls` feature of lock-runtime), a module of that name with one test per
/// behaviour of the second list, which calls the behaviour `async fn name(d: Deployment)` with a
/// fresh deployment of that kind.
///
/// `mod <name>;` first puts those modules in a module of that name, for a second list of
/// behaviours on other backends in the same file.
///
/// ```no_run
/// use lock_runtime::LockOptions;
/// use lock_tests::Deployment;
///
/// async fn a_held_lock_is_busy(d: Deployment) {
///     let _held = d.locks.lock("k", LockOptions::new()).await.expect("free");
///     assert!(!d.is_free("k").await, "{}", d.log());
/// }
///
/// async fn the_server_stores_it(d: Deployment) {
///     let _held = d.locks.lock("k", LockOptions::new()).await.expect("free");
///     assert!(d.server_of("lock:{k}").expect("a server").holds_lock("lock:{k}"));
/// }
///
/// lock_tests::on_backends!([memory, redis, cluster] [a_held_lock_is_busy]);
/// lock_tests::on_backends!(mod on_servers; [redis, cluster] [the_server_stores_it]);
/// # fn main() {}
/// ```
#[macro_export]
macro_rules! on_backends {
    (mod $outer:ident; [$($backend:ident),* $(,)?] $names:tt) => {
        mod $outer {
            use super::*;
            $crate::on_backends!([$($backend),*] $names);
        }
    };
    ([$($backend:ident),* $(,)?] $names:tt) => {
        $( $crate::on_backends!(@backend $backend $names); )*
    };
    (@backend $backend:ident [$($name:ident),* $(,)?]) => {
        mod $backend {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name($crate::Deployment::$backend().await).await
                }
            )*
        }
    };
}
