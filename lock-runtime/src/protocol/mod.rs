//! What is in Redis for a lock and how each step reads and writes it without a script where it
//! can: the value a holder writes (and [`StoredLock`], which reads it back; see [`value`]), the
//! slot's fence counter, the transaction that takes a free lock, the compare-and-set that renews
//! and the compare-and-delete that releases one nobody waited for, and the server's
//! capabilities they depend on. The scripts (`scripts/*.lua`, see [`scripts`]) are the paths of
//! contended, fair, kept and old-format locks, and of servers without these commands.

pub(crate) mod lean;
#[cfg(test)]
mod round_trip;
pub(crate) mod scripts;
pub(crate) mod slots;
pub(crate) mod value;
pub(crate) mod waits;

pub use value::StoredLock;
#[cfg(feature = "postgres")]
pub(crate) use value::{app_text, host_word};
pub(crate) use value::{
    held_value, holder_hex, holder_id, holder_metadata, holder_part, release_id, token_id,
};

use std::time::Duration;

use redis::{RedisResult, Value};

/// Tokens below this come from a counter that was lost (see `next_token` in queue.lua).
pub(crate) const SEEDED: u64 = 1_000_000_000_000_000;

/// 2^53: the scripts count in Lua numbers, exact below it; a counter there is reported.
pub(crate) const MAX_TOKEN: u64 = 1 << 53;

/// The Redis pub/sub channel [`Notice`](crate::store::Notice)s of managers under `prefix` in
/// database `db` travel on: `<prefix>notices`, and `<prefix>notices:<db>` for a database other
/// than 0 (`PUBLISH` reaches every database's subscribers, and the managers of two databases
/// name their locks alike). A lock's name begins with `{` after the prefix, so no lock's
/// channel is one of these.
pub(crate) fn notices_channel(prefix: &str, db: i64) -> String {
    if db == 0 {
        format!("{prefix}notices")
    } else {
        format!("{prefix}notices:{db}")
    }
}

/// The database a Redis URL names (`redis://host/2`, `?db=2`); 0 for a URL that names none or
/// is not a one-server URL (Cluster has database 0 only).
pub(crate) fn url_db(url: &str) -> i64 {
    use redis::IntoConnectionInfo;
    url.into_connection_info()
        .map_or(0, |info| info.redis_settings().db())
}

/// The wall clock in milliseconds since the Unix epoch: when a holder took its lock, as its
/// value says (`since=`).
pub(crate) fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| {
            u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
        })
}

/// How a release tells waiters (release.lua's ARGV[3]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Announce {
    /// `PUBLISH` on the lock's channel.
    Publish,
    /// `SPUBLISH`: Redis Cluster 7+, where the channel lives in the lock's slot.
    Sharded,
    /// Not at all: a Redlock minority grant given back while another owner holds the majority.
    Quiet,
}

impl Announce {
    pub(crate) fn as_arg(self) -> &'static str {
        match self {
            Announce::Publish => "",
            Announce::Sharded => "sharded",
            Announce::Quiet => "quiet",
        }
    }
}

/// Milliseconds for Redis, rounded up so a sub-millisecond remainder never becomes "no expiry".
pub(crate) fn millis(duration: Duration) -> u64 {
    let ms = duration.as_millis();
    let rounded = if duration.subsec_nanos().is_multiple_of(1_000_000) {
        ms
    } else {
        ms + 1
    };
    u64::try_from(rounded).unwrap_or(u64::MAX).max(1)
}

/// How long a lock freed for the first fair waiter in line waits for it (see queue.lua): a
/// waiter that is alive comes within a round trip of hearing of it; one that does not come in
/// this time (it died, or missed the message) is taken out of line, and the next one's turn
/// begins. What a dead waiter costs the others, once.
pub(crate) const FAIR_TURN_MS: u64 = 250;

/// [`FAIR_TURN_MS`] as a duration.
pub(crate) const FAIR_TURN: Duration = Duration::from_millis(FAIR_TURN_MS);

/// How a server deletes a key only if it holds a given value, natively.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NativeDelete {
    /// `DELIFEQ key value` (Valkey 9.0).
    DelIfEq,
    /// `DELEX key IFEQ value` (Redis 8.4).
    DelEx,
}

/// What a server can do for the lean paths, found once at connect.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Capabilities {
    /// `SET ... NX GET` (Redis 7.0): a free lock is taken in one transaction.
    pub(crate) lean_acquire: bool,
    /// A native compare-and-delete, if any; otherwise a two-line script.
    pub(crate) native_delete: Option<NativeDelete>,
    /// `SET ... IFEQ` (Valkey 8.1, Redis 8.4): a lock nobody waited for is renewed by
    /// comparing its whole value, without the renewal script.
    pub(crate) set_ifeq: bool,
    /// RESP3 (Redis 6.0), which a Cluster's subscriptions need; assumed where `INFO` is refused.
    pub(crate) resp3: bool,
}

