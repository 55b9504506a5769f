//! The stored value between its two sides, on a real server: values the Rust writer
//! ([`held_value`], [`holder_part`]) wrote are read right by every script that reads one, each
//! script that writes a value writes the Rust writer's text where both write one (a release
//! compares the whole value, so a difference would send every release to the script), and
//! every value a script writes parses in Rust ([`StoredLock`], [`Blocker`]). The short id of a
//! token is the same on both sides ([`token_id`], value.lua's `token_id`). Changing the format
//! on one side only fails here.

use std::time::Duration;

use lock_tests::RedisServer;
use redis::{Connection, Value};

use super::scripts::{
    ACQUIRE, HANDOFF, LEAVE, PERMIT_RELEASE, RELEASE, RENEW, RW_ACQUIRE, RW_LEAVE, RW_RELEASE,
    SEMAPHORE, STEAL,
};
use super::value::{
    StoredLock, held_value, holder_hex, holder_id, holder_metadata, holder_part, release_id,
    token_id,
};
use crate::blocker::Blocker;
use crate::key::Key;
use crate::shape::Shape;
use crate::store::{HolderId, Notice, NoticeKind};

/// When the holder began its attempt (wall clock, ms).
const SINCE: u64 = 1_764_045_123_456;
/// The holder's owner token, and another caller's.
const OWNER: &str = "5f0c6a2e-owner";
const OTHER: &str = "9a1d77b0-other";
/// A lease: long enough for any test.
const LEASE_MS: &str = "30000";
/// How long a lock freed for the first fair waiter waits for it.
const TURN_MS: &str = "250";

/// The holder parts a manager writes: with holder metadata (the default) and without.
fn holders() -> [String; 2] {
    [holder_metadata("web-1", 42, "orders api"), String::new()]
}

/// One server and a connection to it, with the names of the lock `k`.
struct Store {
    server: RedisServer,
    conn: Connection,
    key: Key,
}

impl Store {
    fn start() -> Store {
        let server = RedisServer::start();
        let conn = redis::Client::open(server.url())
            .and_then(|client| client.get_connection())
            .unwrap_or_else(|err| panic!("connect: {err}\n{}", server.log()));
        let key = Key::lock("lock:", "k").expect("a key");
        Store { server, conn, key }
    }

    fn set(&self, key: &str, value: &str) {
        assert_eq!(self.server.cmd(&["SET", key, value, "PX", LEASE_MS]), "OK");
    }

    fn get(&self, key: &str) -> String {
        self.server.cmd(&["GET", key])
    }

    /// The lock's value, parsed as `inspect` and `lockctl` read it.
    fn parsed(&self, key: &str) -> StoredLock {
        let value = self.get(key);
        StoredLock::parse(&value).unwrap_or_else(|| panic!("`{value}` is not a lock"))
    }

    /// acquire.lua for `token` (see its ARGV), as the manager calls it.
    fn acquire(&mut self, token: &str, holder: &str, waited: &str, mode: &str) -> Vec<Value> {
        let mut call = ACQUIRE.prepare_invoke();
        call.key(&self.key.lock)
            .key(self.key.counter())
            .key(self.key.queue())
            .key(self.key.queue_expiry())
            .key(self.key.fence_before_0_2())
            .arg(token)
            .arg(LEASE_MS)
            .arg(holder)
            .arg(waited)
            .arg(mode)
            .arg(TURN_MS)
            .arg("")
            .arg("");
        call.invoke(&mut self.conn).expect("acquire.lua")
    }

    /// renew.lua for `token` on `key` (a lock or a writer).
    fn renew(&mut self, key: &str, token: &str) -> i64 {
        let mut call = RENEW.prepare_invoke();
        call.key(key).arg(token).arg(LEASE_MS);
        call.invoke(&mut self.conn).expect("renew.lua")
    }

    /// release.lua for `token`, keeping the lock busy `keep_ms` more.
    fn release(&mut self, token: &str, keep_ms: &str) -> i64 {
        let mut call = RELEASE.prepare_invoke();
        call.key(&self.key.lock)
            .key(self.key.queue())
            .key(self.key.queue_expiry())
            .arg(token)
            .arg(keep_ms)
            .arg("")
            .arg(TURN_MS);
        call.invoke(&mut self.conn).expect("release.lua")
    }

