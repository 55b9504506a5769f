use lock_runtime::distributed_lock;

#[distributed_lock(key = "jobs:cleanup")]
async fn cleanup() {}

fn main() {}
