//! Reading locks: SCAN (never KEYS) on every data server, then each lock's value, lease,
//! waiters and fair line.

use lock_runtime::inspect::{self, DeploymentKind, StoredLock};
use serde::Serialize;

use crate::failure::Failure;
use crate::nodes::{Node, Nodes};

/// One lock on one server, as `list`, `show` and `--json` present it. The field names are
/// stable: scripts read them.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct LockView {
    /// The lock's name (`order:42`).
    pub(crate) key: String,
    /// Its Redis key (`lock:{order:42}`).
    pub(crate) stored_key: String,
    /// The server it was read on (`host:port`).
    pub(crate) server: String,
    /// `held`, `kept` (released, busy until it expires), `reserved` (free for the first fair
    /// waiter alone), `free` (only keeps the last fencing token) or `absent`.
    pub(crate) state: String,
    /// The last fencing token handed out.
    pub(crate) fence: Option<u64>,
    /// 12 hex digits of the SHA-1 of the owner token: tells holders apart, cannot release.
    pub(crate) holder_id: Option<String>,
    pub(crate) host: Option<String>,
    pub(crate) pid: Option<u64>,
    pub(crate) app: Option<String>,
    /// When it was taken, server time in ms since the epoch.
    pub(crate) since_ms: Option<u64>,
    /// How long it has been held, by the server's clock.
    pub(crate) age_ms: Option<u64>,
    /// The remaining lease (PTTL).
    pub(crate) lease_ms: Option<i64>,
    /// Connections subscribed to the lock's channel: processes with a waiter.
    pub(crate) waiters: u64,
    /// Fair waiters in line (ZCARD of the line).
    pub(crate) line_length: u64,
    /// Someone was told the lock is busy, so its release announces itself.
    pub(crate) announced: bool,
    /// The waiter a reserved lock is freed for (its id, as `holder_id`).
    pub(crate) reserved_for: Option<String>,
    /// How long a reserved lock waits for that waiter.
    pub(crate) reserved_ms: Option<i64>,
    /// The fair line in order (`show` only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) line: Option<Vec<LineEntry>>,
}

/// One fair waiter in line.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct LineEntry {
    /// 1 is next.
    pub(crate) position: usize,
    /// 12 hex digits of the SHA-1 of its owner token.
    pub(crate) waiter_id: String,
    /// When its entry ends unless it asks again.
    pub(crate) expires_in_ms: Option<i64>,
}

/// The locks whose names match `pattern` on every server; free markers only with `all`.
pub(crate) async fn list(
    nodes: &Nodes,
    prefix: &str,
    pattern: &str,
    all: bool,
) -> Result<Vec<LockView>, Failure> {
    let matching = inspect::scan_pattern(prefix, pattern);
    let mut locks = Vec::new();
    for node in &nodes.nodes {
        for stored in scan(nodes, node, &matching).await? {
            let Some(key) = inspect::lock_name(prefix, &stored) else {
                continue;
            };
            let Some(view) = read(nodes, node, &key, &stored, false).await? else {
                continue;
            };
            if all || view.state != "free" {
                locks.push(view);
            }
        }
    }
    locks.sort_by(|a, b| a.key.cmp(&b.key).then_with(|| a.server.cmp(&b.server)));
    Ok(locks)
}

/// The lock `key` on every server that may hold it, with its fair line; `absent` where there is
/// none.
pub(crate) async fn show(nodes: &Nodes, prefix: &str, key: &str) -> Result<Vec<LockView>, Failure> {
    let stored = inspect::lock_key(prefix, key).map_err(|err| Failure::usage(err.to_string()))?;
    let mut views = Vec::new();
    for node in nodes.for_key(&stored).await? {
        let view = read(nodes, node, key, &stored, true).await?;
        views.push(view.unwrap_or_else(|| LockView::absent(key, &stored, &node.server)));
    }
    Ok(views)
}

/// Every key matching `pattern` on `node`, with SCAN.
async fn scan(nodes: &Nodes, node: &Node, pattern: &str) -> Result<Vec<String>, Failure> {
    let mut cursor = 0u64;
    let mut keys = Vec::new();
    loop {
        let (next, batch): (u64, Vec<String>) = nodes
            .query(
                node,
                "SCAN",
                redis::cmd("SCAN")
                    .arg(cursor)
                    .arg("MATCH")
                    .arg(pattern)
                    .arg("COUNT")
                    .arg(1000),
            )
            .await?;
        keys.extend(batch);
        if next == 0 {
            break;
        }
        cursor = next;
    }
    keys.sort();
    keys.dedup();
    Ok(keys)
}

