//! The read-write lock (`read_lock`, `write_lock`, `mode = "read" | "write"`): many readers or one
//! writer, each hold with the guarantees of a lock. Run on memory://, one redis-server, a master
//! behind Sentinel and a three-master Redis Cluster; Redlock refuses it.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use std::sync::Arc;
use std::sync::atomic::AtomicI32;

use lock_runtime::inspect::read_write_keys;
use lock_runtime::{Mode, distributed_lock};
use lock_tests::prelude::*;
use tokio::sync::watch;

const CONTENDER: &str = env!("CARGO_BIN_EXE_contender");

lock_tests::on_backends!(
    [memory, redis, sentinel, cluster]
    [
    many_readers_hold_together_across_managers,
    a_writer_excludes_readers_and_other_writers,
    a_waiting_writer_goes_before_readers_that_came_after_it,
    a_writer_that_stops_waiting_holds_no_reader_up,
    a_writers_release_wakes_the_waiting_readers_at_once,
    the_last_readers_release_wakes_the_waiting_writer_at_once,
    watchdog_keeps_a_short_read_share_across_a_long_body,
    a_writers_token_is_above_every_earlier_token,
    a_read_inside_a_write_section_reenters_it,
    an_upgrade_from_read_to_write_fails_at_once,
    release_on_cancel_frees_the_write_hold_at_once,
    release_on_panic_frees_the_read_share_at_once,
    the_lock_the_semaphore_and_the_read_write_lock_of_one_name_are_apart,
    permits_and_fair_with_a_mode_are_refused,
    the_attribute_lets_readers_in_together_and_a_writer_alone,
    ]
);

fn read() -> LockOptions {
    LockOptions::new().ttl(Duration::from_secs(10))
}

/// Where the releases of the read-write lock `key` are announced: a caller waits on it.
fn channel(key: &str) -> String {
    read_write_keys("lock:", key).expect("a key").channel
}

/// Whether a writer waits for the read-write lock `key` with its mark on it, and knows it: on a
/// server, the mark is there and a manager listens for releases (the writer subscribes once
/// its busy answer came back); read from outside, so that the writer is not woken to ask again
/// (as a reader's release would). On memory, a reader of `locks` is refused.
async fn writer_marked(f: &Deployment, locks: &LockManager, key: &str) -> bool {
    let mark = read_write_keys("lock:", key).expect("a key").writer_waiting;
    match f.server_of(&mark) {
        Some(server) => {
            server.cmd(&["EXISTS", &mark]) == "1" && f.listeners(&channel(key)) >= Some(1)
        }
        None => readers_refused(locks, key).await,
    }
}

/// Whether a reader of `locks` that only tries is refused now (a waiting writer's mark or a
/// writer holds it); a share it gets is given back at once. On a task of its own, so that no
/// share of the caller's task is re-entered.
async fn readers_refused(locks: &LockManager, key: &str) -> bool {
    let (locks, key) = (locks.clone(), key.to_owned());
    tokio::spawn(async move {
        match locks.read_lock(key, LockOptions::new()).await {
            Ok(share) => share.release().await.map(|()| false),
            Err(err) => Ok(err.is_busy()),
        }
    })
    .await
    .expect("task")
    .expect("release")
}

async fn many_readers_hold_together_across_managers(f: Deployment) {
    let managers = [f.locks.clone(), f.connect().await];
    let mut shares = Vec::new();
    for locks in managers.iter().cycle().take(4) {
        let share = locks.read_lock("catalog", read()).await;
        shares.push(share.unwrap_or_else(|err| panic!("{err}\n{}", f.log())));
    }
    let mut tokens: Vec<u64> = shares.iter().map(|share| share.fencing_token()).collect();
    tokens.dedup();
    assert_eq!(tokens.len(), 4, "every share has its own fencing token");
    assert!(shares.iter().all(|share| share.mode() == Mode::Read));
    // (Another manager: through these two, this task holds shares, and asking for the write
    // hold there is an upgrade.)
    let writers = f.connect().await;
    let writer = writers.write_lock("catalog", LockOptions::new()).await;
    assert!(writer.expect_err("readers hold it").is_busy());
    for share in shares {
        share.release().await.expect("release");
    }
    let writer = writers.write_lock("catalog", LockOptions::new()).await;
    writer.expect("free").release().await.expect("release");
}

