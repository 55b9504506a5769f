//! What the server holds and counts: a lock as the server stores it (`lock-runtime/scripts/acquire.lua`), read with one `GET`:
//! `held token=<T> waiting=<0|1|2>[ since=<ms> host=<h> pid=<p> app=<a>]`, `kept
//! waiting=<0|1|2>` (released, busy until it expires) or `free next=<T> until=<ms>` (released
//! for the first fair waiter in line alone until then); and the fence counter of its slot.

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

    /// The last fencing token the counter of the slot of `stored_key` (stored under `prefix`)
    /// handed out, or `None` if there is no counter.
    pub fn fence_counter(&self, prefix: &str, stored_key: &str) -> Option<u64> {
        let counter = lock_runtime::inspect::fence_counter_key(prefix, stored_key);
        self.cmd(&["GET", &counter]).parse().ok()
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
