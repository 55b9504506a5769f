//! A scratch directory removed on drop.

use std::fs;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// A fresh directory under the system temp dir, removed with its contents on drop.
#[derive(Debug)]
pub(crate) struct TempDir {
    path: PathBuf,
}

impl TempDir {
    /// Creates `<tmp>/lock-tests-<label>-<pid>-<n>-<nanos>`; the pid, a counter and the clock keep
    /// it unique across threads, processes and leftovers of earlier runs.
    pub(crate) fn new(label: &str) -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let root = std::env::temp_dir();
        for _ in 0..100 {
            let nanos = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |elapsed| elapsed.subsec_nanos());
            let n = NEXT.fetch_add(1, Ordering::Relaxed);
            let path = root.join(format!(
                "lock-tests-{label}-{}-{n}-{nanos}",
                std::process::id()
            ));
            match fs::create_dir(&path) {
                Ok(()) => return Self { path },
                Err(e) if e.kind() == ErrorKind::AlreadyExists => continue,
                Err(e) => panic!("cannot create a temp dir at {}: {e}", path.display()),
            }
        }
        panic!("cannot create a unique temp dir under {}", root.display());
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        // Best effort: a leftover directory in the temp dir harms nobody.
        let _ = fs::remove_dir_all(&self.path);
    }
}
