//! Reading locks: SCAN (never KEYS) on every data server, then each lock's value, lease,
//! waiters and fair line; semaphores' and read-write locks' holders and their leases.

use std::collections::BTreeSet;

use lock_runtime::inspect::{self, DeploymentKind, Kind, StoredLock};
use serde::Serialize;

use crate::failure::Failure;
use crate::nodes::{Node, Nodes};
use crate::waits::{self, WaiterView};

/// One lock on one server, as `list`, `show` and `--json` present it. The field names are
/// stable: scripts read them.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct LockView {
    /// The lock's name (`order:42`).
    pub(crate) key: String,
    /// `lock`, `semaphore` or `rwlock`.
    pub(crate) kind: &'static str,
    /// Its Redis key (`lock:{order:42}`; a semaphore's set of holders, a read-write lock's
    /// channel).
    pub(crate) stored_key: String,
    /// The server it was read on (`host:port`).
    pub(crate) server: String,
    /// `held`, `kept` (released, busy until it expires), `reserved` (free for the first fair
    /// waiter alone), `free` (only a last fencing token left by version 0.2: a lock's marker,
    /// or a semaphore's or read-write lock's `:fence` key; a released lock, semaphore or
    /// read-write lock leaves no key now) or `absent`.
    pub(crate) state: String,
    /// A fencing token the stored data carries: a read-write lock's writer's, the one a lock
    /// value written by version 0.2 carries, or the last one version 0.2 kept in a semaphore's
    /// or read-write lock's `:fence` key; `None` otherwise (a lock in the current format, a
    /// semaphore's permits, read shares), whose tokens come from the fence counter of the slot.
    pub(crate) fence: Option<u64>,
    /// For a lock in the current format (whose value carries no fencing token), the last token
    /// the fence counter of its slot handed out: the holder's token is this one or an earlier
    /// one (the counter only rises, and busy attempts count it up too). `None` where `fence`
    /// is known, for semaphores and read-write locks, on Redlock (whose token is the largest of
    /// the masters' answers, so one master's counter bounds nothing) and where the counter is
    /// absent.
    pub(crate) fence_at_most: Option<u64>,
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
    /// A semaphore's permits, as its holders declared them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) permits: Option<u32>,
    /// A read-write lock's: `read` (shares held), `write` (the write hold) or `none`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) mode: Option<&'static str>,
    /// A semaphore's or a read-write lock's holders, each with its lease.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) holders: Option<Vec<HolderEntry>>,
    /// A read-write lock's: a writer waits, so new readers wait behind it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) writer_waiting: Option<bool>,
    /// What names this lock's holder to the force-release script (its ARGV[4]): a 0.2 value's
    /// fencing token, the id of the owner token, or for a `kept` lock (no token) the id of the
    /// whole value. Never printed.
    #[serde(skip)]
    pub(crate) unlock_id: Option<String>,
}

/// One holder of a semaphore's permit or of a read-write lock.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct HolderEntry {
    /// 12 hex digits of the SHA-1 of its owner token.
    pub(crate) holder_id: String,
    /// `permit`, `read` or `write`.
    pub(crate) holds: &'static str,
    /// Its lease left.
    pub(crate) lease_ms: i64,
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

/// The locks, semaphores and read-write locks whose names match `pattern` on every server; free
/// ones (only a last fencing token version 0.2 left: a lock's marker, a semaphore's or
/// read-write lock's `:fence` key) only with `all`.
pub(crate) async fn list(
    nodes: &Nodes,
    prefix: &str,
    pattern: &str,
    all: bool,
) -> Result<Vec<LockView>, Failure> {
    let mut locks = Vec::new();
    for node in &nodes.nodes {
        let mut found = BTreeSet::new();
        for matching in inspect::scan_patterns(prefix, pattern) {
            for stored in scan(nodes, node, &matching).await? {
                if let Some(named) = inspect::stored_name(prefix, &stored) {
                    found.insert(named);
                }
            }
        }
        for (key, kind) in found {
            let Some(view) = read_kind(nodes, node, prefix, &key, kind, false).await? else {
                continue;
            };
            if all || view.state != "free" {
                locks.push(view);
            }
        }
    }
    locks.sort_by(|a, b| (&a.key, a.kind, &a.server).cmp(&(&b.key, b.kind, &b.server)));
    Ok(locks)
}

