//! Independent masters, the deployment Redlock runs on.

use crate::server::RedisServer;
use crate::topology;

/// `n` independent `redis-server` processes that know nothing of each other, all killed on drop.
///
/// ```no_run
/// use lock_tests::Masters;
///
/// let masters = Masters::start(3);
/// masters.pause(0);
/// // a Redlock client on masters.url() still has a majority
/// masters.resume(0);
/// ```
#[derive(Debug)]
pub struct Masters {
    nodes: Vec<RedisServer>,
}

impl Masters {
    /// Starts `n` servers side by side and waits until each answers.
    ///
    /// # Panics
    ///
    /// If `n` is 0, or as [`RedisServer::start`].
    pub fn start(n: usize) -> Self {
        assert!(n > 0, "Masters::start needs at least one server");
        Self {
            nodes: topology::start_all(n, |_| RedisServer::start()),
        }
    }

    /// All servers, in the order of [`urls`](Self::urls).
    pub fn nodes(&self) -> &[RedisServer] {
        &self.nodes
    }

    /// Server `i`.
    ///
    /// # Panics
    ///
    /// If there is no server `i`.
    pub fn node(&self, i: usize) -> &RedisServer {
        self.nodes.get(i).unwrap_or_else(|| {
            panic!(
                "there is no master {i}: only {} were started",
                self.nodes.len()
            )
        })
    }

    /// `redis://127.0.0.1:<port>` of each server.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }

    /// `redlock://127.0.0.1:<p1>,127.0.0.1:<p2>,...`: all servers in one URL.
    pub fn url(&self) -> String {
        let addrs: Vec<String> = self.nodes.iter().map(|n| n.addr().to_string()).collect();
        format!("redlock://{}", addrs.join(","))
    }

    /// Kills server `i` (see [`RedisServer::kill`]).
    pub fn kill(&self, i: usize) {
        self.node(i).kill();
    }

    /// Stops server `i` with SIGSTOP (see [`RedisServer::pause`]).
    pub fn pause(&self, i: usize) {
        self.node(i).pause();
    }

    /// Continues server `i` after [`pause`](Self::pause).
    pub fn resume(&self, i: usize) {
        self.node(i).resume();
    }

    /// Starts server `i` again on its port, empty (see [`RedisServer::restart`]).
    pub fn restart(&self, i: usize) {
        self.node(i).restart();
    }

    /// The logs of all servers, each under a header naming it. Meant for assertion messages.
    pub fn log(&self) -> String {
        let labels: Vec<String> = (0..self.nodes.len())
            .map(|i| format!("master {i}"))
            .collect();
        topology::logs(labels.iter().map(String::as_str).zip(&self.nodes))
    }
}
