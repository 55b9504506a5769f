//! Who held a lock an acquire found busy, as the lock records it: what
//! [`LockError::Busy`](crate::LockError::Busy) and the slow-acquire event carry.

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::protocol::StoredLock;
use crate::protocol::value::records_holder;

/// The holder of a lock that an acquire found busy, as it recorded itself in the lock (see
/// [`LockManagerBuilder::holder_metadata`](crate::LockManagerBuilder::holder_metadata), on by
/// default): where it runs, since when it holds the lock, and its fencing token where the lock
/// records that.
///
/// It comes with [`LockError::Busy`](crate::LockError::Busy) from the server's last busy answer,
/// at no extra request: the acquire's answer carries it, on Redis (every deployment) and on
/// PostgreSQL (the row's `host`, `pid`, `app` and `since` columns). There is none for a
/// semaphore or a read-write lock (they have several holders), for a holder that recorded
/// nothing (holder metadata off), for a lock a PostgreSQL transaction holds
/// (`postgres::lock_in_transaction`), and on `memory://`.
///
/// Nothing in it lets anyone release the lock: [`holder_id`](Self::holder_id) is a digest of
/// the holder's owner token, never the token.
///
/// ```
/// use lock_runtime::{LockError, LockManager, LockOptions};
///
/// async fn run_report(locks: &LockManager) -> Result<(), LockError> {
///     match locks.lock("report", LockOptions::new()).await {
///         Ok(guard) => guard.release().await,
///         Err(LockError::Busy { blocker: Some(blocker), .. }) => {
///             // held by pid 42 on web-1 (app "orders", holder 3f2a9c01b7de) since 2025-...Z
///             eprintln!("report is running elsewhere: {blocker}");
///             if let (Some(host), Some(pid)) = (&blocker.host, blocker.pid) {
///                 eprintln!("to stop it: ssh {host} kill {pid}");
///             }
///             Ok(())
///         }
///         Err(LockError::Busy { .. }) => Ok(()), // busy, holder not recorded
///         Err(err) => Err(err),
///     }
/// }
/// # let _ = run_report;
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Blocker {
    /// 12 hex digits of the SHA-1 of the holder's owner token: tells holders apart, is what
    /// [`inspect::StoredLock::token_id`](crate::inspect::StoredLock::token_id) and `lockctl`
    /// show, but cannot be turned back into the token.
    pub holder_id: String,
    /// The holder's host name.
    pub host: Option<String>,
    /// The holder's process id.
    pub pid: Option<u32>,
    /// The holder's [`app_name`](crate::LockManagerBuilder::app_name) (`None` if it set none).
    pub app: Option<String>,
    /// When the holder began the attempt that took the lock (its wall clock).
    pub since: Option<SystemTime>,
    /// The holder's fencing token, where the lock records it. A PostgreSQL row always does
    /// (`Some`). On Redis only values written by 0.2 (`held fence=<F> token=...`) do; the
    /// current format does not: a token comes from the slot's counter, counted up in the same
    /// transaction that writes the value, so the value cannot contain it, and reading the
    /// counter afterwards would name a later attempt's token, not the holder's. `None` then.
    pub fencing_token: Option<u64>,
}

/// Milliseconds since the Unix epoch from which a `since=` is not a time (year 10000): shown
/// as nothing rather than as a date no one wrote.
pub(crate) const SINCE_BOUND_MS: u64 = 253_402_300_800_000;

impl Blocker {
    /// The holder a lock's value (whole, or without its owner token as acquire.lua answers it)
    /// records, named by `holder_id` if given, else by its token's id; `None` if the value
    /// records no holder metadata, or is not a held lock.
    pub(crate) fn from_value(value: &str, holder_id: Option<String>) -> Option<Blocker> {
        if !records_holder(value) {
            return None;
        }
        let lock = StoredLock::parse(value)?;
        if lock.state != "held" {
            return None;
        }
        let holder_id = holder_id.or_else(|| lock.token_id())?;
        let field = |name| lock.holder_field(name).filter(|value| !value.is_empty());
        let since = field("since")
            .and_then(|ms| ms.parse::<u64>().ok())
            .filter(|&ms| ms < SINCE_BOUND_MS)
            .map(|ms| UNIX_EPOCH + Duration::from_millis(ms));
        let blocker = Blocker {
            holder_id,
            host: field("host").map(str::to_owned),
            pid: field("pid").and_then(|pid| pid.parse().ok()),
            app: field("app").map(str::to_owned),
            since,
            fencing_token: (lock.fence != 0).then_some(lock.fence),
        };
        let recorded = blocker.host.is_some()
            || blocker.pid.is_some()
            || blocker.app.is_some()
            || blocker.since.is_some();
        recorded.then_some(blocker)
    }

