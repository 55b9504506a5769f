//! The stored value of a lock, the one place in Rust that writes and reads it: the value a
//! holder writes ([`held_value`]) and its holder's part, which the scripts take
//! ([`holder_part`]); [`StoredLock`], which reads every form back; and the short id of an owner
//! token ([`token_id`]). `scripts/value.lua` writes and reads the same text for the scripts;
//! the round-trip test (`round_trip.rs`) runs every script that does against this side, on a
//! real server.

use std::fmt::Write as _;

/// Who takes the locks, as a held lock records it after its ` since=`: ` host=<h> pid=<p>
/// app=<a>`. Host and pid are one word each; the app name comes last, runs to the end of the
/// value and may hold anything printable but control characters.
pub(crate) fn holder_metadata(host: &str, pid: u32, app: &str) -> String {
    format!(" host={} pid={pid} app={}", host_word(host), app_text(app))
}

/// A host name as a holder records it: one word, each blank or control character made `_`.
pub(crate) fn host_word(host: &str) -> String {
    host.chars()
        .map(|c| {
            if c.is_whitespace() || c.is_control() {
                '_'
            } else {
                c
            }
        })
        .collect()
}

/// An app name as a holder records it: each control character (a line break, a NUL) made a
/// space.
pub(crate) fn app_text(app: &str) -> String {
    app.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

/// What a held lock's value says of its holder: ` since=<since_ms>` and `metadata` (see
/// [`holder_metadata`]), or nothing without metadata. The scripts that write a held value take
/// it as an argument (acquire.lua's ARGV[3], handoff.lua's ARGV[4]).
pub(crate) fn holder_part(since_ms: u64, metadata: &str) -> String {
    let mut part = String::with_capacity(if metadata.is_empty() {
        0
    } else {
        24 + metadata.len()
    });
    push_holder(&mut part, since_ms, metadata);
    part
}

/// Appends [`holder_part`] to `value`.
fn push_holder(value: &mut String, since_ms: u64, metadata: &str) {
    if !metadata.is_empty() {
        // Writing to a String cannot fail.
        let _ = write!(value, " since={since_ms}");
        value.push_str(metadata);
    }
}

/// The value of a lock held by `token` that nobody was told is busy (`waiting` `'0'`) or that
/// announces its release (`'1'`): `held token=<T> waiting=<W>` and its [`holder_part`].
/// value.lua's `held_value` writes the same text from the same parts. Built in one allocation:
/// it is written on every acquire and compared on every release.
pub(crate) fn held_value(token: &str, waiting: char, since_ms: u64, metadata: &str) -> String {
    let mut value = String::with_capacity(50 + token.len() + metadata.len());
    value.push_str("held token=");
    value.push_str(token);
    value.push_str(" waiting=");
    value.push(waiting);
    push_holder(&mut value, since_ms, metadata);
    value
}

/// The owner token and waiting flag of a value [`held_value`] wrote (`None` for any other form,
/// a 0.2 one included): what the acquire transaction's `SET ... GET` answered of a busy lock.
/// Borrowed: read on every busy answer.
pub(crate) fn held_owner(value: &[u8]) -> Option<(&str, char)> {
    let value = std::str::from_utf8(value).ok()?;
    let rest = value.strip_prefix("held token=")?;
    let (owner, rest) = rest.split_once(' ')?;
    let waiting = rest.strip_prefix("waiting=")?.chars().next()?;
    Some((owner, waiting))
}

/// Whether a held lock's value (whole, or without its owner token as acquire.lua answers it)
/// records holder metadata: the holder's part always begins with ` since=`. Asked before
/// [`StoredLock::parse`]: most busy answers have none, and cost no parse.
pub(crate) fn records_holder(value: &str) -> bool {
    value.contains(" since=")
}

/// One stored lock, parsed (see the [`inspect`](crate::inspect) docs for the forms): every form
/// the library and its scripts write, and those 0.2 wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredLock {
    /// `held`, `kept` or `free`.
    pub state: String,
    /// The fencing token a value carries after its state: one 0.2 wrote, or a read-write
    /// lock's writer; 0 in a lock's own value, whose token is kept in the fence counter of the
    /// lock's slot ([`fence_counter_key`](crate::inspect::fence_counter_key)).
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
        // The fencing token comes first.
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

/// 12 hex digits of the SHA-1 of an owner token, as value.lua's `token_id`: tells holders apart
/// and is what a release announces, but cannot be turned back into the token.
pub(crate) fn token_id(token: &str) -> String {
    let mut id = sha1_smol::Sha1::from(token).digest().to_string();
    id.truncate(12);
    id
}

/// How a release names itself on the lock's channel: the [`token_id`] of its owner token.
pub(crate) fn release_id(token: &str) -> Vec<u8> {
    token_id(token).into_bytes()
}

/// The same 48 bits as a number, as value.lua's `holder_id` (an acquire's busy answer): tells
/// owners apart across servers without revealing the token.
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_value_is_the_one_the_scripts_write() {
        assert_eq!(held_value("t", '0', 5, ""), "held token=t waiting=0");
        assert_eq!(
            held_value("t", '1', 5, " host=h pid=1 app=a b"),
            "held token=t waiting=1 since=5 host=h pid=1 app=a b"
        );
        assert_eq!(holder_part(5, ""), "");
        assert_eq!(
            holder_part(5, " host=h pid=1 app=a b"),
            " since=5 host=h pid=1 app=a b"
        );
    }

    #[test]
    fn the_holder_is_one_word_each_but_the_app_name() {
        assert_eq!(
            holder_metadata("web 1\t", 42, "orders\napi v2"),
            " host=web_1_ pid=42 app=orders api v2"
        );
        let value = held_value("t", '0', 5, &holder_metadata("web 1", 7, "a b"));
        let lock = StoredLock::parse(&value).expect("a lock");
        assert_eq!(lock.holder_field("host"), Some("web_1"));
        assert_eq!(lock.holder_field("app"), Some("a b"));
    }

    #[test]
    fn a_busy_answer_names_the_owner_of_this_format_only() {
        let value = held_value("abc", '1', 5, " host=h pid=1 app=a b");
        assert_eq!(held_owner(value.as_bytes()), Some(("abc", '1')));
        assert_eq!(held_owner(b"held fence=1 token=t waiting=0"), None);
        assert_eq!(held_owner(b"kept waiting=0"), None);
        assert_eq!(held_owner(b"\xff"), None);
    }

    #[test]
    fn a_release_id_is_what_the_release_script_announces() {
        // value.lua: string.sub(redis.sha1hex(token), 1, 12); SHA-1("abc") = a9993e36 4706...
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
        let writer = StoredLock::parse("held fence=12 token=w").expect("a 0.3 writer");
        assert_eq!((writer.fence, writer.token.as_deref()), (12, Some("w")));
        assert!(!writer.waiting);
        assert_eq!(StoredLock::parse("hello"), None);
        assert_eq!(StoredLock::parse("gone fence=1"), None);
    }
}