/// The lock `key` on every server that may hold it, with its fair line, and the semaphore and
/// the read-write lock of that name where they exist; `absent` where none of them is.
pub(crate) async fn show(nodes: &Nodes, prefix: &str, key: &str) -> Result<Vec<LockView>, Failure> {
    let stored = inspect::lock_key(prefix, key).map_err(|err| Failure::usage(err.to_string()))?;
    let mut views = Vec::new();
    for node in nodes.for_key(&stored).await? {
        let lock = read(nodes, node, prefix, key, &stored, true).await?;
        let mut shared = Vec::new();
        for kind in [Kind::Semaphore, Kind::ReadWrite] {
            shared.extend(read_kind(nodes, node, prefix, key, kind, true).await?);
        }
        // `absent` only where nothing of that name is.
        match lock {
            Some(lock) => views.push(lock),
            None if shared.is_empty() => {
                views.push(LockView::absent(key, &stored, &node.server));
            }
            None => {}
        }
        views.extend(shared);
    }
    Ok(views)
}

/// The calls that wait for the lock `key`, as they publish their waits (a call that holds no
/// other lock only once it has waited about a quarter of a second); `None` (said on stderr) if
/// the published waits cannot be read, which leaves the rest of `show` as it is.
pub(crate) async fn waiters(
    nodes: &Nodes,
    prefix: &str,
    key: &str,
) -> Result<Option<Vec<WaiterView>>, Failure> {
    let stored = inspect::lock_key(prefix, key).map_err(|err| Failure::usage(err.to_string()))?;
    match waits::standing(nodes, prefix).await {
        Ok(records) => Ok(Some(waits::waiting_for(prefix, &records, &stored))),
        Err(err) => {
            eprintln!("lockctl: {err}: who waits is not shown");
            Ok(None)
        }
    }
}

/// The `kind` of `key` on `node`; `None` if there is none.
async fn read_kind(
    nodes: &Nodes,
    node: &Node,
    prefix: &str,
    key: &str,
    kind: Kind,
    with_line: bool,
) -> Result<Option<LockView>, Failure> {
    let usage = |err: lock_runtime::LockError| Failure::usage(err.to_string());
    match kind {
        Kind::Semaphore => {
            read_semaphore(
                nodes,
                node,
                key,
                &inspect::semaphore_keys(prefix, key).map_err(usage)?,
            )
            .await
        }
        Kind::ReadWrite => {
            read_read_write(
                nodes,
                node,
                key,
                &inspect::read_write_keys(prefix, key).map_err(usage)?,
            )
            .await
        }
        _ => {
            let stored = inspect::lock_key(prefix, key).map_err(usage)?;
            read(nodes, node, prefix, key, &stored, with_line).await
        }
    }
}

/// A sorted set of holders read `WITHSCORES`: each member with the end of its lease.
type Members = Vec<(String, f64)>;
/// `TIME`: seconds and microseconds.
type ServerTime = (u64, u64);
/// `PUBSUB NUMSUB` of one channel: its name and its subscribers.
type NumSub = (String, u64);

