//! Reading locks through the store's inspection side, and how they are shown: each lock,
//! semaphore and read-write lock with its lease, holders, waiters and fair line.

use lock_runtime::store::{HolderInfo, InLine, Kind, LockInfo, LockState};
use serde::Serialize;

use crate::deployment::Deployment;
use crate::failure::Failure;
use crate::waits::{self, WaiterView};

/// One lock on one server, as `list`, `show` and `--json` present it. The field names are
/// stable: scripts read them.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct LockView {
    /// The lock's name (`order:42`).
    pub(crate) key: String,
    /// `lock`, `semaphore` or `rwlock`.
    pub(crate) kind: &'static str,
    /// What the store keeps it under (on Redis its key, `lock:{order:42}`; a semaphore's set
    /// of holders, a read-write lock's channel).
    pub(crate) stored_key: String,
    /// The place it was read in (a server's `host:port`).
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
    /// The lock as the store answered it: what a force-release names the holder by.
    #[serde(skip)]
    pub(crate) info: LockInfo,
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

/// The locks, semaphores and read-write locks whose names match `pattern` in every place; free
/// ones (only a last fencing token version 0.2 left: a lock's marker, a semaphore's or
/// read-write lock's `:fence` key) only with `all`.
pub(crate) async fn list(
    deployment: &Deployment,
    prefix: &str,
    pattern: &str,
    all: bool,
) -> Result<Vec<LockView>, Failure> {
    let listed = deployment.inspect()?.list(prefix, pattern).await;
    Ok(listed
        .map_err(Failure::store)?
        .into_iter()
        .filter(|info| all || info.state != LockState::Free)
        .map(LockView::from)
        .collect())
}

/// The lock `key` in every place that may hold it, with its fair line, and the semaphore and
/// the read-write lock of that name where they exist; `absent` where none of them is.
pub(crate) async fn show(
    deployment: &Deployment,
    prefix: &str,
    key: &str,
) -> Result<Vec<LockView>, Failure> {
    let shown = deployment.inspect()?.show(prefix, key).await;
    Ok(shown
        .map_err(Failure::store)?
        .into_iter()
        .map(LockView::from)
        .collect())
}

/// The calls that wait for the lock `key`, as they publish their waits (a call that holds no
/// other lock only once it has waited about a quarter of a second); `None` (said on stderr) if
/// the published waits cannot be read, which leaves the rest of `show` as it is.
pub(crate) async fn waiters(
    deployment: &Deployment,
    prefix: &str,
    key: &str,
) -> Result<Option<Vec<WaiterView>>, Failure> {
    let stored = lock_runtime::inspect::lock_key(prefix, key)
        .map_err(|err| Failure::usage(err.to_string()))?;
    match waits::standing(deployment, prefix).await {
        Ok(records) => Ok(Some(waits::waiting_for(prefix, &records, &stored))),
        Err(err) => {
            eprintln!("lockctl: {err}: who waits is not shown");
            Ok(None)
        }
    }
}

impl From<&HolderInfo> for HolderEntry {
    fn from(holder: &HolderInfo) -> HolderEntry {
        HolderEntry {
            holder_id: holder.holder_id.clone(),
            holds: holder.holds.as_str(),
            lease_ms: holder.lease_ms,
        }
    }
}

impl From<&InLine> for LineEntry {
    fn from(entry: &InLine) -> LineEntry {
        LineEntry {
            position: entry.position,
            waiter_id: entry.waiter_id.clone(),
            expires_in_ms: entry.expires_in_ms,
        }
    }
}

impl From<LockInfo> for LockView {
    fn from(info: LockInfo) -> LockView {
        // A read-write lock's mode: what its first holder holds, `none` when nobody does.
        let mode = (info.kind == Kind::ReadWrite)
            .then(|| info.mode().map_or("none", |holds| holds.as_str()));
        LockView {
            key: info.key.clone(),
            kind: info.kind.as_str(),
            stored_key: info.stored_as.clone(),
            server: info.place.clone(),
            state: info.state.as_str().to_owned(),
            fence: info.fence,
            fence_at_most: info.fence_at_most,
            holder_id: info.holder_id.clone(),
            host: info.host.clone(),
            pid: info.pid,
            app: info.app.clone(),
            since_ms: info.since_ms,
            age_ms: info.age_ms,
            lease_ms: info.lease_ms,
            waiters: info.waiters,
            line_length: info.line_length,
            announced: info.announced,
            reserved_for: info.reserved_for.clone(),
            reserved_ms: info.reserved_ms,
            line: (info.line.as_deref()).map(|line| line.iter().map(LineEntry::from).collect()),
            permits: info.permits,
            mode,
            holders: (info.holders.as_deref())
                .map(|holders| holders.iter().map(HolderEntry::from).collect()),
            writer_waiting: info.writer_waiting,
            info,
        }
    }
}
