//! The Redis layout of the locks this crate stores, for tools and tests that read the keys
//! themselves, without repeating how they are stored. To list, show and force-release locks
//! whatever the store, as `lockctl` does, use a manager's inspection side instead
//! ([`LockManager::inspect`](crate::LockManager::inspect), [`Inspect`](crate::store::Inspect)),
//! which reads this layout on Redis.
//!
//! - [`lock_key`], [`queue_key`], [`queue_expiry_key`], [`lock_name`] and [`scan_pattern`]: the
//!   Redis names of a lock; [`semaphore_keys`], [`read_write_keys`], [`stored_name`] and
//!   [`scan_patterns`] those of semaphores and read-write locks too, with [`permit_holder`] and
//!   [`reader_token`] to read their holders.
//! - [`StoredLock::parse`]: the stored value, read with one `GET`.
//! - [`UNLOCK_SCRIPT`]: the force-release script.
//! - [`waits_key`], [`WaitRecord::parse`], [`find_cycles`] and [`victim`]: who waits for which
//!   lock while holding which others, as waiting processes publish it, and the deadlocks in it.
//! - [`notices_channel`]: where managers tell each other requests to let go and steals.
//! - [`Deployment::parse`] and [`redact_url`]: the lock URLs the manager takes, and how to show
//!   them without their passwords.
//!
//! A lock `order:42` is the string key `lock:{order:42}` (the prefix is the manager's
//! [`key_prefix`](crate::LockManagerBuilder::key_prefix)), whose value is one of
//!
//! ```text
//! held token=<T> waiting=<0|1|2>[ since=<ms> host=<h> pid=<p> app=<a...to end>]
//! kept waiting=<0|1|2>              released, busy until it expires (hold_at_least)
//! free next=<T> until=<ms>          released for the first fair waiter in line alone
//! ```
//!
//! A released lock, semaphore or read-write lock leaves no key. Fencing tokens come from a
//! counter per Redis Cluster slot and prefix ([`fence_counter_key`]), which never expires.
//! Values written by 0.2 carry ` fence=<F>` after the state (`held fence=<F> token=...`,
//! `free fence=<F>`) and are read too, as are the `:sem:fence` and `:rw:fence` keys where 0.2
//! kept a semaphore's and a read-write lock's last token (the next grant takes them over).
//!
//! The owner token `<T>` lets whoever knows it release the lock: show [`StoredLock::token_id`]
//! instead.

pub use crate::deployment::{Deployment, DeploymentKind};
pub use crate::protocol::StoredLock;
pub use crate::protocol::waits::{CLOCK_SKEW_MS, WaitRecord, find_cycles, newest_copies, victim};

use crate::error::LockError;
use crate::key::Key;
use crate::shape::Shape;
use crate::url;

/// The force-release script (`scripts/unlock.lua`, after the preludes the library's scripts
/// share): removes the holder whatever its owner token, frees the lock for the
/// first fair waiter in line if there is one and otherwise deletes it and announces the release
/// on the lock's channel, so that waiters wake. Fencing tokens live on in the slot's counter
/// ([`fence_counter_key`]), which it does not touch.
///
/// KEYS: the lock, [`queue_key`], [`queue_expiry_key`]. ARGV: unused (0.2 took how long to keep
/// the last fencing token; pass `0`), `"sharded"` on Redis Cluster (SPUBLISH) or `""`
/// (PUBLISH), milliseconds a lock freed for the first in line waits for it, and the holder to
/// remove: the [`StoredLock::token_id`] of its owner token (of the whole value for a kept lock,
/// which has no token), or the fencing token of a lock 0.2 wrote (`""`: whoever holds it). The
/// answer is `{status, value}`: 1 released, 2 freed for the first in line, -1 not held, -2 held
/// by another holder than the one named, 0 not a lock; `value` is what the key held before (it
/// contains the owner token: never show it).
pub const UNLOCK_SCRIPT: &str = crate::protocol::scripts::script_text!("unlock.lua");

/// How long a lock freed for the first fair waiter in line waits for it, in milliseconds: the
/// third argument of [`UNLOCK_SCRIPT`], as the manager's own releases use it.
pub const FAIR_TURN_MS: u64 = crate::protocol::FAIR_TURN_MS;

