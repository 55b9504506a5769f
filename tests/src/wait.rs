//! Polling for conditions that become true eventually.

use std::time::Duration;

/// How often the condition is checked.
const POLL_INTERVAL: Duration = Duration::from_millis(10);

/// Calls `condition` every few milliseconds until it returns true (then returns true) or `timeout`
/// has passed (then returns false). Blocks the thread: inside async code use [`wait_until_async`].
///
/// Give it a generous timeout; it returns as soon as the condition holds, so a fast machine does
/// not pay for it.
pub fn wait_until(timeout: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let deadline = std::time::Instant::now() + timeout;
    loop {
        if condition() {
            return true;
        }
        if std::time::Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(POLL_INTERVAL);
    }
}

/// Like [`wait_until`], but sleeps with tokio so the runtime keeps driving other tasks
/// (required on a `current_thread` runtime, where a blocking wait would stall the code under test).
pub async fn wait_until_async(timeout: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if condition() {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(POLL_INTERVAL).await;
    }
}
