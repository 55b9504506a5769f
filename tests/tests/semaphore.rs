//! The semaphore (`LockManager::semaphore`, `permits = N`): at most N holders at any moment,
//! each with the guarantees of a lock. Run on memory://, one redis-server, a master behind
//! Sentinel and a three-master Redis Cluster; Redlock refuses it.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use lock_runtime::inspect::semaphore_keys;
use lock_runtime::{LostReason, distributed_lock};
use lock_tests::prelude::*;

const CONTENDER: &str = env!("CARGO_BIN_EXE_contender");

/// Where the releases of the semaphore `key` are announced: a caller waits on it.
fn channel(key: &str) -> String {
    semaphore_keys("lock:", key).expect("a key").holders
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

lock_tests::on_backends!(
    [memory, redis, sentinel, cluster]
    [
    never_more_holders_than_permits_across_managers,
    a_released_permit_wakes_a_waiter_at_once,
    a_release_long_after_the_waiter_asked_still_wakes_it,
    hold_at_least_keeps_a_fast_holders_permit,
    an_abandoned_permit_comes_back_when_its_lease_ends,
    watchdog_keeps_a_short_permit_across_a_long_body,
    a_different_number_of_permits_for_one_key_is_a_config_error,
    release_on_cancel_gives_the_permit_back_at_once,
    release_on_panic_gives_the_permit_back_at_once,
    the_lock_and_the_semaphore_of_one_name_are_apart,
    a_nested_section_reenters_the_permit_of_its_task,
    permits_zero_and_fair_are_refused,
    the_attribute_admits_at_most_its_permits,
    ]
);

async fn never_more_holders_than_permits_across_managers(f: Deployment) {
    const PERMITS: u32 = 3;
    let managers = [f.locks.clone(), f.connect().await];
    let inside = Arc::new(AtomicU32::new(0));
    let most = Arc::new(AtomicU32::new(0));
    let mut tasks = Vec::new();
    for i in 0..8 {
        let locks = managers[i % 2].clone();
        let (inside, most) = (inside.clone(), most.clone());
        tasks.push(tokio::spawn(async move {
            let mut tokens = Vec::new();
            for _ in 0..6 {
                let options = LockOptions::new().wait(Duration::from_secs(30));
                let permit = locks.semaphore("pool", PERMITS, options).await?;
                let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                tokens.push(permit.fencing_token());
                tokio::time::sleep(ms(5)).await;
                inside.fetch_sub(1, Ordering::SeqCst);
                permit.release().await?;
            }
            Ok::<_, LockError>(tokens)
        }));
    }
    let mut all = Vec::new();
    for task in tasks {
        let tokens = task
            .await
            .expect("task")
            .unwrap_or_else(|err| panic!("{err}\n{}", f.log()));
        assert!(tokens.windows(2).all(|w| w[0] < w[1]), "{tokens:?}");
        all.extend(tokens);
    }
    let most = most.load(Ordering::SeqCst);
    assert!(most <= PERMITS, "{most} holders at once\n{}", f.log());
    // The permits are held side by side, not one at a time: as many holders as permits, across
    // the managers, and not one more.
    let mut held = Vec::new();
    for i in 0..PERMITS as usize {
        let permit = managers[i % 2].semaphore("pool", PERMITS, LockOptions::new());
        let permit = permit.await;
        held.push(permit.unwrap_or_else(|err| panic!("a lock, not a semaphore: {err}")));
    }
    let extra = f.connect().await;
    let one_more = extra.semaphore("pool", PERMITS, LockOptions::new()).await;
    assert!(one_more.expect_err("all taken").is_busy());
    for permit in held {
        permit.release().await.expect("release");
    }
    all.sort_unstable();
    all.dedup();
    assert_eq!(
        all.len(),
        48,
        "every permit grant has its own fencing token"
    );
}

async fn a_released_permit_wakes_a_waiter_at_once(f: Deployment) {
    let options = LockOptions::new().ttl(Duration::from_secs(10));
    let first = f.locks.semaphore("wake", 2, options).await.expect("free");
    let second = f.locks.semaphore("wake", 2, options).await.expect("free");
    let other = f.connect().await;
    let waiter = async move {
        let options = LockOptions::new().wait(PATIENCE);
        let permit = other.semaphore("wake", 2, options).await?;
        let entered = Instant::now();
        permit.release().await?;
        Ok::<_, LockError>(entered)
    };
    let waiter = f.spawn_waiting(&channel("wake"), 1, waiter).await;
    let released = Instant::now();
    first.release().await.expect("release");
    let entered = waiter
        .await
        .expect("task")
        .unwrap_or_else(|err| panic!("{err}\n{}", f.log()));
    // The leases had 10 s left: entering within half of it means the release woke the waiter.
    let handover = entered.duration_since(released);
    assert!(
        handover < Duration::from_secs(5),
        "{handover:?}\n{}",
        f.log()
    );
    second.release().await.expect("release");
}

/// The waiter's own lease is much shorter than the holder's: the release must still be
/// announced when it comes after the waiter's lease would have ended.
async fn a_release_long_after_the_waiter_asked_still_wakes_it(f: Deployment) {
    let holder = LockOptions::new().ttl(Duration::from_secs(4));
    let held = f.locks.semaphore("late", 1, holder).await.expect("free");
    let other = f.connect().await;
    let waiter = async move {
        let options = LockOptions::new().ttl(ms(300)).wait(PATIENCE);
        let permit = other.semaphore("late", 1, options).await?;
        let entered = Instant::now();
        permit.release().await?;
        Ok::<_, LockError>(entered)
    };
    let waiter = f.spawn_waiting(&channel("late"), 1, waiter).await;
    let waiting = Instant::now();
    // Past the holder's first renewal, and past the waiter's 300 ms.
    assert!(renewed(&held).await, "no renewal\n{}", f.log());
    let past = wait_until_async(PATIENCE, || waiting.elapsed() > ms(600)).await;
    assert!(past && held.is_held(), "{}", f.log());
    let released = Instant::now();
    held.release().await.expect("release");
    let entered = waiter
        .await
        .expect("task")
        .unwrap_or_else(|err| panic!("{err}\n{}", f.log()));
    // Unannounced, the waiter would sleep until the lease it was told of ran out (4 s after it
    // asked).
    let handover = entered.duration_since(released);
    assert!(handover < ms(1500), "{handover:?}\n{}", f.log());
}

async fn hold_at_least_keeps_a_fast_holders_permit(f: Deployment) {
    // Long enough that the release and the next try fit in it on a loaded machine.
    let options = LockOptions::new().hold_at_least(Duration::from_secs(2));
    let permit = f
        .locks
        .semaphore("nightly", 1, options)
        .await
        .expect("free");
    let started = Instant::now();
    permit.release().await.expect("release");
    let busy = f.locks.semaphore("nightly", 1, LockOptions::new()).await;
    assert!(busy.expect_err("kept for 2 s").is_busy(), "{}", f.log());
    let wait = LockOptions::new().wait(PATIENCE);
    let next = f
        .locks
        .semaphore("nightly", 1, wait)
        .await
        .expect("after the hold");
    // (`started` is taken after the grant: a little of the hold may be behind it.)
    assert!(started.elapsed() >= ms(1500), "{:?}", started.elapsed());
    next.release().await.expect("release");
}

async fn an_abandoned_permit_comes_back_when_its_lease_ends(f: Deployment) {
    let fixed = LockOptions::new().ttl(ms(500)).watchdog(false);
    // The other permit is held, and renewed, by another manager all along.
    let other = f.connect().await;
    let kept = other.semaphore("abandoned", 2, LockOptions::new()).await;
    let kept = kept.expect("free");
    // The lease starts after this and ends by 500 ms after the grant.
    let asked = Instant::now();
    let abandoned = f
        .locks
        .semaphore("abandoned", 2, fixed)
        .await
        .expect("free");
    let granted = Instant::now();
    // Forget the guard: no release, no renewal, as if its holder froze.
    std::mem::forget(abandoned);
    let options = LockOptions::new().wait(PATIENCE);
    let next = f
        .locks
        .semaphore("abandoned", 2, options)
        .await
        .unwrap_or_else(|err| panic!("{err}\n{}", f.log()));
    let since_asked = asked.elapsed();
    assert!(
        since_asked >= ms(490),
        "entered before the lease ran out: {since_asked:?}"
    );
    // Woken by the expiry, not long after (a margin for a loaded machine).
    let since_granted = granted.elapsed();
    assert!(
        since_granted < ms(500) + ms(1500),
        "entered long after expiry: {since_granted:?}"
    );
    next.release().await.expect("release");
    kept.release().await.expect("release");
}

async fn watchdog_keeps_a_short_permit_across_a_long_body(f: Deployment) {
    let options = LockOptions::new().ttl(Duration::from_secs(1));
    let permit = f
        .locks
        .semaphore("long-body", 1, options)
        .await
        .expect("free");
    let started = Instant::now();
    // Renewal after renewal, for three leases.
    while started.elapsed() < Duration::from_secs(3) {
        assert!(renewed(&permit).await, "no renewal\n{}", f.log());
        assert!(permit.is_held(), "{}", f.log());
        assert!(permit.remaining() > Duration::ZERO);
        let other = f.locks.semaphore("long-body", 1, LockOptions::new()).await;
        assert!(other.expect_err("still held").is_busy());
    }
    permit.release().await.expect("still ours after 3 s");
}

async fn a_different_number_of_permits_for_one_key_is_a_config_error(f: Deployment) {
    let three = f.locks.semaphore("declared", 3, LockOptions::new()).await;
    let three = three.expect("free");
    let other = f.connect().await;
    let err = other
        .semaphore("declared", 5, LockOptions::new())
        .await
        .expect_err("3 permits are declared");
    let shown = err.to_string();
    assert!(matches!(err, LockError::Config(_)), "{err:?}");
    for part in ["semaphore `declared`", "held with 3 permits", "declares 5"] {
        assert!(shown.contains(part), "{shown}");
    }
    assert!(
        !shown.contains("  ") && !shown.contains("lock:{"),
        "{shown}"
    );
    three.release().await.expect("release");
    // Nobody holds a permit of the old number: the new one applies.
    let five = other.semaphore("declared", 5, LockOptions::new()).await;
    five.unwrap_or_else(|err| panic!("{err}\n{}", f.log()))
        .release()
        .await
        .expect("release");
}

async fn release_on_cancel_gives_the_permit_back_at_once(f: Deployment) {
    f.cancel_a_section("cancel", LockOptions::new().permits(1))
        .await;
    // ttl is 30 s: only the cancellation can free the permit this fast.
    let started = Instant::now();
    let options = LockOptions::new().wait(PATIENCE);
    let permit = f
        .locks
        .semaphore("cancel", 1, options)
        .await
        .unwrap_or_else(|err| panic!("{err}\n{}", f.log()));
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    permit.release().await.expect("release");
}

async fn release_on_panic_gives_the_permit_back_at_once(f: Deployment) {
    f.panic_in_a_section("panic", LockOptions::new().permits(1))
        .await;
    // Released before the panic went on: no waiting needed.
    let permit = f.locks.semaphore("panic", 1, LockOptions::new()).await;
    permit
        .unwrap_or_else(|err| panic!("{err}\n{}", f.log()))
        .release()
        .await
        .expect("release");
}

async fn the_lock_and_the_semaphore_of_one_name_are_apart(f: Deployment) {
    let lock = f.locks.lock("shared-name", LockOptions::new()).await;
    let lock = lock.expect("free");
    let permit = f
        .locks
        .semaphore("shared-name", 1, LockOptions::new())
        .await;
    let permit = permit.unwrap_or_else(|err| panic!("{err}\n{}", f.log()));
    assert_eq!(permit.permits(), Some(1));
    assert_eq!(lock.permits(), None);
    let busy = f
        .locks
        .semaphore("shared-name", 1, LockOptions::new())
        .await;
    assert!(busy.expect_err("its one permit is held").is_busy());
    permit.release().await.expect("release");
    lock.release().await.expect("release");
}

/// Re-entry, decided as for a lock: inside a section of the task that holds a permit, asking
/// for the same semaphore re-enters that permit (no second one is taken, and N = 1 cannot
/// deadlock on itself); outside one, a task that holds every permit itself is told so instead
/// of waiting for itself, and one that holds fewer waits for another's.
async fn a_nested_section_reenters_the_permit_of_its_task(f: Deployment) {
    let locks = f.locks.clone();
    let outer = LockOptions::new().permits(1);
    locks
        .run_locked("nested".into(), outer, async {
            let inner = locks.semaphore("nested", 1, LockOptions::new()).await?;
            assert!(inner.is_reentered());
            assert_eq!(
                lock_runtime::current().map(|held| held.fencing_token()),
                Some(inner.fencing_token())
            );
            let err = locks
                .semaphore("nested", 2, LockOptions::new())
                .await
                .expect_err("held with 1 permit");
            assert!(matches!(err, LockError::Config(_)), "{err:?}");
            inner.release().await
        })
        .await
        .unwrap_or_else(|err| panic!("{err}\n{}", f.log()));
    let held = f.locks.semaphore("nested", 1, LockOptions::new()).await;
    let held = held.expect("released by the outer section");
    let wait = LockOptions::new().wait(Duration::from_secs(10));
    let started = Instant::now();
    let err = f
        .locks
        .semaphore("nested", 1, wait)
        .await
        .expect_err("its only permit is this task's");
    assert!(matches!(err, LockError::HeldByThisTask { .. }), "{err:?}");
    // The message speaks of the semaphore's permits too, not only of re-entering a lock.
    assert!(
        err.to_string().contains("every permit of a semaphore"),
        "{err}"
    );
    assert!(started.elapsed() < Duration::from_secs(2));
    held.release().await.expect("release");

    // Two permits: one this task's, one another manager's, which it gives back soon.
    let mine = f.locks.semaphore("nested-2", 2, LockOptions::new()).await;
    let mine = mine.expect("free");
    let other = f.connect().await;
    let theirs = other.semaphore("nested-2", 2, LockOptions::new()).await;
    let theirs = theirs.expect("free");
    // Given back once this task waits for it.
    let wait = LockOptions::new().wait(PATIENCE);
    let waits = f.locks.semaphore("nested-2", 2, wait);
    let (second, released) = f
        .while_waiting(&channel("nested-2"), 1, waits, theirs.release())
        .await;
    released.expect("release");
    let second =
        second.unwrap_or_else(|err| panic!("waits for the other holder: {err}\n{}", f.log()));
    second.release().await.expect("release");
    mine.release().await.expect("release");
}

async fn permits_zero_and_fair_are_refused(f: Deployment) {
    let zero = f.locks.semaphore("refused", 0, LockOptions::new()).await;
    let shown = zero.expect_err("no permit to take").to_string();
    assert!(shown.contains("at least 1"), "{shown}");
    let fair = LockOptions::new().wait(ms(100)).fair(true);
    let err = f
        .locks
        .semaphore("refused", 2, fair)
        .await
        .expect_err("fair");
    assert!(matches!(err, LockError::Config(_)), "{err:?}");
}

/// At most two calls per tenant run at once, in every process.
#[distributed_lock(key = "export:<tenant>", permits = 2, wait = "20s", manager = locks)]
async fn export(
    locks: LockManager,
    tenant: u64,
    inside: Arc<AtomicU32>,
    most: Arc<AtomicU32>,
) -> Result<u64, LockError> {
    let held = lock_runtime::current().expect("inside the section");
    let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
    most.fetch_max(now, Ordering::SeqCst);
    tokio::time::sleep(ms(20)).await;
    inside.fetch_sub(1, Ordering::SeqCst);
    assert!(held.is_held());
    Ok(tenant)
}

async fn the_attribute_admits_at_most_its_permits(f: Deployment) {
    let managers = [f.locks.clone(), f.connect().await];
    let (inside, most) = (Arc::new(AtomicU32::new(0)), Arc::new(AtomicU32::new(0)));
    // Tasks of their own: branches of one task are one owner, which would be told it holds
    // the permits already.
    let calls: Vec<_> = (0..6)
        .map(|i| {
            let locks = managers[i % 2].clone();
            tokio::spawn(export(locks, 7, inside.clone(), most.clone()))
        })
        .collect();
    for call in calls {
        let answer = call.await.expect("task");
        assert_eq!(answer.unwrap_or_else(|err| panic!("{err}\n{}", f.log())), 7);
    }
    let most = most.load(Ordering::SeqCst);
    assert!((1..=2).contains(&most), "{most} at once");
    // The permits were given back: two are free at once.
    let a = f.locks.semaphore("export:7", 2, LockOptions::new()).await;
    let b = f.locks.semaphore("export:7", 2, LockOptions::new()).await;
    assert!(a.is_ok() && b.is_ok(), "{}", f.log());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_refuses_a_semaphore_and_says_why() {
    let servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let hosts: Vec<String> = servers.iter().map(|s| s.addr().to_string()).collect();
    let locks = LockManager::connect(&format!("redlock://{}", hosts.join(",")))
        .await
        .expect("connect");
    let err = locks
        .semaphore("pool", 2, LockOptions::new())
        .await
        .expect_err("refused");
    let shown = err.to_string();
    assert!(matches!(err, LockError::Config(_)), "{err:?}");
    assert!(shown.contains("not sound"), "{shown}");
    // Nothing was written.
    for server in &servers {
        assert_eq!(server.cmd(&["DBSIZE"]), "0", "{}", server.log());
    }
}

/// A holder process SIGKILLed mid-permit: its permit comes back when its lease runs out.
async fn a_killed_holders_permit_comes_back_after_its_lease(f: Deployment) {
    let mut holder = Command::new(CONTENDER)
        .args(["permit", f.url(), "job", "1", "1000"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn holder");
    let mut line = String::new();
    BufReader::new(holder.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("holder reports");
    assert!(line.starts_with("held "), "{line}\n{}", f.log());
    let busy = f.locks.semaphore("job", 1, LockOptions::new()).await;
    assert!(busy.expect_err("held by the child").is_busy());
    holder.kill().expect("SIGKILL the holder");
    let killed = Instant::now();
    holder.wait().expect("reaped");
    let options = LockOptions::new().wait(PATIENCE);
    let permit = f
        .locks
        .semaphore("job", 1, options)
        .await
        .unwrap_or_else(|err| panic!("{err}\n{}", f.log()));
    // At most one ttl (1 s) after the kill, plus a margin for a loaded machine.
    let took = killed.elapsed();
    assert!(took < ms(1000) + ms(1500), "{took:?}");
    permit.release().await.expect("release");
}

/// Someone removes the permit from outside: the holder is told at its next renewal, and its
/// section is aborted.
async fn a_permit_removed_from_outside_is_reported_lost(f: Deployment) {
    let locks = f.locks.clone();
    let options = LockOptions::new().ttl(Duration::from_secs(3)).permits(2);
    // A body that never ends: only the abort ends the section.
    let section = locks.run_locked("removed".into(), options, async {
        std::future::pending::<()>().await;
        Ok::<_, LockError>(())
    });
    let section = tokio::time::timeout(PATIENCE, section);
    let remover = async {
        let server = f.server_of("lock:{removed}:sem").expect("a server");
        let held = wait_until_async(PATIENCE, || {
            server.cmd(&["ZCARD", "lock:{removed}:sem"]) == "1"
        });
        assert!(held.await, "{}", f.log());
        assert_eq!(
            server.cmd(&["DEL", "lock:{removed}:sem"]),
            "1",
            "{}",
            f.log()
        );
    };
    let (result, ()) = tokio::join!(section, remover);
    match result.expect("told within the tests' patience") {
        Err(LockError::LeaseLost { key, reason, .. }) => {
            assert_eq!(key, "removed");
            assert_eq!(reason, LostReason::NotOwner);
        }
        other => panic!("expected LeaseLost, got {other:?}\n{}", f.log()),
    }
}

/// The stored layout docs/STORED_LAYOUT.md documents: the holders' set, and the token from the
/// fence counter of the semaphore's slot, with no key of its own.
async fn the_stored_layout_is_what_the_readme_shows(f: Deployment) {
    let permit = f.locks.semaphore("layout", 4, LockOptions::new()).await;
    let permit = permit.expect("free");
    let server = f.server_of("lock:{layout}:sem").expect("a server");
    let holders = server.cmd(&["ZRANGE", "lock:{layout}:sem", "0", "-1"]);
    assert!(holders.starts_with("4:"), "{holders}");
    assert_eq!(
        server.fence_counter("lock:", "lock:{layout}:sem"),
        Some(permit.fencing_token()),
        "{}",
        f.log()
    );
    assert_eq!(server.cmd(&["EXISTS", "lock:{layout}:sem:fence"]), "0");
    permit.release().await.expect("release");
    assert_eq!(server.cmd(&["EXISTS", "lock:{layout}:sem"]), "0");
}

/// Once its last holder gives its permit back, nothing of a semaphore is left but the fence
/// counter its slot shares with the locks there, and the waiting marker of a caller told it
/// was full, which expires by itself.
async fn a_released_semaphore_leaves_only_the_slot_counter(f: Deployment) {
    let options = LockOptions::new().ttl(Duration::from_secs(5));
    let first = f.locks.semaphore("tidy", 2, options).await.expect("free");
    let second = f.locks.semaphore("tidy", 2, options).await.expect("free");
    assert!(second.fencing_token() > first.fencing_token());
    first.release().await.expect("release");
    second.release().await.expect("release");
    for server in f.data_servers() {
        let left = server.keys_besides_counters("lock:");
        assert!(left.is_empty(), "{left:?}\n{}", f.log());
    }

    // A caller told every permit is taken leaves the marker, with an expiry.
    let held = f.locks.semaphore("tidy", 1, options).await.expect("free");
    let busy = f.locks.semaphore("tidy", 1, LockOptions::new()).await;
    assert!(busy.expect_err("full").is_busy());
    held.release().await.expect("release");
    let mut markers = Vec::new();
    for server in f.data_servers() {
        markers.extend(server.keys_besides_counters("lock:"));
    }
    match markers.as_slice() {
        [(key, pttl)] => {
            assert_eq!(key, "lock:{tidy}:sem:waiting");
            // At most what stood in the way (5 s) and a lease of the caller's (30 s).
            assert!(*pttl > 0 && *pttl <= 35_000, "{pttl}");
        }
        other => panic!("{other:?}\n{}", f.log()),
    }
}

/// The last fencing token 0.2 kept beside a semaphore (`:sem:fence`, for its fence retention)
/// raises the slot's counter: the next token is above it whatever the counter held, and the key
/// is gone.
async fn a_fence_kept_by_0_2_raises_the_counter_and_goes(f: Deployment) {
    // 2128 in µs: above anything the clock or the counter gives today.
    const HIGH: u64 = 5_000_000_000_000_000;
    let server = f.server_of("lock:{upgraded}:sem").expect("a server");
    let kept = HIGH.to_string();
    server.cmd(&["SET", "lock:{upgraded}:sem:fence", &kept, "PX", "86400000"]);
    let permit = f.locks.semaphore("upgraded", 2, LockOptions::new()).await;
    let permit = permit.unwrap_or_else(|err| panic!("{err}\n{}", f.log()));
    assert!(permit.fencing_token() > HIGH, "{}", permit.fencing_token());
    assert_eq!(server.cmd(&["EXISTS", "lock:{upgraded}:sem:fence"]), "0");
    let next = f.locks.semaphore("upgraded", 2, LockOptions::new()).await;
    let next = next.expect("a permit is left");
    assert!(next.fencing_token() > permit.fencing_token());
    permit.release().await.expect("release");
    next.release().await.expect("release");
    let left = server.keys_besides_counters("lock:");
    assert!(left.is_empty(), "{left:?}");
}

lock_tests::on_backends!(
    mod on_servers;
    [redis, sentinel, cluster]
    [
    a_killed_holders_permit_comes_back_after_its_lease,
    a_permit_removed_from_outside_is_reported_lost,
    the_stored_layout_is_what_the_readme_shows,
    a_released_semaphore_leaves_only_the_slot_counter,
    a_fence_kept_by_0_2_raises_the_counter_and_goes,
    ]
);

/// A fence counter that tokens cannot continue from (not a number) refuses the grant, for the
/// semaphore and the read-write lock alike, and is left as it was; so is a last token 0.2 kept
/// that is not a number. The message names the keys to mend.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fence_counter_that_is_not_a_number_refuses_the_grant() {
    let f = Deployment::redis().await;
    let server = f.server_of("lock:{bad}").expect("a server");
    let counter = lock_runtime::inspect::fence_counter_key("lock:", "lock:{bad}");
    for (fence, kept, take) in [
        (&counter, "lock:{bad}:sem:fence", "permit"),
        (&counter, "lock:{bad}:rw:fence", "write"),
        (
            &"lock:{bad}:sem:fence".to_owned(),
            "lock:{bad}:sem:fence",
            "permit",
        ),
        (
            &"lock:{bad}:rw:fence".to_owned(),
            "lock:{bad}:rw:fence",
            "read",
        ),
    ] {
        server.cmd(&["SET", fence, "not-a-number"]);
        let taken = match take {
            "permit" => f.locks.semaphore("bad", 2, LockOptions::new()).await,
            "read" => f.locks.read_lock("bad", LockOptions::new()).await,
            _ => f.locks.write_lock("bad", LockOptions::new()).await,
        };
        let err = taken.expect_err("no token can follow");
        let message = err.to_string();
        assert!(message.contains("cannot continue from"), "{take}: {err}");
        assert!(message.contains(&format!("`{counter}`")), "{take}: {err}");
        assert!(message.contains(&format!("`{kept}`")), "{take}: {err}");
        assert_eq!(server.cmd(&["GET", fence]), "not-a-number", "{take}");
        server.cmd(&["DEL", fence]);
    }
}