async fn a_writer_excludes_readers_and_other_writers(f: Deployment) {
    let writer = f.locks.write_lock("doc", read()).await.expect("free");
    assert_eq!(writer.mode(), Mode::Write);
    let other = f.connect().await;
    let reader = other.read_lock("doc", LockOptions::new()).await;
    assert!(reader.expect_err("written").is_busy());
    let second = other.write_lock("doc", LockOptions::new()).await;
    assert!(second.expect_err("written").is_busy());
    writer.release().await.expect("release");
    let reader = other.read_lock("doc", LockOptions::new()).await;
    reader.expect("free").release().await.expect("release");
}

/// Readers that come while a writer waits wait until the writer had its turn.
async fn a_waiting_writer_goes_before_readers_that_came_after_it(f: Deployment) {
    let first = f.locks.read_lock("queue", read()).await.expect("free");
    let writers = f.connect().await;
    let readers = f.connect().await;
    let wait = LockOptions::new().wait(PATIENCE);
    let reader_waits = Arc::new(tokio::sync::Notify::new());
    let writer = tokio::spawn({
        let reader_waits = reader_waits.clone();
        async move {
            let hold = writers.write_lock("queue", wait).await?;
            let entered = Instant::now();
            // Held until the late reader waited through some of it.
            reader_waits.notified().await;
            let left = Instant::now();
            hold.release().await?;
            Ok::<_, LockError>((entered, left))
        }
    });
    // A reader that only tries is told busy though only readers hold it, once the writer waits.
    assert!(
        eventually(|| readers_refused(&readers, "queue")).await,
        "readers still get in while a writer waits\n{}",
        f.log()
    );
    let reader = f
        .spawn_waiting(&channel("queue"), 2, async move {
            let share = readers.read_lock("queue", wait).await?;
            let entered = Instant::now();
            share.release().await?;
            Ok::<_, LockError>(entered)
        })
        .await;
    first.release().await.expect("release");
    reader_waits.notify_one();
    let (written, left) = writer.await.expect("task").expect("writer");
    let read = reader.await.expect("task").expect("reader");
    assert!(
        read >= left,
        "the late reader entered while the writer held it"
    );
    assert!(written < read);
}

/// A writer that gave up, and one that was cancelled, take their waiting mark away: readers
/// that come later need not wait for it to expire (about a lease).
async fn a_writer_that_stops_waiting_holds_no_reader_up(f: Deployment) {
    let first = f.locks.read_lock("gave-up", read()).await.expect("free");
    let writers = f.connect().await;
    let readers = f.connect().await;
    let gave_up = writers
        .write_lock("gave-up", read().wait(ms(300)))
        .await
        .expect_err("readers hold it");
    assert!(gave_up.is_busy());
    let unmarked = eventually_within(Duration::from_secs(5), || async {
        !readers_refused(&readers, "gave-up").await
    });
    assert!(
        unmarked.await,
        "the writer that gave up left its mark\n{}",
        f.log()
    );
    // Cancelled while it waits, once its mark holds readers up. (A writer cancelled while the
    // request that sets its mark is on its way leaves the mark until it expires, about 20 s:
    // a gap of the library this test does not cover.)
    let cancelled = writers.write_lock("gave-up", read().wait(Duration::from_secs(10)));
    tokio::select! {
        taken = cancelled => panic!("readers hold it: {taken:?}"),
        marked = eventually(|| writer_marked(&f, &readers, "gave-up")) => {
            assert!(marked, "the waiting writer holds no reader up\n{}", f.log());
        }
    }
    let started = Instant::now();
    let share = readers
        .read_lock("gave-up", read().wait(PATIENCE))
        .await
        .unwrap_or_else(|err| panic!("{err}\n{}", f.log()));
    // A mark left behind would hold readers up until it expired (10 s or more).
    let waited = started.elapsed();
    assert!(waited < Duration::from_secs(5), "{waited:?}");
    share.release().await.expect("release");
    first.release().await.expect("release");
}