/// The semaphore stored at `keys` on `node`: its live holders (a holder whose lease has ended
/// but which no one has cleared yet is not counted), the permits they declared, the last
/// fencing token version 0.2 kept for it if that key is still there; `None` if nothing of it is
/// left.
async fn read_semaphore(
    nodes: &Nodes,
    node: &Node,
    key: &str,
    keys: &inspect::SemaphoreKeys,
) -> Result<Option<LockView>, Failure> {
    let mut pipe = redis::pipe();
    pipe.cmd("ZRANGE")
        .arg(&keys.holders)
        .arg(0)
        .arg(-1)
        .arg("WITHSCORES");
    pipe.cmd("GET").arg(&keys.fence);
    pipe.cmd("PTTL").arg(&keys.fence);
    pipe.cmd("TIME");
    pipe.cmd("PUBSUB").arg("NUMSUB").arg(&keys.holders);
    let Some((members, fence, fence_pttl, (secs, micros), (_, subscribed))): Option<(
        Members,
        Option<String>,
        i64,
        ServerTime,
        NumSub,
    )> = read_pipe(nodes, node, &keys.holders, pipe).await?
    else {
        return Ok(None);
    };
    let now_ms = (secs * 1000 + micros / 1000) as i64;
    let mut permits = None;
    let mut holders = Vec::new();
    for (member, ends) in &members {
        let Some((declared, token)) = inspect::permit_holder(member) else {
            continue;
        };
        if (*ends as i64) <= now_ms {
            continue;
        }
        permits = Some(declared);
        holders.push(HolderEntry {
            holder_id: inspect::token_id(token),
            holds: "permit",
            lease_ms: *ends as i64 - now_ms,
        });
    }
    if holders.is_empty() && fence.is_none() {
        return Ok(None);
    }
    let waiters = subscribed + cluster_subscribers(nodes, node, &keys.holders).await?;
    let view = LockView {
        fence: fence.and_then(|fence| fence.parse().ok()),
        permits,
        waiters,
        ..LockView::shared(key, Kind::Semaphore, &keys.holders, &node.server)
    };
    Ok(Some(view.with_holders(holders, fence_pttl)))
}

/// What [`read_read_write`]'s pipeline answers: the readers, the writer and its PTTL, the fence
/// key version 0.2 kept and its PTTL, whether a writer waits, the time, the channel's
/// subscribers.
type ReadWriteReply = (
    Members,
    Option<String>,
    i64,
    Option<String>,
    i64,
    bool,
    ServerTime,
    NumSub,
);

/// The read-write lock stored at `keys` on `node`: its writer (with its fencing token) or its
/// live readers, whether a writer waits, the last fencing token version 0.2 kept for it if that
/// key is still there; `None` if nothing of it is left.
async fn read_read_write(
    nodes: &Nodes,
    node: &Node,
    key: &str,
    keys: &inspect::ReadWriteKeys,
) -> Result<Option<LockView>, Failure> {
    let mut pipe = redis::pipe();
    pipe.cmd("ZRANGE")
        .arg(&keys.readers)
        .arg(0)
        .arg(-1)
        .arg("WITHSCORES");
    pipe.cmd("GET").arg(&keys.writer);
    pipe.cmd("PTTL").arg(&keys.writer);
    pipe.cmd("GET").arg(&keys.fence);
    pipe.cmd("PTTL").arg(&keys.fence);
    pipe.cmd("EXISTS").arg(&keys.writer_waiting);
    pipe.cmd("TIME");
    pipe.cmd("PUBSUB").arg("NUMSUB").arg(&keys.channel);
    let Some((
        readers,
        writer,
        writer_pttl,
        fence,
        fence_pttl,
        waiting,
        (secs, micros),
        (_, subscribed),
    )): Option<ReadWriteReply> = read_pipe(nodes, node, &keys.readers, pipe).await?
    else {
        return Ok(None);
    };
    let now_ms = (secs * 1000 + micros / 1000) as i64;
    let mut holders = Vec::new();
    let writer = writer.as_deref().and_then(StoredLock::parse);
    if let Some(token) = writer.as_ref().and_then(StoredLock::token_id) {
        holders.push(HolderEntry {
            holder_id: token,
            holds: "write",
            lease_ms: writer_pttl.max(0),
        });
    }
    for (member, ends) in &readers {
        let Some(token) = inspect::reader_token(member) else {
            continue;
        };
        if (*ends as i64) <= now_ms {
            continue;
        }
        holders.push(HolderEntry {
            holder_id: inspect::token_id(token),
            holds: "read",
            lease_ms: *ends as i64 - now_ms,
        });
    }
    if holders.is_empty() && fence.is_none() {
        return Ok(None);
    }
    let mode = match holders.first() {
        Some(holder) => holder.holds,
        None => "none",
    };
    let waiters = subscribed + cluster_subscribers(nodes, node, &keys.channel).await?;
    // The writer's own token; else the one 0.2 kept, while that key is there.
    let writer_fence = writer
        .map(|writer| writer.fence)
        .filter(|&fence| fence != 0);
    let view = LockView {
        fence: writer_fence.or_else(|| fence.and_then(|fence| fence.parse().ok())),
        mode: Some(mode),
        writer_waiting: Some(waiting),
        waiters,
        ..LockView::shared(key, Kind::ReadWrite, &keys.channel, &node.server)
    };
    Ok(Some(view.with_holders(holders, fence_pttl)))
}