    /// The force-release script (`inspect::UNLOCK_SCRIPT`) naming the holder by `id`.
    fn unlock(&mut self, id: &str) -> (i64, String) {
        let script = redis::Script::new(crate::inspect::UNLOCK_SCRIPT);
        let mut call = script.prepare_invoke();
        call.key(&self.key.lock)
            .key(self.key.queue())
            .key(self.key.queue_expiry())
            .arg("0")
            .arg("")
            .arg(TURN_MS)
            .arg(id);
        call.invoke(&mut self.conn).expect("unlock.lua")
    }

    /// steal.lua for `token` on `key`, recorded as `holder`, telling `from` on the notices
    /// channel: `{status, fencing token, victim}`.
    fn steal(&mut self, key: &Key, token: &str, holder: &str, from: &str) -> Vec<i64> {
        let mut call = STEAL.prepare_invoke();
        call.key(&key.lock)
            .key(key.counter())
            .key(key.queue())
            .arg(token)
            .arg(LEASE_MS)
            .arg(holder)
            .arg(super::notices_channel("lock:", 0))
            .arg(from);
        call.invoke(&mut self.conn).expect("steal.lua")
    }

    /// Puts `waiter` first in the lock's line of fair waiters.
    fn line_up(&self, waiter: &str) {
        self.server.cmd(&["ZADD", &self.key.queue(), "1", waiter]);
        let far = "99999999999999";
        self.server
            .cmd(&["ZADD", &self.key.queue_expiry(), far, waiter]);
    }

    /// Another connection to the server, for [`subscribed`].
    fn connect(&self) -> Connection {
        redis::Client::open(self.server.url())
            .and_then(|client| client.get_connection())
            .unwrap_or_else(|err| panic!("connect: {err}\n{}", self.server.log()))
    }
}

/// `conn` subscribed to `channel`, answering within 10 s.
fn subscribed<'a>(conn: &'a mut Connection, channel: &str) -> redis::PubSub<'a> {
    let mut pubsub = conn.as_pubsub();
    pubsub.subscribe(channel).expect("subscribe");
    pubsub
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("a timeout");
    pubsub
}

/// The next message `pubsub` hears.
fn heard(pubsub: &mut redis::PubSub<'_>) -> String {
    let message = pubsub.get_message().expect("a message");
    message.get_payload().expect("text")
}

fn int(value: &Value) -> i64 {
    match value {
        Value::Int(number) => *number,
        other => panic!("{other:?} is not a number"),
    }
}

fn text(value: &Value) -> String {
    match value {
        Value::BulkString(bytes) => String::from_utf8_lossy(bytes).into_owned(),
        other => panic!("{other:?} is not text"),
    }
}

#[test]
fn acquire_reads_a_rust_value_as_busy_names_its_holder_and_marks_it() {
    let mut store = Store::start();
    for metadata in holders() {
        let lock = store.key.lock.clone();
        store.set(&lock, &held_value(OWNER, '0', SINCE, &metadata));
        let answer = store.acquire(OTHER, "", "0", "");
        assert_eq!((int(&answer[0]), int(&answer[3])), (0, 0), "{answer:?}");
        assert!(int(&answer[1]) > 0, "{answer:?}");
        let holder = u64::try_from(int(&answer[2])).expect("a holder id");
        assert_eq!(holder, holder_id(OWNER));
        let recorded = text(&answer[4]);
        let blocker = Blocker::from_value(&recorded, Some(holder_hex(holder)));
        if metadata.is_empty() {
            assert_eq!((recorded.as_str(), blocker), ("", None));
        } else {
            let blocker = blocker.expect("the holder is named");
            assert!(!recorded.contains(OWNER), "{recorded}");
            assert_eq!(blocker.holder_id, token_id(OWNER));
            assert_eq!(
                (blocker.host.as_deref(), blocker.pid, blocker.app.as_deref()),
                (Some("web-1"), Some(42), Some("orders api"))
            );
            assert_eq!(
                blocker.since,
                Some(std::time::UNIX_EPOCH + Duration::from_millis(SINCE))
            );
        }
        // Marked as awaited: the value the Rust writer writes for a holder that waited.
        assert_eq!(store.get(&lock), held_value(OWNER, '1', SINCE, &metadata));
        assert!(store.parsed(&lock).waiting);
        // A fair waiter marks the line: `waiting=2`.
        let answer = store.acquire(OTHER, "", "0", "fair");
        assert_eq!((int(&answer[0]), int(&answer[3])), (0, 1), "{answer:?}");
        assert_eq!(store.get(&lock), held_value(OWNER, '2', SINCE, &metadata));
        assert!(store.parsed(&lock).line);
        // The owner asking again is told it holds it.
        let answer = store.acquire(OWNER, &holder_part(SINCE, &metadata), "0", "");
        assert_eq!((int(&answer[0]), int(&answer[2])), (1, 2), "{answer:?}");
        store
            .server
            .cmd(&["DEL", &lock, &store.key.queue(), &store.key.queue_expiry()]);
    }
}

