//! A locked section: what `run_locked` and `#[distributed_lock]` do with whatever the acquire
//! gave them (one lock, or several keys taken together). Acquire, run the body with
//! `current()` reporting the locks, stop it when a lease is lost (by default), and release
//! before returning: one path for every shape of lock.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;

use futures_util::FutureExt;
use futures_util::future::CatchUnwind;

use crate::{LockError, OnLeaseLost};

/// What a locked section holds while its body runs.
pub(crate) trait Held: Sized {
    /// Runs `body` with [`current()`](crate::current) reporting the held locks, and with nested
    /// acquisitions of them re-entering.
    fn scope<F: Future>(&self, body: F) -> impl Future<Output = F::Output>;

    /// What [`lost`](Held::lost) tells: kept small, since the section keeps it in its state.
    type Lost;

    /// Resolves once a held lease is lost.
    fn lost(&self) -> impl Future<Output = Self::Lost>;

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
                    OnLeaseLost::Abort => {
                        // The loss is checked first: once it is known, the body takes no further step.
                        tokio::select! {
                            biased;
                            lost = held.lost() => Err(lost),
                            finished = body => Ok(finished),
                        }
                    }
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

/// A locked section's body, caught for panics, on the heap.
pub(crate) type Body<F> = Pin<Box<CatchUnwind<AssertUnwindSafe<F>>>>;

/// Boxes a body before any `async fn` takes it: a future passed by value to an `async fn` is
/// kept in its state twice or more (the argument and every local it is moved into), so a body of
/// 2 KB would cost 6 KB in every locked call while it runs. Boxed once, it is kept once.
pub(crate) fn box_body<F: Future>(body: F) -> Body<F> {
    Box::pin(AssertUnwindSafe(body).catch_unwind())
}
