//! The leader scheduler's failover demo, run as the README tells: three processes on a Redis
//! of its own, a SIGKILLed leader and a step-down, and the demo's own checks of the runs.

use std::process::Command;

#[test]
fn the_failover_demo_passes_its_checks() {
    let output = Command::new(env!("CARGO_BIN_EXE_leader_scheduler"))
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
