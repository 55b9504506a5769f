//! `lockctl` for locks in a SQLite file: the operator's command line of lock-runtime, with the
//! URL scheme `sqlite://<path>` registered for this package's store, so that
//!
//! ```text
//! lockctl-sqlite --url sqlite:///var/lib/shop/locks.db list
//! lockctl-sqlite --url sqlite:///var/lib/shop/locks.db unlock order:42 --yes
//! ```
//!
//! lists, shows and force-releases the locks in that file through the store's inspection side.

use std::process::ExitCode;
use std::sync::Arc;

use lock_runtime::store::{self, Store, StoreError};
use lock_store_sqlite::SqliteStore;

async fn open(url: String) -> Result<Arc<dyn Store>, StoreError> {
    let path = url.split_once("://").map_or("", |(_, path)| path);
    if path.is_empty() {
        return Err(StoreError::config(
            "a sqlite:// URL names a file: sqlite:///path/to/locks.db",
        ));
    }
    Ok(Arc::new(SqliteStore::open(path).await?))
}

fn main() -> ExitCode {
    if let Err(err) = store::register_scheme("sqlite", open) {
        eprintln!("lockctl: {err}");
        return ExitCode::from(2);
    }
    lockctl::main()
}
