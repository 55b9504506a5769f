//! What the server holds and counts: a lock as the server stores it (`lock-runtime/scripts/acquire.lua`), read with one `GET`:
//! `held fence=<F> token=<T> waiting=<0|1|2>[ since=<ms> host=<h> pid=<p> app=<a>]`, `kept
//! fence=<F> waiting=<0|1|2>` (released, busy until it expires) or `free fence=<F>[ next=<T>
//! until=<ms>]` (released, keeping its last fencing token; with `next`, for the first fair
//! waiter in line alone until then).

use crate::RedisServer;

/// One stored lock, parsed: the runtime's own reading of the format, so that the tests check
/// locks as operators' tools see them.
pub use lock_runtime::inspect::StoredLock;

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