#[test]
fn acquire_and_hand_over_write_the_rust_value() {
    let mut store = Store::start();
    let lock = store.key.lock.clone();
    for metadata in holders() {
        let holder = holder_part(SINCE, &metadata);
        for (waited, flag) in [("0", '0'), ("1", '1')] {
            store.server.cmd(&["DEL", &lock]);
            let answer = store.acquire(OWNER, &holder, waited, "");
            assert_eq!(int(&answer[0]), 1, "{answer:?}");
            assert_eq!(store.get(&lock), held_value(OWNER, flag, SINCE, &metadata));
        }
        // Handed over from a holder nobody waited for, as the Rust writer wrote it.
        store.set(&lock, &held_value(OWNER, '0', SINCE, &metadata));
        let mut call = HANDOFF.prepare_invoke();
        call.key(&lock)
            .key(store.key.queue())
            .key(store.key.queue_expiry())
            .key(store.key.counter())
            .arg(OWNER)
            .arg(OTHER)
            .arg(LEASE_MS)
            .arg(holder_part(SINCE + 1, &metadata))
            .arg("")
            .arg(TURN_MS);
        let answer: Vec<i64> = call.invoke(&mut store.conn).expect("handoff.lua");
        assert_eq!(answer[0], 1, "{answer:?}");
        assert_eq!(
            store.get(&lock),
            held_value(OTHER, '0', SINCE + 1, &metadata)
        );
        assert_eq!(store.parsed(&lock).token.as_deref(), Some(OTHER));
    }
}

#[test]
fn renew_and_release_read_a_rust_value() {
    let mut store = Store::start();
    let lock = store.key.lock.clone();
    for metadata in holders() {
        store.set(&lock, &held_value(OWNER, '0', SINCE, &metadata));
        store.server.cmd(&["PEXPIRE", &lock, "1000"]);
        assert_eq!(store.renew(&lock, OTHER), 0);
        assert_eq!(store.renew(&lock, OWNER), 1);
        let pttl: i64 = store.server.cmd(&["PTTL", &lock]).parse().expect("a pttl");
        assert!(pttl > 1000, "{pttl}");

        assert_eq!(store.release(OTHER, "0"), 0);
        // Kept for hold_at_least: busy, nobody's.
        assert_eq!(store.release(OWNER, "5000"), 1);
        let kept = store.parsed(&lock);
        assert!(
            kept.is_busy() && kept.token.is_none() && !kept.waiting,
            "{kept:?}"
        );

        // A holder someone waited for announces its release by its token's id.
        store.set(&lock, &held_value(OWNER, '1', SINCE, &metadata));
        let mut conn = store.connect();
        let mut listener = subscribed(&mut conn, &lock);
        assert_eq!(store.release(OWNER, "0"), 1);
        assert_eq!(heard(&mut listener).into_bytes(), release_id(OWNER));
        assert_eq!(store.get(&lock), "(nil)");
    }
}

#[test]
fn a_fair_turn_is_written_for_rust_and_named_by_its_waiters_id() {
    let mut store = Store::start();
    let lock = store.key.lock.clone();
    store.set(&lock, &held_value(OWNER, '2', SINCE, &holders()[0]));
    store.line_up(OTHER);
    let mut conn = store.connect();
    let mut listener = subscribed(&mut conn, &lock);
    assert_eq!(store.release(OWNER, "0"), 2);
    assert_eq!(heard(&mut listener), format!("q:{}", token_id(OTHER)));
    let freed = store.parsed(&lock);
    assert!(freed.is_reserved() && !freed.is_busy(), "{freed:?}");
    assert_eq!(freed.holder_field("next"), Some(OTHER));

    // The waiter leaves: freed for anyone, announced by its id.
    let mut call = LEAVE.prepare_invoke();
    call.key(&lock)
        .key(store.key.queue())
        .key(store.key.queue_expiry())
        .arg(OTHER)
        .arg(TURN_MS)
        .arg("");
    let left: i64 = call.invoke(&mut store.conn).expect("leave.lua");
    assert_eq!(left, 1);
    assert_eq!(heard(&mut listener).into_bytes(), release_id(OTHER));
    assert_eq!(store.get(&lock), "(nil)");
}

