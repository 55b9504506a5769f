//! The inspection side of a store: what an operator's tool (`lockctl`) asks of it to list, show
//! and force-release locks, and to read the published waits, without learning how the store
//! keeps them.
//!
//! A store offers it through [`Store::inspect`](super::Store::inspect); a manager hands on its
//! store's with [`LockManager::inspect`](crate::LockManager::inspect). A store without it
//! answers `None`, and a tool says that this store cannot be inspected.
//!
//! Everything is said in the lock's own words: a lock, semaphore or read-write lock by the name
//! the application gave it ([`LockInfo::key`]), its state, its holders (by an id of their owner
//! token, never the token: whoever knows a token can release the lock), what each holder
//! recorded about itself, its lease, its fencing token, and who waits.

use std::future::Future;
use std::pin::Pin;

use super::error::StoreError;
pub use crate::protocol::waits::WaitRecord;

/// A boxed future, as [`Inspect`]'s methods return them.
type Answer<'a, T> = Pin<Box<dyn Future<Output = Result<T, StoreError>> + Send + 'a>>;

/// What a key a store keeps is: a lock, a semaphore or a read-write lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Kind {
    /// The exclusive lock.
    Lock,
    /// The semaphore.
    Semaphore,
    /// The read-write lock.
    ReadWrite,
}

impl Kind {
    /// `lock`, `semaphore` or `rwlock`: how tools name it.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Lock => "lock",
            Kind::Semaphore => "semaphore",
            Kind::ReadWrite => "rwlock",
        }
    }
}

/// The state of a key as read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LockState {
    /// Held by one holder (a lock) or by at least one (a semaphore, a read-write lock).
    Held,
    /// Released, but busy until it expires (`hold_at_least`).
    Kept,
    /// Free for the first fair waiter in line alone.
    Reserved,
    /// Nothing holds it; only a last fencing token is kept (stores written by version 0.2 of
    /// this crate left such markers). Listed only when asked for.
    Free,
    /// Nothing of that name is stored here.
    Absent,
}

impl LockState {
    /// `held`, `kept`, `reserved`, `free` or `absent`.
    pub fn as_str(self) -> &'static str {
        match self {
            LockState::Held => "held",
            LockState::Kept => "kept",
            LockState::Reserved => "reserved",
            LockState::Free => "free",
            LockState::Absent => "absent",
        }
    }

    /// Whether a force-release has a holder to remove: held or kept.
    pub fn is_busy(self) -> bool {
        matches!(self, LockState::Held | LockState::Kept)
    }
}

/// What one holder of a semaphore's permit or a read-write lock's share holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Holds {
    /// A semaphore's permit.
    Permit,
    /// A read share.
    Read,
    /// The write hold.
    Write,
}

impl Holds {
    /// `permit`, `read` or `write`.
    pub fn as_str(self) -> &'static str {
        match self {
            Holds::Permit => "permit",
            Holds::Read => "read",
            Holds::Write => "write",
        }
    }
}

/// One holder of a semaphore or of a read-write lock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HolderInfo {
    /// An id of its owner token (12 hex digits of its SHA-1 for this crate's stores): tells
    /// holders apart, cannot release.
    pub holder_id: String,
    /// What it holds.
    pub holds: Holds,
    /// Its lease left, in milliseconds.
    pub lease_ms: i64,
}

/// One fair waiter in line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InLine {
    /// 1 is next.
    pub position: usize,
    /// An id of its owner token, as [`HolderInfo::holder_id`].
    pub waiter_id: String,
    /// When its place ends unless it asks again, in milliseconds from now.
    pub expires_in_ms: Option<i64>,
}