/// Runs `pipe` on `node`; `None` (said on stderr) if a key of `what` holds data of another type.
async fn read_pipe<T: redis::FromRedisValue>(
    nodes: &Nodes,
    node: &Node,
    what: &str,
    pipe: redis::Pipeline,
) -> Result<Option<T>, Failure> {
    let mut conn = node.conn.clone();
    match nodes
        .within(
            &node.server,
            &format!("reading `{what}`"),
            pipe.query_async(&mut conn),
        )
        .await
    {
        Ok(value) => Ok(Some(value)),
        Err(err) if err.to_string().contains("WRONGTYPE") => {
            eprintln!(
                "lockctl: a key of `{what}` on {} holds data of another type: skipped",
                node.server
            );
            Ok(None)
        }
        Err(err) => Err(err),
    }
}

/// On Cluster, the processes subscribed to `channel`'s sharded channel; 0 elsewhere.
async fn cluster_subscribers(nodes: &Nodes, node: &Node, channel: &str) -> Result<u64, Failure> {
    if nodes.kind() == DeploymentKind::Cluster {
        sharded_subscribers(nodes, node, channel).await
    } else {
        Ok(0)
    }
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
    prefix: &str,
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
    pipe.cmd("GET")
        .arg(inspect::fence_counter_key(prefix, stored));
    let mut conn = node.conn.clone();
    let (pttl, (secs, micros), (_, subscribed), line_length, counter): (
        i64,
        ServerTime,
        NumSub,
        u64,
        Option<String>,
    ) = nodes
        .within(
            &node.server,
            &format!("reading `{stored}`"),
            pipe.query_async(&mut conn),
        )
        .await?;
    let waiters = subscribed + cluster_subscribers(nodes, node, stored).await?;
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
        kind: Kind::Lock.as_str(),
        stored_key: stored.to_owned(),
        server: node.server.clone(),
        state: state.to_owned(),
        // The current format carries no fencing token (0): tokens come from the fence counter.
        fence: (lock.fence != 0).then_some(lock.fence),
        fence_at_most: fence_bound(nodes, &lock, counter.as_deref()),
        holder_id: lock.token_id(),
        host: lock.holder_field("host").map(str::to_owned),
        pid: lock.holder_field("pid").and_then(|pid| pid.parse().ok()),
        // A manager without `app_name` stores `app=` with nothing after it: no app, not an empty one.
        app: lock
            .holder_field("app")
            .filter(|app| !app.is_empty())
            .map(str::to_owned),
        since_ms,
        age_ms: since_ms.map(|since| now_ms.saturating_sub(since)),
        lease_ms: (pttl >= 0).then_some(pttl),
        waiters,
        line_length,
        announced: lock.waiting,
        reserved_for: lock.holder_field("next").map(inspect::token_id),
        reserved_ms: until_ms.map(|until| until - now_ms as i64),
        line,
        permits: None,
        mode: None,
        holders: None,
        writer_waiting: None,
        unlock_id: Some(unlock_id(&lock, &value)),
    }))
}

/// The last token the fence counter (`counter`, as read) of a current-format lock's slot handed
/// out, which its holder's token does not exceed; `None` where that bounds nothing (see
/// [`LockView::fence_at_most`]).
fn fence_bound(nodes: &Nodes, lock: &StoredLock, counter: Option<&str>) -> Option<u64> {
    let holds_a_token = matches!(lock.state.as_str(), "held" | "kept") && !lock.is_reserved();
    if lock.fence != 0 || !holds_a_token || nodes.kind() == DeploymentKind::Redlock {
        return None;
    }
    counter?.parse().ok()
}