async fn a_writers_release_wakes_the_waiting_readers_at_once(f: Deployment) {
    let writer = f.locks.write_lock("wake", read()).await.expect("free");
    let other = f.connect().await;
    let mut waiting = Vec::new();
    for _ in 0..2 {
        let other = other.clone();
        let reader = async move {
            let options = read().wait(PATIENCE);
            let share = other.read_lock("wake", options).await?;
            Ok::<_, LockError>((Instant::now(), share))
        };
        waiting.push(f.spawn_waiting(&channel("wake"), 1, reader).await);
    }
    let released = Instant::now();
    writer.release().await.expect("release");
    let mut shares = Vec::new();
    for task in waiting {
        let (entered, share) = task
            .await
            .expect("task")
            .unwrap_or_else(|err| panic!("{err}\n{}", f.log()));
        // The lease had 10 s left: within half of it means the release woke them, together.
        let handover = entered.duration_since(released);
        assert!(handover < Duration::from_secs(5), "{handover:?}");
        shares.push(share);
    }
    for share in shares {
        share.release().await.expect("release");
    }
}

async fn the_last_readers_release_wakes_the_waiting_writer_at_once(f: Deployment) {
    let a = f.locks.read_lock("drain", read()).await.expect("free");
    let b = f.locks.read_lock("drain", read()).await.expect("free");
    let other = f.connect().await;
    let writer = async move {
        let hold = other
            .write_lock("drain", LockOptions::new().wait(PATIENCE))
            .await?;
        let entered = Instant::now();
        hold.release().await?;
        Ok::<_, LockError>(entered)
    };
    let mut writer = f.spawn_waiting(&channel("drain"), 1, writer).await;
    a.release().await.expect("release");
    // A while for a writer that went in beside the last reader to show (it cannot fail a
    // correct lock, however slow the machine).
    let early = tokio::time::timeout(ms(300), &mut writer).await;
    assert!(early.is_err(), "one reader still holds it: {early:?}");
    let released = Instant::now();
    b.release().await.expect("release");
    let entered = writer
        .await
        .expect("task")
        .unwrap_or_else(|err| panic!("{err}\n{}", f.log()));
    // Not before the last reader went, and woken by it: the leases had 10 s left.
    assert!(entered >= released, "the writer went in beside a reader");
    let handover = entered.duration_since(released);
    assert!(handover < Duration::from_secs(5), "{handover:?}");
}

async fn watchdog_keeps_a_short_read_share_across_a_long_body(f: Deployment) {
    let options = LockOptions::new().ttl(Duration::from_secs(1));
    let share = f.locks.read_lock("long-body", options).await.expect("free");
    let other = f.connect().await;
    let started = Instant::now();
    // Renewal after renewal, for three leases.
    while started.elapsed() < Duration::from_secs(3) {
        assert!(renewed(&share).await, "no renewal\n{}", f.log());
        assert!(share.is_held(), "{}", f.log());
        let writer = other.write_lock("long-body", LockOptions::new()).await;
        assert!(writer.expect_err("still read").is_busy());
    }
    share.release().await.expect("still ours after 3 s");
}

/// Waits for the watchdog's next renewal of `guard` (the end of its lease moves on); false if
/// none came within the tests' patience.
async fn renewed(guard: &LockGuard) -> bool {
    let end = Instant::now() + guard.remaining();
    wait_until_async(PATIENCE, || {
        Instant::now() + guard.remaining() > end + ms(100)
    })
    .await
}