/// The lock stored at `stored` on `node`; `None` if the key is absent or holds something else
/// (said on stderr).
pub(crate) async fn read(
    nodes: &Nodes,
    node: &Node,
    key: &str,
    stored: &str,
    with_line: bool,
) -> Result<Option<LockView>, Failure> {
    let value: Option<String> = match nodes
        .query(node, "GET", redis::cmd("GET").arg(stored))
        .await
    {
        Ok(value) => value,
        Err(err) if err.to_string().contains("WRONGTYPE") => {
            eprintln!(
                "lockctl: `{stored}` on {} is not a lock of this version (not a string): skipped",
                node.server
            );
            return Ok(None);
        }
        Err(err) => return Err(err),
    };
    let Some(value) = value else {
        return Ok(None);
    };
    let Some(lock) = StoredLock::parse(&value) else {
        eprintln!(
            "lockctl: `{stored}` on {} does not hold a lock: skipped",
            node.server
        );
        return Ok(None);
    };
    let queue = inspect::queue_key(stored);
    let mut pipe = redis::pipe();
    pipe.cmd("PTTL").arg(stored);
    pipe.cmd("TIME");
    pipe.cmd("PUBSUB").arg("NUMSUB").arg(stored);
    pipe.cmd("ZCARD").arg(&queue);
    let mut conn = node.conn.clone();
    let (pttl, (secs, micros), (_, subscribed), line_length): (
        i64,
        (u64, u64),
        (String, u64),
        u64,
    ) = nodes
        .within(
            &node.server,
            &format!("reading `{stored}`"),
            pipe.query_async(&mut conn),
        )
        .await?;
    let mut waiters = subscribed;
    if nodes.kind() == DeploymentKind::Cluster {
        waiters += sharded_subscribers(nodes, node, stored).await?;
    }
    let now_ms = secs * 1000 + micros / 1000;
    let since_ms = lock
        .holder_field("since")
        .and_then(|since| since.parse::<u64>().ok());
    let until_ms = lock
        .holder_field("until")
        .and_then(|until| until.parse::<i64>().ok());
    let state = if lock.is_reserved() {
        "reserved"
    } else {
        lock.state.as_str()
    };
    let line = if with_line && line_length > 0 {
        Some(read_line(nodes, node, stored, now_ms).await?)
    } else {
        None
    };
    Ok(Some(LockView {
        key: key.to_owned(),
        stored_key: stored.to_owned(),
        server: node.server.clone(),
        state: state.to_owned(),
        fence: Some(lock.fence),
        holder_id: lock.token_id(),
        host: lock.holder_field("host").map(str::to_owned),
        pid: lock.holder_field("pid").and_then(|pid| pid.parse().ok()),
        app: lock.holder_field("app").map(str::to_owned),
        since_ms,
        age_ms: since_ms.map(|since| now_ms.saturating_sub(since)),
        lease_ms: (pttl >= 0).then_some(pttl),
        waiters,
        line_length,
        announced: lock.waiting,
        reserved_for: lock.holder_field("next").map(inspect::token_id),
        reserved_ms: until_ms.map(|until| until - now_ms as i64),
        line,
    }))
}

/// The processes subscribed to the sharded channel of the lock stored at `stored`. A cluster
/// older than Redis 7 has no sharded pub/sub: waiters there cannot subscribe (they take the lock
/// when its lease expires), so there are none to count.
async fn sharded_subscribers(nodes: &Nodes, node: &Node, stored: &str) -> Result<u64, Failure> {
    let what = "PUBSUB SHARDNUMSUB";
    let mut conn = node.conn.clone();
    let mut cmd = redis::cmd("PUBSUB");
    cmd.arg("SHARDNUMSUB").arg(stored);
    let request = cmd.query_async::<(String, u64)>(&mut conn);
    nodes
        .within(&node.server, what, async {
            match request.await {
                Ok((_, count)) => Ok(count),
                Err(err) if is_unknown_command(&err) => Ok(0),
                Err(err) => Err(err),
            }
        })
        .await
}

/// An error saying the server does not know the command or subcommand.
fn is_unknown_command(err: &redis::RedisError) -> bool {
    let text = err.to_string();
    text.contains("Unknown subcommand") || text.contains("unknown command")
}

/// The fair line of the lock stored at `stored`, in order.
async fn read_line(
    nodes: &Nodes,
    node: &Node,
    stored: &str,
    now_ms: u64,
) -> Result<Vec<LineEntry>, Failure> {
    let tokens: Vec<String> = nodes
        .query(
            node,
            "ZRANGE",
            redis::cmd("ZRANGE")
                .arg(inspect::queue_key(stored))
                .arg(0)
                .arg(-1),
        )
        .await?;
    let expiry = inspect::queue_expiry_key(stored);
    let mut line = Vec::with_capacity(tokens.len());
    for (index, token) in tokens.iter().enumerate() {
        let ends: Option<f64> = nodes
            .query(node, "ZSCORE", redis::cmd("ZSCORE").arg(&expiry).arg(token))
            .await?;
        line.push(LineEntry {
            position: index + 1,
            waiter_id: inspect::token_id(token),
            expires_in_ms: ends.map(|ends| ends as i64 - now_ms as i64),
        });
    }
    Ok(line)
}

impl LockView {
    fn absent(key: &str, stored: &str, server: &str) -> LockView {
        LockView {
            key: key.to_owned(),
            stored_key: stored.to_owned(),
            server: server.to_owned(),
            state: "absent".to_owned(),
            fence: None,
            holder_id: None,
            host: None,
            pid: None,
            app: None,
            since_ms: None,
            age_ms: None,
            lease_ms: None,
            waiters: 0,
            line_length: 0,
            announced: false,
            reserved_for: None,
            reserved_ms: None,
            line: None,
        }
    }
}
