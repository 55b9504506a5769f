//! What a new user meets first, held to what the README says: the example programs it shows
//! run on memory:// and on Redis (that its code blocks are those programs is `docs_code.rs`'s
//! part), the demos stop on Ctrl-C with their locks released and can be run again at once, and a
//! log piped to a file has no colour codes.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use lock_runtime::{LockManager, LockOptions};
use lock_tests::RedisServer;

fn workspace_file(path: &str) -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    std::fs::read_to_string(root.join(path)).unwrap_or_else(|err| panic!("{path}: {err}"))
}

/// Runs an example binary with `REDIS_URL` set to `url` (or unset) and waits for it.
fn run(exe: &str, url: Option<&str>, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = Command::new(exe);
    command
        .args(args)
        .env_remove("REDIS_URL")
        .env_remove("RUST_LOG");
    if let Some(url) = url {
        command.env("REDIS_URL", url);
    }
    command.envs(env.iter().copied());
    command.output().expect("the example runs")
}

fn shown(output: &Output) -> String {
    format!(
        "exit {:?}\n--- stdout\n{}--- stderr\n{}",
        output.status.code(),
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[test]
fn the_readme_says_how_many_requests_the_demo_sends() {
    let readme = workspace_file("README.md");
    let demo = workspace_file("examples/src/bin/flash_sale.rs");
    let constant = |name: &str| -> u32 {
        let line = demo
            .lines()
            .find(|line| line.starts_with(&format!("const {name}: ")))
            .unwrap_or_else(|| panic!("flash_sale.rs defines {name}"));
        let value = line.rsplit_once("= ").expect("a value").1;
        value.trim_end_matches(';').parse().expect("a number")
    };
    let (users, each) = (constant("USERS"), constant("REQUESTS_PER_USER"));
    let said = format!(
        "{users} users send {each} requests each, {} at once",
        users * each
    );
    assert!(readme.contains(&said), "the README says `{said}`");
}

#[test]
fn getting_started_runs_on_memory_and_on_redis() {
    let exe = env!("CARGO_BIN_EXE_getting_started");
    let on_memory = run(exe, None, &[], &[]);
    assert!(on_memory.status.success(), "{}", shown(&on_memory));
    let text = stdout(&on_memory);
    assert!(text.starts_with("locks on memory"), "{text}");
    assert_eq!(text.matches("user 7, click").count(), 2, "{text}");

    let server = RedisServer::start();
    let on_redis = run(exe, Some(&server.url()), &[], &[]);
    assert!(
        on_redis.status.success(),
        "{}\n{}",
        shown(&on_redis),
        server.log()
    );
    let text = stdout(&on_redis);
    assert!(!text.contains("memory"), "{text}");
    assert_eq!(text.matches("user 7, click").count(), 2, "{text}");
}

#[test]
fn the_api_without_the_attribute_runs() {
    let output = run(env!("CARGO_BIN_EXE_without_attribute"), None, &[], &[]);
    assert!(output.status.success(), "{}", shown(&output));
    assert!(
        stdout(&output).contains("inside run_locked"),
        "{}",
        shown(&output)
    );
}

#[test]
fn a_log_written_to_a_pipe_has_no_colour_codes() {
    let output = run(
        env!("CARGO_BIN_EXE_flash_sale"),
        None,
        &[],
        &[("RUST_LOG", "info")],
    );
    assert!(output.status.success(), "{}", shown(&output));
    let text = stdout(&output);
    assert!(text.contains(" INFO "), "an info line is logged: {text}");
    assert!(
        !text.contains('\u{1b}'),
        "escape codes in a piped log: {text:?}"
    );
}

/// Sends SIGINT to `pid`, as Ctrl-C does.
fn interrupt(pid: u32) {
    let status = Command::new("kill")
        .args(["-INT", &pid.to_string()])
        .status()
        .expect("kill runs");
    assert!(status.success(), "kill -INT {pid}");
}

#[test]
fn a_flash_sale_interrupted_midway_can_be_run_again_at_once() {
    let server = RedisServer::start();
    let mut sale = Command::new(env!("CARGO_BIN_EXE_flash_sale"))
        .env("REDIS_URL", server.url())
        .env_remove("RUST_LOG")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("flash_sale starts");
    let mut lines = BufReader::new(sale.stdout.take().expect("stdout")).lines();
    let mut seen = String::new();
    // Interrupted once the requests are on their way (or done: a rerun must pass either way).
    for line in lines.by_ref() {
        let line = line.expect("a line");
        seen.push_str(&line);
        seen.push('\n');
        if line.contains("at once") {
            break;
        }
    }
    interrupt(sale.id());
    for line in lines {
        seen.push_str(&line.expect("a line"));
        seen.push('\n');
    }
    let status = sale.wait().expect("flash_sale ends");
    match status.code() {
        Some(130) => {
            assert!(seen.contains("interrupted: releasing"), "{seen}");
            // shutdown() returned before the process exited: nothing of it is held any more,
            // not even what an acquire on the wire at that moment took.
            let keys = server.cmd(&["KEYS", "lock:*"]);
            // The locks, not the fence counters of their slots.
            let held: Vec<&str> = keys
                .lines()
                .filter(|key| lock_runtime::inspect::lock_name("lock:", key).is_some())
                .filter(|key| server.holds_lock(key))
                .collect();
            assert!(held.is_empty(), "held after shutdown: {held:?}\n{seen}");
        }
        Some(0) => assert!(seen.contains("ok: sold exactly"), "{seen}"),
        other => panic!("exit {other:?} after SIGINT:\n{seen}\n{}", server.log()),
    }

    let rerun = run(
        env!("CARGO_BIN_EXE_flash_sale"),
        Some(&server.url()),
        &[],
        &[],
    );
    assert!(
        rerun.status.success(),
        "{}\n{}",
        shown(&rerun),
        server.log()
    );
    assert!(
        stdout(&rerun).contains("ok: sold exactly 50"),
        "{}",
        shown(&rerun)
    );
}

#[test]
fn scheduled_job_run_twice_in_a_row_draws_once_each_time() {
    let server = RedisServer::start();
    for run_number in 1..=2 {
        let output = run(
            env!("CARGO_BIN_EXE_scheduled_job"),
            Some(&server.url()),
            &[],
            &[],
        );
        assert!(
            output.status.success(),
            "run {run_number}: {}\n{}",
            shown(&output),
            server.log()
        );
        assert!(
            stdout(&output).contains("ok: exactly one draw"),
            "{}",
            shown(&output)
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn cache_rebuild_waits_out_a_lock_a_killed_run_left_and_says_so() {
    let server = RedisServer::start();
    // What a killed run leaves: a held lock nobody renews, here with a 2 s lease.
    let killed = LockManager::connect(&server.url()).await.expect("connect");
    let left = killed
        .lock(
            "rebuild:product:42",
            LockOptions::new()
                .ttl(Duration::from_secs(2))
                .watchdog(false),
        )
        .await
        .expect("free");
    let url = server.url();
    let output = tokio::task::spawn_blocking(move || {
        run(env!("CARGO_BIN_EXE_cache_rebuild"), Some(&url), &[], &[])
    })
    .await
    .expect("the run");
    drop(left);
    assert!(
        output.status.success(),
        "{}\n{}",
        shown(&output),
        server.log()
    );
    let text = stdout(&output);
    assert!(
        text.contains("`rebuild:product:42` is still held, by an earlier run"),
        "{text}"
    );
    assert!(
        text.contains("ok: the database was hit exactly once"),
        "{text}"
    );
}
