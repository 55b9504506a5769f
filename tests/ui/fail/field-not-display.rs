use lock_runtime::{LockError, distributed_lock};

struct Tenant(u32);

struct Order {
    tenant: Tenant,
    id: u64,
}

#[distributed_lock(key = "tenant:<order.tenant>:order:<order.id>")]
async fn ship(order: &Order) -> Result<u64, LockError> {
    Ok(order.id + u64::from(order.tenant.0))
}

fn main() {}
