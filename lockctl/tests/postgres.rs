//! The built `lockctl` binary over a PostgreSQL store: `list`, `show` and `unlock` read and
//! force-release a lock held in the table through the store's inspection side, never printing
//! the password or an owner token.

use std::process::{Command, Output, Stdio};
use std::time::Duration;

use lock_runtime::{LockManager, LockOptions};
use lock_tests::PostgresServer;
use lock_tests::prelude::*;
use serde_json::Value;

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

fn json(output: &Output) -> Value {
    assert_eq!(output.status.code(), Some(0), "{}", text(output));
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(output)))
}

#[tokio::test(flavor = "multi_thread")]
async fn lockctl_lists_shows_and_unlocks_a_postgres_lock() {
    let server = PostgresServer::start();
    let url = server.url();
    let locks = LockManager::connect(&url).await.expect("connect");
    let guard = locks
        .lock("order:42", LockOptions::new().ttl(Duration::from_secs(60)))
        .await
        .expect("free");
    let fence = guard.fencing_token();
    let token = server.psql("SELECT token FROM lock_runtime_locks");
    let token = token.trim();
    assert!(!token.is_empty(), "the lock has a row");

    let listed = lockctl(&url, &["list", "order:*", "--json"]);
    let shown = text(&listed);
    assert!(!shown.contains(server.password()), "{shown}");
    assert!(!shown.contains(token), "{shown}");
    let listed = json(&listed);
    let entries = listed["locks"].as_array().expect("locks");
    assert_eq!(entries.len(), 1, "{listed}");
    let lock = &entries[0];
    assert_eq!(lock["key"], "order:42", "{listed}");
    assert_eq!(lock["state"], "held", "{listed}");
    assert_eq!(lock["fence"].as_u64(), Some(fence), "{listed}");
    let lease = lock["lease_ms"].as_i64().expect("a lease");
    assert!(lease > 0 && lease <= 60_000, "{listed}");
    // What the holder recorded: its host and pid (no app_name set), and the holder id a busy
    // answer gives, 12 hex digits of the owner token's digest.
    assert_eq!(
        lock["holder_id"].as_str(),
        Some(lock_runtime::inspect::token_id(token).as_str()),
        "{listed}"
    );
    let host = server.psql("SELECT host FROM lock_runtime_locks");
    assert!(!host.trim().is_empty(), "no host recorded");
    assert_eq!(lock["host"].as_str(), Some(host.trim()), "{listed}");
    assert_eq!(
        lock["pid"].as_u64(),
        Some(u64::from(std::process::id())),
        "{listed}"
    );
    assert!(lock["app"].is_null(), "{listed}");
    assert!(lock["since_ms"].as_u64().is_some(), "{listed}");
    assert!(
        listed["deployment"]
            .as_str()
            .is_some_and(|url| url.contains("***") && !url.contains(server.password())),
        "{listed}"
    );

    let shown = lockctl(&url, &["show", "order:42", "--json"]);
    let shown = json(&shown);
    assert_eq!(shown["key"], "order:42", "{shown}");
    assert_eq!(shown["locks"][0]["state"], "held", "{shown}");
    assert_eq!(shown["locks"][0]["fence"].as_u64(), Some(fence), "{shown}");
    assert_eq!(
        shown["locks"][0]["host"].as_str(),
        Some(host.trim()),
        "{shown}"
    );
    assert_eq!(
        shown["locks"][0]["pid"].as_u64(),
        Some(u64::from(std::process::id())),
        "{shown}"
    );

    // A waiter of another manager gets the lock once an operator unlocks it.
    let other = LockManager::connect(&url).await.expect("connect");
    let waiter = tokio::spawn(async move {
        other
            .lock("order:42", LockOptions::new().wait(PATIENCE))
            .await
            .map(|guard| guard.fencing_token())
    });
    let unlocked = lockctl(&url, &["unlock", "order:42", "--yes"]);
    assert_eq!(unlocked.status.code(), Some(0), "{}", text(&unlocked));
    let next = waiter
        .await
        .expect("task")
        .expect("served after the unlock");
    assert!(next > fence, "{next} after {fence}");
    drop(guard);
}

