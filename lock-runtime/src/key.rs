//! How a lock key is stored: `<prefix>{<key>}`, so that the lock, the line of its fair waiters and
//! the fence counter of earlier versions share one Redis Cluster slot (the part in braces is the
//! hash tag).

use crate::LockError;

/// The Redis names of one lock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StoredKey {
    /// `<prefix>{<key>}`: the lock hash, and the channel its release is published on.
    pub(crate) lock: String,
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
        Ok(StoredKey { lock })
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
