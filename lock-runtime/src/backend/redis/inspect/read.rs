//! Reading locks on Redis: SCAN (never KEYS) on every data server, then each lock's value,
//! lease, waiters and fair line; semaphores' and read-write locks' holders and their leases.

use std::collections::BTreeSet;

use super::nodes::{Node, Nodes};
use crate::deployment::DeploymentKind;
use crate::inspect::{self as names, StoredLock};
use crate::store::{HolderInfo, Holds, InLine, Kind, LockInfo, LockState, StoreError};

fn config(err: crate::error::LockError) -> StoreError {
    StoreError::config(err.to_string())
}

/// Every lock, semaphore and read-write lock whose name matches `pattern` on every server.
pub(super) async fn list(
    nodes: &Nodes,
    prefix: &str,
    pattern: &str,
) -> Result<Vec<LockInfo>, StoreError> {
    let mut locks = Vec::new();
    for node in &nodes.nodes {
        let mut found = BTreeSet::new();
        for matching in names::scan_patterns(prefix, pattern) {
            for stored in scan(nodes, node, &matching).await? {
                if let Some(named) = names::stored_name(prefix, &stored) {
                    found.insert(named);
                }
            }
        }
        for (key, kind) in found {
            locks.extend(read_kind(nodes, node, prefix, &key, kind, false).await?);
        }
    }
    locks.sort_by(|a, b| (&a.key, a.kind, &a.place).cmp(&(&b.key, b.kind, &b.place)));
    Ok(locks)
}

/// The lock `key` on every server that may hold it, with its fair line, and the semaphore and
/// the read-write lock of that name where they exist; `absent` where none of them is.
pub(super) async fn show(
    nodes: &Nodes,
    prefix: &str,
    key: &str,
) -> Result<Vec<LockInfo>, StoreError> {
    let stored = names::lock_key(prefix, key).map_err(config)?;
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
                views.push(LockInfo::new(key, Kind::Lock, &stored, &node.server));
            }
            None => {}
        }
        views.extend(shared);
    }
    Ok(views)
}

