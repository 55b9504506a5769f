//! Who takes the locks, as each row the store writes records it: the host, process id and app
//! name of the holder, with the time it began its attempt; and a busy answer's record read
//! back as a [`Blocker`].

use std::time::{Duration, UNIX_EPOCH};

use crate::blocker::{Blocker, SINCE_BOUND_MS};
use crate::protocol;

/// This process as its rows record it (holder metadata on). Host and app are written as a
/// Redis store writes them into a lock's value (one word; no control characters), so both
/// stores name a holder alike.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Holder {
    pub(crate) host: String,
    pub(crate) pid: u32,
    /// `None` where the manager set no app name (or an empty one).
    pub(crate) app: Option<String>,
}

impl Holder {
    /// This process, on this host, under `app`.
    pub(crate) fn here(app: Option<&str>) -> Holder {
        let host = gethostname::gethostname();
        Holder {
            host: protocol::host_word(&host.to_string_lossy()),
            pid: std::process::id(),
            app: app.filter(|app| !app.is_empty()).map(protocol::app_text),
        }
    }
}

/// What a busy row recorded of its holder, as the acquire statement answers it.
#[derive(Debug, Default)]
pub(crate) struct Recorded {
    /// `protocol::holder_id` of the holder's owner token; 0 for a kept lock (no holder).
    pub(crate) holder: i64,
    pub(crate) fence: Option<i64>,
    pub(crate) host: Option<String>,
    pub(crate) pid: Option<i64>,
    pub(crate) app: Option<String>,
    pub(crate) since_ms: Option<i64>,
}

impl Recorded {
    /// The holder it names, if it recorded itself (holder metadata on).
    pub(crate) fn blocker(self) -> Option<Blocker> {
        let holder = u64::try_from(self.holder).ok().filter(|&id| id != 0)?;
        if self.host.is_none()
            && self.pid.is_none()
            && self.app.is_none()
            && self.since_ms.is_none()
        {
            return None;
        }
        Some(Blocker {
            holder_id: protocol::holder_hex(holder),
            host: self.host,
            pid: self.pid.and_then(|pid| u32::try_from(pid).ok()),
            app: self.app,
            since: self
                .since_ms
                .and_then(|ms| u64::try_from(ms).ok())
                .filter(|&ms| ms < SINCE_BOUND_MS)
                .map(|ms| UNIX_EPOCH + Duration::from_millis(ms)),
            fencing_token: self
                .fence
                .and_then(|fence| u64::try_from(fence).ok())
                .filter(|&fence| fence != 0),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_holder_is_recorded_as_a_redis_value_records_it() {
        let holder = Holder::here(Some("orders\napi"));
        assert_eq!(holder.app.as_deref(), Some("orders api"));
        assert_eq!(holder.pid, std::process::id());
        assert!(!holder.host.contains(char::is_whitespace), "{holder:?}");
        assert_eq!(Holder::here(Some("")).app, None);
        assert_eq!(Holder::here(None).app, None);
    }

    #[test]
    fn a_recorded_holder_is_named_by_the_same_id_as_on_redis() {
        let token = "abc";
        let recorded = Recorded {
            holder: i64::try_from(protocol::holder_id(token)).expect("48 bits"),
            fence: Some(17),
            host: Some("web-1".into()),
            pid: Some(42),
            app: None,
            since_ms: Some(1_764_045_123_456),
        };
        let blocker = recorded.blocker().expect("recorded");
        assert_eq!(blocker.holder_id, protocol::token_id(token));
        assert_eq!(blocker.fencing_token, Some(17));
        assert_eq!(
            blocker.to_string(),
            "held by pid 42 on web-1 (holder a9993e364706) since 2025-11-25T04:32:03.456Z \
             [fencing token 17]"
        );
    }

    #[test]
    fn nothing_recorded_or_no_holder_is_no_blocker() {
        let nothing = Recorded {
            holder: 5,
            fence: Some(3),
            ..Recorded::default()
        };
        assert_eq!(nothing.blocker(), None);
        let kept = Recorded {
            holder: 0,
            host: Some("h".into()),
            ..Recorded::default()
        };
        assert_eq!(kept.blocker(), None);
    }
}
