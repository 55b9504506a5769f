//! Compile-time behaviour of `#[distributed_lock]`: every mistake in `ui/fail` must be rejected
//! with the message checked in next to it, and every form in `ui/pass` must compile and run.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

/// What no message may show the user: the runtime's support module, or a file inside it.
const INTERNALS: &[&str] = &["__private", "lock-runtime/src", "lock-runtime\\src"];

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.compile_fail("ui/fail/*.rs");
    t.pass("ui/pass/*.rs");
}

#[test]
fn no_expected_error_names_the_runtime_internals() {
    for (case, expected) in fail_cases() {
        for internal in INTERNALS {
            assert!(
                !expected.contains(internal),
                "ui/fail/{case}.stderr names `{internal}`:\n{expected}"
            );
        }
    }
}

/// trybuild builds without incremental compilation, where rustc reports some follow-on
/// errors differently: a cascade could hide behind its settings. This checks, with a plain
/// incremental `cargo check`, every mistake that rustc (not the attribute) reports: as many
/// errors as its `.stderr` shows, each in the user's file, none naming the runtime's internals.
#[test]
fn rustc_reported_mistakes_give_the_same_errors_in_an_incremental_build() {
    let cases: Vec<(String, String)> = fail_cases()
        .into_iter()
        .filter(|(_, expected)| expected.contains("error[E"))
        .collect();
    assert!(!cases.is_empty(), "no rustc-reported case in ui/fail");
    let krate = scratch_crate(&cases);
    let output = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
        .args(["check", "--bins", "--keep-going", "--message-format=json"])
        .current_dir(&krate)
        // The defaults a user's `cargo check` has: incremental, no extra flags, its own target.
        .env_remove("CARGO_INCREMENTAL")
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("CARGO_BUILD_TARGET_DIR")
        .output()
        .expect("run cargo check");
    let stderr = String::from_utf8_lossy(&output.stderr);
    let mut errors: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    for message in serde_json::Deserializer::from_slice(&output.stdout).into_iter::<Value>() {
        let message = message.expect("cargo's JSON output");
        if message["reason"] != "compiler-message" || message["message"]["level"] != "error" {
            continue;
        }
        let text = message["message"]["message"].as_str().unwrap_or_default();
        if text.starts_with("aborting due to") {
            continue;
        }
        let target = message["target"]["name"].as_str().unwrap_or_default();
        errors
            .entry(target.to_owned())
            .or_default()
            .push(message["message"].clone());
    }
    let mut failures = Vec::new();
    for (case, expected) in &cases {
        let found = errors.remove(case).unwrap_or_default();
        let rendered: String = found
            .iter()
            .filter_map(|error| error["rendered"].as_str())
            .collect();
        let count = expected
            .lines()
            .filter(|line| line.starts_with("error[") || line.starts_with("error:"))
            .count();
        let file = format!("src/bin/{case}.rs");
        let outside = found.iter().any(|error| {
            let spans = error["spans"].as_array().map(Vec::as_slice).unwrap_or(&[]);
            !spans
                .iter()
                .any(|span| span["is_primary"] == true && span["file_name"] == file.as_str())
        });
        let internal = INTERNALS.iter().find(|name| rendered.contains(**name));
        if found.len() != count || outside || internal.is_some() {
            failures.push(format!(
                "{case}: {} error(s) where trybuild shows {count}{}{}\n{rendered}",
                found.len(),
                if outside {
                    ", one not in the user's file"
                } else {
                    ""
                },
                internal.map_or(String::new(), |name| format!(", naming `{name}`")),
            ));
        }
    }
    assert!(
        errors.is_empty(),
        "errors in unexpected targets: {errors:?}\n{stderr}"
    );
    assert!(
        failures.is_empty(),
        "{}\ncargo's stderr:\n{stderr}",
        failures.join("\n")
    );
}

/// `(name, expected stderr)` of every case in `ui/fail`.
fn fail_cases() -> Vec<(String, String)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("ui/fail");
    let mut cases = Vec::new();
    for entry in fs::read_dir(&dir).expect("read ui/fail") {
        let path = entry.expect("read ui/fail").path();
        if path.extension().is_some_and(|ext| ext == "rs") {
            let name = path
                .file_stem()
                .expect("a file name")
                .to_string_lossy()
                .into_owned();
            let expected = fs::read_to_string(path.with_extension("stderr"))
                .unwrap_or_else(|err| panic!("ui/fail/{name}.stderr: {err}"));
            cases.push((name, expected));
        }
    }
    cases.sort();
    cases
}

/// A crate with one bin per case, depending on this workspace's `lock-runtime` with this
/// workspace's lockfile (so no dependency is newer than the ones already fetched), kept under
/// `target/` with its own target directory, so that a second run only rechecks the cases.
fn scratch_crate(cases: &[(String, String)]) -> PathBuf {
    let tests = Path::new(env!("CARGO_MANIFEST_DIR"));
    let workspace = tests.parent().expect("the workspace holds the tests");
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(|dir| workspace.join(dir))
        .unwrap_or_else(|| workspace.join("target"));
    let krate = target.join("tests").join("ui-incremental");
    let bins = krate.join("src").join("bin");
    fs::create_dir_all(&bins).expect("create the scratch crate");
    let runtime = workspace.join("lock-runtime");
    let manifest = format!(
        "[package]\nname = \"lock-ui-incremental\"\nversion = \"0.0.0\"\nedition = \"2024\"\n\
         publish = false\n\n[dependencies]\nlock-runtime = {{ path = '{}' }}\n\n[workspace]\n",
        runtime.display()
    );
    write_if_changed(&krate.join("Cargo.toml"), &manifest);
    // Copied every time: cargo only drops the entries this crate does not use, offline.
    fs::copy(workspace.join("Cargo.lock"), krate.join("Cargo.lock")).expect("copy Cargo.lock");
    for entry in fs::read_dir(&bins).expect("read the scratch crate") {
        let path = entry.expect("read the scratch crate").path();
        let name = path
            .file_stem()
            .map(|stem| stem.to_string_lossy().into_owned());
        if !cases.iter().any(|(case, _)| Some(case) == name.as_ref()) {
            fs::remove_file(&path).expect("remove a case that is gone");
        }
    }
    for (case, _) in cases {
        let source = fs::read_to_string(tests.join("ui/fail").join(format!("{case}.rs")))
            .expect("read a case");
        write_if_changed(&bins.join(format!("{case}.rs")), &source);
    }
    krate
}

/// Writes only a changed file, so that unchanged cases stay fresh for cargo.
fn write_if_changed(path: &Path, contents: &str) {
    if fs::read_to_string(path).is_ok_and(|old| old == contents) {
        return;
    }
    fs::write(path, contents).unwrap_or_else(|err| panic!("write {}: {err}", path.display()));
}