async fn a_writers_token_is_above_every_earlier_token(f: Deployment) {
    let other = f.connect().await;
    let mut earlier = Vec::new();
    for locks in [&f.locks, &other, &f.locks] {
        let share = locks.read_lock("fenced", read()).await.expect("free");
        earlier.push(share.fencing_token());
        share.release().await.expect("release");
    }
    let writer = other.write_lock("fenced", read()).await.expect("free");
    let token = writer.fencing_token();
    assert!(
        earlier.iter().all(|&t| t < token),
        "{earlier:?} then {token}"
    );
    writer.release().await.expect("release");
    let share = f.locks.read_lock("fenced", read()).await.expect("free");
    assert!(share.fencing_token() > token);
    share.release().await.expect("release");
}

async fn a_read_inside_a_write_section_reenters_it(f: Deployment) {
    let locks = f.locks.clone();
    let options = read().mode(Mode::Write);
    let inner = f
        .locks
        .run_locked("nested".into(), options, async move {
            let outer = lock_runtime::current().expect("inside").fencing_token();
            let share = locks.read_lock("nested", LockOptions::new()).await?;
            assert_eq!(share.fencing_token(), outer, "no second hold");
            assert_eq!(share.mode(), Mode::Write);
            share.release().await?;
            // A read inside a read re-enters too.
            Ok::<_, LockError>(outer)
        })
        .await
        .unwrap_or_else(|err| panic!("{err}\n{}", f.log()));
    assert!(inner > 0);
    let locks = f.locks.clone();
    f.locks
        .run_locked("nested".into(), read().mode(Mode::Read), async move {
            let share = locks.read_lock("nested", LockOptions::new()).await?;
            assert_eq!(share.mode(), Mode::Read);
            share.release().await
        })
        .await
        .expect("read inside read");
}

async fn an_upgrade_from_read_to_write_fails_at_once(f: Deployment) {
    let locks = f.locks.clone();
    let wait = LockOptions::new().wait(Duration::from_secs(10));
    let started = Instant::now();
    let err = f
        .locks
        .run_locked("upgrade".into(), read().mode(Mode::Read), async move {
            locks.write_lock("upgrade", wait).await.map(drop)
        })
        .await
        .expect_err("an upgrade");
    assert!(matches!(err, LockError::Config(_)), "{err:?}");
    assert!(
        err.to_string().contains("upgrade from read to write"),
        "{err}"
    );
    // Outside a section, a share this task holds counts too.
    let share = f.locks.read_lock("upgrade", read()).await.expect("free");
    let err = f
        .locks
        .write_lock("upgrade", wait)
        .await
        .expect_err("upgrade");
    assert!(
        err.to_string().contains("release the read lock first"),
        "{err}"
    );
    assert!(started.elapsed() < Duration::from_secs(3));
    share.release().await.expect("release");
    // A share the watchdog does not renew is this task's too: the upgrade does not wait for
    // its lease to run out.
    let unwatched = read().watchdog(false);
    let share = f.locks.read_lock("upgrade", unwatched).await.expect("free");
    let asked = Instant::now();
    let err = f
        .locks
        .write_lock("upgrade", wait)
        .await
        .expect_err("upgrade");
    assert!(matches!(err, LockError::Config(_)), "{err:?}");
    assert!(asked.elapsed() < Duration::from_secs(3), "{err}");
    share.release().await.expect("release");
    // Nothing was left that holds readers up.
    let other = f.connect().await;
    let reader = other.read_lock("upgrade", LockOptions::new()).await;
    reader.expect("free").release().await.expect("release");
}

