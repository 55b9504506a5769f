use std::sync::{Arc, LazyLock};

use lock_runtime::{LockError, LockManager, distributed_lock};

// `manager = <expr>` takes any expression that gives a `LockManager`, a reference to one, or a
// smart pointer to one: it is borrowed and deref-coerced to `&LockManager`.

static LOCKS: LazyLock<LockManager> = LazyLock::new(LockManager::memory);

fn shared_locks() -> &'static LockManager {
    &LOCKS
}

struct AppState {
    locks: LockManager,
    arc_locks: Arc<LockManager>,
}

#[distributed_lock(key = "a:<id>", manager = LOCKS)]
async fn from_static(id: u64) -> Result<u64, LockError> {
    Ok(id)
}

#[distributed_lock(key = "b:<id>", manager = LOCKS.clone())]
async fn from_owned_temporary(id: u64) -> Result<u64, LockError> {
    Ok(id)
}

#[distributed_lock(key = "c:<id>", manager = shared_locks())]
async fn from_fn_returning_ref(id: u64) -> Result<u64, LockError> {
    Ok(id)
}

#[distributed_lock(key = "d:<id>", manager = &state.locks)]
async fn from_explicit_ref(state: &AppState, id: u64) -> Result<u64, LockError> {
    Ok(id + state.locks.memory_marker())
}

#[distributed_lock(key = "e:<id>", manager = state.arc_locks)]
async fn from_arc(state: &AppState, id: u64) -> Result<u64, LockError> {
    Ok(id)
}

#[distributed_lock(key = "f:<id>", manager = locks)]
async fn from_double_ref(locks: &&LockManager, id: u64) -> Result<u64, LockError> {
    Ok(id)
}

// An owned parameter that the body also uses: the manager is cloned before the body takes it.
#[distributed_lock(key = "g:<id>", manager = state.locks)]
async fn from_owned_param(state: AppState, id: u64) -> Result<u64, LockError> {
    drop(state);
    Ok(id)
}

trait MemoryMarker {
    fn memory_marker(&self) -> u64;
}

impl MemoryMarker for LockManager {
    fn memory_marker(&self) -> u64 {
        0
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let state = AppState {
        locks: LockManager::memory(),
        arc_locks: Arc::new(LockManager::memory()),
    };
    assert_eq!(from_static(1).await.expect("locked call"), 1);
    assert_eq!(from_owned_temporary(2).await.expect("locked call"), 2);
    assert_eq!(from_fn_returning_ref(3).await.expect("locked call"), 3);
    assert_eq!(from_explicit_ref(&state, 4).await.expect("locked call"), 4);
    assert_eq!(from_arc(&state, 5).await.expect("locked call"), 5);
    assert_eq!(from_double_ref(&&state.locks, 6).await.expect("locked call"), 6);
    assert_eq!(from_owned_param(state, 7).await.expect("locked call"), 7);
}
