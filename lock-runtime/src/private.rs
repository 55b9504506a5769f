//! Support items for the code that `#[distributed_lock]` generates. Not a public API: names here
//! change without notice.

use std::fmt::Display;
use std::future::Future;

use crate::LockError;
use crate::manager::box_body;

pub use crate::options::OnLeaseLost;
pub use crate::{LockManager, LockOptions};
pub use core::time::Duration;
pub use std::fmt::Write;
pub use std::string::String;

/// Runs `body` while holding the lock `key` of `manager`; see [`LockManager::run_locked`].
pub fn run_locked<F, T, E>(
    manager: &LockManager,
    key: String,
    options: LockOptions,
    body: F,
) -> impl Future<Output = Result<T, E>>
where
    F: Future<Output = Result<T, E>>,
    E: From<LockError>,
{
    manager.run_locked(key, options, body)
}

/// Runs `body` while holding the lock `key` of the process-wide default manager
/// ([`set_global_default`](crate::set_global_default)). Without one, the body does not run and
/// the caller gets [`LockError::Config`].
pub fn run_locked_global<F, T, E>(
    key: String,
    options: LockOptions,
    body: F,
) -> impl Future<Output = Result<T, E>>
where
    F: Future<Output = Result<T, E>>,
    E: From<LockError>,
{
    // Boxed here, not inside the async block, so the body is kept once (see `box_body`).
    let body = box_body(body);
    async move {
        let manager = crate::global_default().ok_or_else(|| {
            LockError::Config(
                "#[distributed_lock] found no default LockManager: call \
                 lock_runtime::set_global_default(manager) at startup, or pass `manager = ...`"
                    .into(),
            )
        })?;
        manager.run_locked_boxed(key, options, body).await
    }
}

/// Implemented by every type that can stand in a key template placeholder.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be used in a #[distributed_lock] key placeholder",
    label = "this placeholder's value does not implement `std::fmt::Display`",
    note = "a key placeholder is rendered with `Display`: implement `std::fmt::Display` for `{Self}`, or name a field that implements it (`<param.field>`)"
)]
pub trait KeyPart: Display {}

#[diagnostic::do_not_recommend]
impl<T: Display + ?Sized> KeyPart for T {}

/// Passes a placeholder value through, checking that it can be rendered into a key.
#[inline(always)]
pub fn key_part<T: KeyPart + ?Sized>(value: &T) -> &T {
    value
}

/// Checks at compile time that a locked fn's error type can carry a [`LockError`].
#[diagnostic::on_unimplemented(
    message = "the error type `{Self}` of a #[distributed_lock] fn must implement `From<lock_runtime::LockError>`",
    label = "this error type cannot carry a lock error",
    note = "add `impl From<lock_runtime::LockError> for {Self}` (or a `#[from] LockError` variant with thiserror), or return `Result<_, lock_runtime::LockError>`"
)]
pub trait FromLockError: From<LockError> {}

#[diagnostic::do_not_recommend]
impl<E: From<LockError>> FromLockError for E {}

/// Names the error type of a locked fn so that [`FromLockError`] is checked at its span.
#[inline(always)]
pub fn assert_error_type<E: FromLockError>() {}