/// The hash where the waiters of managers under `prefix` publish their waits:
/// `<prefix>waits:{waits}`, in one Redis Cluster slot per prefix. `HGETALL` reads it: field
/// the waiter id, value a record [`WaitRecord::parse`] reads. A waiter is published while its
/// task holds another lock of this prefix, or once it has waited about a quarter of a second;
/// each record stands until its `until_ms` unless its process writes it again, which a live
/// waiter does about every 200 ms while its task holds another lock, else every 2 s.
pub fn waits_key(prefix: &str) -> String {
    crate::protocol::waits::waits_key(prefix)
}

/// The Redis pub/sub channel where managers under `prefix` tell each other
/// [`Notice`](crate::store::Notice)s (a request that a holder let go, a steal, an election's
/// leader), for the managers of database `db`: `<prefix>notices` for database 0 (and Cluster),
/// `<prefix>notices:<db>` for another, carrying one
/// [`Notice::encode`](crate::store::Notice::encode) line per message. Every manager subscribes
/// to it (`SUBSCRIBE`, on Cluster too: `PUBLISH` reaches every node), so `SUBSCRIBE` shows what
/// they tell each other.
///
/// ```
/// use lock_runtime::inspect::notices_channel;
///
/// assert_eq!(notices_channel("lock:", 0), "lock:notices");
/// assert_eq!(notices_channel("lock:", 2), "lock:notices:2");
/// ```
pub fn notices_channel(prefix: &str, db: i64) -> String {
    crate::protocol::notices_channel(prefix, db)
}

/// The stored name of the lock `key` under `prefix`: `<prefix>{<key>}`. It is also the channel
/// its releases are announced on.
///
/// # Errors
///
/// [`LockError::Config`] for an empty key.
pub fn lock_key(prefix: &str, key: &str) -> Result<String, LockError> {
    Ok(Key::lock(prefix, key)?.lock)
}

/// The fence counter that hands out the fencing tokens of the lock stored at `lock` under
/// `prefix`: `<prefix>fence:{<tag>}`, one per Redis Cluster slot (the tag puts it in the
/// lock's slot).
pub fn fence_counter_key(prefix: &str, lock: &str) -> String {
    crate::protocol::slots::counter(prefix, lock)
}

/// The line of fair waiters of the lock stored at `lock`: a sorted set of owner tokens by
/// arrival.
pub fn queue_key(lock: &str) -> String {
    format!("{lock}:queue")
}

/// When the entries of the line of `lock` end: a sorted set of owner tokens by server time in
/// milliseconds.
pub fn queue_expiry_key(lock: &str) -> String {
    format!("{lock}:queue:expiry")
}

/// The lock name a stored key stands for (`lock:{order:42}` gives `order:42`), or `None` if
/// `stored` is not a lock stored under `prefix` (a line of fair waiters, another prefix).
pub fn lock_name(prefix: &str, stored: &str) -> Option<String> {
    let inner = stored
        .strip_prefix(prefix)?
        .strip_prefix('{')?
        .strip_suffix('}')?;
    // See Key::new: a leading `}` or `\` is stored behind a `\`.
    let name = match inner.strip_prefix('\\') {
        Some(rest) if rest.starts_with(['}', '\\']) => rest,
        _ => inner,
    };
    (!name.is_empty()).then(|| name.to_owned())
}

/// The `SCAN ... MATCH` pattern for the locks under `prefix` whose names match the glob
/// `pattern` (`*`, `order:*`, `job-?`): the prefix is matched literally, the glob inside the
/// hash tag's braces.
pub fn scan_pattern(prefix: &str, pattern: &str) -> String {
    let mut escaped = String::with_capacity(prefix.len() + pattern.len() + 2);
    for c in prefix.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            escaped.push('\\');
        }
        escaped.push(c);
    }
    format!("{escaped}{{{pattern}}}")
}

/// What a key this crate stores belongs to (see [`stored_name`]).
pub use crate::store::Kind;

