use lock_runtime::distributed_lock;

struct Receipt {
    order: u64,
}

// A struct is not a `Result`: a failed acquire would have nowhere to go.
#[distributed_lock(key = "order:<id>")]
async fn place(id: u64) -> Receipt {
    Receipt { order: id }
}

fn main() {}
