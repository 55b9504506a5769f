//! Support items for the code that `#[distributed_lock]` generates. Not a public API: names here
//! change without notice.

use std::fmt::Display;
use std::future::Future;

pub use crate::error::LockError;
use crate::section::box_body;

pub use crate::manager::LockManager;
pub use crate::options::{Deadlock, LockOptions, OnLeaseLost};
pub use crate::shape::Mode;
pub use core::time::Duration;
pub use std::fmt::Write;
pub use std::string::String;

/// Runs `body` while holding the lock `key` of `manager`; see [`LockManager::run_locked`].
///
/// A lock error `error` becomes the output `wrap(into(error))`, that is `Err(E::from(error))`.
/// Both are given by the generated code's checks ([`LockedReturn::from_error`] and
/// [`FromLockError::from_lock_error`]), so nothing here can fail to compile on a wrong return
/// type: the checks, spanned in the user's code, are the only errors.
pub fn run_locked<F, R, E>(
    manager: &LockManager,
    key: String,
    options: LockOptions,
    wrap: fn(E) -> R,
    into: fn(LockError) -> E,
    body: F,
) -> impl Future<Output = R>
where
    F: Future<Output = R>,
{
    manager.run_locked_boxed(key, options, move |error| wrap(into(error)), box_body(body))
}

/// Runs `body` while holding the lock `key` of the process-wide default manager
/// ([`set_global_default`](crate::set_global_default)). Without one, the body does not run and
/// the caller gets [`LockError::Config`].
pub fn run_locked_global<F, R, E>(
    key: String,
    options: LockOptions,
    wrap: fn(E) -> R,
    into: fn(LockError) -> E,
    body: F,
) -> impl Future<Output = R>
where
    F: Future<Output = R>,
{
    // Boxed here, not inside the async block, so the body is kept once (see `box_body`).
    let body = box_body(body);
    async move {
        let Some(manager) = crate::manager::global_default() else {
            return wrap(into(no_global_default()));
        };
        manager
            .run_locked_boxed(key, options, move |error| wrap(into(error)), body)
            .await
    }
}

/// Runs `body` while holding every lock of `keys` (`#[distributed_lock(keys = [..])]`); see
/// [`LockManager::run_locked_all`]. Errors as for [`run_locked`].
pub fn run_locked_all<F, R, E, const N: usize>(
    manager: &LockManager,
    keys: [String; N],
    options: LockOptions,
    wrap: fn(E) -> R,
    into: fn(LockError) -> E,
    body: F,
) -> impl Future<Output = R>
where
    F: Future<Output = R>,
{
    manager.run_locked_all_boxed(
        Vec::from(keys),
        options,
        move |error| wrap(into(error)),
        box_body(body),
    )
}

/// [`run_locked_all`] on the process-wide default manager, as [`run_locked_global`].
pub fn run_locked_all_global<F, R, E, const N: usize>(
    keys: [String; N],
    options: LockOptions,
    wrap: fn(E) -> R,
    into: fn(LockError) -> E,
    body: F,
) -> impl Future<Output = R>
where
    F: Future<Output = R>,
{
    let body = box_body(body);
    async move {
        let Some(manager) = crate::manager::global_default() else {
            return wrap(into(no_global_default()));
        };
        manager
            .run_locked_all_boxed(
                Vec::from(keys),
                options,
                move |error| wrap(into(error)),
                body,
            )
            .await
    }
}

fn no_global_default() -> LockError {
    LockError::Config(format!(
        "#[distributed_lock] found no default LockManager: call \
         lock_runtime::set_global_default(manager) at startup, or pass `manager = ...`{}",
        IN_A_TEST
    ))
}

/// Where the kit is built, the likely cause: a task spawned from inside `TestLocks::scope`.
#[cfg(feature = "testing")]
const IN_A_TEST: &str = "; in a test, `TestLocks::scope(future)` (or \
    `testing::with_default(&manager, future)`) makes a manager the default of that future \
    only, and a task spawned inside it does not inherit it: spawn `kit.scope(future)` (or \
    `with_default(&manager, future)`) instead of the bare future";

#[cfg(not(feature = "testing"))]
const IN_A_TEST: &str = "";

/// Implemented by every type that can stand in a key template placeholder.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be used in a #[distributed_lock] key placeholder",
    label = "this placeholder's value does not implement `std::fmt::Display`",
    note = "a key placeholder is rendered with `Display`: implement `std::fmt::Display` for `{Self}`, or name a field that implements it (`<param.field>`)"
)]
pub trait KeyPart: Display {}

#[diagnostic::do_not_recommend]
impl<T: Display + ?Sized> KeyPart for T {}

/// Checks at compile time that a locked fn's error type can carry a [`LockError`], and converts
/// one. Named by the generated code as `<E as FromLockError>::from_lock_error`, at `E`'s span.
#[diagnostic::on_unimplemented(
    message = "the error type `{Self}` of a #[distributed_lock] fn must implement `From<lock_runtime::LockError>`",
    label = "this error type cannot carry a lock error",
    note = "add `impl From<lock_runtime::LockError> for {Self}` (or a `#[from] LockError` variant with thiserror), or return `Result<_, lock_runtime::LockError>`"
)]
pub trait FromLockError {
    /// `Self::from(error)`.
    fn from_lock_error(error: LockError) -> Self;
}

#[diagnostic::do_not_recommend]
impl<E: From<LockError>> FromLockError for E {
    #[inline(always)]
    fn from_lock_error(error: LockError) -> Self {
        E::from(error)
    }
}

/// Checks at compile time that a locked fn returns a `Result`, whatever its name (`io::Result<T>`,
/// an alias), and wraps an error in it. Named by the generated code at the return type's span.
#[diagnostic::on_unimplemented(
    message = "a #[distributed_lock] fn must return `Result<T, E>` with `E: From<lock_runtime::LockError>`, found `{Self}`",
    label = "not a `Result`",
    note = "acquiring the lock can fail (busy, lost, Redis unreachable) and the failure is returned as `E`; write e.g. `-> Result<{Self}, lock_runtime::LockError>`"
)]
pub trait LockedReturn {
    /// The `E` of `Result<T, E>`.
    type Error;
    /// `Err(error)`.
    fn from_error(error: Self::Error) -> Self;
}

#[diagnostic::do_not_recommend]
impl<T, E> LockedReturn for Result<T, E> {
    type Error = E;

    #[inline(always)]
    fn from_error(error: E) -> Self {
        Err(error)
    }
}
