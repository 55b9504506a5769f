//! What the multi-node setups share: starting nodes side by side, asking nodes that may be down or
//! paused short questions, waiting for a setup to settle, and the logs of many nodes at once.

use std::panic;
use std::time::{Duration, Instant};

use crate::resp::{self, Reply};
use crate::server::{ProcessState, RedisServer};

/// How long a node may take to answer a probe before it counts as down (killed or paused).
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);
/// How often a settling condition is checked. Each check asks every node a few questions, so
/// this is slower than [`wait_until`](crate::wait_until)'s pace.
const SETTLE_INTERVAL: Duration = Duration::from_millis(50);

/// A node's replication role, as `ROLE` reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Role {
    Master,
    Replica { master_port: u16 },
    Sentinel,
}

/// Starts `count` servers on threads of their own, so a topology comes up in the time of its
/// slowest node rather than the sum of all. `start` gets the node's index.
///
/// If any start panics, the servers that did start are killed and the first panic goes on.
pub(crate) fn start_all(
    count: usize,
    start: impl Fn(usize) -> RedisServer + Sync,
) -> Vec<RedisServer> {
    std::thread::scope(|scope| {
        let start = &start;
        let handles: Vec<_> = (0..count).map(|i| scope.spawn(move || start(i))).collect();
        let mut nodes = Vec::with_capacity(count);
        let mut first_panic = None;
        for handle in handles {
            match handle.join() {
                Ok(node) => nodes.push(node),
                Err(payload) => {
                    first_panic.get_or_insert(payload);
                }
            }
        }
        if let Some(payload) = first_panic {
            drop(nodes);
            panic::resume_unwind(payload);
        }
        nodes
    })
}

/// Sends one command on a fresh connection. `None` when the node does not answer within a
/// second: it is down or paused. Error replies are `Some`. A node this harness paused or killed
/// is not asked at all: it cannot answer, and waiting a second for it would slow every check
/// made while it is out.
pub(crate) fn ask(node: &RedisServer, args: &[&str]) -> Option<Reply> {
    if node.state() != ProcessState::Running {
        return None;
    }
    resp::command(node.addr(), node.password(), args, PROBE_TIMEOUT).ok()
}

/// The text of a non-error reply, or why there is none, for a settling condition to report.
pub(crate) fn ask_text(node: &RedisServer, args: &[&str]) -> Result<String, String> {
    match ask(node, args) {
        Some(Reply::Error(e)) => Err(format!("{args:?} on {} failed: {e}", node.addr())),
        Some(reply) => Ok(reply.to_string()),
        None => Err(format!("{} does not answer {args:?}", node.addr())),
    }
}

/// The node's role, or `None` when it does not answer (or answers something unexpected).
pub(crate) fn role(node: &RedisServer) -> Option<Role> {
    let Some(Reply::Array(items)) = ask(node, &["ROLE"]) else {
        return None;
    };
    match items.as_slice() {
        [Reply::Bulk(kind), ..] if kind == b"master" => Some(Role::Master),
        [Reply::Bulk(kind), _, Reply::Integer(port), ..] if kind == b"slave" => {
            let master_port = u16::try_from(*port).ok()?;
            Some(Role::Replica { master_port })
        }
        [Reply::Bulk(kind), ..] if kind == b"sentinel" => Some(Role::Sentinel),
        _ => None,
    }
}

/// The value of `name` in an `INFO` or `CLUSTER INFO` text (`name:value` lines).
pub(crate) fn info_field<'a>(text: &'a str, name: &str) -> Option<&'a str> {
    text.lines().find_map(|line| {
        let (key, value) = line.split_once(':')?;
        (key == name).then(|| value.trim_end())
    })
}

/// Checks `condition` until it returns `Ok` (and returns that) or `timeout` has passed; then the
/// error is the last reason the condition gave, so a panic message says what never happened.
pub(crate) fn settle<T>(
    timeout: Duration,
    mut condition: impl FnMut() -> Result<T, String>,
) -> Result<T, String> {
    let deadline = Instant::now() + timeout;
    loop {
        let reason = match condition() {
            Ok(value) => return Ok(value),
            Err(reason) => reason,
        };
        if Instant::now() >= deadline {
            return Err(format!("after {timeout:?}: {reason}"));
        }
        std::thread::sleep(SETTLE_INTERVAL);
    }
}

/// The logs of `nodes`, each under a header with its label and address.
pub(crate) fn logs<'a>(nodes: impl IntoIterator<Item = (&'a str, &'a RedisServer)>) -> String {
    nodes
        .into_iter()
        .map(|(label, node)| format!("--- {label} {} log ---\n{}", node.addr(), node.log()))
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn info_field_finds_the_value_without_the_line_end() {
        let text = "# Cluster\r\ncluster_state:ok\r\ncluster_slots_ok:16384\r\n";
        assert_eq!(info_field(text, "cluster_state"), Some("ok"));
        assert_eq!(info_field(text, "cluster_slots_ok"), Some("16384"));
        assert_eq!(info_field(text, "cluster"), None);
    }
}