/// `revoke` and `steal` against a real PostgreSQL, as an operator runs them: the holder hears
/// who asked, then loses its lock to the steal with a greater fencing token; a waiter gets the
/// lock once the steal's hold ends. Neither prints the password or an owner token.
#[tokio::test(flavor = "multi_thread")]
async fn lockctl_revokes_and_steals_a_postgres_lock() {
    let server = PostgresServer::start();
    let url = server.url();
    let locks = LockManager::builder()
        .url(&url)
        .app_name("billing")
        .build()
        .await
        .expect("connect");
    let guard = locks
        .lock("order:42", LockOptions::new().ttl(Duration::from_secs(60)))
        .await
        .expect("free");
    let token = server.psql("SELECT token FROM lock_runtime_locks");
    let token = token.trim().to_owned();

    let began = std::time::Instant::now();
    let revoked = lockctl(&url, &["revoke", "order:42", "--reason", "deploy at 14:00"]);
    let said = text(&revoked);
    println!("$ lockctl revoke order:42 --reason \"deploy at 14:00\"\n{said}");
    assert_eq!(revoked.status.code(), Some(0), "{said}");
    let pid = std::process::id().to_string();
    for part in [
        "billing",
        pid.as_str(),
        "holder decides",
        "reason: deploy at 14:00",
    ] {
        assert!(said.contains(part), "no `{part}` in {said}");
    }
    let request = tokio::time::timeout(PATIENCE, guard.release_requested())
        .await
        .expect("the holder heard it");
    println!(
        "revoke heard {} ms after lockctl started (its start, connection and exit included)",
        began.elapsed().as_millis()
    );
    assert!(request.from().starts_with("lockctl "), "{request}");
    assert!(request.from().ends_with(": deploy at 14:00"), "{request}");
    assert!(guard.is_held(), "a request takes nothing");

    let other = LockManager::connect(&url).await.expect("connect");
    let waiter = tokio::spawn(async move {
        let options = LockOptions::new().wait(PATIENCE);
        other
            .lock("order:42", options)
            .await
            .map(|guard| guard.fencing_token())
    });
    let began = std::time::Instant::now();
    let args = [
        "steal", "order:42", "--reason", "stuck", "--hold", "200ms", "--json",
    ];
    // Run while the victim waits to be told: the steal holds the lock for 200 ms.
    let running = tokio::task::spawn_blocking({
        let url = url.clone();
        move || lockctl(&url, &args)
    });
    let lost = tokio::time::timeout(PATIENCE, guard.lost()).await;
    println!(
        "steal heard {} ms after lockctl started (its start and connection included)",
        began.elapsed().as_millis()
    );
    assert_eq!(lost.expect("told"), lock_runtime::LostReason::Stolen);
    let stolen = running.await.expect("lockctl ran");
    let said = text(&stolen);
    println!("$ lockctl {}\n{said}", args.join(" "));
    for secret in [server.password(), token.as_str()] {
        assert!(!said.contains(secret), "{said}");
    }
    let stolen = json(&stolen);
    let fence = stolen["fencing_token"].as_u64().expect("a token");
    assert!(fence > guard.fencing_token(), "{stolen}");
    assert_eq!(stolen["victim"]["app"], "billing", "{stolen}");
    assert_eq!(
        stolen["victim_id"], stolen["victim"]["holder_id"],
        "{stolen}"
    );
    assert!(stolen["held_ms"].as_u64() >= Some(200), "{stolen}");
    assert_eq!(stolen["released"], true, "{stolen}");
    let next = waiter.await.expect("task").expect("served after the steal");
    assert!(next > fence, "{next} after the thief's {fence}");
}
