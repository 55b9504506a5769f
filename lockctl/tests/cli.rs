//! The built `lockctl` binary against real servers: what `list` and `show` print, that no
//! password or owner token is ever printed, the refused prompt without a terminal, a force
//! unlock that hands the lock to a waiter at once, and the deadlocks and waiters `deadlocks` and
//! `show` find in the waits that waiting calls publish.

use std::net::{Ipv4Addr, TcpListener};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use lock_runtime::Deadlock;
use lock_tests::prelude::*;
use lock_tests::{RedisCluster, StoredLock};
use serde_json::Value;

const PASSWORD: &str = "s3cret-pw";

/// A lease far longer than the tests wait: only an unlock can free it in time.
const LONG_LEASE: Duration = Duration::from_secs(60);

/// Runs `lockctl --url <url> <args>` with stdin closed (not a terminal).
fn lockctl(url: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_lockctl"))
        .arg("--url")
        .arg(url)
        .args(args)
        .env_remove("REDIS_URL")
        .stdin(Stdio::null())
        .output()
        .expect("lockctl runs")
}

fn text(output: &Output) -> String {
    format!(
        "exit {:?}\n--- stdout\n{}--- stderr\n{}",
        output.status.code(),
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// The exit code of `lockctl deadlocks` when it found a deadlock.
const DEADLOCK_FOUND: i32 = 3;

/// The JSON `output` printed, from a run that succeeded (or, for `deadlocks`, found one).
fn json(output: &Output) -> Value {
    assert!(
        matches!(output.status.code(), Some(0 | DEADLOCK_FOUND)),
        "{}",
        text(output)
    );
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(output)))
}

async fn manager(url: &str, app: &str) -> LockManager {
    LockManager::builder()
        .url(url)
        .app_name(app)
        .build()
        .await
        .expect("connect")
}

fn held(server: &RedisServer, stored: &str) -> StoredLock {
    server
        .stored_lock(stored)
        .unwrap_or_else(|| panic!("`{stored}` is held\n{}", server.log()))
}

#[tokio::test(flavor = "multi_thread")]
async fn list_json_names_the_holder_without_its_token_or_the_password() {
    let server = RedisServer::start_with(&["--requirepass", PASSWORD]);
    let locks = manager(&server.url(), "billing jobs").await;
    let guard = locks
        .lock("order:42", LockOptions::new().ttl(Duration::from_secs(30)))
        .await
        .expect("free");
    let _other = locks.lock("job", LockOptions::new()).await.expect("free");
    let token = held(&server, "lock:{order:42}").token.expect("a token");

    let output = lockctl(&server.url(), &["list", "order:*", "--json"]);
    let shown = text(&output);
    assert!(!shown.contains(PASSWORD), "{shown}");
    assert!(!shown.contains(&token), "{shown}");
    let listed = json(&output);
    let locks = listed["locks"].as_array().expect("locks");
    assert_eq!(locks.len(), 1, "the pattern keeps `job` out: {shown}");
    let lock = &locks[0];
    assert_eq!(lock["key"], "order:42", "{shown}");
    assert_eq!(lock["stored_key"], "lock:{order:42}", "{shown}");
    assert_eq!(lock["state"], "held", "{shown}");
    // The stored value carries no fencing token now (they come from the slot's fence counter):
    // none is shown rather than a made-up 0.
    assert!(guard.fencing_token() > 0);
    assert!(lock["fence"].is_null(), "{shown}");
    assert_eq!(lock["pid"], std::process::id(), "{shown}");
    assert_eq!(lock["app"], "billing jobs", "{shown}");
    assert!(lock["host"].is_string(), "{shown}");
    let lease = lock["lease_ms"].as_i64().expect("a lease");
    assert!(lease > 0 && lease <= 30_000, "{shown}");
    assert!(
        lock["age_ms"].as_u64().is_some_and(|age| age < 60_000),
        "{shown}"
    );
    assert_eq!(
        lock["holder_id"].as_str().map(str::len),
        Some(12),
        "{shown}"
    );
    assert_eq!(lock["waiters"], 0, "{shown}");
    assert_eq!(lock["line_length"], 0, "{shown}");
    assert!(
        listed["deployment"]
            .as_str()
            .is_some_and(|url| url.contains("***")),
        "{shown}"
    );
}

/// The value of a lock this version takes carries no fencing token; `list` and `show` give
/// what is true instead of `-`: the last token the slot's counter handed out, which the
/// holder's does not exceed (and equals while nothing else in the slot took one since).
#[tokio::test(flavor = "multi_thread")]
async fn list_and_show_bound_a_held_locks_fence_by_its_slots_counter() {
    let server = RedisServer::start();
    let locks = manager(&server.url(), "fenced").await;
    let guard = locks
        .lock("order:7", LockOptions::new())
        .await
        .expect("free");
    let token = guard.fencing_token();

    let listed = json(&lockctl(&server.url(), &["list", "--json"]));
    let lock = &listed["locks"][0];
    assert!(lock["fence"].is_null(), "{listed}");
    let at_most = lock["fence_at_most"].as_u64().expect("a bound");
    assert!(at_most >= token, "{at_most} < {token}: {listed}");

    let output = lockctl(&server.url(), &["list"]);
    let shown = text(&output);
    assert!(shown.contains(&format!("<={at_most}")), "{shown}");
    let output = lockctl(&server.url(), &["show", "order:7"]);
    let shown = text(&output);
    let fence_line = shown
        .lines()
        .find(|line| line.starts_with("fence "))
        .unwrap_or_else(|| panic!("a fence line: {shown}"));
    assert!(fence_line.ends_with(&format!("<={at_most}")), "{shown}");
}

