//! The chaos experiment in a very reduced form, so `cargo test --workspace` runs it: two workers,
//! fifteen seconds, a fixed seed, every invariant checked by the binary itself.

use std::process::Command;

#[test]
fn a_short_chaos_run_keeps_every_invariant() {
    let json = std::env::temp_dir().join(format!("lock-chaos-quick-{}.json", std::process::id()));
    let output = Command::new(env!("CARGO_BIN_EXE_chaos"))
        .args([
            "--quick",
            "--seconds",
            "15",
            "--workers",
            "2",
            "--seed",
            "20261122",
        ])
        .arg("--json")
        .arg(&json)
        .output()
        .expect("the chaos binary runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "chaos failed ({}):\n{stdout}\n{stderr}",
        output.status
    );
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).expect("the JSON report"))
            .expect("the JSON report parses");
    let _ = std::fs::remove_file(&json);
    let summary = &report["summary"];
    assert_eq!(report["ok"], true, "{stdout}");
    assert_eq!(summary["unexplained_overlaps"], 0, "{stdout}");
    assert_eq!(summary["stale_tokens_accepted"], 0, "{stdout}");
    assert_eq!(summary["sections_without_lock"], 0, "{stdout}");
    assert!(summary["holds"].as_u64().unwrap_or(0) > 20, "{stdout}");
    let faults: u64 = summary["faults"]
        .as_object()
        .expect("faults by kind")
        .values()
        .filter_map(serde_json::Value::as_u64)
        .sum();
    assert!(faults >= 3, "a 15 s run injects a few faults:\n{stdout}");
}
