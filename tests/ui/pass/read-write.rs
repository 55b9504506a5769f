use lock_runtime::{LockError, LockManager, Mode, distributed_lock};

// Many readers at once; a writer alone.
#[distributed_lock(key = "doc:<id>", mode = "read", wait = "5s")]
async fn read_doc(id: u64) -> Result<u64, LockError> {
    let held = lock_runtime::current().expect("a read share");
    assert!(held.fencing_token() > 0);
    Ok(id)
}

#[distributed_lock(key = "doc:<id>", mode = "write", ttl = "10s", wait = "5s")]
async fn write_doc(id: u64) -> Result<u64, LockError> {
    // A read of the same document inside the write section re-enters the write hold.
    read_doc(id).await
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let locks = LockManager::memory();
    lock_runtime::set_global_default(locks.clone()).expect("first default");
    assert_eq!(write_doc(7).await.expect("write"), 7);
    let share = locks
        .read_lock("doc:7", lock_runtime::LockOptions::new())
        .await
        .expect("free");
    assert_eq!(share.mode(), Mode::Read);
    // A reader alongside another reader.
    let other = tokio::spawn(read_doc(7)).await.expect("task");
    assert_eq!(other.expect("read"), 7);
    share.release().await.expect("release");
}
