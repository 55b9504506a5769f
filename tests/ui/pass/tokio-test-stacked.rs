// trybuild compiles pass cases as binaries, not tests: `#[test]` fns are left out, and with them
// the only uses of these imports.
#![allow(unused_imports)]

use lock_runtime::{LockError, distributed_lock};

// `#[tokio::test]` above `#[distributed_lock]`: the test body runs under the lock (the
// integration tests run such a test; here it only has to compile).
#[tokio::test]
#[distributed_lock(key = "tests:exclusive")]
async fn runs_alone() -> Result<(), LockError> {
    assert!(lock_runtime::current().is_some());
    Ok(())
}

fn main() {}