    /// [`since`](Self::since) in RFC 3339, UTC, to the millisecond.
    pub(crate) fn since_text(&self) -> Option<humantime::Rfc3339Timestamp> {
        self.since.map(humantime::format_rfc3339_millis)
    }
}

/// `held by pid 42 on web-1 (app "orders", holder 3f2a9c01b7de) since
/// 2025-11-25T04:32:03.456Z [fencing token 17]`, leaving out what the lock does not record.
impl fmt::Display for Blocker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("held by")?;
        if let Some(pid) = self.pid {
            write!(f, " pid {pid}")?;
        }
        if let Some(host) = &self.host {
            let on = if self.pid.is_some() { " on" } else { "" };
            write!(f, "{on} {}", host.escape_debug())?;
        }
        f.write_str(" (")?;
        if let Some(app) = &self.app {
            write!(f, "app {app:?}, ")?;
        }
        write!(f, "holder {})", self.holder_id)?;
        if let Some(since) = self.since_text() {
            write!(f, " since {since}")?;
        }
        if let Some(token) = self.fencing_token {
            write!(f, " [fencing token {token}]")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_with_metadata_names_its_holder_and_never_its_token() {
        let value = "held token=abc waiting=1 since=1764045123456 host=web-1 pid=42 app=orders api";
        let blocker = Blocker::from_value(value, None).expect("recorded");
        assert_eq!(blocker.holder_id, "a9993e364706");
        assert_eq!(blocker.host.as_deref(), Some("web-1"));
        assert_eq!(blocker.pid, Some(42));
        assert_eq!(blocker.app.as_deref(), Some("orders api"));
        assert_eq!(
            blocker.since,
            Some(UNIX_EPOCH + Duration::from_millis(1_764_045_123_456))
        );
        assert_eq!(blocker.fencing_token, None);
        let shown = blocker.to_string();
        assert_eq!(
            shown,
            "held by pid 42 on web-1 (app \"orders api\", holder a9993e364706) since \
             2025-11-25T04:32:03.456Z"
        );
        let debug = format!("{blocker:?}");
        for text in [&shown, &debug] {
            assert!(!text.contains("abc"), "{text}");
        }
    }

    #[test]
    fn the_script_answer_without_a_token_is_read_with_the_holder_it_names() {
        // acquire.lua answers the value without its owner token, and the holder apart.
        let blocker = Blocker::from_value(
            "held fence=17 waiting=0 since=0 host=h pid=7 app=",
            Some("0123456789ab".into()),
        )
        .expect("recorded");
        assert_eq!(blocker.holder_id, "0123456789ab");
        assert_eq!(blocker.fencing_token, Some(17));
        assert_eq!(blocker.app, None);
        assert_eq!(blocker.since, Some(UNIX_EPOCH));
        assert_eq!(
            blocker.to_string(),
            "held by pid 7 on h (holder 0123456789ab) since 1970-01-01T00:00:00.000Z \
             [fencing token 17]"
        );
    }

    #[test]
    fn nothing_recorded_is_no_blocker() {
        for value in [
            "held token=abc waiting=0",
            "held fence=3 token=abc waiting=0",
            "kept waiting=1",
            "free next=t until=5",
            "",
            "hello since=5",
        ] {
            assert_eq!(Blocker::from_value(value, None), None, "{value}");
        }
        // No token and no holder named: nobody to name.
        assert_eq!(
            Blocker::from_value("held waiting=0 since=1 host=h pid=1 app=a", None),
            None
        );
    }

    #[test]
    fn a_since_that_is_no_time_is_left_out() {
        let blocker = Blocker::from_value(
            "held token=abc waiting=0 since=99999999999999999 host=h pid=x app=a",
            None,
        )
        .expect("recorded");
        assert_eq!(blocker.since, None);
        assert_eq!(blocker.pid, None);
        assert_eq!(
            blocker.to_string(),
            "held by h (app \"a\", holder a9993e364706)"
        );
    }
}
