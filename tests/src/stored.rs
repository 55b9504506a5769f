//! What the server holds and counts: a lock as the server stores it (`lock-runtime/scripts/acquire.lua`), read with one `GET`:
//! `held fence=<F> token=<T> waiting=<0|1|2>[ since=<ms> host=<h> pid=<p> app=<a>]`, `kept
//! fence=<F> waiting=<0|1|2>` (released, busy until it expires) or `free fence=<F>[ next=<T>
//! until=<ms>]` (released, keeping its last fencing token; with `next`, for the first fair
//! waiter in line alone until then).

use crate::RedisServer;

/// One stored lock, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredLock {
    /// `held`, `kept` or `free`.
    pub state: String,
    pub fence: u64,
    /// The owner token of a held lock.
    pub token: Option<String>,
    /// Someone was told the lock is busy: the release will announce itself.
    pub waiting: bool,
    /// Fair waiters are in line (`waiting=2`): the release frees it for the first of them.
    pub line: bool,
    /// `since`, `host`, `pid`, `app` with holder metadata; `app` runs to the end of the value.
    pub holder: Vec<(String, String)>,
}

impl StoredLock {
    /// Parses a stored value; `None` if it is not a lock.
    pub fn parse(value: &str) -> Option<StoredLock> {
        let (state, rest) = value.split_once(' ')?;
        let rest = rest.strip_prefix("fence=")?;
        let (fence, mut rest) = rest.split_once(' ').unwrap_or((rest, ""));
        let mut lock = StoredLock {
            state: state.to_owned(),
            fence: fence.parse().ok()?,
            token: None,
            waiting: false,
            line: false,
            holder: Vec::new(),
        };
        while !rest.is_empty() {
            let (name, tail) = rest.split_once('=')?;
            let (value, tail) = if name == "app" {
                (tail, "")
            } else {
                tail.split_once(' ').unwrap_or((tail, ""))
            };
            match name {
                "token" => lock.token = Some(value.to_owned()),
                "waiting" => {
                    lock.waiting = value != "0";
                    lock.line = value == "2";
                }
                _ => lock.holder.push((name.to_owned(), value.to_owned())),
            }
            rest = tail;
        }
        Some(lock)
    }

    /// Busy for others: held, or kept for `hold_at_least`.
    pub fn is_busy(&self) -> bool {
        self.state == "held" || self.state == "kept"
    }

    /// A holder field (`host`, `pid`, `app`, `since`), or `next` and `until` of a lock freed for
    /// the first fair waiter in line.
    pub fn holder_field(&self, name: &str) -> Option<&str> {
        self.holder
            .iter()
            .find(|(field, _)| field == name)
            .map(|(_, value)| value.as_str())
    }
}

impl RedisServer {
    /// The lock stored at `stored_key` (`lock:{key}`), or `None` if the key is absent.
    ///
    /// # Panics
    ///
    /// If the key holds something that is not a lock.
    pub fn stored_lock(&self, stored_key: &str) -> Option<StoredLock> {
        let value = self.cmd(&["GET", stored_key]);
        if value == "(nil)" {
            return None;
        }
        Some(StoredLock::parse(&value).unwrap_or_else(|| {
            panic!("`{stored_key}` holds `{value}`, not a lock\n{}", self.log())
        }))
    }

    /// `INFO commandstats` as (command, calls) pairs, without the harness's own probes (`INFO`,
    /// `CONFIG`, `AUTH`, `PING`): since the last `CONFIG RESETSTAT`, what the clients sent,
    /// and on Redis 7 also the commands their scripts ran (each under its own name).
    pub fn command_calls(&self) -> Vec<(String, u64)> {
        self.cmd(&["INFO", "commandstats"])
            .lines()
            .filter_map(|line| {
                let (name, stats) = line.strip_prefix("cmdstat_")?.split_once(':')?;
                let calls = stats
                    .strip_prefix("calls=")?
                    .split(',')
                    .next()?
                    .parse()
                    .ok()?;
                Some((name.to_owned(), calls))
            })
            // Redis 7 names subcommands `config|resetstat`.
            .filter(|(name, _)| {
                let command = name.split('|').next().unwrap_or_default();
                !matches!(command, "info" | "config" | "auth" | "ping")
            })
            .collect()
    }

    /// Whether a lock is held (or kept for `hold_at_least`) at `stored_key`.
    pub fn holds_lock(&self, stored_key: &str) -> bool {
        self.stored_lock(stored_key)
            .is_some_and(|lock| lock.is_busy())
    }
}

#[cfg(test)]
mod tests {
    use super::StoredLock;

    #[test]
    fn every_form_of_a_stored_lock_is_read() {
        let held = StoredLock::parse(
            "held fence=1764045123456789 token=abc waiting=1 since=1764045123456 host=web-1 pid=42 app=orders api",
        )
        .expect("a lock");
        assert_eq!(held.state, "held");
        assert_eq!(held.fence, 1_764_045_123_456_789);
        assert_eq!(held.token.as_deref(), Some("abc"));
        assert!(held.waiting);
        assert_eq!(held.holder_field("app"), Some("orders api"));
        assert_eq!(held.holder_field("pid"), Some("42"));
        let kept = StoredLock::parse("kept fence=7 waiting=0").expect("a lock");
        assert!(kept.is_busy() && !kept.waiting && kept.token.is_none());
        let free = StoredLock::parse("free fence=9").expect("a lock");
        assert!(!free.is_busy());
        assert_eq!(StoredLock::parse("hello"), None);
    }
}
