//! What the package's tests share: a database file of their own, and waiting on what can be
//! seen.
#![allow(dead_code, unreachable_pub)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use lock_runtime::LockManager;
use lock_store_sqlite::SqliteStore;

/// A database file in the temporary directory, named for this process and test, removed (with
/// its WAL files) when dropped.
pub struct TempDb {
    path: PathBuf,
}

impl TempDb {
    pub fn new(test: &str) -> TempDb {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let name = format!(
            "lock-store-sqlite-{}-{}-{test}.db",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        TempDb {
            path: std::env::temp_dir().join(name),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub async fn store(&self) -> Arc<SqliteStore> {
        Arc::new(
            SqliteStore::open(&self.path)
                .await
                .expect("open the database"),
        )
    }
}

impl Drop for TempDb {
    fn drop(&mut self) {
        for suffix in ["", "-wal", "-shm"] {
            let mut file = self.path.clone().into_os_string();
            file.push(suffix);
            let _ = std::fs::remove_file(file);
        }
    }
}

/// A manager over `store`, as one process of several would build it.
pub async fn manager(store: &Arc<SqliteStore>) -> LockManager {
    LockManager::builder()
        .store(store.clone())
        .build()
        .await
        .expect("a manager over the SQLite store")
}

/// Waits up to `timeout` for `condition`, looking every 20 ms.
pub async fn wait_until(timeout: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let until = Instant::now() + timeout;
    loop {
        if condition() {
            return true;
        }
        if Instant::now() >= until {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