#[test]
fn the_force_release_names_a_holder_as_rust_does() {
    let mut store = Store::start();
    let lock = store.key.lock.clone();
    for metadata in holders() {
        let value = held_value(OWNER, '0', SINCE, &metadata);
        store.set(&lock, &value);
        let id = store.parsed(&lock).token_id().expect("a token");
        assert_eq!(store.unlock(&token_id(OTHER)), (-2, value.clone()));
        assert_eq!(store.unlock(&id), (1, value));
        assert_eq!(store.get(&lock), "(nil)");
    }
    // A kept lock has no token: the id of its whole value names it.
    store.set(&lock, "kept waiting=0");
    assert_eq!(
        store.unlock(&token_id("kept waiting=0")),
        (1, "kept waiting=0".to_owned())
    );
}

#[test]
fn a_writer_is_a_held_value_with_its_token_that_every_reader_reads() {
    let mut store = Store::start();
    let rw = Key::new("lock:", "k", Shape::Write).expect("a key");
    let writer = rw.rw_writer();
    let take = |store: &mut Store, token: &str, mode: &str| -> Vec<i64> {
        let mut call = RW_ACQUIRE.prepare_invoke();
        call.key(rw.rw_readers())
            .key(&writer)
            .key(rw.rw_writer_waiting())
            .key(rw.counter())
            .key(rw.sem_waiting())
            .key(rw.fence_of_0_2())
            .arg(token)
            .arg(mode)
            .arg(LEASE_MS)
            .arg("0")
            .arg("")
            .arg("0");
        call.invoke(&mut store.conn).expect("rw_acquire.lua")
    };
    let granted = take(&mut store, OWNER, "w");
    assert_eq!(granted[0], 1, "{granted:?}");
    let fence = u64::try_from(granted[1]).expect("a token");
    let held = store.parsed(&writer);
    assert_eq!(
        (held.state.as_str(), held.token.as_deref(), held.fence),
        ("held", Some(OWNER), fence)
    );
    assert!(!held.waiting);
    // What 0.2 and 0.3 read as their writers' form: `held fence=<F> token=<T>`.
    assert!(
        store
            .get(&writer)
            .starts_with(&format!("held fence={fence} token={OWNER} ")),
        "{}",
        store.get(&writer)
    );
    let release = |store: &mut Store, token: &str| -> i64 {
        let mut call = RW_RELEASE.prepare_invoke();
        call.key(rw.rw_readers())
            .key(&writer)
            .key(rw.sem_waiting())
            .arg(token)
            .arg("w")
            .arg("0")
            .arg("")
            .arg(&rw.lock);
        call.invoke(&mut store.conn).expect("rw_release.lua")
    };
    // This writer, then one as 0.2 and 0.3 wrote it.
    for _ in 0..2 {
        assert_eq!(take(&mut store, OTHER, "w")[0], 0);
        assert_eq!(take(&mut store, OTHER, "r")[0], 0);
        assert_eq!(store.renew(&writer, OTHER), 0);
        assert_eq!(store.renew(&writer, OWNER), 1);
        assert_eq!(release(&mut store, OTHER), -1);
        assert_eq!(release(&mut store, OWNER), 1);
        assert_eq!(store.get(&writer), "(nil)");
        store.set(&writer, &format!("held fence={fence} token={OWNER}"));
    }
}

