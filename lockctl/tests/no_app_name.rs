//! A lock taken by a manager without `app_name`: `lockctl` shows its app as `-` in text and as
//! `null` in JSON, as for every other absent value, never as an empty column or `""`.

use std::process::{Command, Output, Stdio};

use lock_runtime::{LockManager, LockOptions};
use lock_tests::RedisServer;
use serde_json::Value;

fn lockctl(url: &str, args: &[&str]) -> Output {
    let output = Command::new(env!("CARGO_BIN_EXE_lockctl"))
        .arg("--url")
        .arg(url)
        .args(args)
        .env_remove("REDIS_URL")
        .stdin(Stdio::null())
        .output()
        .expect("lockctl runs");
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_holder_without_app_name_shows_a_dash_in_text_and_null_in_json() {
    let server = RedisServer::start();
    let locks = LockManager::connect(&server.url()).await.expect("connect");
    let _guard = locks
        .lock("order:42", LockOptions::new())
        .await
        .expect("free");

    let listed: Value = serde_json::from_slice(&lockctl(&server.url(), &["list", "--json"]).stdout)
        .expect("list --json is JSON");
    let lock = &listed["locks"][0];
    assert_eq!(lock["key"], "order:42", "{listed}");
    assert!(lock["app"].is_null(), "app should be null: {listed}");
    assert!(
        lock["host"].is_string(),
        "the other holder fields stay: {listed}"
    );

    let shown: Value =
        serde_json::from_slice(&lockctl(&server.url(), &["show", "order:42", "--json"]).stdout)
            .expect("show --json is JSON");
    assert!(shown["locks"][0]["app"].is_null(), "{shown}");

    let table = stdout(&lockctl(&server.url(), &["list"]));
    let mut lines = table.lines();
    let header: Vec<&str> = lines.next().expect("a header").split_whitespace().collect();
    let row: Vec<&str> = lines.next().expect("a row").split_whitespace().collect();
    let app = header.iter().position(|&name| name == "APP").expect("APP");
    assert_eq!(header.len(), row.len(), "one value per column:\n{table}");
    assert_eq!(row[app], "-", "{table}");

    let details = stdout(&lockctl(&server.url(), &["show", "order:42"]));
    let app_line = details
        .lines()
        .find(|line| line.starts_with("app "))
        .unwrap_or_else(|| panic!("an app line:\n{details}"));
    assert_eq!(app_line.split_whitespace().nth(1), Some("-"), "{details}");
}