/// The `kind` of `key` on `node`; `None` if there is none.
async fn read_kind(
    nodes: &Nodes,
    node: &Node,
    prefix: &str,
    key: &str,
    kind: Kind,
    with_line: bool,
) -> Result<Option<LockInfo>, StoreError> {
    match kind {
        Kind::Semaphore => {
            let keys = names::semaphore_keys(prefix, key).map_err(config)?;
            read_semaphore(nodes, node, key, &keys).await
        }
        Kind::ReadWrite => {
            let keys = names::read_write_keys(prefix, key).map_err(config)?;
            read_read_write(nodes, node, key, &keys).await
        }
        _ => {
            let stored = names::lock_key(prefix, key).map_err(config)?;
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

fn now_of((secs, micros): ServerTime) -> i64 {
    (secs * 1000 + micros / 1000) as i64
}

/// The live holders among `members` (a holder whose lease has ended but which no one has
/// cleared yet is not counted), each read by `holder`.
fn live_holders<'a>(
    members: &'a Members,
    now_ms: i64,
    holder: impl Fn(&'a str) -> Option<(Holds, &'a str)>,
) -> Vec<HolderInfo> {
    members
        .iter()
        .filter(|(_, ends)| (*ends as i64) > now_ms)
        .filter_map(|(member, ends)| {
            let (holds, token) = holder(member)?;
            Some(HolderInfo {
                holder_id: names::token_id(token),
                holds,
                lease_ms: *ends as i64 - now_ms,
            })
        })
        .collect()
}

/// A semaphore or read-write lock `info` with `holders`, or with only the fencing token
/// version 0.2 kept (`fence`, for `fence_pttl` more); `None` if neither is left.
fn shared(
    info: LockInfo,
    holders: Vec<HolderInfo>,
    fence: Option<String>,
    fence_pttl: i64,
) -> Option<LockInfo> {
    if holders.is_empty() && fence.is_none() {
        return None;
    }
    let mut info = LockInfo {
        fence: info
            .fence
            .or_else(|| fence.and_then(|fence| fence.parse().ok())),
        ..info
    }
    .with_holders(holders);
    if info.state == LockState::Free {
        info.lease_ms = (fence_pttl >= 0).then_some(fence_pttl);
    }
    Some(info)
}

/// The semaphore stored at `keys` on `node`: its live holders, the permits they declared, the
/// last fencing token version 0.2 kept for it if that key is still there; `None` if nothing of
/// it is left.
async fn read_semaphore(
    nodes: &Nodes,
    node: &Node,
    key: &str,
    keys: &names::SemaphoreKeys,
) -> Result<Option<LockInfo>, StoreError> {
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
    let Some((members, fence, fence_pttl, time, (_, subscribed))): Option<(
        Members,
        Option<String>,
        i64,
        ServerTime,
        NumSub,
    )> = read_pipe(nodes, node, &keys.holders, pipe).await?
    else {
        return Ok(None);
    };
    let now_ms = now_of(time);
    let declared = names::permit_holder;
    let permits = members
        .iter()
        .filter(|(_, ends)| (*ends as i64) > now_ms)
        .filter_map(|(member, _)| declared(member).map(|(permits, _)| permits))
        .next_back();
    let holders = live_holders(&members, now_ms, |member| {
        declared(member).map(|(_, token)| (Holds::Permit, token))
    });
    let mut info = LockInfo::new(key, Kind::Semaphore, &keys.holders, &node.server);
    info.permits = permits;
    info.waiters = subscribed + cluster_subscribers(nodes, node, &keys.holders).await?;
    Ok(shared(info, holders, fence, fence_pttl))
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
    keys: &names::ReadWriteKeys,
) -> Result<Option<LockInfo>, StoreError> {
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
    let Some((readers, writer, writer_pttl, fence, fence_pttl, waiting, time, (_, subscribed))): Option<ReadWriteReply> =
        read_pipe(nodes, node, &keys.readers, pipe).await?
    else {
        return Ok(None);
    };
    let now_ms = now_of(time);
    let writer = writer.as_deref().and_then(StoredLock::parse);
    let mut holders: Vec<HolderInfo> = writer
        .as_ref()
        .and_then(StoredLock::token_id)
        .map(|token| HolderInfo {
            holder_id: token,
            holds: Holds::Write,
            lease_ms: writer_pttl.max(0),
        })
        .into_iter()
        .collect();
    holders.extend(live_holders(&readers, now_ms, |member| {
        names::reader_token(member).map(|token| (Holds::Read, token))
    }));
    let mut info = LockInfo::new(key, Kind::ReadWrite, &keys.channel, &node.server);
    // The writer's own token; else the one 0.2 kept, while that key is there.
    info.fence = writer
        .map(|writer| writer.fence)
        .filter(|&fence| fence != 0);
    info.writer_waiting = Some(waiting);
    info.waiters = subscribed + cluster_subscribers(nodes, node, &keys.channel).await?;
    Ok(shared(info, holders, fence, fence_pttl))
}

/// Runs `pipe` on `node`; `None` (logged) if a key of `what` holds data of another type.
async fn read_pipe<T: redis::FromRedisValue>(
    nodes: &Nodes,
    node: &Node,
    what: &str,
    pipe: redis::Pipeline,
) -> Result<Option<T>, StoreError> {
    let mut conn = node.conn.clone();
    let doing = format!("reading `{what}`");
    match nodes
        .within_raw(&node.server, &doing, pipe.query_async(&mut conn))
        .await?
    {
        Ok(value) => Ok(Some(value)),
        Err(err) if err.to_string().contains("WRONGTYPE") => {
            tracing::warn!(key = what, server = %node.server, "holds data of another type: skipped");
            Ok(None)
        }
        Err(err) => Err(super::nodes::failed(&doing, &node.server, &err)),
    }
}

/// On Cluster, the processes subscribed to `channel`'s sharded channel; 0 elsewhere.
async fn cluster_subscribers(nodes: &Nodes, node: &Node, channel: &str) -> Result<u64, StoreError> {
    if nodes.kind() == DeploymentKind::Cluster {
        sharded_subscribers(nodes, node, channel).await
    } else {
        Ok(0)
    }
}

/// Every key matching `pattern` on `node`, with SCAN.
async fn scan(nodes: &Nodes, node: &Node, pattern: &str) -> Result<Vec<String>, StoreError> {
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

/// The value of the lock stored at `stored` on `node`; `None` if the key is absent or holds
/// something else (logged).
pub(super) async fn read_value(
    nodes: &Nodes,
    node: &Node,
    stored: &str,
) -> Result<Option<(String, StoredLock)>, StoreError> {
    let mut conn = node.conn.clone();
    let mut get = redis::cmd("GET");
    get.arg(stored);
    let request = get.query_async(&mut conn);
    let value: Option<String> = match nodes.within_raw(&node.server, "GET", request).await? {
        Ok(value) => value,
        Err(err) if err.to_string().contains("WRONGTYPE") => {
            tracing::warn!(key = stored, server = %node.server, "not a lock of this version (not a string): skipped");
            return Ok(None);
        }
        Err(err) => return Err(super::nodes::failed("GET", &node.server, &err)),
    };
    let Some(value) = value else {
        return Ok(None);
    };
    let Some(lock) = StoredLock::parse(&value) else {
        tracing::warn!(key = stored, server = %node.server, "does not hold a lock: skipped");
        return Ok(None);
    };
    Ok(Some((value, lock)))
}

/// The lock stored at `stored` on `node`; `None` if the key is absent or holds something else.
async fn read(
    nodes: &Nodes,
    node: &Node,
    prefix: &str,
    key: &str,
    stored: &str,
    with_line: bool,
) -> Result<Option<LockInfo>, StoreError> {
    let Some((value, lock)) = read_value(nodes, node, stored).await? else {
        return Ok(None);
    };
    let mut pipe = redis::pipe();
    pipe.cmd("PTTL").arg(stored);
    pipe.cmd("TIME");
    pipe.cmd("PUBSUB").arg("NUMSUB").arg(stored);
    pipe.cmd("ZCARD").arg(names::queue_key(stored));
    pipe.cmd("GET")
        .arg(names::fence_counter_key(prefix, stored));
    let mut conn = node.conn.clone();
    let (pttl, time, (_, subscribed), line_length, counter): (
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
    let now_ms = now_of(time) as u64;
    let mut info = described(LockInfo::new(key, Kind::Lock, stored, &node.server), &lock);
    info.waiters = subscribed + cluster_subscribers(nodes, node, stored).await?;
    info.fence_at_most = fence_bound(nodes, &lock, counter.as_deref());
    info.age_ms = info.since_ms.map(|since| now_ms.saturating_sub(since));
    info.lease_ms = (pttl >= 0).then_some(pttl);
    info.line_length = line_length;
    info.reserved_ms = lock
        .holder_field("until")
        .and_then(|until| until.parse::<i64>().ok())
        .map(|until| until - now_ms as i64);
    if with_line && line_length > 0 {
        info.line = Some(read_line(nodes, node, stored, now_ms).await?);
    }
    info.unlock_id = Some(unlock_id(&lock, &value));
    Ok(Some(info))
}

/// `info` with what the stored value `lock` says: its state, fencing token, holder and what
/// the holder recorded.
pub(super) fn described(mut info: LockInfo, lock: &StoredLock) -> LockInfo {
    info.state = if lock.is_reserved() {
        LockState::Reserved
    } else {
        match lock.state.as_str() {
            "held" => LockState::Held,
            "kept" => LockState::Kept,
            _ => LockState::Free,
        }
    };
    // The current format carries no fencing token (0): tokens come from the fence counter.
    info.fence = (lock.fence != 0).then_some(lock.fence);
    info.holder_id = lock.token_id();
    info.host = lock.holder_field("host").map(str::to_owned);
    info.pid = lock.holder_field("pid").and_then(|pid| pid.parse().ok());
    // A manager without `app_name` stores `app=` with nothing after it: no app, not an empty one.
    info.app = lock
        .holder_field("app")
        .filter(|app| !app.is_empty())
        .map(str::to_owned);
    info.since_ms = lock
        .holder_field("since")
        .and_then(|since| since.parse::<u64>().ok());
    info.announced = lock.waiting;
    info.reserved_for = lock.holder_field("next").map(names::token_id);
    info
}

/// The last token the fence counter (`counter`, as read) of a current-format lock's slot handed
/// out, which its holder's token does not exceed; `None` where that bounds nothing (a token in
/// the value, no holder, Redlock whose token is the largest of the masters' answers).
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
pub(super) fn unlock_id(lock: &StoredLock, value: &str) -> String {
    if lock.fence != 0 {
        lock.fence.to_string()
    } else {
        lock.token_id().unwrap_or_else(|| names::token_id(value))
    }
}

/// The processes subscribed to the sharded channel of the lock stored at `stored`. A cluster
/// older than Redis 7 has no sharded pub/sub: waiters there cannot subscribe (they take the lock
/// when its lease expires), so there are none to count.
async fn sharded_subscribers(nodes: &Nodes, node: &Node, stored: &str) -> Result<u64, StoreError> {
    let what = "PUBSUB SHARDNUMSUB";
    let mut conn = node.conn.clone();
    let mut cmd = redis::cmd("PUBSUB");
    cmd.arg("SHARDNUMSUB").arg(stored);
    let request = cmd.query_async::<(String, u64)>(&mut conn);
    match nodes.within_raw(&node.server, what, request).await? {
        Ok((_, count)) => Ok(count),
        Err(err) if is_unknown_command(&err) => Ok(0),
        Err(err) => Err(super::nodes::failed(what, &node.server, &err)),
    }
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
) -> Result<Vec<InLine>, StoreError> {
    let tokens: Vec<String> = nodes
        .query(
            node,
            "ZRANGE",
            redis::cmd("ZRANGE")
                .arg(names::queue_key(stored))
                .arg(0)
                .arg(-1),
        )
        .await?;
    let expiry = names::queue_expiry_key(stored);
    let mut line = Vec::with_capacity(tokens.len());
    for (index, token) in tokens.iter().enumerate() {
        let ends: Option<f64> = nodes
            .query(node, "ZSCORE", redis::cmd("ZSCORE").arg(&expiry).arg(token))
            .await?;
        line.push(InLine {
            position: index + 1,
            waiter_id: names::token_id(token),
            expires_in_ms: ends.map(|ends| ends as i64 - now_ms as i64),
        });
    }
    Ok(line)
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
            names::token_id(kept),
            "the id of the value"
        );
    }
}
