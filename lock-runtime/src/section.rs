//! A locked section: what `run_locked` and `#[distributed_lock]` do with whatever the acquire
//! gave them (one lock, or several keys taken together). Acquire, run the body with
//! `current()` reporting the locks, stop it when a lease is lost (by default), and release
//! before returning: one path for every shape of lock.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::task::Poll;

use futures_util::FutureExt;
use futures_util::future::CatchUnwind;

use crate::error::LockError;
use crate::options::OnLeaseLost;

/// What a locked section holds while its body runs.
pub(crate) trait Held: Sized {
    /// Runs `body` with [`current()`](crate::current) reporting the held locks, and with nested
    /// acquisitions of them re-entering.
    fn scope<F: Future>(&self, body: F) -> impl Future<Output = F::Output>;

    /// What [`lost`](Held::lost) tells: kept small, since the section keeps it in its state.
    type Lost;

    /// Resolves once a held lease is lost.
    fn lost(&self) -> impl Future<Output = Self::Lost>;

    /// The loss if one is known now: what the first poll of [`lost`](Held::lost) would tell,
    /// without registering anything to be woken by.
    fn lost_now(&self) -> Option<Self::Lost>;

    /// The [`LockError::LeaseLost`] of a loss, naming the key.
    fn lost_error(&self, lost: Self::Lost) -> LockError;

    /// Releases everything after the body finished; a failure is logged (the body's result
    /// is what the caller gets).
    fn finish(self) -> impl Future<Output = ()>;
}

/// Runs `body` under what `acquire` takes. The body never runs if the acquire fails; with
/// [`OnLeaseLost::Abort`] a lost lease drops the body at its next `.await` and the section
/// returns the loss. A panic in the body is carried past the release and resumed after it.
///
/// A plain fn returning an `async move` block rather than an `async fn`: the block uses its
/// captures in place, where an `async fn` would keep a second copy of each argument.
#[allow(
    clippy::manual_async_fn,
    reason = "an `async fn` would keep a second copy of each argument in its state"
)]
pub(crate) fn run<H, A, F, R>(
    acquire: Pin<Box<A>>,
    on_lease_lost: OnLeaseLost,
    into: impl FnOnce(LockError) -> R,
    body: Body<F>,
) -> impl Future<Output = R>
where
    H: Held,
    A: Future<Output = Result<H, LockError>>,
    F: Future<Output = R>,
{
    async move {
        // Inside a section of this task that holds a key, this re-enters it: the guard
        // releases nothing and the outer section gives the lock back.
        let held = match acquire.await {
            Ok(held) => held,
            Err(error) => return into(error),
        };
        let outcome = held
            .scope(async {
                match on_lease_lost {
                    OnLeaseLost::Continue => Ok(body.await),
                    OnLeaseLost::Abort => abort_on_loss(&held, body).await,
                }
            })
            .await;
        match outcome {
            Ok(finished) => {
                held.finish().await;
                match finished {
                    Ok(result) => result,
                    Err(panic) => std::panic::resume_unwind(panic),
                }
            }
            // The body was dropped: say so now. The lock is most likely gone (or the server
            // unreachable, the usual cause), so its release goes on in the background rather
            // than holding the caller up until the server answers.
            Err(lost) => {
                let error = held.lost_error(lost);
                drop(held);
                into(error)
            }
        }
    }
}

/// Runs `body` until it finishes or a lease of `held` is lost, whichever comes first. The loss
/// is checked first: once it is known, the body takes no further step.
///
/// The watch on the loss (a wake-up on every change of the lease's status and a timer at its
/// local deadline, registered with the runtime's driver and removed again, for every lease of
/// `held`) is set up only once the body waits: a body that finishes in its first poll costs a
/// look at the status instead.
#[allow(
    clippy::manual_async_fn,
    reason = "an `async fn` would keep a second copy of each argument in its state"
)]
fn abort_on_loss<H: Held, B: Future + Unpin>(
    held: &H,
    mut body: B,
) -> impl Future<Output = Result<B::Output, H::Lost>> {
    async move {
        if let Some(lost) = held.lost_now() {
            return Err(lost);
        }
        // Made here, first polled only once the body waits.
        let mut lost = std::pin::pin!(held.lost());
        let mut watched = false;
        std::future::poll_fn(move |cx| {
            if watched && let Poll::Ready(lost) = lost.as_mut().poll(cx) {
                return Poll::Ready(Err(lost));
            }
            if let Poll::Ready(finished) = Pin::new(&mut body).poll(cx) {
                return Poll::Ready(Ok(finished));
            }
            if !watched {
                // The body waits: from now on a loss wakes this section. A loss since the
                // look above is seen by this first poll, before the body takes another step.
                watched = true;
                if let Poll::Ready(lost) = lost.as_mut().poll(cx) {
                    return Poll::Ready(Err(lost));
                }
            }
            Poll::Pending
        })
        .await
    }
}