#[tokio::test(flavor = "multi_thread")]
async fn list_skips_free_markers_unless_all_and_text_names_the_holder() {
    let server = RedisServer::start();
    let locks = manager(&server.url(), "reports").await;
    let _held = locks.lock("busy", LockOptions::new()).await.expect("free");
    locks
        .lock("done", LockOptions::new())
        .await
        .expect("free")
        .release()
        .await
        .expect("released");
    // A released lock leaves no key now; only version 0.2 left a free marker, which an upgraded
    // deployment may still hold for a while.
    assert_eq!(
        server.cmd(&["EXISTS", "lock:{done}"]),
        "0",
        "{}",
        server.log()
    );
    server.cmd(&["SET", "lock:{old}", "free fence=9", "PX", "60000"]);

    let output = lockctl(&server.url(), &["list"]);
    let shown = text(&output);
    assert_eq!(output.status.code(), Some(0), "{shown}");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.starts_with("KEY"), "{shown}");
    assert!(
        stdout.contains("busy") && stdout.contains("reports"),
        "{shown}"
    );
    assert!(
        stdout.contains(&format!("/{}", std::process::id())),
        "{shown}"
    );
    assert!(!stdout.contains("done"), "{shown}");
    assert!(!stdout.contains("old"), "{shown}");

    let all = json(&lockctl(&server.url(), &["list", "--all", "--json"]));
    let states: Vec<(&str, &str)> = all["locks"]
        .as_array()
        .expect("locks")
        .iter()
        .map(|lock| {
            (
                lock["key"].as_str().unwrap_or_default(),
                lock["state"].as_str().unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(states, [("busy", "held"), ("old", "free")], "{all}");
    assert_eq!(all["locks"][1]["fence"], 9, "{all}");
    assert!(all["locks"][0]["fence"].is_null(), "{all}");
}

/// Semaphores and read-write locks are listed and shown beside the locks, with their holders'
/// ids and leases (never their owner tokens), and `unlock` refuses them, saying why.
#[tokio::test(flavor = "multi_thread")]
async fn semaphores_and_read_write_locks_are_listed_and_shown_but_not_unlocked() {
    let server = RedisServer::start();
    let url = server.url();
    let locks = manager(&url, "exports").await;
    let options = LockOptions::new().ttl(Duration::from_secs(30));
    let first = locks.semaphore("exports", 3, options).await.expect("free");
    let second = locks.semaphore("exports", 3, options).await.expect("free");
    let reader = locks.read_lock("doc:7", options).await.expect("free");
    let other = manager(&url, "readers").await;
    let reader_two = other.read_lock("doc:7", options).await.expect("shared");
    let writer = locks.write_lock("doc:8", options).await.expect("free");
    let _lock = locks.lock("order:1", options).await.expect("free");
    let tokens: Vec<String> = ["lock:{exports}:sem", "lock:{doc:7}:rw:readers"]
        .iter()
        .flat_map(|set| {
            let members = server.cmd(&["ZRANGE", set, "0", "-1"]);
            members
                .lines()
                .filter_map(|member| member.rsplit_once(':').map(|(_, t)| t.to_owned()))
                .collect::<Vec<_>>()
        })
        .collect();
    assert_eq!(tokens.len(), 4, "two permits, two readers");

    let output = lockctl(&url, &["list", "--json"]);
    let shown = text(&output);
    for token in &tokens {
        assert!(!shown.contains(token.as_str()), "no owner token: {shown}");
    }
    let listed = json(&output);
    let rows: Vec<(&str, &str, &str, usize)> = listed["locks"]
        .as_array()
        .expect("locks")
        .iter()
        .map(|row| {
            (
                row["key"].as_str().unwrap_or_default(),
                row["kind"].as_str().unwrap_or_default(),
                row["state"].as_str().unwrap_or_default(),
                row["holders"].as_array().map_or(0, Vec::len),
            )
        })
        .collect();
    assert_eq!(
        rows,
        [
            ("doc:7", "rwlock", "held", 2),
            ("doc:8", "rwlock", "held", 1),
            ("exports", "semaphore", "held", 2),
            ("order:1", "lock", "held", 0),
        ],
        "{shown}"
    );
    let exports = &listed["locks"][2];
    assert_eq!(exports["permits"], 3, "{shown}");
    // A permit's token is in no key: it came from the fence counter of the slot.
    assert!(exports["fence"].is_null(), "{shown}");
    assert_eq!(exports["stored_key"], "lock:{exports}:sem", "{shown}");
    assert_eq!(listed["locks"][0]["mode"], "read", "{shown}");
    assert_eq!(listed["locks"][1]["mode"], "write", "{shown}");
    assert_eq!(
        listed["locks"][1]["fence"],
        writer.fencing_token(),
        "{shown}"
    );
    for holder in exports["holders"].as_array().expect("holders") {
        let lease = holder["lease_ms"].as_i64().expect("a lease");
        assert!(lease > 0 && lease <= 30_000, "{shown}");
        assert_eq!(
            holder["holder_id"].as_str().map(str::len),
            Some(12),
            "{shown}"
        );
    }

    let text_list = lockctl(&url, &["list"]);
    let stdout = String::from_utf8_lossy(&text_list.stdout);
    for expected in [
        "KIND",
        "2/3 permits",
        "2 readers",
        "writer",
        "semaphore",
        "rwlock",
    ] {
        assert!(
            stdout.contains(expected),
            "{expected}: {}",
            text(&text_list)
        );
    }
    let show = lockctl(&url, &["show", "exports"]);
    let show_text = String::from_utf8_lossy(&show.stdout);
    assert!(
        show_text.contains("permits") && show_text.matches("permit, lease left").count() == 2,
        "{}",
        text(&show)
    );

    let refused = lockctl(&url, &["unlock", "exports", "--yes"]);
    assert_eq!(refused.status.code(), Some(1), "{}", text(&refused));
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(
        said.contains("is a semaphore") && said.contains("lease ends"),
        "{}",
        text(&refused)
    );
    assert!(first.is_held() && reader.is_held(), "left untouched");

    // Released, they leave no key: not listed, even with --all.
    for guard in [first, second] {
        guard.release().await.expect("released");
    }
    reader.release().await.expect("released");
    reader_two.release().await.expect("released");
    let after = json(&lockctl(&url, &["list", "exports", "--json"]));
    assert_eq!(after["locks"].as_array().map(Vec::len), Some(0), "{after}");
    let all = json(&lockctl(&url, &["list", "--all", "doc:7", "--json"]));
    assert_eq!(all["locks"].as_array().map(Vec::len), Some(0), "{all}");
    let show = json(&lockctl(&url, &["show", "doc:7", "--json"]));
    assert_eq!(show["locks"][0]["state"], "absent", "{show}");
}

/// The `:sem:fence` and `:rw:fence` keys where version 0.2 kept the last fencing token of a
/// semaphore and a read-write lock, which a deployment being upgraded may still hold: listed
/// with --all as `free` with that token and how long it is kept, until the next grant takes
/// them over.
#[tokio::test(flavor = "multi_thread")]
async fn fence_keys_version_0_2_kept_show_as_free_until_taken_over() {
    let server = RedisServer::start();
    let url = server.url();
    server.cmd(&[
        "SET",
        "lock:{pool}:sem:fence",
        "1764045123456789",
        "PX",
        "60000",
    ]);
    server.cmd(&[
        "SET",
        "lock:{doc}:rw:fence",
        "1764045123456790",
        "PX",
        "60000",
    ]);
    let listed = json(&lockctl(&url, &["list", "--json"]));
    assert_eq!(
        listed["locks"].as_array().map(Vec::len),
        Some(0),
        "{listed}"
    );
    let all = json(&lockctl(&url, &["list", "--all", "--json"]));
    let rows: Vec<(&str, &str, &str, Option<u64>)> = all["locks"]
        .as_array()
        .expect("locks")
        .iter()
        .map(|row| {
            (
                row["key"].as_str().unwrap_or_default(),
                row["kind"].as_str().unwrap_or_default(),
                row["state"].as_str().unwrap_or_default(),
                row["fence"].as_u64(),
            )
        })
        .collect();
    assert_eq!(
        rows,
        [
            ("doc", "rwlock", "free", Some(1_764_045_123_456_790)),
            ("pool", "semaphore", "free", Some(1_764_045_123_456_789)),
        ],
        "{all}"
    );
    let kept = all["locks"][1]["lease_ms"].as_i64().expect("kept for");
    assert!(kept > 0 && kept <= 60_000, "{all}");
    let show = lockctl(&url, &["show", "pool"]);
    let shown = String::from_utf8_lossy(&show.stdout);
    assert!(
        shown.contains("1764045123456789") && shown.contains("fence kept for"),
        "{}",
        text(&show)
    );

    // The next grant takes the key over: its token is above, and the key is gone.
    let locks = manager(&url, "upgraded").await;
    let permit = locks.semaphore("pool", 2, LockOptions::new()).await;
    let permit = permit.expect("free");
    assert!(permit.fencing_token() > 1_764_045_123_456_789);
    permit.release().await.expect("released");
    let all = json(&lockctl(&url, &["list", "--all", "pool", "--json"]));
    assert_eq!(all["locks"].as_array().map(Vec::len), Some(0), "{all}");
}

#[tokio::test(flavor = "multi_thread")]
async fn show_json_gives_the_fair_line_and_unlock_serves_its_first() {
    let server = RedisServer::start();
    let holder = manager(&server.url(), "holder").await;
    let waiter = manager(&server.url(), "waiter").await;
    let _guard = holder
        .lock("hot", LockOptions::new().fair(true))
        .await
        .expect("free");
    let waiting = tokio::spawn(async move {
        // In line for longer than the test looks at the line; it is aborted at the end.
        let options = LockOptions::new().fair(true).wait(3 * PATIENCE);
        waiter
            .lock("hot", options)
            .await
            .map(|guard| guard.fencing_token())
    });
    assert!(
        wait_until_async(PATIENCE, || {
            server.cmd(&["ZCARD", "lock:{hot}:queue"]) == "1"
        })
        .await,
        "the waiter is in line\n{}",
        server.log()
    );

    let output = lockctl(&server.url(), &["show", "hot", "--json"]);
    let shown = text(&output);
    let shown_json = json(&output);
    assert_eq!(shown_json["key"], "hot", "{shown}");
    let lock = &shown_json["locks"][0];
    assert_eq!(lock["state"], "held", "{shown}");
    assert_eq!(lock["app"], "holder", "{shown}");
    assert_eq!(lock["line_length"], 1, "{shown}");
    assert_eq!(lock["line"][0]["position"], 1, "{shown}");
    let queued = server.cmd(&["ZRANGE", "lock:{hot}:queue", "0", "0"]);
    assert_eq!(
        lock["line"][0]["waiter_id"],
        lock_runtime::inspect::token_id(&queued),
        "{shown}"
    );
    assert!(
        !shown.contains(&queued),
        "a waiter's token is never shown: {shown}"
    );
    waiting.abort();
}

#[tokio::test(flavor = "multi_thread")]
async fn unlock_refuses_without_yes_when_stdin_is_not_a_terminal() {
    let server = RedisServer::start();
    let locks = manager(&server.url(), "app").await;
    let _guard = locks.lock("kept", LockOptions::new()).await.expect("free");

    let output = lockctl(&server.url(), &["unlock", "kept"]);
    let shown = text(&output);
    assert_eq!(output.status.code(), Some(2), "{shown}");
    assert!(shown.contains("--yes"), "{shown}");
    assert_eq!(held(&server, "lock:{kept}").state, "held", "{shown}");
}

#[tokio::test(flavor = "multi_thread")]
async fn force_unlock_hands_the_lock_to_a_waiting_process_at_once() {
    let server = RedisServer::start_with(&["--requirepass", PASSWORD]);
    let holder = manager(&server.url(), "stuck job").await;
    let waiter = manager(&server.url(), "next job").await;
    let guard = holder
        .lock("stuck", LockOptions::new().ttl(LONG_LEASE))
        .await
        .expect("free");
    let fence = guard.fencing_token();
    let token = held(&server, "lock:{stuck}").token.expect("a token");
    let waiting = tokio::spawn(async move {
        let options = LockOptions::new().wait(Duration::from_secs(30));
        let guard = waiter.lock("stuck", options).await?;
        Ok::<_, lock_runtime::LockError>((Instant::now(), guard.fencing_token()))
    });
    assert!(
        wait_until_async(PATIENCE, || {
            server
                .stored_lock("lock:{stuck}")
                .is_some_and(|lock| lock.waiting)
        })
        .await,
        "the waiter was told the lock is busy\n{}",
        server.log()
    );

    let unlocked_at = Instant::now();
    let output = lockctl(
        &server.url(),
        &["unlock", "stuck", "--yes", "--fence-retention", "1h"],
    );
    let shown = text(&output);
    assert_eq!(output.status.code(), Some(0), "{shown}");
    assert!(
        !shown.contains(PASSWORD) && !shown.contains(&token),
        "{shown}"
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    // Still accepted, so that existing scripts keep working, but it does nothing any more.
    assert!(
        stderr.contains("--fence-retention is deprecated and ignored"),
        "{shown}"
    );
    let audit = stderr
        .lines()
        .find(|line| line.contains("audit"))
        .unwrap_or_else(|| panic!("an audit line: {shown}"));
    for expected in [
        format!("pid={}", std::process::id()),
        "app=stuck job".to_owned(),
        // The value carries no fencing token: the holder is named by the id of its token.
        "fence=-".to_owned(),
        format!("id={}", lock_runtime::inspect::token_id(&token)),
        "`stuck`".to_owned(),
    ] {
        assert!(audit.contains(&expected), "{expected} in {audit}");
    }

    let (acquired_at, next_fence) = tokio::time::timeout(PATIENCE, waiting)
        .await
        .expect("the waiter is woken by the unlock")
        .expect("joined")
        .unwrap_or_else(|e| panic!("the waiter gets the lock: {e}\n{}", server.log()));
    let waited = acquired_at.saturating_duration_since(unlocked_at);
    // Without the unlock's announcement it would sleep until the 60 s lease ends.
    assert!(
        waited < LONG_LEASE / 2,
        "woken by the unlock, not the end of its {LONG_LEASE:?} lease: {waited:?}"
    );
    assert!(next_fence > fence, "{next_fence} > {fence}");
    drop(guard);
}

#[tokio::test(flavor = "multi_thread")]
async fn cluster_list_reads_every_master_and_unlock_wakes_a_waiter() {
    let cluster = RedisCluster::start(3, 0);
    let url = cluster.url();
    let holder = manager(&url, "cluster holder").await;
    let waiter = manager(&url, "cluster waiter").await;
    let keys: Vec<String> = (0..12).map(|n| format!("shard-{n}")).collect();
    let mut guards = Vec::new();
    for key in &keys {
        let options = LockOptions::new().ttl(LONG_LEASE);
        guards.push(holder.lock(key, options).await.expect("free"));
    }
    let masters: std::collections::HashSet<u16> = keys
        .iter()
        .map(|key| cluster.master_for_key(format!("lock:{{{key}}}")).port())
        .collect();
    assert!(masters.len() > 1, "the keys span several masters");

    let output = lockctl(&url, &["list", "shard-*", "--json"]);
    let shown = text(&output);
    let listed = json(&output);
    let mut names: Vec<String> = listed["locks"]
        .as_array()
        .expect("locks")
        .iter()
        .map(|lock| lock["key"].as_str().unwrap_or_default().to_owned())
        .collect();
    names.sort();
    let mut expected = keys.clone();
    expected.sort();
    assert_eq!(names, expected, "{shown}");

    // A semaphore and a read-write lock are found on the masters that serve their slots.
    let _permit = holder
        .semaphore("pool", 2, LockOptions::new())
        .await
        .expect("free");
    let _share = holder
        .read_lock("doc", LockOptions::new())
        .await
        .expect("free");
    for (name, kind, stored) in [
        ("pool", "semaphore", "lock:{pool}:sem"),
        ("doc", "rwlock", "lock:{doc}:rw"),
    ] {
        let listed = json(&lockctl(&url, &["list", name, "--json"]));
        assert_eq!(
            listed["locks"].as_array().map(Vec::len),
            Some(1),
            "{listed}"
        );
        let row = &listed["locks"][0];
        assert_eq!(row["kind"], kind, "{listed}");
        assert_eq!(row["state"], "held", "{listed}");
        assert_eq!(
            row["server"],
            cluster.master_for_key(stored).addr().to_string(),
            "{listed}"
        );
    }

    let waiting = tokio::spawn(async move {
        let options = LockOptions::new().wait(Duration::from_secs(30));
        waiter
            .lock("shard-0", options)
            .await
            .map(|_| Instant::now())
    });
    let stored = "lock:{shard-0}";
    let master = cluster.master_for_key(stored);
    // Sharded pub/sub came with Redis 7: before it, a waiter on a cluster cannot subscribe, and
    // takes the lock when the lease it was told of ends.
    let sharded_pubsub = lock_tests::server_version() >= (7, 0, 0);
    // Told busy, and (Redis 7) subscribed, which it does right after the busy answer.
    let subscribed = || {
        let count = master.cmd(&["PUBSUB", "SHARDNUMSUB", stored]);
        count.lines().nth(1).and_then(|n| n.parse::<u64>().ok()) >= Some(1)
    };
    assert!(
        wait_until_async(PATIENCE, || {
            master.stored_lock(stored).is_some_and(|lock| lock.waiting)
                && (!sharded_pubsub || subscribed())
        })
        .await,
        "the waiter was told the lock is busy and listens for its release\n{}",
        cluster.log()
    );
    let shown_json = json(&lockctl(&url, &["show", "shard-0", "--json"]));
    assert_eq!(
        shown_json["locks"][0]["server"],
        master.addr().to_string(),
        "{shown_json}"
    );
    let waiters = shown_json["locks"][0]["waiters"].as_u64();
    if sharded_pubsub {
        assert!(
            waiters >= Some(1),
            "the waiter's subscription is counted: {shown_json}"
        );
    } else {
        assert_eq!(waiters, Some(0), "{shown_json}");
    }

    let unlocked_at = Instant::now();
    let output = lockctl(&url, &["unlock", "shard-0", "--yes"]);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output));
    if !sharded_pubsub {
        waiting.abort();
        assert!(!master.holds_lock(stored), "unlocked\n{}", cluster.log());
        return;
    }
    let acquired_at = tokio::time::timeout(PATIENCE, waiting)
        .await
        .expect("the waiter is woken by the unlock")
        .expect("joined")
        .unwrap_or_else(|e| panic!("the waiter gets the lock: {e}\n{}", cluster.log()));
    assert!(
        acquired_at.saturating_duration_since(unlocked_at) < LONG_LEASE / 2,
        "woken by the sharded announcement, not the end of its {LONG_LEASE:?} lease"
    );
}

/// A loopback port of this test's own, whose every connection is closed at once: a server that
/// cannot be talked to, on a port that no other process can take meanwhile (as it could a port
/// found free and left unbound).
fn hanging_up_server() -> u16 {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("a free loopback port");
    let port = listener.local_addr().expect("a bound address").port();
    std::thread::spawn(move || {
        for connection in listener.incoming() {
            drop(connection);
        }
    });
    port
}

/// A loopback port of this test's own, whose every connection is answered as an HTTP server
/// answers a request it cannot read, then closed.
fn http_server() -> u16 {
    use std::io::{Read, Write};
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("a free loopback port");
    let port = listener.local_addr().expect("a bound address").port();
    std::thread::spawn(move || {
        for mut connection in listener.incoming().flatten() {
            let mut request = [0u8; 512];
            let _ = connection.read(&mut request);
            let _ = connection.write_all(
                b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            );
        }
    });
    port
}

#[test]
fn a_server_that_does_not_speak_redis_is_named_with_what_to_check() {
    let port = http_server();
    let output = lockctl(&format!("redis://127.0.0.1:{port}"), &["list"]);
    let shown = text(&output);
    assert_eq!(output.status.code(), Some(1), "{shown}");
    assert!(shown.contains(&format!("127.0.0.1:{port}")), "{shown}");
    assert!(shown.contains("did not answer as Redis does"), "{shown}");
    assert!(shown.contains("the URL's port"), "{shown}");
}

#[test]
fn errors_name_the_server_and_never_the_password() {
    let port = hanging_up_server();
    let url = format!("redis://:{PASSWORD}@127.0.0.1:{port}");
    let output = lockctl(&url, &["list"]);
    let shown = text(&output);
    assert_eq!(output.status.code(), Some(1), "{shown}");
    assert!(shown.contains(&format!("127.0.0.1:{port}")), "{shown}");
    assert!(!shown.contains(PASSWORD), "{shown}");

    for url in [
        format!("ftp://u:{PASSWORD}@h"),
        format!("redis+cluster://u:{PASSWORD}@a:1,,b:2"),
    ] {
        let output = lockctl(&url, &["list"]);
        let shown = text(&output);
        assert_eq!(output.status.code(), Some(2), "{shown}");
        assert!(!shown.contains(PASSWORD), "{shown}");
    }
}

#[test]
fn no_deployment_is_a_usage_error() {
    let output = Command::new(env!("CARGO_BIN_EXE_lockctl"))
        .arg("list")
        .env_remove("REDIS_URL")
        .stdin(Stdio::null())
        .output()
        .expect("lockctl runs");
    assert_eq!(output.status.code(), Some(2), "{}", text(&output));
    assert!(text(&output).contains("REDIS_URL"), "{}", text(&output));
}

#[test]
fn steal_without_a_reason_is_a_usage_error_before_anything_is_reached() {
    // No server listens on the URL: the missing reason is found first.
    let output = lockctl("redis://127.0.0.1:1", &["steal", "order:42"]);
    assert_eq!(output.status.code(), Some(2), "{}", text(&output));
    assert!(text(&output).contains("--reason"), "{}", text(&output));
}

#[tokio::test(flavor = "multi_thread")]
async fn redlock_shows_every_master_and_unlock_releases_on_each() {
    let masters = lock_tests::Masters::start(3);
    let url = masters.url();
    let holder = manager(&url, "redlock holder").await;
    let guard = holder
        .lock("report", LockOptions::new().ttl(Duration::from_secs(60)))
        .await
        .expect("free");

    let output = lockctl(&url, &["show", "report", "--json"]);
    let shown = text(&output);
    let locks = json(&output)["locks"].as_array().cloned().expect("locks");
    assert_eq!(locks.len(), 3, "one entry per master: {shown}");
    let servers: Vec<String> = masters
        .nodes()
        .iter()
        .map(|node| node.addr().to_string())
        .collect();
    for lock in &locks {
        assert!(
            servers
                .iter()
                .any(|server| lock["server"] == server.as_str()),
            "{shown}"
        );
        assert_eq!(lock["state"], "held", "{shown}");
        assert_eq!(lock["app"], "redlock holder", "{shown}");
    }
    let listed = lockctl(&url, &["list"]);
    let stdout = String::from_utf8_lossy(&listed.stdout);
    assert!(stdout.contains("SERVER"), "{}", text(&listed));
    assert_eq!(stdout.matches("report").count(), 3, "{}", text(&listed));

    let output = lockctl(&url, &["unlock", "report", "--yes"]);
    let shown = text(&output);
    assert_eq!(output.status.code(), Some(0), "{shown}");
    assert_eq!(shown.matches("lockctl audit").count(), 3, "{shown}");
    // The values carry no fencing token (each master's fence counter hands them out), and the
    // unlock leaves no key on any master.
    assert!(guard.fencing_token() > 0);
    for lock in &locks {
        assert!(lock["fence"].is_null(), "{shown}");
    }
    for node in masters.nodes() {
        assert_eq!(
            node.stored_lock("lock:{report}"),
            None,
            "released on {}",
            node.addr()
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn sentinel_reads_the_master_the_sentinels_name() {
    let setup = lock_tests::SentinelSetup::start(0, 1);
    let holder = manager(&setup.url(), "sentinel holder").await;
    let _guard = holder
        .lock("nightly", LockOptions::new())
        .await
        .expect("free");

    let output = lockctl(&setup.url(), &["list", "--json"]);
    let shown = text(&output);
    let listed = json(&output);
    assert_eq!(listed["locks"][0]["key"], "nightly", "{shown}");
    assert_eq!(
        listed["locks"][0]["server"],
        setup.master().addr().to_string(),
        "{shown}"
    );
}

#[test]
fn watch_refreshes_until_interrupted() {
    let server = RedisServer::start();
    server.cmd(&[
        "SET",
        "lock:{w}",
        "held fence=5 token=t waiting=0 since=1 host=h pid=7 app=a",
        "PX",
        "60000",
    ]);
    let mut child = Command::new(env!("CARGO_BIN_EXE_lockctl"))
        .args([
            "--url",
            &server.url(),
            "watch",
            "--json",
            "--interval",
            "100ms",
        ])
        .env_remove("REDIS_URL")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("lockctl runs");
    let stdout = child.stdout.take().expect("piped");
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(stdout));
    for _ in 0..3 {
        let line = lines.next().expect("a refresh").expect("readable");
        let refresh: Value = serde_json::from_str(&line).expect("one JSON document per line");
        assert_eq!(refresh["locks"][0]["key"], "w", "{line}");
    }
    // Ctrl-C ends it, as a success.
    let pid = i32::try_from(child.id()).expect("a pid");
    assert_eq!(interrupt(pid), 0, "SIGINT sent");
    let status = child.wait().expect("it exits");
    assert_eq!(status.code(), Some(0), "{status:?}");
}

/// Sends SIGINT to the lockctl this test started, with the kill(1) command (the workspace
/// forbids unsafe code, and libc's kill is unsafe).
fn interrupt(pid: i32) -> i32 {
    Command::new("kill")
        .args(["-INT", &pid.to_string()])
        .status()
        .map_or(-1, |status| status.code().unwrap_or(-1))
}

#[test]
fn help_never_shows_the_url_from_the_environment() {
    let output = Command::new(env!("CARGO_BIN_EXE_lockctl"))
        .arg("--help")
        .env("REDIS_URL", format!("redis://:{PASSWORD}@127.0.0.1:1"))
        .stdin(Stdio::null())
        .output()
        .expect("lockctl runs");
    let shown = text(&output);
    assert_eq!(output.status.code(), Some(0), "{shown}");
    assert!(shown.contains("REDIS_URL"), "{shown}");
    assert!(!shown.contains(PASSWORD), "{shown}");
}

/// Runs `lockctl --url <url> unlock <key>` on a terminal (script(1) gives it a pseudo-terminal),
/// answers `answer` to its question, and returns its exit code and what the terminal showed.
fn unlock_at_a_terminal(url: &str, key: &str, answer: &str) -> (Option<i32>, String) {
    use std::io::{Read, Write};
    let command = format!("{} --url {url} unlock {key}", env!("CARGO_BIN_EXE_lockctl"));
    let mut child = Command::new("script")
        .args(["-q", "-e", "-c", &command, "/dev/null"])
        .env_remove("REDIS_URL")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("script(1) from util-linux runs: install bsdutils");
    let mut stdin = child.stdin.take().expect("piped");
    stdin
        .write_all(format!("{answer}\n").as_bytes())
        .expect("answered");
    let mut shown = String::new();
    child
        .stdout
        .take()
        .expect("piped")
        .read_to_string(&mut shown)
        .expect("readable");
    drop(stdin);
    let status = child.wait().expect("it exits");
    (status.code(), shown)
}

#[test]
fn unlock_asks_at_a_terminal_and_does_nothing_unless_told_yes() {
    let server = RedisServer::start();
    server.cmd(&[
        "SET",
        "lock:{asked}",
        "held fence=11 token=secret-owner waiting=0 since=1 host=h pid=9 app=a",
        "PX",
        "60000",
    ]);

    let (code, shown) = unlock_at_a_terminal(&server.url(), "asked", "n");
    assert_eq!(code, Some(1), "{shown}");
    assert!(
        shown.contains("[y/N]") && shown.contains("pid=9"),
        "{shown}"
    );
    assert_eq!(held(&server, "lock:{asked}").state, "held", "{shown}");

    let (code, shown) = unlock_at_a_terminal(&server.url(), "asked", "y");
    assert_eq!(code, Some(0), "{shown}");
    assert!(shown.contains("lockctl audit"), "{shown}");
    assert!(!shown.contains("secret-owner"), "{shown}");
    // A value 0.2 wrote is confirmed by its fence, and released like any: no key is left.
    assert!(shown.contains("fence=11"), "{shown}");
    assert_eq!(server.stored_lock("lock:{asked}"), None, "{shown}");
}

/// Values in the current format, written as the runtime writes them: a held lock is confirmed by
/// the id of its owner token, a kept one (released with `hold_at_least`, no token) by its
/// value; either way the unlock leaves no key.
#[test]
fn unlock_removes_held_and_kept_locks_of_the_current_format() {
    let server = RedisServer::start();
    server.cmd(&[
        "SET",
        "lock:{now}",
        "held token=secret-now waiting=0 since=1 host=h pid=12 app=batch run",
        "PX",
        "60000",
    ]);
    server.cmd(&["SET", "lock:{slow}", "kept waiting=0", "PX", "60000"]);

    let shown = json(&lockctl(&server.url(), &["show", "now", "--json"]));
    let lock = &shown["locks"][0];
    assert_eq!(lock["state"], "held", "{shown}");
    assert!(lock["fence"].is_null(), "{shown}");
    let id = lock_runtime::inspect::token_id("secret-now");
    assert_eq!(lock["holder_id"], id.as_str(), "{shown}");

    let output = lockctl(&server.url(), &["unlock", "now", "--yes"]);
    let said = text(&output);
    assert_eq!(output.status.code(), Some(0), "{said}");
    assert!(!said.contains("secret-now"), "{said}");
    let audit = said
        .lines()
        .find(|line| line.contains("lockctl audit"))
        .unwrap_or_else(|| panic!("an audit line: {said}"));
    for expected in [
        "held holder",
        "pid=12",
        "app=batch run",
        "fence=-",
        &format!("id={id}"),
    ] {
        assert!(audit.contains(expected), "{expected} in {audit}");
    }
    assert_eq!(server.stored_lock("lock:{now}"), None, "{said}");

    let output = lockctl(&server.url(), &["unlock", "slow", "--yes"]);
    let said = text(&output);
    assert_eq!(output.status.code(), Some(0), "{said}");
    assert!(said.contains("kept holder"), "{said}");
    assert_eq!(server.stored_lock("lock:{slow}"), None, "{said}");

    let output = lockctl(&server.url(), &["unlock", "slow", "--yes"]);
    assert_eq!(
        output.status.code(),
        Some(1),
        "nothing left to unlock: {}",
        text(&output)
    );
}

/// How long a deadlock may take to show in `lockctl deadlocks`: a waiter that holds another
/// lock is published at its manager's next tick (about 200 ms), so this is patience for a
/// loaded machine.
const DEADLOCK_PATIENCE: Duration = Duration::from_secs(10);

/// Longer than any test looks: the waits of a deadlock under `Deadlock::Wait` last until the
/// test ends and aborts them.
const LONG_WAIT: Duration = Duration::from_secs(120);

/// Runs `lockctl --url <url> <args>` until its JSON satisfies `shows`, or `patience` has
/// passed: the last JSON it printed, and whether it showed.
async fn lockctl_until(
    url: &str,
    args: &[&str],
    patience: Duration,
    shows: impl Fn(&Value) -> bool,
) -> (Value, bool) {
    let deadline = Instant::now() + patience;
    loop {
        let last = json(&lockctl(url, args));
        if shows(&last) {
            return (last, true);
        }
        if Instant::now() >= deadline {
            return (last, false);
        }
        // Between two runs of the binary: the poll's pace, not an ordering.
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Two managers of their own, as two processes would have (`app` names them `a` and `b`),
/// each take one of `keys` and then wait long for the other's (`Deadlock::Wait`, the default):
/// the waiting tasks (aborted by the caller), once both hold their first lock and begin to
/// wait, and when they began.
async fn abba(url: &str, keys: [&str; 2]) -> (Vec<tokio::task::JoinHandle<()>>, Instant) {
    let both_hold = std::sync::Arc::new(tokio::sync::Barrier::new(3));
    let mut tasks = Vec::new();
    for (app, first, second) in [("a", keys[0], keys[1]), ("b", keys[1], keys[0])] {
        let locks = manager(url, app).await;
        let both_hold = both_hold.clone();
        let (first, second) = (first.to_owned(), second.to_owned());
        tasks.push(tokio::spawn(async move {
            let options = LockOptions::new().ttl(LONG_LEASE);
            let _held = locks
                .lock(first.as_str(), options)
                .await
                .unwrap_or_else(|err| panic!("take {first}: {err}"));
            both_hold.wait().await;
            // Ends only once the caller aborts the other task, whose lock then goes (as this
            // one's goes when it is aborted itself).
            let _second = locks
                .lock(
                    second.as_str(),
                    options.wait(LONG_WAIT).deadlock(Deadlock::Wait),
                )
                .await;
        }));
    }
    both_hold.wait().await;
    (tasks, Instant::now())
}

/// `lockctl deadlocks --json` at `url` shows the cycle of [`abba`] on `keys`, within
/// [`DEADLOCK_PATIENCE`] of both waits beginning; `tokens` (the owner tokens of both keys) are
/// never printed. Returns the cycle.
async fn abba_is_reported(url: &str, keys: [&str; 2], began: Instant, tokens: &[String]) -> Value {
    let (cycles, shown) = lockctl_until(url, &["deadlocks", "--json"], DEADLOCK_PATIENCE, |v| {
        v.as_array().is_some_and(|cycles| !cycles.is_empty())
    })
    .await;
    assert!(
        shown,
        "no deadlock shown within {DEADLOCK_PATIENCE:?}: {cycles}"
    );
    eprintln!(
        "lockctl deadlocks showed the deadlock {:?} after both began to wait",
        began.elapsed()
    );
    assert_eq!(cycles.as_array().map(Vec::len), Some(1), "{cycles}");
    let members = cycles[0]["members"].as_array().cloned().expect("members");
    assert_eq!(members.len(), 2, "{cycles}");
    let mut seen: Vec<(String, String, String)> = members
        .iter()
        .map(|member| {
            assert_eq!(member["pid"], std::process::id(), "{cycles}");
            assert!(member["host"].is_string(), "{cycles}");
            assert_eq!(member["gives_up"], false, "nobody chose to fail: {cycles}");
            let since = member["waiting_since"].as_str().unwrap_or_default();
            let since = humantime::parse_rfc3339(since)
                .unwrap_or_else(|err| panic!("{since}: {err}: {cycles}"));
            let ago = std::time::SystemTime::now()
                .duration_since(since)
                .unwrap_or_default();
            assert!(ago < LONG_WAIT, "{cycles}");
            assert_eq!(
                member["holds"].as_array().map(Vec::len),
                Some(1),
                "{cycles}"
            );
            (
                member["app"].as_str().unwrap_or_default().to_owned(),
                member["waits_for"].as_str().unwrap_or_default().to_owned(),
                member["holds"][0].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    seen.sort();
    let expected = |app: &str, waits: &str, holds: &str| (app.into(), waits.into(), holds.into());
    assert_eq!(
        seen,
        [
            expected("a", keys[1], keys[0]),
            expected("b", keys[0], keys[1])
        ],
        "{cycles}"
    );
    let output = lockctl(url, &["deadlocks"]);
    let shown = text(&output);
    // Found: exit code 3, with --json too.
    assert_eq!(output.status.code(), Some(DEADLOCK_FOUND), "{shown}");
    let with_json = lockctl(url, &["deadlocks", "--json"]);
    assert_eq!(
        with_json.status.code(),
        Some(DEADLOCK_FOUND),
        "{}",
        text(&with_json)
    );
    for expected in [
        "deadlock 1 of 1",
        "WAITS FOR",
        keys[0],
        keys[1],
        "nobody gives up",
        &std::process::id().to_string(),
    ] {
        assert!(shown.contains(expected), "{expected}: {shown}");
    }
    for token in tokens {
        assert!(!shown.contains(token.as_str()), "no owner token: {shown}");
        assert!(
            !cycles.to_string().contains(token.as_str()),
            "no owner token: {cycles}"
        );
    }
    cycles
}

/// `lockctl show <key> --json` lists the call of [`abba`] waiting for `key` (app `app`,
/// holding `holds`), and so does its text.
fn waiter_is_shown(url: &str, key: &str, app: &str, holds: &str) {
    let output = lockctl(url, &["show", key, "--json"]);
    let shown = json(&output);
    let waiters = shown["waiters"].as_array().cloned().expect("waiters");
    assert_eq!(waiters.len(), 1, "{shown}");
    assert_eq!(waiters[0]["pid"], std::process::id(), "{shown}");
    assert_eq!(waiters[0]["app"], app, "{shown}");
    assert_eq!(waiters[0]["holds"][0], holds, "{shown}");
    assert!(waiters[0]["waiting_since"].is_string(), "{shown}");
    let output = lockctl(url, &["show", key]);
    let shown = text(&output);
    assert!(
        shown.contains(&format!("waiting for {key}: 1 call")),
        "{shown}"
    );
    assert!(shown.contains(&std::process::id().to_string()), "{shown}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deadlock_between_two_managers_is_shown_with_its_waiters() {
    let server = RedisServer::start();
    let url = server.url();
    let keys = ["acct:1", "acct:2"];
    let (tasks, began) = abba(&url, keys).await;
    let tokens: Vec<String> = ["lock:{acct:1}", "lock:{acct:2}"]
        .iter()
        .map(|stored| held(&server, stored).token.expect("a token"))
        .collect();

    abba_is_reported(&url, keys, began, &tokens).await;
    // `a` holds acct:1 and waits for acct:2.
    waiter_is_shown(&url, "acct:2", "a", "acct:1");
    waiter_is_shown(&url, "acct:1", "b", "acct:2");
    for task in tasks {
        task.abort();
    }
}

/// The same on PostgreSQL: the waits are rows of its table of published records.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deadlock_on_postgres_is_shown_with_its_waiters() {
    let server = tokio::task::spawn_blocking(lock_tests::PostgresServer::start)
        .await
        .expect("started");
    let url = server.url();
    let keys = ["acct:1", "acct:2"];
    let (tasks, began) = abba(&url, keys).await;
    let tokens: Vec<String> = ["lock:{acct:1}", "lock:{acct:2}"]
        .iter()
        .map(|stored| {
            server.psql(&format!(
                "SELECT token FROM lock_runtime_locks WHERE name = '{stored}'"
            ))
        })
        .collect();
    assert!(
        tokens.iter().all(|token| !token.trim().is_empty()),
        "{tokens:?}"
    );

    abba_is_reported(&url, keys, began, &tokens).await;
    waiter_is_shown(&url, "acct:2", "a", "acct:1");
    waiter_is_shown(&url, "acct:1", "b", "acct:2");
    for task in tasks {
        task.abort();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_deadlock_where_nothing_waits_or_a_waiter_holds_nothing() {
    let server = RedisServer::start();
    let url = server.url();
    let expect_none = || {
        let output = lockctl(&url, &["deadlocks"]);
        let shown = text(&output);
        assert_eq!(output.status.code(), Some(0), "{shown}");
        assert_eq!(
            String::from_utf8_lossy(&output.stdout),
            "no deadlock\n",
            "{shown}"
        );
        let listed = json(&lockctl(&url, &["deadlocks", "--json"]));
        assert_eq!(listed, serde_json::json!([]), "{listed}");
    };
    // Nothing published at all: the hash does not exist.
    expect_none();

    let holder = manager(&url, "holder").await;
    let _held = holder
        .lock("busy", LockOptions::new().ttl(LONG_LEASE))
        .await
        .expect("free");
    let idle = json(&lockctl(&url, &["show", "busy", "--json"]));
    assert_eq!(idle["waiters"], serde_json::json!([]), "{idle}");
    expect_none();

    // A waiter that holds nothing is published once it has waited a while: `show` lists it,
    // and it is no deadlock.
    let waiter = manager(&url, "lone waiter").await;
    let waiting = tokio::spawn(async move {
        let waited = waiter
            .lock("busy", LockOptions::new().wait(LONG_WAIT))
            .await;
        panic!("the wait for a held lock ended: {waited:?}");
    });
    let (shown, listed) = lockctl_until(&url, &["show", "busy", "--json"], PATIENCE, |v| {
        v["waiters"].as_array().is_some_and(|w| !w.is_empty())
    })
    .await;
    assert!(listed, "the waiter is published: {shown}");
    let waiter = &shown["waiters"][0];
    assert_eq!(waiter["app"], "lone waiter", "{shown}");
    assert_eq!(waiter["pid"], std::process::id(), "{shown}");
    assert_eq!(waiter["holds"], serde_json::json!([]), "{shown}");
    expect_none();
    waiting.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deadlock_on_a_cluster_is_read_from_the_master_of_the_waits() {
    let cluster = RedisCluster::start(3, 0);
    let url = cluster.url();
    let waits_master = cluster
        .master_for_key(lock_runtime::inspect::waits_key("lock:"))
        .port();
    // Locks that live on other masters than the published waits: reading the masters of the
    // locks would not find them.
    let names: Vec<String> = (0..64)
        .map(|n| format!("acct:{n}"))
        .filter(|name| cluster.master_for_key(format!("lock:{{{name}}}")).port() != waits_master)
        .take(2)
        .collect();
    let keys = [names[0].as_str(), names[1].as_str()];
    let (tasks, began) = abba(&url, keys).await;
    let tokens: Vec<String> = keys
        .iter()
        .map(|key| {
            let stored = format!("lock:{{{key}}}");
            cluster
                .master_for_key(&stored)
                .stored_lock(&stored)
                .and_then(|lock| lock.token)
                .unwrap_or_else(|| panic!("{stored} is held\n{}", cluster.log()))
        })
        .collect();

    abba_is_reported(&url, keys, began, &tokens).await;
    waiter_is_shown(&url, keys[1], "a", keys[0]);
    for task in tasks {
        task.abort();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deadlock_on_redlock_is_read_from_the_masters_copies() {
    let masters = lock_tests::Masters::start(3);
    let url = masters.url();
    let keys = ["x", "y"];
    let (tasks, began) = abba(&url, keys).await;
    let tokens: Vec<String> = masters
        .nodes()
        .iter()
        .flat_map(|node| keys.map(|key| node.stored_lock(&format!("lock:{{{key}}}"))))
        .flatten()
        .filter_map(|lock| lock.token)
        .collect();
    assert!(!tokens.is_empty(), "the locks are held");

    abba_is_reported(&url, keys, began, &tokens).await;
    waiter_is_shown(&url, "y", "a", "x");
    for task in tasks {
        task.abort();
    }
}

/// A user whose rights predate the published waits (no `HGETALL`) still gets `show`, told on
/// stderr that who waits is not shown; `deadlocks`, which has nothing else to show, fails
/// naming the server, never the password.
#[tokio::test(flavor = "multi_thread")]
async fn show_without_the_right_to_read_the_waits_shows_the_rest() {
    // Users with rights (and channel rights, `&`) came in Redis 6.0 and 6.2: before them
    // every client may run every command.
    if lock_tests::server_version() < (6, 2, 0) {
        eprintln!("skipped: this server has no ACL channel rights");
        return;
    }
    let server = RedisServer::start();
    let password = format!(">{PASSWORD}");
    server.cmd(&[
        "ACL", "SETUSER", "ops", "on", &password, "~*", "&*", "+@all", "-hgetall",
    ]);
    let url = format!("redis://ops:{PASSWORD}@127.0.0.1:{}", server.port());
    let locks = manager(&server.url(), "app").await;
    let _held = locks.lock("busy", LockOptions::new()).await.expect("free");

    let output = lockctl(&url, &["show", "busy", "--json"]);
    let shown = text(&output);
    let json_shown = json(&output);
    assert_eq!(json_shown["locks"][0]["state"], "held", "{shown}");
    assert!(json_shown["waiters"].is_null(), "{shown}");
    assert!(shown.contains("who waits is not shown"), "{shown}");
    assert!(!shown.contains(PASSWORD), "{shown}");

    let output = lockctl(&url, &["deadlocks"]);
    let shown = text(&output);
    assert_eq!(output.status.code(), Some(1), "{shown}");
    assert!(shown.contains(&server.addr().to_string()), "{shown}");
    assert!(!shown.contains(PASSWORD), "{shown}");
}

/// The ACL user docs/LOCKCTL.md gives an operator, as it is written there: it may list, show
/// and force-release (it holds no right to load scripts, and needs none).
#[tokio::test(flavor = "multi_thread")]
async fn the_rights_the_docs_grant_are_enough_to_list_show_and_unlock() {
    if lock_tests::server_version() < (6, 2, 0) {
        eprintln!("skipped: this server has no ACL channel rights");
        return;
    }
    let page = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/LOCKCTL.md"))
        .expect("docs/LOCKCTL.md");
    let line = page
        .lines()
        .find(|line| line.starts_with("ACL SETUSER ops"))
        .expect("the page gives the operator's user");
    let password = format!(">{PASSWORD}");
    // As the page says: a server before 7.0 has no SPUBLISH, and the line leaves it out there.
    let sharded = lock_tests::server_version() >= (7, 0, 0);
    let setuser: Vec<&str> = line
        .split_whitespace()
        .filter(|word| sharded || *word != "+spublish")
        .map(|word| {
            if word == ">PASSWORD" {
                password.as_str()
            } else {
                word
            }
        })
        .collect();
    let server = RedisServer::start();
    server.cmd(&setuser);
    let url = format!("redis://ops:{PASSWORD}@127.0.0.1:{}", server.port());
    let locks = manager(&server.url(), "app").await;
    let _held = locks
        .lock("rights", LockOptions::new().ttl(LONG_LEASE))
        .await
        .expect("free");

    for args in [&["list"][..], &["show", "rights"]] {
        let output = lockctl(&url, args);
        assert_eq!(output.status.code(), Some(0), "{args:?}: {}", text(&output));
    }
    let output = lockctl(&url, &["unlock", "rights", "--yes"]);
    let shown = text(&output);
    assert_eq!(output.status.code(), Some(0), "{shown}");
    assert_eq!(server.stored_lock("lock:{rights}"), None, "{shown}");
}

/// The variable that makes [`deadlock_child_process`] a child of
/// [`a_deadlock_between_two_processes_is_reported`]: `<url> <app> <first> <second>`.
const CHILD: &str = "LOCKCTL_DEADLOCK_CHILD";

/// Not a test of its own: run by [`a_deadlock_between_two_processes_is_reported`] as a process
/// of this test binary (with [`CHILD`] set). Takes `first`, prints `child holds`, and once a line
/// comes on stdin waits for `second` (`Deadlock::Wait`) until it is killed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a child process that a_deadlock_between_two_processes_is_reported starts"]
async fn deadlock_child_process() {
    use std::io::Write;
    let Ok(args) = std::env::var(CHILD) else {
        return;
    };
    let args: Vec<&str> = args.split(' ').collect();
    let [url, app, first, second] = args[..] else {
        panic!("{CHILD}: {args:?}");
    };
    let locks = manager(url, app).await;
    let options = LockOptions::new().ttl(LONG_LEASE);
    let _held = locks.lock(first, options).await.expect("free");
    println!("child holds");
    std::io::stdout().flush().expect("flush");
    let mut go = String::new();
    tokio::task::spawn_blocking(move || std::io::stdin().read_line(&mut go))
        .await
        .expect("stdin")
        .expect("a line");
    let _second = locks
        .lock(second, options.wait(LONG_WAIT).deadlock(Deadlock::Wait))
        .await;
}

/// Two real processes on one Redis, each holding one account and waiting for the other's:
/// `lockctl deadlocks` names both, by their pids, soon after both began to wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deadlock_between_two_processes_is_reported() {
    use std::io::{BufRead, BufReader, Write};
    let server = RedisServer::start();
    let url = server.url();
    let mut children: Vec<std::process::Child> =
        [("a", "acct:1", "acct:2"), ("b", "acct:2", "acct:1")]
            .into_iter()
            .map(|(app, first, second)| {
                Command::new(std::env::current_exe().expect("this test binary"))
                    .args([
                        "deadlock_child_process",
                        "--exact",
                        "--ignored",
                        "--nocapture",
                    ])
                    .env(CHILD, format!("{url} {app} {first} {second}"))
                    .stdin(Stdio::piped())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::null())
                    .spawn()
                    .expect("spawn a child")
            })
            .collect();
    let pids: Vec<u32> = children.iter().map(std::process::Child::id).collect();
    for child in &mut children {
        let stdout = child.stdout.take().expect("stdout");
        let held = tokio::task::spawn_blocking(move || {
            BufReader::new(stdout)
                .lines()
                .map_while(Result::ok)
                .any(|line| line == "child holds")
        })
        .await
        .expect("read");
        assert!(
            held,
            "a child did not take its first lock\n{}",
            server.log()
        );
    }
    for child in &mut children {
        writeln!(child.stdin.as_mut().expect("stdin"), "go").expect("write");
    }
    let began = Instant::now();
    let (cycles, shown) = lockctl_until(&url, &["deadlocks", "--json"], DEADLOCK_PATIENCE, |v| {
        v.as_array().is_some_and(|cycles| !cycles.is_empty())
    })
    .await;
    let took = began.elapsed();
    for child in &mut children {
        let _ = child.kill();
        let _ = child.wait();
    }
    assert!(
        shown,
        "no deadlock shown within {DEADLOCK_PATIENCE:?}: {cycles}"
    );
    eprintln!(
        "lockctl deadlocks showed the two processes' deadlock {took:?} after they began to wait"
    );
    let members = cycles[0]["members"].as_array().cloned().expect("members");
    let mut shown_pids: Vec<u64> = members
        .iter()
        .filter_map(|member| member["pid"].as_u64())
        .collect();
    shown_pids.sort_unstable();
    let mut expected: Vec<u64> = pids.iter().map(|&pid| u64::from(pid)).collect();
    expected.sort_unstable();
    assert_eq!(shown_pids, expected, "{cycles}");
}

/// `revoke` and `steal` against a real server, as an operator runs them: the holder hears who
/// asked, then loses its lock to the steal with a greater fencing token.
#[tokio::test(flavor = "multi_thread")]
async fn revoke_asks_the_holder_and_steal_takes_its_lock_on_redis() {
    let server = RedisServer::start();
    let locks = manager(&server.url(), "billing jobs").await;
    let guard = locks
        .lock("order:42", LockOptions::new().ttl(LONG_LEASE))
        .await
        .expect("free");

    let began = Instant::now();
    let revoked = lockctl(&server.url(), &["revoke", "order:42", "--reason", "deploy"]);
    assert_eq!(revoked.status.code(), Some(0), "{}", text(&revoked));
    let shown = text(&revoked);
    for part in [
        "billing jobs",
        &std::process::id().to_string(),
        "holder decides",
    ] {
        assert!(shown.contains(part), "no `{part}` in {shown}");
    }
    let request = tokio::time::timeout(PATIENCE, guard.release_requested())
        .await
        .expect("the holder heard it");
    println!(
        "revoke heard {} ms after lockctl started (its start, connection and exit included)",
        began.elapsed().as_millis()
    );
    assert!(request.from().ends_with(": deploy"), "{request}");

    let began = Instant::now();
    let running = tokio::task::spawn_blocking({
        let url = server.url();
        move || lockctl(&url, &["steal", "order:42", "--reason", "stuck", "--json"])
    });
    let lost = tokio::time::timeout(PATIENCE, guard.lost()).await;
    println!(
        "steal heard {} ms after lockctl started (its start and connection included)",
        began.elapsed().as_millis()
    );
    assert_eq!(lost.expect("told"), lock_runtime::LostReason::Stolen);
    let stolen = json(&running.await.expect("lockctl ran"));
    assert!(
        stolen["fencing_token"].as_u64() > Some(guard.fencing_token()),
        "{stolen}"
    );
    assert_eq!(stolen["victim"]["app"], "billing jobs", "{stolen}");
}
