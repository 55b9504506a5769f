//! The built `lockctl` binary's `elections` and `election NAME` against real servers: the
//! leader (holder, host, pid, app, the term's fencing token) and the candidates with their
//! priorities, never an owner token; on PostgreSQL, the leader alone.

use std::process::{Command, Output, Stdio};
use std::time::Duration;

use lock_runtime::{ElectionOptions, Leadership};
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

async fn manager(url: &str, app: &str) -> LockManager {
    LockManager::builder()
        .url(url)
        .app_name(app)
        .build()
        .await
        .expect("connect")
}

/// The owner token of `leadership`'s term, which nothing may print.
fn owner_token(leadership: &Leadership) -> String {
    let term = leadership.current_term().expect("leading").to_secret_text();
    term.split(' ').nth(2).expect("a token").to_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn elections_and_election_show_the_leader_and_the_candidates_by_priority() {
    let server = RedisServer::start();
    let url = server.url();
    let first = manager(&url, "scheduler-a").await;
    let second = manager(&url, "scheduler-b").await;
    let options = ElectionOptions::new().ttl(Duration::from_secs(30));
    let leader = first
        .elect("nightly-jobs", options.priority(1))
        .expect("campaign");
    let token = leader.elected().await.expect("elected");
    let _candidate = second
        .elect("nightly-jobs", options.priority(5))
        .expect("campaign");
    let found = eventually(|| async {
        first
            .candidates("nightly-jobs")
            .await
            .is_ok_and(|candidates| candidates.len() == 2)
    })
    .await;
    assert!(found, "{}", server.log());
    let secret = owner_token(&leader);

    let listed = lockctl(&url, &["elections"]);
    let shown = text(&listed);
    println!("{shown}");
    assert_eq!(listed.status.code(), Some(0), "{shown}");
    assert!(!shown.contains(&secret), "{shown}");
    let row = shown
        .lines()
        .find(|line| line.starts_with("nightly-jobs"))
        .unwrap_or_else(|| panic!("{shown}"));
    for word in [
        "scheduler-a",
        &token.to_string(),
        &std::process::id().to_string(),
    ] {
        assert!(row.contains(word), "{word} in {row}");
    }
    assert!(row.trim_end().ends_with('2'), "two candidates: {row}");

    let listed = json(&lockctl(&url, &["elections", "--json"]));
    let election = &listed[0];
    assert_eq!(election["name"], "nightly-jobs", "{listed}");
    assert_eq!(election["leader"]["app"], "scheduler-a");
    assert_eq!(election["leader"]["fencing_token"], token);
    assert_eq!(election["candidates"].as_array().map(Vec::len), Some(2));

    let shown = lockctl(&url, &["election", "nightly-jobs"]);
    let shown_text = text(&shown);
    println!("{shown_text}");
    assert_eq!(shown.status.code(), Some(0), "{shown_text}");
    assert!(!shown_text.contains(&secret), "{shown_text}");
    assert!(
        shown_text.contains(&format!("fencing token {token}")),
        "{shown_text}"
    );
    let candidates: Vec<&str> = shown_text
        .lines()
        .filter(|line| line.contains("scheduler-"))
        .skip(1)
        .collect();
    assert_eq!(candidates.len(), 2, "{shown_text}");
    assert!(candidates[0].starts_with('5') && candidates[0].contains("waiting"));
    assert!(candidates[1].starts_with('1') && candidates[1].contains("leading"));

    let shown = json(&lockctl(&url, &["election", "nightly-jobs", "--json"]));
    assert_eq!(shown["leader"]["app"], "scheduler-a", "{shown}");
    assert_eq!(shown["candidates"][0]["priority"], 5);
    assert_eq!(shown["candidates"][1]["leading"], true);

    // The candidates' records are no lock: `list` shows the election's lock alone.
    let locks = text(&lockctl(&url, &["list"]));
    assert!(locks.contains("nightly-jobs"), "{locks}");
    assert!(!locks.contains("elections"), "{locks}");

    let nobody = text(&lockctl(&url, &["election", "nobody-campaigns"]));
    assert!(nobody.contains("leader:     nobody"), "{nobody}");
    assert!(nobody.contains("candidates: 0"), "{nobody}");
}

#[tokio::test(flavor = "multi_thread")]
async fn on_postgres_election_and_elections_show_the_leader_and_the_candidates() {
    let server = tokio::task::spawn_blocking(PostgresServer::start)
        .await
        .expect("started");
    let url = server.url();
    let locks = manager(&url, "scheduler-a").await;
    let leader = locks
        .elect("nightly-jobs", ElectionOptions::new())
        .expect("campaign");
    let token = leader.elected().await.expect("elected");
    let standby = manager(&url, "scheduler-b").await;
    let waiting = standby
        .elect("nightly-jobs", ElectionOptions::new().priority(5))
        .expect("campaign");
    let found = eventually(|| async {
        locks
            .candidates("nightly-jobs")
            .await
            .is_ok_and(|candidates| candidates.len() == 2)
    })
    .await;
    assert!(found, "{}", server.log());

    let shown = json(&lockctl(&url, &["election", "nightly-jobs", "--json"]));
    assert_eq!(shown["leader"]["app"], "scheduler-a", "{shown}");
    assert_eq!(shown["leader"]["fencing_token"], token, "{shown}");
    assert_eq!(shown["candidates"][0]["priority"], 5, "{shown}");
    assert_eq!(shown["candidates"][0]["app"], "scheduler-b", "{shown}");
    assert_eq!(shown["candidates"][1]["leading"], true, "{shown}");
    let shown_text = text(&lockctl(&url, &["election", "nightly-jobs"]));
    println!("{shown_text}");
    assert!(shown_text.contains("candidates: 2"), "{shown_text}");
    assert!(!shown_text.contains(&owner_token(&leader)), "{shown_text}");

    let listed = lockctl(&url, &["elections"]);
    assert_eq!(listed.status.code(), Some(0), "{}", text(&listed));
    assert!(text(&listed).contains("nightly-jobs"), "{}", text(&listed));
    drop(waiting);
    leader.step_down().await.expect("stepped down");
}
