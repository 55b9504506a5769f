//! The leader scheduler's failover demo, run as the README tells: three processes on a Redis
//! of its own, a SIGKILLed leader and a step-down, and the demo's own checks of the runs.
//!
//! The suite shares its machine with builds and other suites: the demo gets a 4 s lease (a
//! step-down's hand-over must stay under it, or it waited for the lease instead of a release)
//! and 4 s of slack for scheduling a failover, where the demo's defaults (2 s, 0.7 s) are for a
//! run of its own.

use std::process::Command;

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
