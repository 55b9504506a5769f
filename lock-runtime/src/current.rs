//! The locks held by the running task: what `current()` reports and what makes nested
//! acquisitions of the same key re-enter instead of deadlocking.
//!
//! The chain lives in a `tokio::task_local!`, so it follows one task through its awaits and does
//! not cross `tokio::spawn`: a spawned task is a different owner, as it should be.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crate::error::LostReason;
use crate::lease::Lease;
use crate::shape::Shape;

tokio::task_local! {
    static HELD: Arc<Frame>;
}

/// One lock held by the task, and the ones held around it.
pub(crate) struct Frame {
    lease: Arc<Lease>,
    outer: Option<Arc<Frame>>,
}

/// Runs `body` with `lease` added to the task's held locks.
pub(crate) fn scope<F: Future>(lease: Arc<Lease>, body: F) -> impl Future<Output = F::Output> {
    let outer = HELD.try_with(Arc::clone).ok();
    HELD.scope(Arc::new(Frame { lease, outer }), body)
}

/// The task's held locks with `first` and every lease of `rest` added, `first` innermost: the
/// one [`current()`] reports. Run a section in it with [`scope_frames`].
pub(crate) fn with_all<'a>(
    first: &Arc<Lease>,
    rest: impl DoubleEndedIterator<Item = &'a Arc<Lease>>,
) -> Arc<Frame> {
    let mut outer = HELD.try_with(Arc::clone).ok();
    for lease in rest.rev() {
        outer = Some(Arc::new(Frame {
            lease: lease.clone(),
            outer,
        }));
    }
    Arc::new(Frame {
        lease: first.clone(),
        outer,
    })
}

/// Runs `body` with `frames` (from [`with_all`]) as the task's held locks.
pub(crate) fn scope_frames<F: Future>(
    frames: Arc<Frame>,
    body: F,
) -> impl Future<Output = F::Output> {
    HELD.scope(frames, body)
}

/// The lease of `key` on manager `manager_id` if the running task already holds the lock of
/// that name `shape` takes (see [`Shape::same_lock`]): the lock, a permit of the semaphore
/// (under any number of permits), or a read share or the write hold of the read-write lock.
pub(crate) fn held(manager_id: u64, key: &str, shape: Shape) -> Option<Arc<Lease>> {
    HELD.try_with(|frame| {
        let mut frame = Some(frame);
        while let Some(f) = frame {
            if f.lease.manager_id == manager_id
                && f.lease.key() == key
                && f.lease.stored.shape.same_lock(shape)
            {
                return Some(f.lease.clone());
            }
            frame = f.outer.as_ref();
        }
        None
    })
    .ok()
    .flatten()
}

/// The innermost lock held by the running task, if it runs inside a locked section
/// (`#[distributed_lock]` or [`LockManager::run_locked`](crate::LockManager::run_locked)).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), lock_runtime::LockError> {
/// use lock_runtime::{LockManager, LockOptions};
///
/// let locks = LockManager::memory();
/// assert!(lock_runtime::current().is_none());
/// locks
///     .run_locked("report:daily".to_string(), LockOptions::new(), async {
///         let held = lock_runtime::current().expect("inside a locked section");
///         assert_eq!(held.key(), "report:daily");
///         assert!(held.is_held());
///         Ok::<_, lock_runtime::LockError>(())
///     })
///     .await?;
/// # Ok(())
/// # }
/// ```
pub fn current() -> Option<CurrentLock> {
    HELD.try_with(|frame| CurrentLock {
        lease: frame.lease.clone(),
    })
    .ok()
}

/// Every lock held by the running task, innermost first: inside a multi-key section
/// ([`LockManager::lock_all`](crate::LockManager::lock_all) made a scope with
/// [`MultiGuard::scope`](crate::MultiGuard::scope), or `#[distributed_lock(keys = [..])]`), its
/// keys in their canonical order, then the locks of the sections around it. A lock appears
/// once, also when a section re-entered it. Empty outside any locked section.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use lock_runtime::{LockManager, LockOptions};
///
/// let locks = LockManager::memory();
/// let both = locks.lock_all(["account:2", "account:1"], LockOptions::new()).await?;
/// both.scope(async {
///     let held: Vec<String> = lock_runtime::current_all()
///         .iter()
///         .map(|lock| lock.key().to_owned())
///         .collect();
///     assert_eq!(held, ["account:1", "account:2"]);
/// })
/// .await;
/// both.release().await?;
/// # Ok(())
/// # }
/// ```
pub fn current_all() -> Vec<CurrentLock> {
    HELD.try_with(|frame| {
        let mut held: Vec<CurrentLock> = Vec::new();
        let mut frame = Some(frame);
        while let Some(f) = frame {
            if !held.iter().any(|lock| Arc::ptr_eq(&lock.lease, &f.lease)) {
                held.push(CurrentLock {
                    lease: f.lease.clone(),
                });
            }
            frame = f.outer.as_ref();
        }
        held
    })
    .unwrap_or_default()
}

/// A lock held by the running task, as seen from inside the locked section.
#[derive(Clone)]
pub struct CurrentLock {
    lease: Arc<Lease>,
}

impl std::fmt::Debug for CurrentLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CurrentLock")
            .field("key", &self.lease.key())
            .field("fencing_token", &self.fencing_token())
            .field("is_held", &self.is_held())
            .finish()
    }
}

impl CurrentLock {
    /// The lock key, as the caller named it.
    pub fn key(&self) -> &str {
        self.lease.key()
    }

    /// Which lock of the key's name the section holds (see
    /// [`LockGuard::mode`](crate::LockGuard::mode)): [`Mode::Read`](crate::Mode::Read) inside a
    /// `mode = "read"` section, for instance.
    pub fn mode(&self) -> crate::shape::Mode {
        self.lease.stored.shape.mode()
    }

    /// The fencing token of this acquisition: pass it to the storage the lock protects, and have
    /// that storage refuse writes with a smaller token than it has seen.
    pub fn fencing_token(&self) -> u64 {
        self.lease.fencing_token()
    }

    /// The owner token of this acquisition (never shown or logged): what a fence derives its
    /// holder id from.
    pub(crate) fn owner_token(&self) -> &str {
        self.lease.token()
    }

    /// True while the lease is known to be held (not lost, not released, local deadline ahead).
    pub fn is_held(&self) -> bool {
        self.lease.is_held()
    }

    /// What is left of the lease by the local clock; the watchdog extends it.
    pub fn remaining(&self) -> Duration {
        self.lease.remaining()
    }

    /// Resolves when the lease is lost, with the reason. Never resolves if the lock is released
    /// normally.
    pub async fn lost(&self) -> LostReason {
        self.lease.lost().await
    }

    /// Resolves once someone asks the holder to let go, with who asked, as
    /// [`LockGuard::release_requested`](crate::LockGuard::release_requested) does: inside an
    /// attribute's body, `current().unwrap().release_requested()` is the future to `select!` on.
    pub async fn release_requested(&self) -> crate::ReleaseRequest {
        self.lease.release_requested().await
    }
}
