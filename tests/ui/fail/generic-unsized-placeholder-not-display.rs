use lock_runtime::{LockError, distributed_lock};

#[distributed_lock(key = "entity:<id>")]
async fn touch<'a, I>(id: &'a I) -> Result<usize, LockError>
where
    I: AsRef<[u8]> + ?Sized + Sync,
{
    Ok(id.as_ref().len())
}

fn main() {}
