//! Which lock of a key's name one acquisition takes: the lock, a permit of the semaphore, or a
//! read share or the write hold of the read-write lock. The options derive it once
//! ([`LockOptions::shape`](crate::LockOptions::shape)); every step that differs between them
//! (the stored names, the scripts called, what a backend refuses, re-entry) matches on it.
//! Publicly these are spelt `semaphore`, `read_lock` and `write_lock` (or
//! [`LockOptions::permits`](crate::LockOptions::permits) and
//! [`LockOptions::mode`](crate::LockOptions::mode)); [`Mode`] is the public name of the
//! read-write lock's two holds, which a shape reports back.

/// Which lock of a key's name a call takes: the exclusive lock, or the read-write lock in
/// shared (read) or exclusive (write) mode. The read-write lock of a name is apart from its
/// lock and its semaphore: they never exclude each other.
///
/// ```
/// use lock_runtime::{LockOptions, Mode};
///
/// const READ: LockOptions = LockOptions::new().mode(Mode::Read);
/// assert_eq!(READ.mode_value(), Mode::Read);
/// assert_eq!(LockOptions::new().mode_value(), Mode::Exclusive);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum Mode {
    /// The lock: one holder at a time (the default).
    #[default]
    Exclusive,
    /// A read share of the read-write lock: any number of readers together, never with a
    /// writer; new readers wait while a writer waits.
    Read,
    /// The write hold of the read-write lock: one writer, and no reader.
    Write,
}

/// Which lock of a key's name a call takes, as a store sees it: the lock, a permit of the
/// semaphore, or a read share or the write hold of the read-write lock. They never exclude
/// each other; a store keeps each apart ([`Key::name`](crate::store::Key::name) differs).
/// A store that does not keep one says so in
/// [`Store::supports`](crate::store::Store::supports).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Shape {
    /// The lock: one holder at a time.
    Lock,
    /// One of the `permits` permits of the semaphore of the key's name.
    Semaphore {
        /// How many holders the semaphore admits at once.
        permits: u32,
    },
    /// A read share of the read-write lock of the key's name.
    Read,
    /// The write hold of the read-write lock of the key's name.
    Write,
}

impl Shape {
    /// What the stored name of this shape adds to the lock's `<prefix>{<key>}` (see
    /// [`Key`](crate::key::Key)).
    pub(crate) fn suffix(self) -> &'static str {
        match self {
            Shape::Lock => "",
            Shape::Semaphore { .. } => ":sem",
            Shape::Read | Shape::Write => ":rw",
        }
    }

    /// What the one stored lock this shape takes is called in messages: `lock`, `semaphore`,
    /// `read-write lock`.
    pub fn noun(self) -> &'static str {
        match self {
            Shape::Lock => "lock",
            Shape::Semaphore { .. } => "semaphore",
            Shape::Read | Shape::Write => "read-write lock",
        }
    }

    /// Whether `self` and `other` take the same stored lock of a key's name: a task holding
    /// the one and asking for the other re-enters its hold (or is told why it cannot).
    pub(crate) fn same_lock(self, other: Shape) -> bool {
        matches!(
            (self, other),
            (Shape::Lock, Shape::Lock)
                | (Shape::Semaphore { .. }, Shape::Semaphore { .. })
                | (Shape::Read | Shape::Write, Shape::Read | Shape::Write)
        )
    }

    /// The number of permits of a semaphore, `None` for the others (what
    /// [`LockGuard::permits`](crate::LockGuard::permits) says).
    pub fn permits(self) -> Option<u32> {
        match self {
            Shape::Semaphore { permits } => Some(permits),
            Shape::Lock | Shape::Read | Shape::Write => None,
        }
    }

    /// The public [`Mode`] of this shape: [`Mode::Exclusive`] for the lock and a semaphore's
    /// permit (what [`LockGuard::mode`](crate::LockGuard::mode) says).
    pub(crate) fn mode(self) -> Mode {
        match self {
            Shape::Lock | Shape::Semaphore { .. } => Mode::Exclusive,
            Shape::Read => Mode::Read,
            Shape::Write => Mode::Write,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shape_takes_the_same_lock_as_another_of_its_name_only() {
        let sem = |permits| Shape::Semaphore { permits };
        assert!(sem(2).same_lock(sem(3)));
        assert!(Shape::Read.same_lock(Shape::Write));
        assert!(Shape::Lock.same_lock(Shape::Lock));
        for (a, b) in [
            (Shape::Lock, sem(1)),
            (Shape::Lock, Shape::Read),
            (sem(1), Shape::Write),
        ] {
            assert!(!a.same_lock(b), "{a:?} {b:?}");
            assert!(!b.same_lock(a), "{a:?} {b:?}");
        }
    }

    #[test]
    fn the_public_getters_read_as_the_two_flags_did() {
        assert_eq!(Shape::Semaphore { permits: 4 }.permits(), Some(4));
        assert_eq!(Shape::Semaphore { permits: 4 }.mode(), Mode::Exclusive);
        assert_eq!(Shape::Read.permits(), None);
        assert_eq!(Shape::Read.mode(), Mode::Read);
        assert_eq!(Shape::Write.mode(), Mode::Write);
        assert_eq!(Shape::Lock.mode(), Mode::Exclusive);
    }
}
