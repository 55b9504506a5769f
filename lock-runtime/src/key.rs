//! How a lock key is stored: `<prefix>{<key>}`, so that the lock and its fence counter share one
//! Redis Cluster slot (the part in braces is the hash tag).

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
        let mut lock = String::with_capacity(prefix.len() + key.len() + 2);
        lock.push_str(prefix);
        lock.push('{');
        lock.push_str(key);
        lock.push('}');
        Ok(StoredKey { lock })
    }

    /// The fence counter's name: the lock's name plus `:fence`, in the same hash slot.
    pub(crate) fn fence(&self) -> String {
        let mut fence = String::with_capacity(self.lock.len() + 6);
        fence.push_str(&self.lock);
        fence.push_str(":fence");
        fence
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
    }

    #[test]
    fn empty_key_is_rejected() {
        assert!(matches!(
            StoredKey::new("lock:", ""),
            Err(LockError::Config(_))
        ));
    }
}