/// What names the holder of the lock stored as `value` to the force-release script: a 0.2
/// value's fencing token, else the id of its owner token, else (a `kept` lock) the id of the
/// whole value, as the script computes it.
pub(crate) fn unlock_id(lock: &StoredLock, value: &str) -> String {
    if lock.fence != 0 {
        lock.fence.to_string()
    } else {
        lock.token_id().unwrap_or_else(|| inspect::token_id(value))
    }
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

/// An error saying the server does not know the command or subcommand: a plain `ERR` (there
/// is no code of its own) whose message starts so, in any case (Redis 6.0 wrote "Unknown
/// subcommand", 6.2 and later "unknown subcommand").
fn is_unknown_command(err: &redis::RedisError) -> bool {
    let detail = err
        .detail()
        .unwrap_or_default()
        .trim_start()
        .to_ascii_lowercase();
    err.code() == Some("ERR")
        && (detail.starts_with("unknown command") || detail.starts_with("unknown subcommand"))
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
            kind: Kind::Lock.as_str(),
            stored_key: stored.to_owned(),
            server: server.to_owned(),
            state: "absent".to_owned(),
            fence: None,
            fence_at_most: None,
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
            permits: None,
            mode: None,
            holders: None,
            writer_waiting: None,
            unlock_id: None,
        }
    }

    /// A semaphore or read-write lock with nothing read yet.
    fn shared(key: &str, kind: Kind, stored: &str, server: &str) -> LockView {
        LockView {
            kind: kind.as_str(),
            state: "free".to_owned(),
            ..LockView::absent(key, stored, server)
        }
    }

    /// `held` with these holders (the lease shown is the longest: when the last one ends), or
    /// `free` with only the fencing token version 0.2 kept, for `fence_pttl` more.
    fn with_holders(mut self, holders: Vec<HolderEntry>, fence_pttl: i64) -> LockView {
        if holders.is_empty() {
            self.lease_ms = (fence_pttl >= 0).then_some(fence_pttl);
        } else {
            self.state = "held".to_owned();
            self.lease_ms = holders.iter().map(|holder| holder.lease_ms).max();
            if let [only] = holders.as_slice() {
                self.holder_id = Some(only.holder_id.clone());
            }
        }
        self.holders = Some(holders);
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unknown_subcommand_is_told_on_every_redis() {
        let error = |reply: &[u8]| {
            redis::parse_redis_value(reply)
                .and_then(redis::Value::extract_error)
                .expect_err("an error reply")
        };
        for reply in [
            // Redis 6.2 and later, Valkey: no sharded pub/sub before Redis 7.
            &b"-ERR unknown subcommand 'SHARDNUMSUB'. Try PUBSUB HELP.\r\n"[..],
            // Redis 5.0 and 6.0.
            b"-ERR Unknown subcommand or wrong number of arguments for 'SHARDNUMSUB'. Try PUBSUB HELP.\r\n",
            b"-ERR unknown command 'PUBSUB', with args beginning with: 'SHARDNUMSUB' \r\n",
        ] {
            assert!(is_unknown_command(&error(reply)), "{}", String::from_utf8_lossy(reply));
        }
        let refused =
            error(b"-NOPERM this user has no permissions to run the 'pubsub' command\r\n");
        assert!(!is_unknown_command(&refused));
    }

    /// What `unlock` passes the force-release script to name the holder it confirmed.
    #[test]
    fn the_holder_is_named_by_fence_token_id_or_value() {
        let old = "held fence=11 token=abc waiting=0";
        let lock = StoredLock::parse(old).expect("a lock");
        assert_eq!(unlock_id(&lock, old), "11", "0.2: its fencing token");
        let old_kept = "kept fence=7 waiting=2";
        let lock = StoredLock::parse(old_kept).expect("a lock");
        assert_eq!(unlock_id(&lock, old_kept), "7");
        let held = "held token=abc waiting=0 since=1 host=h pid=2 app=a";
        let lock = StoredLock::parse(held).expect("a lock");
        assert_eq!(
            unlock_id(&lock, held),
            "a9993e364706",
            "the id of its owner token"
        );
        let kept = "kept waiting=1";
        let lock = StoredLock::parse(kept).expect("a lock");
        assert_eq!(
            unlock_id(&lock, kept),
            inspect::token_id(kept),
            "the id of the value"
        );
    }
}
