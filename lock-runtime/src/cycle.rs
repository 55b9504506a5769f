//! A deadlock as [`LockError::Deadlock`](crate::LockError::Deadlock) and a `Busy` wait found in
//! one name it: its members, each a waiting call with what it waits for and holds. The detector
//! (`deadlock`) finds cycles and names them with these.

use std::fmt;
use std::time::SystemTime;

/// A deadlock, as [`LockError::Deadlock`](crate::LockError::Deadlock) names it: who waits for
/// which lock while holding which, starting with the call that gave up; each member waits for
/// a lock the next one holds, and the last for one the first holds.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct DeadlockCycle {
    /// The members, the call that gave up first.
    pub members: Vec<CycleMember>,
}

/// One waiting call of a [`DeadlockCycle`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct CycleMember {
    /// The lock it waits for, by name (`order:42`).
    pub waits_for: String,
    /// The locks its task holds, by name.
    pub holds: Vec<String>,
    /// Where it runs: host, process id and app name, as its manager records them.
    pub host: Option<String>,
    /// Its process id.
    pub pid: Option<u32>,
    /// Its app name ([`LockManagerBuilder::app_name`](crate::LockManagerBuilder::app_name)).
    pub app: Option<String>,
    /// When its wait began (its wall clock).
    pub waiting_since: SystemTime,
}

/// `pid 42 on web-1 (app "orders") holds `a` and waits for `b`; pid 7 on web-2 holds `b` and
/// waits for `a``.
impl fmt::Display for DeadlockCycle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (at, member) in self.members.iter().enumerate() {
            if at > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{member}")?;
        }
        Ok(())
    }
}

impl fmt::Display for CycleMember {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.pid, &self.host) {
            (Some(pid), Some(host)) => write!(f, "pid {pid} on {}", host.escape_debug())?,
            (Some(pid), None) => write!(f, "pid {pid}")?,
            (None, Some(host)) => write!(f, "a process on {}", host.escape_debug())?,
            (None, None) => f.write_str("a process")?,
        }
        if let Some(app) = &self.app {
            write!(f, " (app \"{}\")", app.escape_debug())?;
        }
        f.write_str(" holds ")?;
        for (at, held) in self.holds.iter().enumerate() {
            if at > 0 {
                f.write_str(", ")?;
            }
            write!(f, "`{}`", held.escape_debug())?;
        }
        write!(f, " and waits for `{}`", self.waits_for.escape_debug())
    }
}
