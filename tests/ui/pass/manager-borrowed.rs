use std::sync::Arc;

use lock_runtime::{LockError, LockManager, distributed_lock};

// `manager = ...` may give a borrow (an accessor returning `&LockManager`, `&self.locks`) on every
// receiver: the manager is cloned, not the reference, when the body owns what it reads.
struct Svc {
    locks: LockManager,
    count: u64,
}

impl Svc {
    fn locks(&self) -> &LockManager {
        &self.locks
    }

    #[distributed_lock(key = "svc:ref:<id>", manager = self.locks())]
    async fn by_ref_accessor(&self, id: u64) -> Result<u64, LockError> {
        Ok(id)
    }

    #[distributed_lock(key = "svc:ref:<id>", manager = &self.locks)]
    async fn by_ref_borrow(&self, id: u64) -> Result<u64, LockError> {
        Ok(id)
    }

    #[distributed_lock(key = "svc:mut:<id>", manager = self.locks())]
    async fn by_mut_accessor(&mut self, id: u64) -> Result<u64, LockError> {
        self.count += 1;
        Ok(id)
    }

    #[distributed_lock(key = "svc:mut:<id>", manager = &self.locks)]
    async fn by_mut_borrow(&mut self, id: u64) -> Result<u64, LockError> {
        self.count += 1;
        Ok(id)
    }

    #[distributed_lock(key = "svc:arc:<id>", manager = self.locks())]
    async fn by_arc_accessor(self: Arc<Self>, id: u64) -> Result<u64, LockError> {
        Ok(id + self.count)
    }

    #[distributed_lock(key = "svc:arc:<id>", manager = &self.locks)]
    async fn by_arc_borrow(self: Arc<Self>, id: u64) -> Result<u64, LockError> {
        Ok(id + self.count)
    }

    #[distributed_lock(key = "svc:own:<id>", manager = self.locks())]
    async fn by_value_accessor(self, id: u64) -> Result<Self, LockError> {
        let _ = id;
        Ok(self)
    }

    #[distributed_lock(key = "svc:own:<id>", manager = &self.locks)]
    async fn by_value_borrow(self, id: u64) -> Result<Self, LockError> {
        let _ = id;
        Ok(self)
    }
}

#[distributed_lock(key = "param:mut:<id>", manager = locks)]
async fn with_mut_manager(locks: &mut LockManager, id: u64) -> Result<u64, LockError> {
    let _: &mut LockManager = locks;
    Ok(id)
}

#[distributed_lock(key = "param:ref:<id>", manager = locks)]
async fn with_ref_manager(locks: &LockManager, id: u64) -> Result<u64, LockError> {
    let _: &LockManager = locks;
    Ok(id)
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let mut svc = Svc {
        locks: LockManager::memory(),
        count: 0,
    };
    assert_eq!(svc.by_ref_accessor(1).await.expect("locked"), 1);
    assert_eq!(svc.by_ref_borrow(2).await.expect("locked"), 2);
    assert_eq!(svc.by_mut_accessor(3).await.expect("locked"), 3);
    assert_eq!(svc.by_mut_borrow(4).await.expect("locked"), 4);
    let svc = svc.by_value_accessor(5).await.expect("locked");
    let svc = Arc::new(svc.by_value_borrow(6).await.expect("locked"));
    assert_eq!(svc.clone().by_arc_accessor(7).await.expect("locked"), 9);
    assert_eq!(svc.clone().by_arc_borrow(8).await.expect("locked"), 10);
    let mut locks = LockManager::memory();
    assert_eq!(with_mut_manager(&mut locks, 9).await.expect("locked"), 9);
    assert_eq!(with_ref_manager(&locks, 10).await.expect("locked"), 10);
}
