use lock_runtime::{LockError, LockManager, distributed_lock};

struct Point {
    x: i32,
    y: i32,
}

// Parameters bound by patterns, `mut` parameters and `_` parameters may sit next to the ones
// the key names; the key names whole parameters only.
#[distributed_lock(key = "grid:<id>", manager = locks)]
async fn shift(
    locks: &LockManager,
    id: u32,
    Point { x, y }: Point,
    (dx, dy): (i32, i32),
    mut steps: u8,
    _: &str,
) -> Result<(i32, i32), LockError> {
    steps = steps.saturating_add(1);
    Ok((x + dx * i32::from(steps), y + dy))
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let locks = LockManager::memory();
    let moved = shift(&locks, 1, Point { x: 1, y: 2 }, (3, 4), 0, "ignored").await;
    assert_eq!(moved.expect("locked call"), (4, 6));
}