async fn release_on_cancel_frees_the_write_hold_at_once(f: Deployment) {
    f.cancel_a_section("cancel", LockOptions::new().mode(Mode::Write))
        .await;
    // ttl is 30 s: only the cancellation can free it this fast.
    let started = Instant::now();
    let options = LockOptions::new().wait(PATIENCE);
    let share = f.locks.read_lock("cancel", options).await;
    let share = share.unwrap_or_else(|err| panic!("{err}\n{}", f.log()));
    assert!(started.elapsed() < Duration::from_secs(5));
    share.release().await.expect("release");
}

async fn release_on_panic_frees_the_read_share_at_once(f: Deployment) {
    f.panic_in_a_section("panic", LockOptions::new().mode(Mode::Read))
        .await;
    let writer = f.locks.write_lock("panic", LockOptions::new()).await;
    writer
        .unwrap_or_else(|err| panic!("{err}\n{}", f.log()))
        .release()
        .await
        .expect("release");
}

async fn the_lock_the_semaphore_and_the_read_write_lock_of_one_name_are_apart(f: Deployment) {
    let lock = f
        .locks
        .lock("name", LockOptions::new())
        .await
        .expect("free");
    let permit = f.locks.semaphore("name", 1, LockOptions::new()).await;
    let permit = permit.expect("free");
    let writer = f.locks.write_lock("name", LockOptions::new()).await;
    let writer = writer.unwrap_or_else(|err| panic!("{err}\n{}", f.log()));
    writer.release().await.expect("release");
    permit.release().await.expect("release");
    lock.release().await.expect("release");
}

async fn permits_and_fair_with_a_mode_are_refused(f: Deployment) {
    let both = LockOptions::new().permits(2).mode(Mode::Read);
    let err = f.locks.lock("x", both).await.expect_err("refused");
    assert!(matches!(err, LockError::Config(_)), "{err:?}");
    let fair = LockOptions::new().fair(true);
    let err = f.locks.write_lock("x", fair).await.expect_err("refused");
    assert!(err.to_string().contains("leave fair out"), "{err}");
    let err = f
        .locks
        .lock_all(["x", "y"], LockOptions::new().mode(Mode::Read))
        .await;
    assert!(matches!(err, Err(LockError::Config(_))));
}

/// Readers count up, a writer counts down: a writer never sees another holder. A reader stays
/// until `go`.
#[distributed_lock(key = "page:<id>", mode = "read", wait = "20s", manager = locks)]
async fn read_page(
    locks: LockManager,
    id: u64,
    inside: Arc<AtomicI32>,
    mut go: watch::Receiver<bool>,
) -> Result<i32, LockError> {
    assert_eq!(lock_runtime::current().expect("inside").mode(), Mode::Read);
    let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
    assert!(now > 0, "a reader beside a writer");
    go.wait_for(|&go| go).await.expect("the test goes on");
    inside.fetch_sub(1, Ordering::SeqCst);
    Ok(now)
}

#[distributed_lock(key = "page:<id>", mode = "write", wait = "20s", manager = locks)]
async fn write_page(locks: LockManager, id: u64, inside: Arc<AtomicI32>) -> Result<i32, LockError> {
    let before = inside.fetch_sub(1000, Ordering::SeqCst);
    assert_eq!(before, 0, "a writer beside another holder");
    tokio::time::sleep(ms(20)).await;
    inside.fetch_add(1000, Ordering::SeqCst);
    Ok(0)
}

