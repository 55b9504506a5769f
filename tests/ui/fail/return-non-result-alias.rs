use lock_runtime::distributed_lock;

// The attribute cannot see through an alias: the check is rustc's, at the return type.
type Lookup = Option<u64>;

#[distributed_lock(key = "order:<id>")]
async fn find(id: u64) -> Lookup {
    Some(id)
}

fn main() {}
