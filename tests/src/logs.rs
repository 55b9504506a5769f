//! What the library logs, captured for a test to read.

use std::sync::{Arc, Mutex, PoisonError};

pub use tracing::Level;

/// The text the library logged (without colour codes) on this thread while a
/// [`capture`](Self::capture) guard lived.
///
/// ```no_run
/// use lock_tests::logs::{Level, Logged};
///
/// let logged = Logged::default();
/// {
///     let _capture = logged.capture(Level::WARN);
///     // ... the code under test ...
/// }
/// assert!(!logged.text().contains("retry"));
/// ```
#[derive(Clone, Default)]
pub struct Logged(Arc<Mutex<Vec<u8>>>);

impl Logged {
    /// Everything captured so far.
    pub fn text(&self) -> String {
        let bytes = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        String::from_utf8_lossy(&bytes).into_owned()
    }

    /// Captures the events of `level` and above on this thread until the guard is dropped.
    pub fn capture(&self, level: Level) -> tracing::subscriber::DefaultGuard {
        let subscriber = tracing_subscriber::fmt()
            .with_writer(self.clone())
            .with_ansi(false)
            .with_max_level(level)
            .finish();
        tracing::subscriber::set_default(subscriber)
    }
}

impl std::io::Write for Logged {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Logged {
    type Writer = Logged;

    fn make_writer(&'a self) -> Logged {
        self.clone()
    }
}