/// A locked section's body, caught for panics, on the heap.
pub(crate) type Body<F> = Pin<Box<CatchUnwind<AssertUnwindSafe<F>>>>;

/// Boxes a body before any `async fn` takes it: a future passed by value to an `async fn` is
/// kept in its state twice or more (the argument and every local it is moved into), so a body of
/// 2 KB would cost 6 KB in every locked call while it runs. Boxed once, it is kept once.
pub(crate) fn box_body<F: Future>(body: F) -> Body<F> {
    Box::pin(AssertUnwindSafe(body).catch_unwind())
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;
    use std::future::Future;
    use std::pin::pin;
    use std::task::{Context, Poll, Waker};

    use super::*;
    use crate::error::LostReason;

    /// A held lock whose loss the test decides, counting how often its watch is polled.
    #[derive(Default)]
    struct Fake {
        lost: Cell<Option<LostReason>>,
        watch_polls: Cell<u32>,
    }

    impl Held for Fake {
        fn scope<F: Future>(&self, body: F) -> impl Future<Output = F::Output> {
            body
        }

        type Lost = LostReason;

        fn lost(&self) -> impl Future<Output = LostReason> {
            std::future::poll_fn(|_| {
                self.watch_polls.set(self.watch_polls.get() + 1);
                self.lost.get().map_or(Poll::Pending, Poll::Ready)
            })
        }

        fn lost_now(&self) -> Option<LostReason> {
            self.lost.get()
        }

        fn lost_error(&self, reason: LostReason) -> LockError {
            LockError::LeaseLost {
                key: "k".into(),
                reason,
            }
        }

        async fn finish(self) {}
    }

    fn poll<F: Future>(future: std::pin::Pin<&mut F>) -> Poll<F::Output> {
        future.poll(&mut Context::from_waker(Waker::noop()))
    }

    #[test]
    fn a_body_that_finishes_at_once_sets_up_no_watch() {
        let held = Fake::default();
        let section = pin!(abort_on_loss(&held, Box::pin(async { 7 })));
        assert!(matches!(poll(section), Poll::Ready(Ok(7))));
        assert_eq!(held.watch_polls.get(), 0);
    }

    #[test]
    fn a_loss_known_before_the_body_runs_keeps_it_from_running() {
        let held = Fake::default();
        held.lost.set(Some(LostReason::Expired));
        let ran = Cell::new(false);
        let section = pin!(abort_on_loss(&held, Box::pin(async { ran.set(true) })));
        assert!(matches!(
            poll(section),
            Poll::Ready(Err(LostReason::Expired))
        ));
        assert!(!ran.get());
    }

    #[test]
    fn a_body_that_waits_is_watched_and_stopped_by_a_loss() {
        let held = Fake::default();
        let steps = Cell::new(0);
        let body = Box::pin(async {
            loop {
                steps.set(steps.get() + 1);
                let mut once = false;
                std::future::poll_fn(|_| {
                    if std::mem::replace(&mut once, true) {
                        Poll::Ready(())
                    } else {
                        Poll::Pending
                    }
                })
                .await;
            }
        });
        let mut section = pin!(abort_on_loss(&held, body));
        assert!(poll(section.as_mut()).is_pending());
        assert_eq!((steps.get(), held.watch_polls.get()), (1, 1));
        assert!(poll(section.as_mut()).is_pending());
        assert_eq!((steps.get(), held.watch_polls.get()), (2, 2));
        // Once lost, the body takes no further step.
        held.lost.set(Some(LostReason::NotOwner));
        assert!(matches!(
            poll(section.as_mut()),
            Poll::Ready(Err(LostReason::NotOwner))
        ));
        assert_eq!(steps.get(), 2);
    }
}
