//! How a lock key is stored: `<prefix>{<key>}`, so that the lock, the line of its fair waiters and
//! the fence counter of earlier versions share one Redis Cluster slot (the part in braces is the
//! hash tag). A semaphore of the same name is `<prefix>{<key>}:sem`, in the same slot: a lock's
//! name always ends with the closing brace, so no lock can be stored under a semaphore's. The
//! read-write lock of the same name is `<prefix>{<key>}:rw` (its channel) with its keys
//! `:rw:readers`, `:rw:writer`, `:rw:writer-waiting` and `:rw:waiting`, in the same slot and
//! apart from the lock and the semaphore. All of them take their fencing tokens from the
//! counter of that slot ([`Key::counter`]).

use crate::error::LockError;
use crate::shape::Shape;

/// The key of one lock as a store sees it: the lock's name, its shape, and a name unique per
/// name and shape ([`Key::name`]) to keep it under.
///
/// ```
/// use lock_runtime::store::{Key, Shape};
///
/// let key = Key::new("lock:", "pool", Shape::Semaphore { permits: 3 }).unwrap();
/// assert_eq!(key.key(), "pool");
/// assert_eq!(key.prefix(), "lock:");
/// assert_eq!(key.name(), "lock:{pool}:sem");
/// assert_eq!(key.shape().permits(), Some(3));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Key {
    /// `<prefix>{<key>}`: the lock hash, and the channel its release is published on; for a
    /// semaphore, `<prefix>{<key>}:sem`, its set of holders and its channel; for a read-write
    /// lock, `<prefix>{<key>}:rw`, its channel (its data is in the `rw_*` keys).
    pub(crate) lock: String,
    /// Which lock of the key's name this names, and how it is taken.
    pub(crate) shape: Shape,
    /// How long the manager's key prefix is: the start of `lock`.
    prefix_len: usize,
}

impl Key {
    /// The names of the lock `key`.
    pub(crate) fn lock(prefix: &str, key: &str) -> Result<Self, LockError> {
        Key::new(prefix, key, Shape::Lock)
    }

    /// The key `key` of a manager with key prefix `prefix`, taken as `shape`. Refused if the
    /// key is empty.
    ///
    /// Its name is the lock's, or a semaphore's (see semaphore.lua), `<prefix>{<key>}:sem`, or
    /// a read-write lock's (see rw_acquire.lua), `<prefix>{<key>}:rw`; all beside the lock of
    /// that name and in its slot.
    pub fn new(prefix: &str, key: &str, shape: Shape) -> Result<Self, LockError> {
        if key.is_empty() {
            return Err(LockError::Config(
                "lock key is empty: name the resource the lock protects".into(),
            ));
        }
        let suffix = shape.suffix();
        let mut lock = String::with_capacity(prefix.len() + key.len() + 3 + suffix.len());
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
        lock.push_str(suffix);
        Ok(Key {
            lock,
            shape,
            prefix_len: prefix.len(),
        })
    }

    /// A read-write lock's readers: a sorted set of `r:<owner token>` scored by lease end.
    pub(crate) fn rw_readers(&self) -> String {
        self.with_suffix(":readers")
    }

    /// A read-write lock's writer: `held fence=<n> token=<owner token> waiting=0`, expiring
    /// with its lease (a held lock's value with its fencing token, so renew.lua renews it as a
    /// lock).
    pub(crate) fn rw_writer(&self) -> String {
        self.with_suffix(":writer")
    }

    /// Present while a writer waits: new readers wait behind it.
    pub(crate) fn rw_writer_waiting(&self) -> String {
        self.with_suffix(":writer-waiting")
    }

