//! lockctl over a store written outside the library: the package's `lockctl-sqlite` (lockctl
//! with the `sqlite://` scheme registered) lists, shows and force-releases the locks another
//! process holds in the file, through the store's inspection side alone.

mod common;

use std::process::Output;
use std::time::{Duration, Instant};

use common::{TempDb, manager};
use lock_runtime::LockOptions;
use serde_json::Value;

/// Runs `lockctl-sqlite --url sqlite://<file> <args>` with stdin closed.
async fn lockctl(db: &TempDb, args: &[&str]) -> Output {
    tokio::process::Command::new(env!("CARGO_BIN_EXE_lockctl-sqlite"))
        .arg("--url")
        .arg(format!("sqlite://{}", db.path().display()))
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .expect("lockctl-sqlite runs")
}

fn said(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

fn json(output: &Output) -> Value {
    serde_json::from_slice(&output.stdout).unwrap_or_else(|err| panic!("{err}: {}", said(output)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lockctl_lists_shows_and_unlocks_the_locks_in_the_file() {
    let db = TempDb::new("lockctl");
    let holder = manager(&db.store().await).await;
    let lease = Duration::from_secs(60);
    let held = holder
        .lock("order:42", LockOptions::new().ttl(lease))
        .await
        .expect("free");
    let _permit = holder
        .semaphore("exports", 3, LockOptions::new())
        .await
        .expect("a permit");

    let listed = lockctl(&db, &["list", "--json"]).await;
    assert_eq!(listed.status.code(), Some(0), "{}", said(&listed));
    let locks = json(&listed)["locks"].clone();
    let rows: Vec<(&str, &str, &str)> = (locks.as_array().expect("an array").iter())
        .map(|lock| {
            let field = |name: &str| lock[name].as_str().unwrap_or_default();
            (field("key"), field("kind"), field("state"))
        })
        .collect();
    assert_eq!(
        rows,
        [
            ("exports", "semaphore", "held"),
            ("order:42", "lock", "held")
        ],
        "{locks}"
    );
    assert_eq!(locks[0]["permits"], 3, "{locks}");
    assert_eq!(locks[1]["fence"], held.fencing_token(), "{locks}");
    let left = locks[1]["lease_ms"].as_i64().expect("a lease");
    assert!(left > 0 && left <= 60_000, "{locks}");

    let shown = lockctl(&db, &["show", "order:42"]).await;
    let text = said(&shown);
    assert_eq!(shown.status.code(), Some(0), "{text}");
    assert!(text.contains("keeps no published waits"), "{text}");
    let fence = text.lines().find(|line| line.starts_with("fence "));
    let fence = fence.and_then(|line| line.split_whitespace().nth(1));
    assert_eq!(
        fence,
        Some(held.fencing_token().to_string().as_str()),
        "{text}"
    );

    // A waiter of another store over the file: woken by the force-release, not the lease.
    let waiter = manager(&db.store().await).await;
    let waiting = tokio::spawn(async move {
        let started = Instant::now();
        let options = LockOptions::new().wait(Duration::from_secs(120));
        let guard = waiter.lock("order:42", options).await.expect("taken");
        (started.elapsed(), guard.fencing_token())
    });
    let unlocked = lockctl(&db, &["unlock", "order:42", "--yes"]).await;
    let text = said(&unlocked);
    assert_eq!(unlocked.status.code(), Some(0), "{text}");
    assert!(
        text.contains("lockctl audit") && text.contains("force-released `order:42`"),
        "{text}"
    );
    let (waited, fence) = tokio::time::timeout(Duration::from_secs(30), waiting)
        .await
        .expect("woken by the force-release")
        .expect("no panic");
    assert!(waited < lease / 2, "waited {waited:?}");
    assert!(fence > held.fencing_token());

    let refused = lockctl(&db, &["unlock", "exports", "--yes"]).await;
    assert_eq!(refused.status.code(), Some(1), "{}", said(&refused));
    assert!(
        said(&refused).contains("is a semaphore"),
        "{}",
        said(&refused)
    );
    let deadlocks = lockctl(&db, &["deadlocks"]).await;
    assert_eq!(deadlocks.status.code(), Some(1), "{}", said(&deadlocks));
}

/// A store that carries no notices and cannot steal: `revoke` and `steal` refuse with a usage
/// error saying so, and the holder keeps its lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revoke_and_steal_are_refused_on_a_store_that_cannot_do_them() {
    let db = TempDb::new("lockctl-control");
    let holder = manager(&db.store().await).await;
    let held = holder
        .lock("order:7", LockOptions::new().ttl(Duration::from_secs(60)))
        .await
        .expect("free");
    for (args, says) in [
        (
            &["revoke", "order:7", "--reason", "deploy"][..],
            "carries no notices",
        ),
        (
            &["steal", "order:7", "--reason", "stuck"][..],
            "cannot steal",
        ),
        (
            &["steal", "order:7", "--reason", "x", "--json"][..],
            "cannot steal",
        ),
    ] {
        let output = lockctl(&db, args).await;
        let text = said(&output);
        println!("$ lockctl-sqlite {}\n{text}", args.join(" "));
        assert_eq!(output.status.code(), Some(2), "{text}");
        assert!(text.contains(says), "{text}");
        assert!(text.contains("this store cannot"), "{text}");
        assert!(output.stdout.is_empty(), "{text}");
    }
    assert!(
        held.is_held(),
        "the holder lost its lock to a refused command"
    );
    held.release().await.expect("still ours");
}