async fn the_attribute_lets_readers_in_together_and_a_writer_alone(f: Deployment) {
    let managers = [f.locks.clone(), f.connect().await];
    let inside = Arc::new(AtomicI32::new(0));
    let (go, stay) = watch::channel(false);
    // Tasks of their own: branches of one task are one owner.
    let readers: Vec<_> = (0..4)
        .map(|i| {
            let call = read_page(managers[i % 2].clone(), 1, inside.clone(), stay.clone());
            tokio::spawn(call)
        })
        .collect();
    let together = wait_until_async(PATIENCE, || inside.load(Ordering::SeqCst) == 4).await;
    assert!(together, "readers went one at a time\n{}", f.log());
    let writers: Vec<_> = (0..2)
        .map(|i| tokio::spawn(write_page(managers[i % 2].clone(), 1, inside.clone())))
        .collect();
    // The writers wait (their mark turns new readers away) while the readers are inside.
    let probe = f.connect().await;
    assert!(
        eventually(|| readers_refused(&probe, "page:1")).await,
        "{}",
        f.log()
    );
    go.send(true).expect("readers listen");
    for call in readers {
        let answer = call.await.expect("task");
        answer.unwrap_or_else(|err| panic!("{err}\n{}", f.log()));
    }
    for call in writers {
        call.await.expect("task").expect("written");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_refuses_a_read_write_lock_and_says_why() {
    let servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let hosts: Vec<String> = servers.iter().map(|s| s.addr().to_string()).collect();
    let locks = LockManager::connect(&format!("redlock://{}", hosts.join(",")))
        .await
        .expect("connect");
    for mode in [Mode::Read, Mode::Write] {
        let err = locks
            .lock("doc", LockOptions::new().mode(mode))
            .await
            .expect_err("refused");
        assert!(matches!(err, LockError::Config(_)), "{err:?}");
        assert!(err.to_string().contains("not sound"), "{err}");
    }
    for server in &servers {
        assert_eq!(server.cmd(&["DBSIZE"]), "0", "{}", server.log());
    }
}

/// A reader process SIGKILLed mid-share: its share ends with its lease, and a writer goes.
async fn a_killed_readers_share_ends_with_its_lease(f: Deployment) {
    let mut reader = Command::new(CONTENDER)
        .args(["read", f.url(), "report", "1000"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn reader");
    let mut line = String::new();
    BufReader::new(reader.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("reader reports");
    assert!(line.starts_with("held "), "{line}\n{}", f.log());
    let busy = f.locks.write_lock("report", LockOptions::new()).await;
    assert!(busy.expect_err("read by the child").is_busy());
    reader.kill().expect("SIGKILL the reader");
    let killed = Instant::now();
    reader.wait().expect("reaped");
    let options = LockOptions::new().wait(PATIENCE);
    let writer = f.locks.write_lock("report", options).await;
    let writer = writer.unwrap_or_else(|err| panic!("{err}\n{}", f.log()));
    // At most one ttl (1 s) after the kill, plus a margin for a loaded machine.
    let took = killed.elapsed();
    assert!(took < ms(1000) + ms(1500), "{took:?}");
    writer.release().await.expect("release");
}

/// The stored layout docs/STORED_LAYOUT.md documents: the readers' set and the writer's value,
/// with tokens from the fence counter of the lock's slot and no key of their own.
async fn the_stored_layout_is_what_the_readme_shows(f: Deployment) {
    let share = f.locks.read_lock("layout", LockOptions::new()).await;
    let share = share.expect("free");
    let server = f.server_of("lock:{layout}:rw:readers").expect("a server");
    let readers = server.cmd(&["ZRANGE", "lock:{layout}:rw:readers", "0", "-1"]);
    assert!(readers.starts_with("r:"), "{readers}");
    assert_eq!(
        server.fence_counter("lock:", "lock:{layout}:rw"),
        Some(share.fencing_token()),
        "{}",
        f.log()
    );
    assert_eq!(server.cmd(&["EXISTS", "lock:{layout}:rw:fence"]), "0");
    share.release().await.expect("release");
    let writer = f.locks.write_lock("layout", LockOptions::new()).await;
    let writer = writer.expect("free");
    let held = server.cmd(&["GET", "lock:{layout}:rw:writer"]);
    let fence = writer.fencing_token();
    assert!(
        held.starts_with(&format!("held fence={fence} token=")),
        "{held}"
    );
    writer.release().await.expect("release");
    assert_eq!(server.cmd(&["EXISTS", "lock:{layout}:rw:readers"]), "0");
    assert_eq!(server.cmd(&["EXISTS", "lock:{layout}:rw:writer"]), "0");
}

/// Once its last holder is gone, nothing of a read-write lock is left but the fence counter
/// its slot shares with the locks there, and the markers of callers told it was busy, which
/// expire by themselves.
async fn a_released_read_write_lock_leaves_only_the_slot_counter(f: Deployment) {
    let options = LockOptions::new().ttl(Duration::from_secs(5));
    let one = f.locks.read_lock("tidy", options).await.expect("free");
    let two = f.locks.read_lock("tidy", options).await.expect("shared");
    let shared = two.fencing_token();
    one.release().await.expect("release");
    two.release().await.expect("release");
    let writer = f.locks.write_lock("tidy", options).await.expect("free");
    assert!(writer.fencing_token() > shared);
    writer.release().await.expect("release");
    for server in f.data_servers() {
        let left = server.keys_besides_counters("lock:");
        assert!(left.is_empty(), "{left:?}\n{}", f.log());
    }

    // A writer that waited while a reader held it marks itself waiting and leaves the busy
    // marker: both expire.
    let reader = f.locks.read_lock("tidy", options).await.expect("free");
    let waiting = LockOptions::new().ttl(Duration::from_secs(5)).wait(ms(300));
    let locks = f.locks.clone();
    let told = tokio::spawn(async move { locks.write_lock("tidy", waiting).await });
    let told = told.await.expect("task").expect_err("read");
    assert!(told.is_busy(), "{told:?}");
    reader.release().await.expect("release");
    let mut markers = Vec::new();
    for server in f.data_servers() {
        markers.extend(server.keys_besides_counters("lock:"));
    }
    assert!(!markers.is_empty(), "the busy marker\n{}", f.log());
    for (key, pttl) in &markers {
        assert!(
            key == "lock:{tidy}:rw:waiting" || key == "lock:{tidy}:rw:writer-waiting",
            "{markers:?}"
        );
        // At most what stood in the way (5 s) and a lease of the writer's (5 s); or gone
        // between the listing and its PTTL (-2): the writer that gave up leaves its waiting
        // mark in the background.
        assert!(*pttl == -2 || (*pttl > 0 && *pttl <= 10_000), "{markers:?}");
    }
}

/// The last fencing token 0.2 kept beside a read-write lock (`:rw:fence`) raises the slot's
/// counter: the next token of either mode is above it whatever the counter held, and the key is
/// gone.
async fn a_fence_kept_by_0_2_raises_the_counter_and_goes(f: Deployment) {
    // 2128 in µs: above anything the clock or the counter gives today.
    const HIGH: u64 = 5_000_000_000_000_000;
    let server = f.server_of("lock:{upgraded}:rw").expect("a server");
    for (step, mode) in [(0, Mode::Read), (1, Mode::Write)] {
        let kept = (HIGH + step * 1_000).to_string();
        server.cmd(&["SET", "lock:{upgraded}:rw:fence", &kept, "PX", "86400000"]);
        let held = f
            .locks
            .lock("upgraded", LockOptions::new().mode(mode))
            .await;
        let held = held.unwrap_or_else(|err| panic!("{err}\n{}", f.log()));
        assert!(
            held.fencing_token() > HIGH + step * 1_000,
            "{mode:?}: {}",
            held.fencing_token()
        );
        assert_eq!(server.cmd(&["EXISTS", "lock:{upgraded}:rw:fence"]), "0");
        held.release().await.expect("release");
    }
    let left = server.keys_besides_counters("lock:");
    assert!(left.is_empty(), "{left:?}");
}

lock_tests::on_backends!(
    mod on_servers;
    [redis, sentinel, cluster]
    [
    a_killed_readers_share_ends_with_its_lease,
    the_stored_layout_is_what_the_readme_shows,
    a_released_read_write_lock_leaves_only_the_slot_counter,
    a_fence_kept_by_0_2_raises_the_counter_and_goes,
    ]
);
