//! Force-releasing a lock on Redis, and reading the published waits.

use super::nodes::Nodes;
use super::read::described;
use crate::deployment::DeploymentKind;
use crate::inspect::{self as names, StoredLock};
use crate::protocol;
use crate::store::{Kind, LockInfo, Recorded, StoreError, Unlocked, WaitRecord};

/// The holder recorded in the value a force-release removed (or found instead).
fn recorded(seen: &LockInfo, value: &str) -> Option<Recorded> {
    let lock = StoredLock::parse(value)?;
    let info = described(LockInfo::new(&seen.key, Kind::Lock, "", ""), &lock);
    let mut recorded = Recorded::of(&info);
    // The value's own word: a lock freed for a fair waiter says `free`.
    recorded.state = lock.state;
    Some(recorded)
}

/// Force-releases the lock `seen` names on its server, if its holder is still the one it
/// names (see [`names::UNLOCK_SCRIPT`]).
pub(super) async fn unlock(nodes: &Nodes, seen: &LockInfo) -> Result<Unlocked, StoreError> {
    if seen.kind != Kind::Lock {
        return Ok(Unlocked::NotALock);
    }
    let Some(node) = nodes.nodes.iter().find(|node| node.server == seen.place) else {
        return Err(StoreError::permanent(format!(
            "`{}` was read on {}, which is not a server of this deployment now",
            seen.key, seen.place
        )));
    };
    let stored = seen.stored_as.as_str();
    // EVAL, not EVALSHA: a force-release is rare, and needs no right to load scripts.
    let mut eval = redis::cmd("EVAL");
    eval.arg(names::UNLOCK_SCRIPT)
        .arg(3)
        .arg(stored)
        .arg(names::queue_key(stored))
        .arg(names::queue_expiry_key(stored))
        // Unused since 0.3 (it kept the last fencing token this long): a released lock
        // leaves no key, its tokens come from the fence counter of its slot.
        .arg("0")
        .arg(nodes.announce())
        .arg(names::FAIR_TURN_MS)
        // The holder confirmed: one that took the lock meanwhile is left alone.
        .arg(seen.unlock_id.as_deref().unwrap_or_default());
    let (status, before): (i64, String) = nodes
        .query(node, &format!("force-releasing `{stored}`"), &eval)
        .await?;
    let removed = recorded(seen, &before);
    Ok(match status {
        1 => Unlocked::Released { removed },
        2 => Unlocked::ServedNext { removed },
        -1 => Unlocked::AlreadyFree,
        -2 => Unlocked::Changed { now: removed },
        _ => Unlocked::NotALock,
    })
}

/// The standing records of the waits published under `prefix`: on a cluster read on the
/// master of its slot, on every Redlock master a copy of its own (of two copies of one record
/// the one written last counts; one master that answers is enough), elsewhere on the one
/// server.
pub(super) async fn waits(nodes: &Nodes, prefix: &str) -> Result<Vec<WaitRecord>, StoreError> {
    let key = names::waits_key(prefix);
    let mut copies = Vec::new();
    let mut why = Vec::new();
    for node in nodes.for_key(&key).await? {
        let read: Result<Vec<(String, String)>, StoreError> = nodes
            .query(
                node,
                &format!("reading the published waits `{key}`"),
                redis::cmd("HGETALL").arg(&key),
            )
            .await;
        match read {
            Ok(fields) => copies.push(fields),
            Err(err) => why.push(err),
        }
    }
    if copies.is_empty() || (nodes.kind() != DeploymentKind::Redlock && !why.is_empty()) {
        let mut why = why.into_iter();
        return Err(why
            .next()
            .unwrap_or_else(|| StoreError::permanent(format!("no server holds `{key}`"))));
    }
    for err in why {
        tracing::warn!(error = %err, "published waits read from the other masters' copies");
    }
    Ok(protocol::waits::standing(
        copies.into_iter().flatten(),
        protocol::now_ms(),
    ))
}