/// One lock, semaphore or read-write lock as read in one place of a store. Build one with
/// [`LockInfo::new`] and set what the store knows; the rest stays unknown (`None`, 0).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockInfo {
    /// The name the application gave it (`order:42`).
    pub key: String,
    /// What it is.
    pub kind: Kind,
    /// What the store keeps it under (for Redis the key, `lock:{order:42}`; a semaphore's set
    /// of holders, a read-write lock's channel).
    pub stored_as: String,
    /// Where it was read ([`Inspect::places`]): a server's `host:port`, never credentials.
    pub place: String,
    /// Its state.
    pub state: LockState,
    /// A fencing token the stored data carries (the holder's, where the store knows it).
    pub fence: Option<u64>,
    /// Where the holder's fencing token is not stored: the last token handed out for its key,
    /// which the holder's does not exceed.
    pub fence_at_most: Option<u64>,
    /// An id of the holder's owner token, as [`HolderInfo::holder_id`] (one holder only).
    pub holder_id: Option<String>,
    /// The host the holder recorded.
    pub host: Option<String>,
    /// The process id the holder recorded.
    pub pid: Option<u64>,
    /// The application name the holder recorded (`None` where it set none).
    pub app: Option<String>,
    /// When it was taken, ms since the Unix epoch (the store's clock where it has one).
    pub since_ms: Option<u64>,
    /// How long it has been held, in milliseconds.
    pub age_ms: Option<u64>,
    /// The remaining lease, in milliseconds (the longest of several holders').
    pub lease_ms: Option<i64>,
    /// Processes with a waiter told of its releases.
    pub waiters: u64,
    /// Fair waiters in line.
    pub line_length: u64,
    /// Someone was told it is busy, so its release announces itself.
    pub announced: bool,
    /// The waiter a reserved lock is freed for (its id, as `holder_id`).
    pub reserved_for: Option<String>,
    /// How long a reserved lock waits for that waiter, in milliseconds.
    pub reserved_ms: Option<i64>,
    /// The fair line in order, where it was asked for ([`Inspect::show`]).
    pub line: Option<Vec<InLine>>,
    /// A semaphore's permits, as its holders declared them.
    pub permits: Option<u32>,
    /// A semaphore's or a read-write lock's holders (`None` for a lock).
    pub holders: Option<Vec<HolderInfo>>,
    /// A read-write lock's: a writer waits, so new readers wait behind it.
    pub writer_waiting: Option<bool>,
    /// What names this holder to [`Inspect::unlock`], so that it removes this holder only and
    /// never one that took the lock meanwhile. An id, never an owner token.
    pub unlock_id: Option<String>,
}

impl LockInfo {
    /// `key` of `kind`, kept as `stored_as` and read at `place`, with nothing else known yet:
    /// [`LockState::Absent`], no holder.
    pub fn new(
        key: impl Into<String>,
        kind: Kind,
        stored_as: impl Into<String>,
        place: impl Into<String>,
    ) -> LockInfo {
        LockInfo {
            key: key.into(),
            kind,
            stored_as: stored_as.into(),
            place: place.into(),
            state: LockState::Absent,
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
            holders: None,
            writer_waiting: None,
            unlock_id: None,
        }
    }

    /// A semaphore or read-write lock: [`LockState::Held`] by `holders` (its lease the longest
    /// of theirs, its `holder_id` the only holder's), or [`LockState::Free`] with none.
    pub fn with_holders(mut self, holders: Vec<HolderInfo>) -> LockInfo {
        if holders.is_empty() {
            self.state = LockState::Free;
        } else {
            self.state = LockState::Held;
            self.lease_ms = holders.iter().map(|holder| holder.lease_ms).max();
            if let [only] = holders.as_slice() {
                self.holder_id = Some(only.holder_id.clone());
            }
        }
        self.holders = Some(holders);
        self
    }

    /// A read-write lock's mode: what its first holder holds (`write` for a writer), or `None`
    /// when nobody holds it; `None` for the other kinds too.
    pub fn mode(&self) -> Option<Holds> {
        self.holders.as_ref()?.first().map(|holder| holder.holds)
    }
}