    /// The Redis key that holds this lease's data, which renewals extend: the lock itself, a
    /// semaphore's set, a read-write lock's readers or writer.
    pub(crate) fn held_at(&self) -> std::borrow::Cow<'_, str> {
        match self.shape {
            Shape::Read => self.rw_readers().into(),
            Shape::Write => self.rw_writer().into(),
            Shape::Lock | Shape::Semaphore { .. } => self.lock.as_str().into(),
        }
    }

    /// Where 0.2 kept a semaphore's or a read-write lock's last fencing token
    /// (`<prefix>{<key>}:sem:fence`, `<prefix>{<key>}:rw:fence`), in the same hash slot: the next
    /// grant raises the counter above it and deletes it (see queue.lua's take_over_fence).
    pub(crate) fn fence_of_0_2(&self) -> String {
        self.with_suffix(":fence")
    }

    /// Present while someone was lately told the semaphore is full: its releases announce
    /// themselves (see semaphore.lua).
    pub(crate) fn sem_waiting(&self) -> String {
        self.with_suffix(":waiting")
    }

    /// The fence counter of the lock's slot (see [`crate::protocol::slots::counter`]), which
    /// hands out the lock's fencing tokens.
    pub(crate) fn counter(&self) -> String {
        crate::protocol::slots::counter(&self.lock[..self.prefix_len], &self.lock)
    }

    /// The fence counter versions before 0.2 kept beside the lock (`<lock>:fence`): read by
    /// acquire.lua only while such a version holds the lock.
    pub(crate) fn fence_before_0_2(&self) -> String {
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

    /// The key as the caller named it: the stored name without the prefix, the braces, the
    /// escape of a leading `}` or `\` and the shape's suffix. (Kept once, in the stored name.)
    pub fn key(&self) -> &str {
        let end = self.lock.len() - 1 - self.shape.suffix().len();
        let inner = &self.lock[self.prefix_len + 1..end];
        inner.strip_prefix('\\').unwrap_or(inner)
    }

    /// The name the lock is kept under: the manager's prefix, the key in braces (a leading
    /// `}` or `\\` escaped), and the shape's suffix (`:sem` for a semaphore, `:rw` for a
    /// read-write lock). Unique per prefix, key and shape; Redis stores the lock under exactly
    /// this name, and the braces keep everything of one key in one Redis Cluster slot.
    pub fn name(&self) -> &str {
        &self.lock
    }

    /// Which lock of the key's name this is, and how it is taken.
    pub fn shape(&self) -> Shape {
        self.shape
    }

    /// The key prefix of the manager that asks (`lock:` by default).
    pub fn prefix(&self) -> &str {
        &self.lock[..self.prefix_len]
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
        let k = Key::lock("lock:", "order:42").expect("valid key");
        assert_eq!(k.lock, "lock:{order:42}");
        assert!(k.counter().starts_with("lock:fence:{"));
        assert_eq!(k.queue(), "lock:{order:42}:queue");
        assert_eq!(k.queue_expiry(), "lock:{order:42}:queue:expiry");
    }

    #[test]
    fn a_read_write_lock_lives_beside_the_lock_and_the_semaphore_of_its_name() {
        let k = Key::new("lock:", "doc", Shape::Read).expect("valid key");
        assert_eq!(k.lock, "lock:{doc}:rw");
        assert_eq!(k.rw_readers(), "lock:{doc}:rw:readers");
        assert_eq!(k.rw_writer(), "lock:{doc}:rw:writer");
        assert_eq!(k.rw_writer_waiting(), "lock:{doc}:rw:writer-waiting");
        assert_eq!(k.fence_of_0_2(), "lock:{doc}:rw:fence");
        assert_eq!(k.sem_waiting(), "lock:{doc}:rw:waiting");
        assert_eq!(k.held_at(), "lock:{doc}:rw:readers");
        assert_eq!(k.shape, Shape::Read);
        let w = Key::new("lock:", "doc", Shape::Write).expect("valid key");
        assert_eq!(w.held_at(), "lock:{doc}:rw:writer");
        assert_ne!(Key::lock("lock:", "doc").expect("valid key").lock, k.lock);
    }

    #[test]
    fn a_semaphore_lives_beside_the_lock_of_its_name_and_never_under_a_lock_name() {
        let k = Key::new("lock:", "pool", Shape::Semaphore { permits: 3 }).expect("valid key");
        assert_eq!(k.lock, "lock:{pool}:sem");
        assert_eq!(k.fence_of_0_2(), "lock:{pool}:sem:fence");
        assert_eq!(k.sem_waiting(), "lock:{pool}:sem:waiting");
        assert_eq!(k.shape, Shape::Semaphore { permits: 3 });
        // A lock's stored name ends with its hash tag's brace, whatever the key.
        let tricky = Key::lock("lock:", "pool}:sem").expect("valid key");
        assert_ne!(tricky.lock, k.lock);
        assert!(tricky.lock.ends_with('}'));
    }

    #[test]
    fn semaphores_and_read_write_locks_count_tokens_on_the_counter_of_their_slot() {
        use crate::protocol::slots::slot;
        for key in ["pool", "}x", "a}b", "order:42"] {
            let lock = Key::lock("lock:", key).expect("valid key");
            let sem = Key::new("lock:", key, Shape::Semaphore { permits: 2 }).expect("valid key");
            let rw = Key::new("lock:", key, Shape::Write).expect("valid key");
            // One counter for all three: the slot's.
            assert_eq!(sem.counter(), lock.counter(), "{key}");
            assert_eq!(rw.counter(), lock.counter(), "{key}");
            for name in [
                sem.lock.clone(),
                sem.sem_waiting(),
                sem.fence_of_0_2(),
                rw.rw_readers(),
                rw.rw_writer(),
                rw.rw_writer_waiting(),
                rw.sem_waiting(),
                rw.fence_of_0_2(),
            ] {
                assert_eq!(slot(&name), slot(&lock.counter()), "{name}");
            }
        }
    }

    #[test]
    fn a_leading_brace_cannot_empty_the_hash_tag_and_names_stay_distinct() {
        let brace = Key::lock("lock:", "}a").expect("valid key");
        let slash = Key::lock("lock:", "\\}a").expect("valid key");
        assert_eq!(brace.lock, "lock:{\\}a}");
        assert_eq!(slash.lock, "lock:{\\\\}a}");
        assert_ne!(brace.lock, slash.lock);
    }

    #[test]
    fn the_key_comes_back_from_the_stored_name() {
        let shapes = [
            Shape::Lock,
            Shape::Semaphore { permits: 3 },
            Shape::Read,
            Shape::Write,
        ];
        for key in ["order:42", "}a", "\\}a", "\\", "a}:sem", "{x}", "é:ü"] {
            for prefix in ["lock:", "", "app:{tenant}:"] {
                for shape in shapes {
                    let stored = Key::new(prefix, key, shape).expect("valid key");
                    assert_eq!(stored.key(), key, "{prefix} {shape:?}");
                }
            }
        }
    }

    #[test]
    fn empty_key_is_rejected() {
        assert!(matches!(Key::lock("lock:", ""), Err(LockError::Config(_))));
    }
}
