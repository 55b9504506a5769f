#![deny(missing_docs, unused_must_use)]
//! Doc comments, other attributes and inner attributes stay where they were.

use lock_runtime::{LockError, LockManager, distributed_lock};

/// Documented, `#[must_use]`, `#[inline]`, and with an attribute after ours.
#[must_use = "the refund amount must be recorded"]
#[distributed_lock(key = "refund:<order_id>", manager = locks)]
#[inline]
pub async fn refund(locks: &LockManager, order_id: u64) -> Result<u64, LockError> {
    #![allow(clippy::let_and_return)]
    let amount = order_id * 10;
    amount.checked_add(0).ok_or(LockError::Config("overflow".into()))
}

/// Compiled only when the condition holds, as without the attribute.
#[cfg(any())]
#[distributed_lock(key = "never")]
pub async fn never_compiled() -> Result<(), LockError> {
    this_does_not_exist()
}

/// Unsafe fns keep their `unsafe`.
///
/// # Safety
///
/// None needed; the attribute only has to keep the qualifier.
#[distributed_lock(key = "raw:<n>", manager = locks)]
pub async unsafe fn raw(locks: &LockManager, n: u8) -> Result<u8, LockError> {
    Ok(n)
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let locks = LockManager::memory();
    let amount = refund(&locks, 3).await.expect("locked call");
    assert_eq!(amount, 30);
    // SAFETY: `raw` has no safety requirement.
    assert_eq!(unsafe { raw(&locks, 1) }.await.expect("locked call"), 1);
}
