use lock_runtime::{LockError, distributed_lock};

#[distributed_lock(key = "tenant:<self.tenant>:<doc_id>")]
async fn save(doc_id: u64) -> Result<u64, LockError> {
    Ok(doc_id)
}

fn main() {}
