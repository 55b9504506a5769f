use lock_runtime::{LockError, LockManager, distributed_lock};

struct Inventory {
    locks: LockManager,
    warehouse: String,
    stock: u32,
}

impl Inventory {
    #[distributed_lock(key = "stock:<self.warehouse>:<sku>", manager = self.locks)]
    async fn available(&self, sku: &str) -> Result<u32, LockError> {
        if let Some(lock) = lock_runtime::current() {
            assert_eq!(lock.key(), format!("stock:{}:{sku}", self.warehouse));
        }
        Ok(self.stock)
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let inventory = Inventory {
        locks: LockManager::memory(),
        warehouse: "north".into(),
        stock: 12,
    };
    assert_eq!(inventory.available("sku-1").await.expect("locked call"), 12);
}
