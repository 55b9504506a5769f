use lock_runtime::{LockError, distributed_lock};

#[distributed_lock(key = "order:<usr_id>:{voucher_id}:<amount>")]
async fn place_order(user_id: u64, voucher_id: u64) -> Result<u64, LockError> {
    Ok(user_id + voucher_id)
}

fn main() {}
