//! The types and futures users move between tasks are `Send` (and `Sync` where shared).

use lock_runtime::{ElectionOptions, LockError, LockGuard, LockManager, LockOptions};

fn assert_send<T: Send>(_: &T) {}
fn assert_send_sync<T: Send + Sync + 'static>() {}

#[test]
fn managers_guards_and_lock_futures_are_send() {
    assert_send_sync::<LockManager>();
    assert_send_sync::<LockGuard>();
    assert_send_sync::<LockError>();
    assert_send_sync::<lock_runtime::CurrentLock>();
    assert_send_sync::<lock_runtime::Leadership>();
    assert_send_sync::<lock_runtime::MultiGuard>();
    assert_send_sync::<lock_runtime::MultiReleaseError>();
    let locks = LockManager::memory();
    assert_send(&locks.lock("k", LockOptions::new()));
    assert_send(&locks.run_locked("k".into(), LockOptions::new(), async {
        Ok::<_, LockError>(())
    }));
    assert_send(&locks.lock_all(["a", "b"], LockOptions::new()));
    assert_send(
        &locks.run_locked_all(["a", "b"], LockOptions::new(), async {
            Ok::<_, LockError>(())
        }),
    );
    assert_send(&LockManager::connect("memory://"));
}

#[tokio::test]
async fn election_futures_are_send() {
    let locks = LockManager::memory();
    let leadership = locks
        .elect("k", ElectionOptions::new())
        .expect("campaign starts");
    assert_send(&leadership.elected());
    assert_send(&leadership.deposed());
    assert_send(&leadership.step_down());
}
