//! Where a manager's background work runs, and noticing when the runtime that ran it is gone.
//!
//! A manager outlives the runtime that made it: `#[tokio::test]` builds a runtime per test while
//! the global default is set once per process, and some programs run several runtimes. Every
//! background task (a connection's driver, the release subscriber, the Sentinel listeners, the
//! renewal driver, a dropped guard's release) dies with the runtime it was spawned on. Each one
//! is therefore started again on the caller's runtime at its next use, and a connection whose
//! runtime is known to be gone is replaced before a request is sent on it, so the caller never
//! sees the dead connection's `broken pipe`.
//!
//! Or the application pins all of it to one runtime that outlives the others
//! ([`LockManagerBuilder::runtime`](crate::LockManagerBuilder::runtime)).

use std::future::Future;
use std::sync::{Arc, PoisonError, RwLock};

use tokio::runtime::Handle;
use tokio::task::JoinHandle;

/// Where background tasks go: the pinned runtime, or the caller's.
#[derive(Clone, Default)]
pub(crate) struct Background {
    pinned: Option<Handle>,
}

impl Background {
    pub(crate) fn pinned_to(handle: Option<Handle>) -> Self {
        Background { pinned: handle }
    }

    /// The runtime all background I/O is pinned to, if any.
    pub(crate) fn pinned(&self) -> Option<&Handle> {
        self.pinned.as_ref()
    }

    /// Spawns `task` on the pinned runtime, or else on the caller's. Must be called within a
    /// runtime unless pinned, as `tokio::spawn`.
    pub(crate) fn spawn<F>(&self, task: F) -> JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        match &self.pinned {
            Some(handle) => handle.spawn(task),
            None => tokio::spawn(task),
        }
    }

    /// Spawns `task` on the pinned runtime, or else on the caller's if there is one: for work
    /// started from a `Drop`, which may run outside any runtime. `None` if there was none.
    pub(crate) fn try_spawn<F>(&self, task: F) -> Option<JoinHandle<()>>
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let handle = self.pinned.clone().or_else(|| Handle::try_current().ok())?;
        Some(handle.spawn(task))
    }

    /// Runs `work` so that the tasks it spawns (a connection's driver, say) belong to the pinned
    /// runtime; unpinned, runs it in place, on the caller's runtime.
    pub(crate) async fn run<F>(&self, work: F) -> Result<F::Output, RuntimeGone>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        match &self.pinned {
            Some(handle) => handle.spawn(work).await.map_err(|_| RuntimeGone),
            None => Ok(work.await),
        }
    }

    /// A token that tells when the runtime that background work goes to now has shut down.
    pub(crate) fn lifeline(&self) -> Lifeline {
        Lifeline(self.spawn(std::future::pending()))
    }
}

/// The error of a request whose pinned runtime shut down: it cannot be served any more.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RuntimeGone;

impl std::fmt::Display for RuntimeGone {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(
            "the runtime the lock manager's background I/O is pinned to has shut down; keep it \
             running as long as the manager is used",
        )
    }
}

impl std::error::Error for RuntimeGone {}

/// A task that never finishes by itself: once it is finished, its runtime has shut down (a
/// runtime that shuts down drops every task it owns, and marks it finished). One idle task per
/// connection, no work on the hot path beyond an atomic load.
pub(crate) struct Lifeline(JoinHandle<()>);

impl Lifeline {
    /// Whether the runtime this was made on has shut down.
    pub(crate) fn is_cut(&self) -> bool {
        self.0.is_finished()
    }
}

impl Drop for Lifeline {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// A connection whose driver task runs on the runtime it was made on, with that runtime's
/// [`Lifeline`]: replaced by a fresh one when that runtime is gone.
pub(crate) struct Revivable<C> {
    current: RwLock<(C, Arc<Lifeline>)>,
}

impl<C: Clone> Revivable<C> {
    pub(crate) fn new(conn: C, lifeline: Lifeline) -> Self {
        Revivable {
            current: RwLock::new((conn, Arc::new(lifeline))),
        }
    }

    /// The connection, unless its runtime has shut down.
    pub(crate) fn live(&self) -> Option<C> {
        let current = self.current.read().unwrap_or_else(PoisonError::into_inner);
        (!current.1.is_cut()).then(|| current.0.clone())
    }

    /// The connection if it is live, else the one `fresh` makes (made once, however many
    /// callers find the old one dead at the same time); the old one if `fresh` cannot make one.
    /// With the lifeline of the connection returned.
    pub(crate) fn live_or(
        &self,
        fresh: impl FnOnce() -> Option<(C, Lifeline)>,
    ) -> (C, Arc<Lifeline>) {
        {
            let current = self.current.read().unwrap_or_else(PoisonError::into_inner);
            if !current.1.is_cut() {
                return current.clone();
            }
        }
        let mut current = self.current.write().unwrap_or_else(PoisonError::into_inner);
        if current.1.is_cut()
            && let Some((conn, lifeline)) = fresh()
        {
            *current = (conn, Arc::new(lifeline));
        }
        current.clone()
    }

    /// Puts `conn` in place of the current connection.
    pub(crate) fn replace(&self, conn: C, lifeline: Lifeline) {
        *self.current.write().unwrap_or_else(PoisonError::into_inner) = (conn, Arc::new(lifeline));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime")
    }

    #[test]
    fn a_lifeline_is_cut_when_its_runtime_shuts_down_and_not_before() {
        let first = runtime();
        let lifeline = first.block_on(async { Background::default().lifeline() });
        assert!(!lifeline.is_cut());
        drop(first);
        assert!(lifeline.is_cut());
    }

    #[test]
    fn a_pinned_lifeline_lives_as_long_as_the_pinned_runtime() {
        let pinned = runtime();
        let background = Background::pinned_to(Some(pinned.handle().clone()));
        let caller = runtime();
        let lifeline = caller.block_on(async { background.lifeline() });
        drop(caller);
        assert!(!lifeline.is_cut());
        drop(pinned);
        assert!(lifeline.is_cut());
    }

    #[test]
    fn a_revivable_connection_is_made_again_once_after_its_runtime_is_gone() {
        let first = runtime();
        let conns =
            first.block_on(async { Revivable::new(1_u32, Background::default().lifeline()) });
        assert_eq!(conns.live(), Some(1));
        drop(first);
        assert_eq!(conns.live(), None);
        let second = runtime();
        second.block_on(async {
            let mut made = 0;
            for _ in 0..3 {
                let (conn, lifeline) = conns.live_or(|| {
                    made += 1;
                    Some((2, Background::default().lifeline()))
                });
                assert_eq!(conn, 2);
                assert!(!lifeline.is_cut());
            }
            assert_eq!(made, 1);
        });
    }
}
