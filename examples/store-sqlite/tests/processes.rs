//! The SQLite store across processes: the package's `hold-lock` binary is the other process.

mod common;

use std::process::Stdio;
use std::time::{Duration, Instant};

use common::{TempDb, manager};
use lock_runtime::LockOptions;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdout, Command};

/// The other process: `hold-lock <file> <key> <ttl ms> <mode>`, its output read line by line.
struct Other {
    child: Child,
    lines: Lines<BufReader<ChildStdout>>,
}

impl Other {
    fn start(db: &TempDb, key: &str, ttl: Duration, mode: &str) -> Other {
        let mut child = Command::new(env!("CARGO_BIN_EXE_hold-lock"))
            .arg(db.path())
            .args([key, &ttl.as_millis().to_string(), mode])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("start hold-lock");
        let stdout = child.stdout.take().expect("its output");
        Other {
            child,
            lines: BufReader::new(stdout).lines(),
        }
    }

    /// Its next line of output, waiting up to 30 s.
    async fn said(&mut self) -> String {
        let line = tokio::time::timeout(Duration::from_secs(30), self.lines.next_line())
            .await
            .expect("hold-lock answers within 30 s")
            .expect("its output is readable");
        line.expect("hold-lock said something before it ended")
    }

    /// The fencing token of its `held <fence>` line.
    async fn held(&mut self) -> u64 {
        let line = self.said().await;
        let fence = line.strip_prefix("held ").expect("`held <fence>`");
        fence.parse().expect("a fencing token")
    }

    async fn release(&mut self) {
        let stdin = self.child.stdin.as_mut().expect("its input");
        stdin
            .write_all(b"release\n")
            .await
            .expect("asked to release");
        stdin.flush().await.expect("asked to release");
        assert_eq!(self.said().await, "released");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_held_by_another_process_is_busy_here_until_it_releases() {
    let db = TempDb::new("procs");
    let mut other = Other::start(&db, "order:1", Duration::from_secs(20), "hold");
    let theirs = other.held().await;
    let locks = manager(&db.store().await).await;
    let refused = locks
        .lock("order:1", LockOptions::new().wait(Duration::ZERO))
        .await
        .expect_err("held by the other process");
    assert!(refused.is_busy(), "{refused}");
    other.release().await;
    let ours = locks
        .lock("order:1", LockOptions::new().wait(Duration::ZERO))
        .await
        .expect("free once the other process released it");
    assert!(ours.fencing_token() > theirs);
    ours.release().await.expect("released");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_held_here_is_busy_for_another_process() {
    let db = TempDb::new("procs-here");
    let locks = manager(&db.store().await).await;
    let ours = locks
        .lock("order:2", LockOptions::new())
        .await
        .expect("free");
    let mut other = Other::start(&db, "order:2", Duration::from_secs(5), "try");
    assert_eq!(other.said().await, "busy");
    let our_fence = ours.fencing_token();
    ours.release().await.expect("released");
    let mut again = Other::start(&db, "order:2", Duration::from_secs(5), "try");
    assert!(again.held().await > our_fence);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_processs_lock_is_free_once_its_lease_ends() {
    let db = TempDb::new("crash");
    let ttl = Duration::from_secs(1);
    let mut other = Other::start(&db, "order:3", ttl, "hold");
    let theirs = other.held().await;
    // Killed: no release, no more renewals.
    other.child.kill().await.expect("killed");
    let locks = manager(&db.store().await).await;
    let ours = locks
        .lock("order:3", LockOptions::new().wait(Duration::from_secs(15)))
        .await
        .expect("free once the dead holder's lease ended");
    assert!(ours.fencing_token() > theirs);
    ours.release().await.expect("released");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_in_another_process_wakes_a_waiter_here() {
    let db = TempDb::new("procs-wake");
    // Renewed by its process's watchdog, this lease never ends by itself: only a release read
    // from the file's feed lets the waiter in before its 30 s wait is out.
    let mut other = Other::start(&db, "order:4", Duration::from_secs(20), "hold");
    let theirs = other.held().await;
    let locks = manager(&db.store().await).await;
    let waiter = tokio::spawn(async move {
        let taken = locks
            .lock("order:4", LockOptions::new().wait(Duration::from_secs(30)))
            .await;
        taken.map(|guard| guard.fencing_token())
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    other.release().await;
    let released = Instant::now();
    let ours = waiter
        .await
        .expect("the waiter ran")
        .expect("taken after the release");
    assert!(ours > theirs);
    assert!(
        released.elapsed() < Duration::from_secs(10),
        "the waiter waited out the lease instead of being woken"
    );
}
