use lock_runtime::{LockError, LockManager, distributed_lock};

struct Tenant {
    id: u32,
}

struct Order {
    tenant: Tenant,
    number: u64,
    r#type: &'static str,
}

struct Shard(u8, (u16, u32));

struct Service {
    locks: LockManager,
    region: Region,
}

struct Region {
    name: String,
}

impl Service {
    // Field paths through parameters and `self`, tuple indices and raw identifiers.
    #[distributed_lock(
        key = "<self.region.name>/<order.tenant.id>/<order.number>/<order.r#type>/<shard.0>/<shard.1.1>",
        manager = self.locks
    )]
    async fn ship(&self, order: &Order, shard: Shard) -> Result<String, LockError> {
        let expected = format!(
            "{}/{}/{}/{}/{}/{}",
            self.region.name, order.tenant.id, order.number, order.r#type, shard.0, (shard.1).1
        );
        if let Some(lock) = lock_runtime::current() {
            assert_eq!(lock.key(), expected);
        }
        Ok(expected)
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let service = Service {
        locks: LockManager::memory(),
        region: Region { name: "eu".into() },
    };
    let order = Order {
        tenant: Tenant { id: 4 },
        number: 99,
        r#type: "express",
    };
    let shipped = service.ship(&order, Shard(2, (7, 8))).await;
    assert_eq!(shipped.expect("locked call"), "eu/4/99/express/2/8");
}
