//! A `#[distributed_lock]` fn with no `manager = ...`, in a process that never called
//! `lock_runtime::set_global_default`. A test binary of its own: the global default is
//! process-wide, and once any test in a process set it, this case could not happen there.

use std::sync::atomic::{AtomicBool, Ordering};

use lock_runtime::{LockError, distributed_lock};

#[distributed_lock(key = "orphan:<id>")]
async fn orphan(id: u32, ran: &AtomicBool) -> Result<(), LockError> {
    ran.store(true, Ordering::SeqCst);
    Ok(())
}

#[tokio::test]
async fn without_a_default_or_manager_the_call_fails_with_config_and_skips_the_body() {
    assert!(lock_runtime::global_default().is_none(), "a default is set");
    let ran = AtomicBool::new(false);
    match orphan(1, &ran).await {
        Err(LockError::Config(message)) => {
            assert!(message.contains("set_global_default"), "{message}");
        }
        other => panic!("expected Config, got {other:?}"),
    }
    assert!(!ran.load(Ordering::SeqCst), "the body ran without a lock");
}