/// A holder as it recorded itself, as a force-release found it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Recorded {
    /// `held`, `kept`, ... (see [`LockState::as_str`]).
    pub state: String,
    /// The host it recorded.
    pub host: Option<String>,
    /// The process id it recorded.
    pub pid: Option<u64>,
    /// The application name it recorded.
    pub app: Option<String>,
    /// Its fencing token, where stored.
    pub fence: Option<u64>,
    /// An id of its owner token.
    pub holder_id: Option<String>,
}

impl Recorded {
    /// The holder recorded in `info`.
    pub fn of(info: &LockInfo) -> Recorded {
        Recorded {
            state: info.state.as_str().to_owned(),
            host: info.host.clone(),
            pid: info.pid,
            app: info.app.clone(),
            fence: info.fence,
            holder_id: info.holder_id.clone(),
        }
    }
}

/// What a force-release did.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Unlocked {
    /// The holder was removed and the waiters told.
    Released {
        /// The holder removed, where the store read it.
        removed: Option<Recorded>,
    },
    /// The holder was removed and the lock freed for the first fair waiter in line, who was
    /// told.
    ServedNext {
        /// The holder removed, where the store read it.
        removed: Option<Recorded>,
    },
    /// Nothing held it any more: released meanwhile.
    AlreadyFree,
    /// Another holder took it meanwhile: left as it is.
    Changed {
        /// The holder found instead, where the store read it.
        now: Option<Recorded>,
    },
    /// What is stored there is not a lock: left untouched.
    NotALock,
}

/// The inspection side of a [`Store`](super::Store): lists, shows and force-releases its locks
/// and reads the published waits, each answer in the lock's own words.
///
/// A store whose locks live in several places (a Redis Cluster's masters, Redlock's
/// independent masters) answers one [`LockInfo`] per place that holds them; the others answer
/// one place.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use lock_runtime::store::LockState;
/// use lock_runtime::{LockManager, LockOptions};
///
/// let locks = LockManager::memory();
/// let _guard = locks.lock("order:42", LockOptions::new()).await?;
/// let inspect = locks.inspect().expect("memory can be inspected");
/// let listed = inspect.list("lock:", "order:*").await?;
/// assert_eq!(listed[0].key, "order:42");
/// assert_eq!(listed[0].state, LockState::Held);
/// # Ok(())
/// # }
/// ```
pub trait Inspect: Send + Sync {
    /// The places locks are read in, as [`LockInfo::place`] names them (`host:port`, never
    /// credentials): one for a store that keeps every lock in one place.
    fn places(&self) -> Answer<'_, Vec<String>>;

    /// Every lock, semaphore and read-write lock under `prefix` whose name matches the glob
    /// `pattern` (`*`, `order:*`, `job-?`), in every place, free ones too, sorted by name, kind
    /// and place. Without their fair lines.
    fn list<'a>(&'a self, prefix: &'a str, pattern: &'a str) -> Answer<'a, Vec<LockInfo>>;

    /// The lock `key` under `prefix` in every place that may hold it, with its fair line, and
    /// the semaphore and read-write lock of that name where they exist; one
    /// [`LockState::Absent`] lock per place where none of them is.
    ///
    /// # Errors
    ///
    /// [`StoreError::config`] for a key the store cannot name (an empty one).
    fn show<'a>(&'a self, prefix: &'a str, key: &'a str) -> Answer<'a, Vec<LockInfo>>;

    /// Force-releases the lock `seen` names (a lock [`show`](Inspect::show) answered, held or
    /// kept) in its place whatever its owner token, if the holder [`LockInfo::unlock_id`]
    /// names still holds it, and wakes its waiters; a holder that took it meanwhile is left
    /// alone ([`Unlocked::Changed`]). Semaphores and read-write locks are not force-released.
    fn unlock<'a>(&'a self, prefix: &'a str, seen: &'a LockInfo) -> Answer<'a, Unlocked>;

    /// The waits published under `prefix` that stand now (see
    /// [`Store::waits`](super::Store::waits)), each waiter once, in waiter id order; an error
    /// where the store keeps none or they cannot be read.
    fn waits<'a>(&'a self, prefix: &'a str) -> Answer<'a, Vec<WaitRecord>>;
}
