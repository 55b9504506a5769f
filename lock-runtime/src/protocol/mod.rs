//! What is in Redis for a lock and how each step reads and writes it without a script where it
//! can: the value a holder writes (and [`StoredLock`], which reads it back), the slot's fence
//! counter, the transaction that takes a free lock, the compare-and-set that renews and the
//! compare-and-delete that releases one nobody waited for, and the server's capabilities they
//! depend on. The scripts (`scripts/*.lua`) are the paths of contended, fair, kept and
//! old-format locks, and of servers without these commands.

pub(crate) mod lean;
pub(crate) mod scripts;
pub(crate) mod slots;
pub(crate) mod waits;

use std::time::Duration;

use redis::{RedisResult, Value};

/// Tokens below this come from a counter that was lost (see `next_token` in queue.lua).
pub(crate) const SEEDED: u64 = 1_000_000_000_000_000;

/// 2^53: the scripts count in Lua numbers, exact below it; a counter there is reported.
pub(crate) const MAX_TOKEN: u64 = 1 << 53;

/// The value of a lock held by `token` that nobody was told is busy (`waiting` `'0'`) or that
/// announces its release (`'1'`): `held token=<T> waiting=<W>` and, with holder metadata
/// (`metadata` ` host=<h> pid=<p> app=<a>`, empty without), ` since=<since_ms>` and the
/// metadata. queue.lua's `held_value` writes the same text from the same parts. Built in one
/// allocation: it is written on every acquire and compared on every release.
pub(crate) fn held_value(token: &str, waiting: char, since_ms: u64, metadata: &str) -> String {
    use std::fmt::Write as _;
    let mut value = String::with_capacity(50 + token.len() + metadata.len());
    value.push_str("held token=");
    value.push_str(token);
    value.push_str(" waiting=");
    value.push(waiting);
    if !metadata.is_empty() {
        // Writing to a String cannot fail.
        let _ = write!(value, " since={since_ms}");
        value.push_str(metadata);
    }
    value
}

/// One stored lock, parsed (see the [`inspect`](crate::inspect) docs for the forms): every form
/// `held_value` and the scripts write, and those 0.2 wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredLock {
    /// `held`, `kept` or `free`.
    pub state: String,
    /// The fencing token a value written by 0.2 carries; 0 in this format, which keeps tokens in
    /// the fence counter of the lock's slot ([`fence_counter_key`](crate::inspect::fence_counter_key)).
    pub fence: u64,
    /// The owner token of a held lock. Whoever knows it can release the lock: never show it.
    pub token: Option<String>,
    /// Someone was told the lock is busy: the release will announce itself.
    pub waiting: bool,
    /// Fair waiters are in line (`waiting=2`): the release frees it for the first of them.
    pub line: bool,
    /// `since`, `host`, `pid`, `app` with holder metadata (`app` runs to the end of the value);
    /// `next` and `until` of a lock freed for the first fair waiter in line.
    pub holder: Vec<(String, String)>,
}

