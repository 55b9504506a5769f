use lock_runtime::distributed_lock;

// `io::Result<T>` hides its error type: the check goes through the return type instead.
#[distributed_lock(key = "file:<path>")]
async fn rewrite(path: String) -> std::io::Result<usize> {
    Ok(path.len())
}

fn main() {}
