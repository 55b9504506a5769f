//! How a lock key is stored: `<prefix>{<key>}`, so that the lock, the line of its fair waiters and
//! the fence counter of earlier versions share one Redis Cluster slot (the part in braces is the
//! hash tag). A semaphore of the same name is `<prefix>{<key>}:sem`, in the same slot: a lock's
//! name always ends with the closing brace, so no lock can be stored under a semaphore's.

use crate::LockError;

/// The Redis names of one lock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StoredKey {
    /// `<prefix>{<key>}`: the lock hash, and the channel its release is published on; for a
    /// semaphore, `<prefix>{<key>}:sem`, its set of holders and its channel.
    pub(crate) lock: String,
    /// `Some(n)`: this names the semaphore of `n` permits called `<key>`, not the lock.
    pub(crate) permits: Option<u32>,
}

impl StoredKey {
    pub(crate) fn new(prefix: &str, key: &str) -> Result<Self, LockError> {
        if key.is_empty() {
            return Err(LockError::Config(
                "lock key is empty: name the resource the lock protects".into(),
            ));
        }
        let mut lock = String::with_capacity(prefix.len() + key.len() + 3);
        lock.push_str(prefix);
        lock.push('{');
        // A key starting with `}` would make the hash tag empty, and Redis Cluster would then
        // hash the whole name: the lock and its fence counter could land in different slots.
        // A leading `\` keeps the tag non-empty; keys starting with `\` get one too, so that no
        // two keys share a name.
        if key.starts_with(['}', '\\']) {
            lock.push('\\');
        }
        lock.push_str(key);
        lock.push('}');
        Ok(StoredKey {
            lock,
            permits: None,
        })
    }

    /// The names of the semaphore `key` of `permits` permits (see semaphore.lua):
    /// `<prefix>{<key>}:sem`, beside the lock of that name and in its slot.
    pub(crate) fn semaphore(prefix: &str, key: &str, permits: u32) -> Result<Self, LockError> {
        let mut stored = StoredKey::new(prefix, key)?;
        stored.lock.push_str(":sem");
        stored.permits = Some(permits);
        Ok(stored)
    }

    /// The lock's, or with `permits`, the semaphore's names.
    pub(crate) fn of(prefix: &str, key: &str, permits: Option<u32>) -> Result<Self, LockError> {
        match permits {
            Some(permits) => StoredKey::semaphore(prefix, key, permits),
            None => StoredKey::new(prefix, key),
        }
    }

    /// A semaphore's last fencing token (see semaphore.lua), in the same hash slot.
    pub(crate) fn sem_fence(&self) -> String {
        self.with_suffix(":fence")
    }

    /// Present while someone was lately told the semaphore is full: its releases announce
    /// themselves (see semaphore.lua).
    pub(crate) fn sem_waiting(&self) -> String {
        self.with_suffix(":waiting")
    }

    /// The fence counter of versions before the string format (read, never written, by
    /// acquire.lua): the lock's name plus `:fence`, in the same hash slot.
    pub(crate) fn fence(&self) -> String {
        self.with_suffix(":fence")
    }

    /// The line of fair waiters (see queue.lua), in the same hash slot.
    pub(crate) fn queue(&self) -> String {
        self.with_suffix(":queue")
    }

    /// When the entries of the line end.
    pub(crate) fn queue_expiry(&self) -> String {
        self.with_suffix(":queue:expiry")
    }

    fn with_suffix(&self, suffix: &str) -> String {
        let mut name = String::with_capacity(self.lock.len() + suffix.len());
        name.push_str(&self.lock);
        name.push_str(suffix);
        name
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stored_key_wraps_the_key_in_a_hash_tag() {
        let k = StoredKey::new("lock:", "order:42").expect("valid key");
        assert_eq!(k.lock, "lock:{order:42}");
        assert_eq!(k.fence(), "lock:{order:42}:fence");
        assert_eq!(k.queue(), "lock:{order:42}:queue");
        assert_eq!(k.queue_expiry(), "lock:{order:42}:queue:expiry");
    }

    #[test]
    fn a_semaphore_lives_beside_the_lock_of_its_name_and_never_under_a_lock_name() {
        let k = StoredKey::semaphore("lock:", "pool", 3).expect("valid key");
        assert_eq!(k.lock, "lock:{pool}:sem");
        assert_eq!(k.sem_fence(), "lock:{pool}:sem:fence");
        assert_eq!(k.sem_waiting(), "lock:{pool}:sem:waiting");
        assert_eq!(k.permits, Some(3));
        // A lock's stored name ends with its hash tag's brace, whatever the key.
        let tricky = StoredKey::new("lock:", "pool}:sem").expect("valid key");
        assert_ne!(tricky.lock, k.lock);
        assert!(tricky.lock.ends_with('}'));
    }

    #[test]
    fn a_leading_brace_cannot_empty_the_hash_tag_and_names_stay_distinct() {
        let brace = StoredKey::new("lock:", "}a").expect("valid key");
        let slash = StoredKey::new("lock:", "\\}a").expect("valid key");
        assert_eq!(brace.lock, "lock:{\\}a}");
        assert_eq!(slash.lock, "lock:{\\\\}a}");
        assert_ne!(brace.lock, slash.lock);
    }

    #[test]
    fn empty_key_is_rejected() {
        assert!(matches!(
            StoredKey::new("lock:", ""),
            Err(LockError::Config(_))
        ));
    }
}
