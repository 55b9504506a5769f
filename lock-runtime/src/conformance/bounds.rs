//! The kit's bounds, in seconds so that it passes on a loaded machine, and what a check finds.

use std::time::Duration;

/// A lease no check sees run out.
pub(super) const LONG_TTL: Duration = Duration::from_secs(30);
/// The lease of the checks that wait for an expiry.
pub(super) const SHORT_TTL: Duration = Duration::from_secs(1);
/// The lock-delay of the checks that wait for one.
pub(super) const LOCK_DELAY: Duration = Duration::from_secs(2);
/// How soon "at once" must be on a loaded machine.
pub(super) const SOON: Duration = Duration::from_secs(5);
/// The longest a check waits for something that must come.
pub(super) const PATIENCE: Duration = Duration::from_secs(10);
/// The longest one check may run.
pub(super) const CHECK_LIMIT: Duration = Duration::from_secs(60);

/// What a check found: `Ok` with a note on what it saw, or `Err` with what was seen and what
/// was expected.
pub(super) type Verdict = Result<String, String>;