impl Capabilities {
    /// Asks the server (`INFO server`), and tries each native delete, then `SET ... IFEQ`, on a
    /// key of the prefix that never exists (`<prefix>{lock-runtime:probe}`): one the server
    /// lacks, or this user may not run, answers an error. A server that refuses `INFO` gets the
    /// scripts, which work everywhere.
    pub(crate) async fn probe(
        conn: &mut impl redis::aio::ConnectionLike,
        key_prefix: &str,
    ) -> Capabilities {
        let info: RedisResult<String> = redis::cmd("INFO").arg("server").query_async(conn).await;
        let lean_acquire = info.as_ref().is_ok_and(|info| version_at_least(info, 7));
        // A server that refuses INFO has ACLs, which came with RESP3 in Redis 6.0.
        let resp3 = info.as_ref().map_or(true, |info| version_at_least(info, 6));
        let probe = format!("{key_prefix}{{lock-runtime:probe}}");
        let mut native_delete = None;
        if lean_acquire {
            let mut delifeq = redis::cmd("DELIFEQ");
            delifeq.arg(&probe).arg("");
            let mut delex = redis::cmd("DELEX");
            delex.arg(&probe).arg("IFEQ").arg("");
            for (command, native) in [
                (delifeq, NativeDelete::DelIfEq),
                (delex, NativeDelete::DelEx),
            ] {
                if command.query_async::<i64>(conn).await.is_ok() {
                    native_delete = Some(native);
                    break;
                }
            }
        }
        let set_ifeq = lean_acquire && {
            // Never creates the key: IFEQ sets only a key that holds the value.
            let answer = redis::cmd("SET")
                .arg(&probe)
                .arg("")
                .arg("IFEQ")
                .arg("")
                .query_async::<Value>(conn)
                .await;
            sets_if_equal(&answer)
        };
        Capabilities {
            lean_acquire,
            native_delete,
            set_ifeq,
            resp3,
        }
    }

    /// One line for the startup log.
    pub(crate) fn describe(&self) -> String {
        if !self.lean_acquire {
            return "scripts (no SET NX GET before Redis 7.0)".to_owned();
        }
        let release = match self.native_delete {
            None => "compare-and-delete by script",
            Some(NativeDelete::DelIfEq) => "native DELIFEQ",
            Some(NativeDelete::DelEx) => "native DELEX IFEQ",
        };
        let renewal = if self.set_ifeq {
            "renewal and hand-over by native SET IFEQ"
        } else {
            "renewal and hand-over by script"
        };
        format!("transactions, {release}, {renewal}")
    }
}

/// Whether the probe `SET <never-existing key> "" IFEQ ""` says the server has `IFEQ`: it
/// answers that nothing was set (or, were the key there with that value, that it was). A
/// server without it answers a syntax error; a user who may not run `SET` that way, an error
/// too.
fn sets_if_equal(answer: &RedisResult<Value>) -> bool {
    matches!(answer, Ok(Value::Nil | Value::Okay))
}

/// Whether `INFO server` reports `redis_version` `major` or later (Valkey reports the Redis
/// version it is compatible with there).
fn version_at_least(info: &str, major: u32) -> bool {
    info.lines()
        .find_map(|line| line.strip_prefix("redis_version:"))
        .and_then(|version| version.trim().split('.').next()?.parse::<u32>().ok())
        .is_some_and(|found| found >= major)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn millis_round_up_and_never_reach_zero() {
        assert_eq!(millis(Duration::from_millis(30)), 30);
        assert_eq!(millis(Duration::from_micros(30_001)), 31);
        assert_eq!(millis(Duration::from_micros(1)), 1);
        assert_eq!(millis(Duration::ZERO), 1);
    }

    #[test]
    fn set_ifeq_is_found_by_its_answer_not_its_error_text() {
        let answer = |reply: &[u8]| -> RedisResult<Value> {
            let value = redis::parse_redis_value(reply).expect("a reply");
            value.extract_error()
        };
        // Valkey 8.1 and later, Redis 8.4 and later: the key is not there, nothing is set.
        assert!(sets_if_equal(&answer(b"$-1\r\n")));
        assert!(sets_if_equal(&answer(b"_\r\n")));
        assert!(sets_if_equal(&answer(b"+OK\r\n")));
        // Older servers do not know the option; a user may lack the right.
        assert!(!sets_if_equal(&answer(b"-ERR syntax error\r\n")));
        assert!(!sets_if_equal(&answer(
            b"-NOPERM User u has no permissions to run the 'set' command\r\n"
        )));
    }

    #[test]
    fn the_protocol_line_names_each_native_command() {
        let mut capabilities = Capabilities {
            lean_acquire: true,
            native_delete: Some(NativeDelete::DelIfEq),
            set_ifeq: true,
            resp3: true,
        };
        assert_eq!(
            capabilities.describe(),
            "transactions, native DELIFEQ, renewal and hand-over by native SET IFEQ"
        );
        capabilities.native_delete = None;
        capabilities.set_ifeq = false;
        assert_eq!(
            capabilities.describe(),
            "transactions, compare-and-delete by script, renewal and hand-over by script"
        );
        assert_eq!(
            Capabilities::default().describe(),
            "scripts (no SET NX GET before Redis 7.0)"
        );
    }

    #[test]
    fn versions_are_read_from_info() {
        assert!(version_at_least("# Server\r\nredis_version:7.0.15\r\n", 7));
        assert!(version_at_least(
            "redis_version:7.2.4\r\nvalkey_version:9.0.0",
            7
        ));
        assert!(!version_at_least("redis_version:6.2.14\r\n", 7));
        assert!(!version_at_least("nothing", 7));
    }
}