/// The Redis names of the semaphore `key` under `prefix` (see docs/STORED_LAYOUT.md).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SemaphoreKeys {
    /// `<prefix>{<key>}:sem`: a sorted set of `<permits>:<owner token>` by lease end (server
    /// ms), and the channel its releases are announced on.
    pub holders: String,
    /// Where 0.2 kept the semaphore's last fencing token (`<prefix>{<key>}:sem:fence`, expiring
    /// its `fence_retention` after each grant). No longer written: the next grant raises
    /// [`counter`](Self::counter) above it and deletes it, so it is seen only during an
    /// upgrade, or where no grant came since.
    pub fence: String,
    /// The fence counter of the semaphore's slot, which hands out its fencing tokens (shared
    /// with the locks of that slot; see [`fence_counter_key`]).
    pub counter: String,
}

/// The Redis names of the read-write lock `key` under `prefix` (see docs/STORED_LAYOUT.md).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReadWriteKeys {
    /// `<prefix>{<key>}:rw`: the channel its releases are announced on (no data).
    pub channel: String,
    /// A sorted set of `r:<owner token>` by lease end (server ms).
    pub readers: String,
    /// `held fence=<F> token=<T> waiting=0`, a held lock's value with the writer's fencing token
    /// `F` ([`StoredLock::parse`]; 0.2 and 0.3 wrote it without ` waiting=0`), expiring with the
    /// writer's lease.
    pub writer: String,
    /// A waiting writer's owner token: while present, new readers wait.
    pub writer_waiting: String,
    /// Where 0.2 kept the last fencing token granted to either mode
    /// (`<prefix>{<key>}:rw:fence`): taken over by the next grant, as
    /// [`SemaphoreKeys::fence`] is.
    pub fence: String,
    /// The fence counter of the keys' slot, which hands out both modes' fencing tokens.
    pub counter: String,
}

/// The names of the semaphore `key` under `prefix`.
///
/// # Errors
///
/// [`LockError::Config`] for an empty key.
pub fn semaphore_keys(prefix: &str, key: &str) -> Result<SemaphoreKeys, LockError> {
    let stored = Key::new(prefix, key, Shape::Semaphore { permits: 1 })?;
    Ok(SemaphoreKeys {
        fence: stored.fence_of_0_2(),
        counter: stored.counter(),
        holders: stored.lock,
    })
}

/// The names of the read-write lock `key` under `prefix`.
///
/// # Errors
///
/// [`LockError::Config`] for an empty key.
pub fn read_write_keys(prefix: &str, key: &str) -> Result<ReadWriteKeys, LockError> {
    let stored = Key::new(prefix, key, Shape::Read)?;
    Ok(ReadWriteKeys {
        readers: stored.rw_readers(),
        writer: stored.rw_writer(),
        writer_waiting: stored.rw_writer_waiting(),
        fence: stored.fence_of_0_2(),
        counter: stored.counter(),
        channel: stored.lock,
    })
}

/// The name and kind a stored key stands for: `lock:{a}` is the lock `a`; `lock:{a}:sem` the
/// semaphore `a`; `lock:{a}:rw:readers` and `lock:{a}:rw:writer` the read-write lock `a`; and
/// so are `lock:{a}:sem:fence` and `lock:{a}:rw:fence`, the last tokens 0.2 kept, which a
/// deployment being upgraded may still hold. `None` for the other keys (lines of fair waiters,
/// markers, fence counters) and for keys not under `prefix`.
pub fn stored_name(prefix: &str, stored: &str) -> Option<(String, Kind)> {
    if let Some(name) = lock_name(prefix, stored) {
        return Some((name, Kind::Lock));
    }
    const SUFFIXES: [(&str, Kind); 5] = [
        ("}:sem", Kind::Semaphore),
        ("}:sem:fence", Kind::Semaphore),
        ("}:rw:readers", Kind::ReadWrite),
        ("}:rw:writer", Kind::ReadWrite),
        ("}:rw:fence", Kind::ReadWrite),
    ];
    SUFFIXES.iter().find_map(|&(suffix, kind)| {
        let base = stored.strip_suffix(suffix)?;
        Some((lock_name(prefix, &format!("{base}}}"))?, kind))
    })
}

/// The `SCAN ... MATCH` patterns for everything [`stored_name`] recognizes under `prefix` whose
/// names match the glob `pattern`: locks, semaphores and read-write locks.
pub fn scan_patterns(prefix: &str, pattern: &str) -> [String; 3] {
    let lock = scan_pattern(prefix, pattern);
    [lock.clone(), format!("{lock}:sem*"), format!("{lock}:rw:*")]
}