#[test]
fn the_other_releases_name_themselves_by_the_tokens_id() {
    let mut store = Store::start();
    let sem = Key::new("lock:", "k", Shape::Semaphore { permits: 1 }).expect("a key");
    let mut call = SEMAPHORE.prepare_invoke();
    call.key(&sem.lock)
        .key(sem.counter())
        .key(sem.sem_waiting())
        .key(sem.fence_of_0_2())
        .arg(OWNER)
        .arg(1)
        .arg(LEASE_MS)
        .arg("1")
        .arg("");
    let granted: Vec<i64> = call.invoke(&mut store.conn).expect("semaphore.lua");
    assert_eq!(granted[0], 1, "{granted:?}");
    let mut conn = store.connect();
    let mut listener = subscribed(&mut conn, &sem.lock);
    let mut call = PERMIT_RELEASE.prepare_invoke();
    call.key(&sem.lock)
        .key(sem.sem_waiting())
        .arg(OWNER)
        .arg(1)
        .arg(0)
        .arg("");
    let released: i64 = call.invoke(&mut store.conn).expect("permit_release.lua");
    assert_eq!(released, 1);
    assert_eq!(heard(&mut listener).into_bytes(), release_id(OWNER));

    // A writer that stops waiting tells the readers, as `w:` and its id.
    let rw = Key::new("lock:", "k", Shape::Write).expect("a key");
    store.set(&rw.rw_writer_waiting(), OWNER);
    store.set(&rw.sem_waiting(), "1");
    let mut conn = store.connect();
    let mut listener = subscribed(&mut conn, &rw.lock);
    let mut call = RW_LEAVE.prepare_invoke();
    call.key(rw.rw_writer_waiting())
        .key(rw.sem_waiting())
        .arg(OWNER)
        .arg("")
        .arg(&rw.lock);
    let left: i64 = call.invoke(&mut store.conn).expect("rw_leave.lua");
    assert_eq!(left, 1);
    assert_eq!(heard(&mut listener), format!("w:{}", token_id(OWNER)));
}

#[test]
fn a_steal_writes_the_rust_value_above_the_holders_token_and_tells_it_as_notice_encode_does() {
    let mut store = Store::start();
    // A name of several bytes per character: the notice counts bytes, as Rust does.
    let key = Key::lock("lock:", "ключ 42").expect("a key");
    let mut conn = store.connect();
    let mut listener = subscribed(&mut conn, &super::notices_channel("lock:", 0));
    for metadata in holders() {
        store.key = key.clone();
        let taken = store.acquire(OWNER, &holder_part(SINCE, &metadata), "1", "");
        assert_eq!(int(&taken[0]), 1, "{taken:?}");
        let from = "ops-1 pid 7: import stuck for an hour";
        let stolen = store.steal(&key, OTHER, &holder_part(SINCE + 1, &metadata), from);
        assert_eq!(stolen[0], 1, "{stolen:?}");
        assert!(stolen[1] > int(&taken[1]), "{stolen:?} after {taken:?}");
        let victim = u64::try_from(stolen[2]).expect("a holder id");
        assert_eq!(victim, holder_id(OWNER));
        // Written as a fresh grant is, keeping the mark of a holder that waited.
        assert_eq!(
            store.get(&key.lock),
            held_value(OTHER, '1', SINCE + 1, &metadata)
        );
        let line = heard(&mut listener);
        let told = Notice::new(
            NoticeKind::Stolen,
            key.name(),
            HolderId::from_raw(victim),
            from,
        );
        assert_eq!(line, told.encode());
        assert_eq!(Notice::decode(&line), Some(told));
        store.server.cmd(&["DEL", &key.lock]);
    }
}

#[test]
fn a_steal_leaves_the_line_in_place_and_takes_a_kept_lock_telling_nobody() {
    let mut store = Store::start();
    let lock = store.key.lock.clone();
    let key = store.key.clone();
    store.set(&lock, &held_value(OWNER, '2', SINCE, ""));
    store.line_up("a-waiter");
    let stolen = store.steal(&key, OTHER, "", "");
    assert_eq!(
        (stolen[0], stolen[2]),
        (1, i64::try_from(holder_id(OWNER)).expect("48 bits"))
    );
    assert_eq!(store.get(&lock), held_value(OTHER, '2', 0, ""));
    assert_eq!(
        store.server.cmd(&["ZRANGE", &key.queue(), "0", "-1"]),
        "a-waiter"
    );
    // The stealer's release frees it for the first in line.
    assert_eq!(store.release(OTHER, "0"), 2);
    assert_eq!(store.parsed(&lock).holder_field("next"), Some("a-waiter"));

    // Kept by hold_at_least: nobody's, taken, its mark kept.
    store
        .server
        .cmd(&["DEL", &lock, &key.queue(), &key.queue_expiry()]);
    store.set(&lock, "kept waiting=1");
    let stolen = store.steal(&key, OTHER, "", "");
    assert_eq!((stolen[0], stolen[2]), (1, 0), "{stolen:?}");
    assert_eq!(store.get(&lock), held_value(OTHER, '1', 0, ""));

    // Data that is not a lock is left as it is.
    store.server.cmd(&["DEL", &lock]);
    store.server.cmd(&["HSET", &lock, "token", OWNER]);
    assert_eq!(store.steal(&key, OTHER, "", "")[0], -1);
}