impl StoredLock {
    /// Parses a stored value; `None` if it is not a lock.
    pub fn parse(value: &str) -> Option<StoredLock> {
        let (state, rest) = value.split_once(' ')?;
        if !matches!(state, "held" | "kept" | "free") {
            return None;
        }
        // Written by 0.2: the last fencing token comes first.
        let (fence, mut rest) = match rest.strip_prefix("fence=") {
            Some(old) => {
                let (fence, rest) = old.split_once(' ').unwrap_or((old, ""));
                (fence.parse().ok()?, rest)
            }
            None => (0, rest),
        };
        let mut lock = StoredLock {
            state: state.to_owned(),
            fence,
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

    /// Freed for the first fair waiter in line alone (`free ... next=<T> until=<ms>`).
    pub fn is_reserved(&self) -> bool {
        self.state == "free" && self.holder_field("next").is_some()
    }

    /// A holder field (`host`, `pid`, `app`, `since`), or `next` and `until` of a lock freed for
    /// the first fair waiter in line.
    pub fn holder_field(&self, name: &str) -> Option<&str> {
        self.holder
            .iter()
            .find(|(field, _)| field == name)
            .map(|(_, value)| value.as_str())
    }

    /// 12 hex digits of the SHA-1 of the owner token: tells holders apart, and is what their
    /// release announces, but cannot be turned back into the token.
    pub fn token_id(&self) -> Option<String> {
        self.token.as_deref().map(token_id)
    }
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

/// 48 bits of the SHA-1 of an owner token, as acquire.lua's `holder_id`: tells owners apart
/// across servers without revealing the token.
pub(crate) fn holder_id(owner: &str) -> u64 {
    let digest = sha1_smol::Sha1::from(owner).digest().bytes();
    digest[..6]
        .iter()
        .fold(0u64, |id, &byte| (id << 8) | u64::from(byte))
}

/// A [`holder_id`] as the 12 hex digits [`token_id`] gives for the same owner token.
pub(crate) fn holder_hex(holder_id: u64) -> String {
    format!("{holder_id:012x}")
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

/// 12 hex digits of the SHA-1 of an owner token: tells holders apart and is what a release
/// announces, but cannot be turned back into the token.
pub(crate) fn token_id(token: &str) -> String {
    let mut id = sha1_smol::Sha1::from(token).digest().to_string();
    id.truncate(12);
    id
}

/// How a release names itself on the lock's channel: the [`token_id`] of its owner token.
pub(crate) fn release_id(token: &str) -> Vec<u8> {
    token_id(token).into_bytes()
}

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
        let lean_acquire = info.is_ok_and(|info| version_at_least(&info, 7));
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
    fn the_value_is_the_one_the_scripts_write() {
        assert_eq!(held_value("t", '0', 5, ""), "held token=t waiting=0");
        assert_eq!(
            held_value("t", '1', 5, " host=h pid=1 app=a b"),
            "held token=t waiting=1 since=5 host=h pid=1 app=a b"
        );
    }

    #[test]
    fn a_release_id_is_what_the_release_script_announces() {
        // release.lua: string.sub(redis.sha1hex(token), 1, 12); SHA-1("abc") = a9993e36 4706...
        assert_eq!(release_id("abc"), b"a9993e364706");
    }

    #[test]
    fn holder_ids_are_48_bits_of_the_sha1() {
        // sha1("abc") = a9993e364706816aba3e...
        assert_eq!(holder_id("abc"), 0xa999_3e36_4706);
        assert_eq!(holder_hex(holder_id("abc")), token_id("abc"));
        assert_eq!(holder_hex(0xab), "0000000000ab");
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

    #[test]
    fn every_form_of_a_stored_lock_is_read() {
        let held = StoredLock::parse(
            "held fence=1764045123456789 token=abc waiting=1 since=1764045123456 host=web-1 pid=42 app=orders api",
        )
        .expect("a lock");
        assert_eq!(held.state, "held");
        assert_eq!(held.fence, 1_764_045_123_456_789);
        assert_eq!(held.token.as_deref(), Some("abc"));
        assert!(held.waiting && !held.line);
        assert_eq!(held.holder_field("app"), Some("orders api"));
        assert_eq!(held.holder_field("pid"), Some("42"));
        assert_eq!(held.token_id().as_deref(), Some("a9993e364706"));
        let new = StoredLock::parse("held token=abc waiting=0 since=1 host=h pid=2 app=x y")
            .expect("a lock");
        assert_eq!(new.fence, 0);
        assert_eq!(new.token.as_deref(), Some("abc"));
        assert_eq!(new.holder_field("app"), Some("x y"));
        let reserved_now = StoredLock::parse("free next=t until=5").expect("a lock");
        assert!(reserved_now.is_reserved());
        let kept = StoredLock::parse("kept fence=7 waiting=2").expect("a lock");
        assert!(kept.is_busy() && kept.line && kept.token.is_none());
        let free = StoredLock::parse("free fence=9").expect("a lock");
        assert!(!free.is_busy() && !free.is_reserved());
        let reserved = StoredLock::parse("free fence=9 next=t until=5").expect("a lock");
        assert!(reserved.is_reserved());
        assert_eq!(StoredLock::parse("hello"), None);
        assert_eq!(StoredLock::parse("gone fence=1"), None);
    }
}