/// The permits declared and the owner token of a semaphore holder's member (`<permits>:<T>`).
/// The token lets whoever knows it release the permit: never show it (see [`token_id`]).
pub fn permit_holder(member: &str) -> Option<(u32, &str)> {
    let (permits, token) = member.split_once(':')?;
    Some((permits.parse().ok()?, token))
}

/// The owner token of a read-write lock reader's member (`r:<T>`); never show it.
pub fn reader_token(member: &str) -> Option<&str> {
    member.strip_prefix("r:")
}

/// 12 hex digits of the SHA-1 of an owner token (see [`StoredLock::token_id`]); a fair waiter's
/// turn is announced as `q:` followed by this id of its token.
pub fn token_id(token: &str) -> String {
    crate::protocol::token_id(token)
}

/// `url` with any password replaced by `***`, and shortened if huge: safe for messages and logs.
pub fn redact_url(url: &str) -> String {
    url::redact(url)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lock_names_round_trip_through_their_stored_keys() {
        for key in ["order:42", "}a", "\\}a", "\\x", "a}b"] {
            let stored = lock_key("lock:", key).expect("valid");
            assert_eq!(
                lock_name("lock:", &stored).as_deref(),
                Some(key),
                "{stored}"
            );
        }
        assert_eq!(lock_name("lock:", "lock:{a}:queue"), None);
        assert_eq!(lock_name("other:", "lock:{a}"), None);
        assert_eq!(queue_key("lock:{a}"), "lock:{a}:queue");
        assert_eq!(queue_expiry_key("lock:{a}"), "lock:{a}:queue:expiry");
    }

    #[test]
    fn semaphores_and_read_write_locks_are_named_from_their_keys() {
        for key in ["exports", "}a", "a}b"] {
            let sem = semaphore_keys("lock:", key).expect("valid");
            let rw = read_write_keys("lock:", key).expect("valid");
            for (stored, kind) in [
                (&sem.holders, Kind::Semaphore),
                (&sem.fence, Kind::Semaphore),
                (&rw.readers, Kind::ReadWrite),
                (&rw.writer, Kind::ReadWrite),
                (&rw.fence, Kind::ReadWrite),
            ] {
                assert_eq!(
                    stored_name("lock:", stored),
                    Some((key.to_owned(), kind)),
                    "{stored}"
                );
            }
            assert_eq!(stored_name("lock:", &rw.channel), None);
            assert_eq!(stored_name("lock:", &rw.writer_waiting), None);
        }
        let sem = semaphore_keys("lock:", "exports").expect("valid");
        assert_eq!(sem.holders, "lock:{exports}:sem");
        assert_eq!(sem.fence, "lock:{exports}:sem:fence");
        assert_eq!(sem.counter, fence_counter_key("lock:", "lock:{exports}"));
        let rw = read_write_keys("lock:", "doc:7").expect("valid");
        assert_eq!(rw.readers, "lock:{doc:7}:rw:readers");
        assert_eq!(rw.fence, "lock:{doc:7}:rw:fence");
        assert_eq!(rw.counter, fence_counter_key("lock:", "lock:{doc:7}"));
        assert_eq!(stored_name("lock:", &rw.counter), None);
        assert_eq!(
            stored_name("lock:", "lock:{a}"),
            Some(("a".into(), Kind::Lock))
        );
        assert_eq!(stored_name("lock:", "lock:{a}:sem:waiting"), None);
        assert_eq!(stored_name("lock:", "lock:{a}:queue"), None);
        assert_eq!(
            scan_patterns("lock:", "job-?"),
            ["lock:{job-?}", "lock:{job-?}:sem*", "lock:{job-?}:rw:*"]
        );
        assert_eq!(permit_holder("3:tok:en"), Some((3, "tok:en")));
        assert_eq!(permit_holder("x:t"), None);
        assert_eq!(reader_token("r:t"), Some("t"));
    }

    #[test]
    fn scan_patterns_match_the_prefix_literally() {
        assert_eq!(scan_pattern("lock:", "*"), "lock:{*}");
        assert_eq!(scan_pattern("a*[b]:", "order:*"), "a\\*\\[b\\]:{order:*}");
    }
}
