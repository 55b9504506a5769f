use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use lock_runtime::{LockError, LockManager, distributed_lock};

const EXPORT_SLOTS: u32 = 2;

// At most two exports run at once, whichever process runs them.
#[distributed_lock(key = "export", permits = 2, wait = "5s", manager = locks)]
async fn export(locks: &LockManager, running: Arc<AtomicU32>, most: Arc<AtomicU32>) -> Result<(), LockError> {
    let now = running.fetch_add(1, Ordering::SeqCst) + 1;
    most.fetch_max(now, Ordering::SeqCst);
    let permits = lock_runtime::current().expect("a permit").fencing_token();
    assert!(permits > 0);
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    running.fetch_sub(1, Ordering::SeqCst);
    Ok(())
}

// The number may be a constant.
#[distributed_lock(key = "report:<tenant>", permits = EXPORT_SLOTS, ttl = "10s")]
async fn report(tenant: u64) -> Result<u64, LockError> {
    // A nested call for the same semaphore re-enters this call's permit.
    nested(tenant).await
}

#[distributed_lock(key = "report:<tenant>", permits = EXPORT_SLOTS)]
async fn nested(tenant: u64) -> Result<u64, LockError> {
    Ok(tenant)
}

// A constant read through `Self` or a type parameter (which a `const` item could not name) is
// checked when the fn is compiled for its types.
trait Slots {
    const SLOTS: u32;
}

struct Two;

impl Slots for Two {
    const SLOTS: u32 = 2;
}

struct Pool<C> {
    slots: std::marker::PhantomData<C>,
}

impl<C: Slots> Pool<C> {
    const SLOTS: u32 = C::SLOTS;

    #[distributed_lock(key = "pool:<id>", permits = Self::SLOTS)]
    async fn through_self(&self, id: u64) -> Result<u32, LockError> {
        Ok(lock_runtime::current().expect("a permit").key().len() as u32)
    }

    #[distributed_lock(key = "pool:<id>", permits = C::SLOTS)]
    async fn through_param(&self, id: u64) -> Result<u32, LockError> {
        Ok(lock_runtime::current().expect("a permit").key().len() as u32)
    }
}

#[distributed_lock(key = "pool:<id>", permits = N)]
async fn const_param<const N: u32>(id: u64) -> Result<u32, LockError> {
    Ok(lock_runtime::current().expect("a permit").key().len() as u32)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let locks = LockManager::memory();
    lock_runtime::set_global_default(locks.clone()).expect("first default");
    let (running, most) = (Arc::new(AtomicU32::new(0)), Arc::new(AtomicU32::new(0)));
    let calls: Vec<_> = (0..6)
        .map(|_| {
            let (locks, running, most) = (locks.clone(), running.clone(), most.clone());
            tokio::spawn(async move { export(&locks, running, most).await })
        })
        .collect();
    for call in calls {
        call.await.expect("task").expect("a permit within the wait");
    }
    assert!(most.load(Ordering::SeqCst) <= 2);
    assert_eq!(report(7).await.expect("permit"), 7);
    let pool = Pool::<Two> {
        slots: std::marker::PhantomData,
    };
    assert_eq!(pool.through_self(1).await.expect("permit"), 6);
    assert_eq!(pool.through_param(2).await.expect("permit"), 6);
    assert_eq!(const_param::<2>(3).await.expect("permit"), 6);
}
