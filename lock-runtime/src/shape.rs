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
        match (self, other) {
            (Shape::Lock, Shape::Lock)
            | (Shape::Semaphore { .. }, Shape::Semaphore { .. })
            | (Shape::Read | Shape::Write, Shape::Read | Shape::Write) => true,
            (Shape::Lock, Shape::Semaphore { .. } | Shape::Read | Shape::Write)
            | (Shape::Semaphore { .. }, Shape::Lock | Shape::Read | Shape::Write)
            | (Shape::Read | Shape::Write, Shape::Lock | Shape::Semaphore { .. }) => false,
        }
    }

    /// Whether a waiter for this shape waits for one holder, whom a busy answer names: the
    /// blocker a wait that runs out reports, and the holder the deadlock detector follows the
    /// wait to (held leases of this shape are where its edges lead).
    ///
    /// - The lock: yes, its one holder.
    /// - A semaphore's permit: no; a full semaphore has all its permits' holders, and any one
    ///   of them leaving lets the waiter in, so no one of them blocks it.
    /// - A read share or the write hold: no; a writer waits for every reader, and a reader
    ///   may wait for a writer that waits before it and holds nothing yet.
    pub(crate) fn waits_for_one_holder(self) -> bool {
        match self {
            Shape::Lock => true,
            Shape::Semaphore { .. } | Shape::Read | Shape::Write => false,
        }
    }

    /// Whether a holder of this shape that lets it go hands it straight to a waiter of this
    /// process, where the store can (`Store::hands_off`).
    ///
    /// - The lock: yes; its next holder is the one waiter first in line.
    /// - A semaphore's permit: no; its waiters may find another permit free, and always ask
    ///   the store.
    /// - A read share or the write hold: no; after a writer every reader may go at once, so a
    ///   release wakes every waiter of the read-write lock in the process instead.
    pub(crate) fn hands_over(self) -> bool {
        match self {
            Shape::Lock => true,
            Shape::Semaphore { .. } | Shape::Read | Shape::Write => false,
        }
    }

    /// Whether a release of this shape announced to this process wakes every waiter of its
    /// stored lock here, not only the first in line.
    ///
    /// - The lock: no; one waiter can take it, the first.
    /// - A semaphore's permit: no; a release frees one permit, for the first waiter.
    /// - A read share or the write hold: yes; after a writer every reader may go at once, and
    ///   after a reader the writer waiting may be anywhere in line, behind readers that queue
    ///   behind it.
    pub(crate) fn release_wakes_every_waiter(self) -> bool {
        match self {
            Shape::Lock | Shape::Semaphore { .. } => false,
            Shape::Read | Shape::Write => true,
        }
    }

    /// Whether, once a task of this process takes this shape, the next waiter here watches the
    /// taker's lease and looks again when it ends (nobody announces an expiry), rather than
    /// asking at once and learning when.
    ///
    /// - The lock: yes; nobody else holds it meanwhile.
    /// - A semaphore's permit: no; another holder's permit may end sooner.
    /// - A read share: no; so may the other readers' shares.
    /// - The write hold: no; though it alone holds the read-write lock, the lock's waiters
    ///   are followed as one (a reader or a writer may be next), and asking at once costs
    ///   one round trip and never misses a grant.
    pub(crate) fn next_waiter_watches_the_lease(self) -> bool {
        match self {
            Shape::Lock => true,
            Shape::Semaphore { .. } | Shape::Read | Shape::Write => false,
        }
    }

    /// Whether an acquire of this shape may take the lean path (one transaction, no script;
    /// see `protocol::lean`) where the store and the call allow it.
    ///
    /// - The lock: yes; it is one value at the key's stored name.
    /// - A semaphore's permit: no; its holders are a sorted set its script trims and counts.
    /// - A read share or the write hold: no; the read-write lock lies in several keys and a
    ///   grant weighs a writer waiting: only its script takes it.
    pub(crate) fn takes_lean_path(self) -> bool {
        match self {
            Shape::Lock => true,
            Shape::Semaphore { .. } | Shape::Read | Shape::Write => false,
        }
    }

    /// Whether a hold of this shape is the one value its acquire wrote at the key's stored
    /// name, so that, while nobody was told it is busy, its renewal may compare that value
    /// natively (`SET ... IFEQ`) and its release delete it by comparing it whole, without a
    /// script.
    ///
    /// - The lock: yes.
    /// - A semaphore's permit or a read share: no; each is a member of a sorted set.
    /// - The write hold: no; its value, though in the lock's form, is kept under the
    ///   writer's name, not the stored name, and its release must wake the read-write lock's
    ///   waiters: its script gives it back.
    pub(crate) fn compares_its_value(self) -> bool {
        match self {
            Shape::Lock => true,
            Shape::Semaphore { .. } | Shape::Read | Shape::Write => false,
        }
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

    /// Every shape, as one of each kind: a semaphore's decisions do not depend on its permits.
    const SHAPES: [Shape; 5] = [
        Shape::Lock,
        Shape::Semaphore { permits: 1 },
        Shape::Semaphore { permits: 3 },
        Shape::Read,
        Shape::Write,
    ];

    /// What a shape decides, one row per shape and one column per decision: a changed decision
    /// shows as a changed row, and a new shape does not compile until it has its row.
    #[rustfmt::skip]
    fn row(shape: Shape) -> (&'static str, &'static str, Mode, [bool; 5]) {
        // The columns of the last one: waits_for_one_holder, hands_over,
        // next_waiter_watches_the_lease, takes_lean_path, compares_its_value.
        match shape {
            //                          suffix  noun               mode
            Shape::Lock =>             ("",     "lock",            Mode::Exclusive,
                                        [true,  true,  true,  true,  true ]),
            Shape::Semaphore { .. } => (":sem", "semaphore",       Mode::Exclusive,
                                        [false, false, false, false, false]),
            Shape::Read =>             (":rw",  "read-write lock", Mode::Read,
                                        [false, false, false, false, false]),
            Shape::Write =>            (":rw",  "read-write lock", Mode::Write,
                                        [false, false, false, false, false]),
        }
    }

    #[test]
    fn each_shape_decides_as_its_row_of_the_table_says() {
        for shape in SHAPES {
            let decided = (
                shape.suffix(),
                shape.noun(),
                shape.mode(),
                [
                    shape.waits_for_one_holder(),
                    shape.hands_over(),
                    shape.next_waiter_watches_the_lease(),
                    shape.takes_lean_path(),
                    shape.compares_its_value(),
                ],
            );
            assert_eq!(decided, row(shape), "{shape:?}");
        }
    }

    #[test]
    fn same_lock_is_the_table_of_stored_locks() {
        // Rows and columns: the lock, two semaphores, a read share, the write hold.
        #[rustfmt::skip]
        let same = [
            [true,  false, false, false, false],
            [false, true,  true,  false, false],
            [false, true,  true,  false, false],
            [false, false, false, true,  true ],
            [false, false, false, true,  true ],
        ];
        for (a, row) in SHAPES.into_iter().zip(same) {
            for (b, same) in SHAPES.into_iter().zip(row) {
                assert_eq!(a.same_lock(b), same, "{a:?} {b:?}");
                // Two shapes take the same stored lock exactly when they name the same key.
                assert_eq!(a.suffix() == b.suffix(), same, "{a:?} {b:?}");
            }
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
