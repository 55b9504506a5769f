//! The leader scheduler's failover demo, run as the README tells: three processes on a Redis
//! of its own, a SIGKILLed leader and a step-down, and the demo's own checks of the runs; and its
//! `--help`, which is help.
//!
//! The suite shares its machine with builds and other suites: the demo gets a 4 s lease (a
//! step-down's hand-over must stay under it, or it waited for the lease instead of a release)
//! and 4 s of slack for scheduling a failover, where the demo's defaults (2 s, 0.7 s) are for a
//! run of its own.

use std::process::{Command, Output};

#[test]
fn the_failover_demo_passes_its_checks() {
    let output = Command::new(env!("CARGO_BIN_EXE_leader_scheduler"))
        .args(["--ttl", "4000", "--slack", "4000"])
        .env_remove("REDIS_URL")
        .output()
        .expect("the demo runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("SIGKILL scheduler"), "{stdout}");
    assert!(
        stdout.lines().any(|line| line.starts_with("ok: ")),
        "{stdout}"
    );
}

/// Runs the scheduler with `args`, `REDIS_URL` and `RUST_LOG` unset, and waits for it.
fn run(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_leader_scheduler"))
        .args(args)
        .env_remove("REDIS_URL")
        .env_remove("RUST_LOG")
        .output()
        .expect("the scheduler runs")
}

fn shown(output: &Output) -> String {
    format!(
        "exit {:?}\n--- stdout\n{}--- stderr\n{}",
        output.status.code(),
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

#[test]
fn help_is_printed_with_exit_code_zero() {
    for args in [
        &["--help"][..],
        &["-h"],
        &["run", "--help"],
        &["run", "--ttl", "500", "-h"],
    ] {
        let output = run(args);
        assert_eq!(
            output.status.code(),
            Some(0),
            "{args:?}: {}",
            shown(&output)
        );
        assert!(
            String::from_utf8_lossy(&output.stdout).contains("USAGE"),
            "{args:?}: {}",
            shown(&output)
        );
    }
    let output = run(&["run", "--bogus"]);
    assert_eq!(output.status.code(), Some(2), "{}", shown(&output));
}
