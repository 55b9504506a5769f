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

    /// Every key the server holds, sorted (read with `SCAN`).
    pub fn stored_keys(&self) -> Vec<String> {
        let mut keys = Vec::new();
        let mut cursor = "0".to_owned();
        loop {
            let reply = self
                .try_cmd(&["SCAN", &cursor, "COUNT", "1000"])
                .unwrap_or_else(|err| panic!("SCAN: {err}\n{}", self.log()));
            let crate::Reply::Array(parts) = reply else {
                panic!("SCAN answered {reply:?}");
            };
            let [crate::Reply::Bulk(next), crate::Reply::Array(found)] = parts.as_slice() else {
                panic!("SCAN answered {parts:?}");
            };
            keys.extend(found.iter().map(ToString::to_string));
            cursor = String::from_utf8_lossy(next).into_owned();
            if cursor == "0" {
                break;
            }
        }
        keys.sort();
        keys.dedup();
        keys
    }

    /// The keys [`stored_keys`](Self::stored_keys) finds besides the fence counters under
    /// `prefix` (`<prefix>fence:{<tag>}`), each with its `PTTL`. A counter with an expiry is
    /// listed too: counters never expire.
    pub fn keys_besides_counters(&self, prefix: &str) -> Vec<(String, i64)> {
        let counter = format!("{prefix}fence:{{");
        self.stored_keys()
            .into_iter()
            .map(|key| {
                let pttl = self.cmd(&["PTTL", &key]).parse().unwrap_or(i64::MIN);
                (key, pttl)
            })
            .filter(|(key, pttl)| !(key.starts_with(&counter) && *pttl == -1))
            .collect()
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

    /// How many lock requests the server served without an error since its stats were last
    /// reset (or it started), as scripts or transactions: calls of `EVALSHA`, `EVAL` and `EXEC`,
    /// less those that failed (`failed_calls`, Redis 6.2 and later). An acquire's ask is one or
    /// two (a transaction that finds the lock busy, then the script that marks it as awaited).
    pub fn requests_served(&self) -> u64 {
        let count = |fields: &str, name: &str| -> u64 {
            fields
                .split(',')
                .find_map(|field| {
                    field
                        .strip_prefix(name)?
                        .strip_prefix('=')?
                        .trim()
                        .parse()
                        .ok()
                })
                .unwrap_or(0)
        };
        self.cmd(&["INFO", "commandstats"])
            .lines()
            .filter_map(|line| {
                let (command, fields) = line.strip_prefix("cmdstat_")?.split_once(':')?;
                matches!(command, "evalsha" | "eval" | "exec").then_some(fields)
            })
            .map(|fields| count(fields, "calls") - count(fields, "failed_calls"))
            .sum()
    }

    /// Whether a lock is held (or kept for `hold_at_least`) at `stored_key`.
    pub fn holds_lock(&self, stored_key: &str) -> bool {
        self.stored_lock(stored_key)
            .is_some_and(|lock| lock.is_busy())
    }
}
