use lock_runtime::distributed_lock;

#[distributed_lock(key = "order:<id>")]
async fn place<E>(id: u64) -> Result<u64, E> {
    Ok(id)
}

fn main() {}
