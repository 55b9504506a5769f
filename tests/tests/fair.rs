//! `fair = true`: first come, first served across processes (two managers stand for two
//! processes), a releaser that asks again goes to the back, and a waiter that gives up, is
//! dropped or dies leaves the line without holding up the others.

use std::sync::Arc;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use lock_tests::Masters;
use lock_tests::fair::served_in_the_order_they_came_in_line;
use lock_tests::prelude::*;

fn fair(wait: Duration) -> LockOptions {
    LockOptions::new().wait(wait).fair(true)
}

/// Puts `dead-waiter` first in the line of `key`, with a place that lasts ten minutes: what a
/// waiter whose process was killed just now leaves behind, its place not yet run out.
fn put_dead_waiter_first(server: &RedisServer, key: &str) {
    let time = server.cmd(&["TIME"]);
    let seconds: u64 = time
        .lines()
        .next()
        .expect("seconds")
        .parse()
        .expect("number");
    let until = ((seconds + 600) * 1000).to_string();
    server.cmd(&["ZADD", &format!("lock:{{{key}}}:queue"), "1", "dead-waiter"]);
    server.cmd(&[
        "ZADD",
        &format!("lock:{{{key}}}:queue:expiry"),
        &until,
        "dead-waiter",
    ]);
}

/// How many wait in the line of `key` on `server`.
fn line(server: &RedisServer, key: &str) -> Option<usize> {
    server
        .cmd(&["ZCARD", &format!("lock:{{{key}}}:queue")])
        .parse()
        .ok()
}

/// Managers on `server` whose locks freed for a dead waiter first in line wait `turn` for it.
async fn with_turn(server: &RedisServer, turn: Duration) -> (LockManager, LockManager) {
    let manager = || async {
        LockManager::builder()
            .url(server.url())
            .fair_turn(turn)
            .build()
            .await
            .expect("connect")
    };
    (manager().await, manager().await)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fair_waiters_get_the_lock_in_the_order_they_came_on_redis() {
    let server = RedisServer::start();
    let (a, b) = (connect(&server).await, connect(&server).await);
    served_in_the_order_they_came_in_line(&a, &b, "turns", || line(&server, "turns")).await;
    // Nobody is left in line.
    assert_eq!(server.cmd(&["EXISTS", "lock:{turns}:queue"]), "0");
    assert_eq!(server.cmd(&["EXISTS", "lock:{turns}:queue:expiry"]), "0");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fair_waiters_get_the_lock_in_the_order_they_came_in_memory() {
    let name = format!("memory://fair-order-{}", std::process::id());
    let a = LockManager::connect(&name).await.expect("memory");
    let b = LockManager::connect(&name).await.expect("memory");
    served_in_the_order_they_came_in_line(&a, &b, "turns", || None).await;
}

/// Tasks of two managers each take the lock again right after releasing it: with `fair`, the
/// releaser goes to the back of the line, so it wins the lock back only when nobody else is in
/// line (almost never), and each task gets its share of the turns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_releaser_that_asks_again_goes_to_the_back_of_the_line() {
    const TASKS: usize = 6;
    const SECTIONS: usize = 120;
    let server = RedisServer::start();
    let managers = [connect(&server).await, connect(&server).await];
    let sections: Arc<Mutex<Vec<usize>>> = Arc::default();
    let mut tasks = Vec::new();
    for task in 0..TASKS {
        let locks = managers[task % 2].clone();
        let sections = sections.clone();
        // Until the sections are done: then each takes one more turn (the others' are ahead
        // of it) and stops, all at about the same time.
        tasks.push(tokio::spawn(async move {
            loop {
                let guard = locks
                    .lock("hot", fair(PATIENCE))
                    .await
                    .unwrap_or_else(|err| panic!("task {task}: {err}"));
                let done = {
                    let mut sections = sections.lock().expect("sections");
                    sections.push(task);
                    sections.len() >= SECTIONS
                };
                guard.release().await.expect("release");
                if done {
                    break;
                }
            }
        }));
    }
    for task in tasks {
        task.await.expect("task");
    }
    let sections = sections.lock().expect("sections").clone();
    let won_again = sections.windows(2).filter(|w| w[0] == w[1]).count();
    assert!(
        won_again * 5 <= sections.len(),
        "the releaser won again {won_again} times in {} sections: {sections:?}",
        sections.len()
    );
    // In line, each waits for the others once: the turns go round.
    for task in 0..TASKS {
        let turns = sections.iter().filter(|&&t| t == task).count();
        assert!(
            turns * TASKS * 3 >= SECTIONS,
            "task {task} had {turns} of {} sections: {sections:?}",
            sections.len()
        );
    }
    assert_eq!(server.cmd(&["EXISTS", "lock:{hot}:queue"]), "0");
}

/// A fair waiter whose wait runs out, and one whose call is dropped, leave the line: the waiter
/// behind them gets the lock as soon as it is released.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_that_gives_up_or_is_dropped_leaves_the_line() {
    let server = RedisServer::start();
    // A waiter left first in line would hold the lock up for a long turn.
    let (a, b) = with_turn(&server, Duration::from_secs(10)).await;
    let holder = a.lock("job", fair(Duration::ZERO)).await.expect("free");
    let gives_up = b.lock("job", fair(Duration::from_millis(200)));
    let dropped = tokio::spawn({
        let b = b.clone();
        async move { b.lock("job", fair(Duration::from_secs(60))).await }
    });
    let err = gives_up.await.expect_err("held throughout");
    assert!(matches!(err, LockError::Busy { .. }), "{err}");
    let last = tokio::spawn({
        let a = a.clone();
        async move { a.lock("job", fair(PATIENCE)).await }
    });
    assert!(
        wait_until_async(PATIENCE, || line(&server, "job") == Some(2)).await,
        "not 2 in line"
    );
    dropped.abort();
    assert!(
        wait_until_async(PATIENCE, || line(&server, "job") == Some(1)).await,
        "not 1 in line"
    );
    let released = Instant::now();
    holder.release().await.expect("release");
    let guard = last.await.expect("task").expect("the lock, at once");
    assert!(
        released.elapsed() < Duration::from_secs(5),
        "waited {:?} after the release",
        released.elapsed()
    );
    guard.release().await.expect("release");
    assert_eq!(server.cmd(&["EXISTS", "lock:{job}:queue"]), "0");
}

/// A waiter that died in line (what a killed process leaves: an entry nobody renews) costs the
/// one behind it one turn (`turn`, the managers' `fair_turn`); meanwhile nobody jumps the line,
/// not even a caller without `fair`. `a` and `b` are two managers on `server`.
async fn a_dead_waiter_first_in_line_costs_one_turn(
    server: &RedisServer,
    a: &LockManager,
    b: &LockManager,
    turn: Duration,
) {
    let holder = a.lock("job", fair(Duration::ZERO)).await.expect("free");
    let waiter = tokio::spawn({
        let b = b.clone();
        async move { b.lock("job", fair(PATIENCE)).await }
    });
    assert!(
        wait_until_async(PATIENCE, || line(server, "job") == Some(1)).await,
        "the waiter never got in line"
    );
    put_dead_waiter_first(server, "job");
    let released = Instant::now();
    holder.release().await.expect("release");
    // Freed for the dead one: nobody else may take it, with or without `fair`, until its turn
    // ends (which a loaded machine may let pass before the caller asks).
    let lock = server.stored_lock("lock:{job}").expect("a lock");
    assert_eq!(lock.holder_field("next"), Some("dead-waiter"), "{lock:?}");
    let barging = a.lock("job", LockOptions::new()).await;
    match barging {
        Err(LockError::Busy { .. }) => {}
        Ok(guard) if released.elapsed() >= turn => guard.release().await.expect("release"),
        other => panic!("took the dead waiter's turn: {other:?}"),
    }
    let guard = waiter.await.expect("task").unwrap_or_else(|err| {
        panic!(
            "{err} after {:?}; line: {}",
            released.elapsed(),
            server.cmd(&["ZRANGE", "lock:{job}:queue", "0", "-1"])
        )
    });
    let waited = released.elapsed();
    assert!(
        waited + Duration::from_millis(100) >= turn && waited < turn + Duration::from_secs(3),
        "the dead waiter held the line up for {waited:?}, its turn being {turn:?}"
    );
    assert_eq!(
        server.cmd(&["EXISTS", "lock:{job}:queue"]),
        "0",
        "the dead waiter is still in line"
    );
    guard.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_waiter_first_in_line_holds_the_others_up_one_turn_at_most() {
    let server = RedisServer::start();
    let (a, b) = (connect(&server).await, connect(&server).await);
    a_dead_waiter_first_in_line_costs_one_turn(&server, &a, &b, Duration::from_millis(250)).await;
}

/// A holder that dies leaves its lock to the first in line when its lease runs out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_lease_goes_to_the_first_in_line() {
    let server = RedisServer::start();
    let a = connect(&server).await;
    let b = connect(&server).await;
    // A lease long enough for both waiters to get in line on a loaded machine.
    let holder = a
        .lock(
            "job",
            fair(Duration::ZERO)
                .ttl(Duration::from_secs(3))
                .watchdog(false),
        )
        .await
        .expect("free");
    // Dies: its lease runs out and nobody releases it.
    std::mem::forget(holder);
    let first = tokio::spawn({
        let b = b.clone();
        async move { b.lock("job", fair(PATIENCE)).await }
    });
    let in_line = wait_until_async(PATIENCE, || line(&server, "job") == Some(1));
    assert!(in_line.await, "the first never got in line");
    let second = tokio::spawn({
        let a = a.clone();
        async move { a.lock("job", fair(PATIENCE)).await }
    });
    let in_line = wait_until_async(PATIENCE, || line(&server, "job") == Some(2));
    assert!(in_line.await, "the second never got in line");
    let guard = first
        .await
        .expect("task")
        .expect("the lock after the lease");
    assert!(!second.is_finished());
    guard.release().await.expect("release");
    second
        .await
        .expect("task")
        .expect("then the second")
        .release()
        .await
        .expect("release");
}

/// A lock that is free on the server while fair waiters are in line (its holder's lease ran
/// out before the first in line asked again) is theirs: a caller without `fair`, which takes a
/// free lock in one transaction without a script, gives it back at once and is told busy, and
/// the lock is freed for the first in line.
#[tokio::test]
async fn a_caller_without_fair_does_not_take_a_free_lock_past_the_line() {
    let server = RedisServer::start();
    let locks = connect(&server).await;
    // Once taken and released: the slot's counter is seeded, so the next acquire of a free lock
    // is the transaction alone.
    let before = locks.lock("ahead", LockOptions::new()).await.expect("free");
    before.release().await.expect("release");
    // A waiter in line whose process is slow to come back: its entry lasts a minute.
    let now_ms: u64 = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_millis()
        .try_into()
        .expect("ms");
    let lock = "lock:{ahead}";
    let queue = lock_runtime::inspect::queue_key(lock);
    let expiry = lock_runtime::inspect::queue_expiry_key(lock);
    server.cmd(&["ZADD", &queue, "1", "phantom-token"]);
    server.cmd(&[
        "ZADD",
        &expiry,
        &(now_ms + 60_000).to_string(),
        "phantom-token",
    ]);
    server.cmd(&["PEXPIRE", &queue, "60000"]);
    server.cmd(&["PEXPIRE", &expiry, "60000"]);

    let busy = locks
        .lock("ahead", LockOptions::new())
        .await
        .expect_err("the first in line has it");
    assert!(busy.is_busy(), "{busy}");
    let stored = server
        .stored_lock(lock)
        .expect("freed for the first in line");
    assert!(stored.is_reserved(), "{stored:?}");
    assert_eq!(stored.holder_field("next"), Some("phantom-token"));
}

/// Redlock keeps no line (its masters could each order it their own way): `fair` is refused with
/// a message that says so.
#[tokio::test]
async fn fair_on_redlock_is_refused_with_a_config_error() {
    let masters = Masters::start(3);
    let locks = LockManager::connect(&masters.url()).await.expect("connect");
    let err = locks
        .lock("job", fair(Duration::from_secs(1)))
        .await
        .expect_err("refused");
    assert!(matches!(err, LockError::Config(_)), "{err}");
    assert!(err.to_string().contains("fair"), "{err}");
    // Without it, the same lock works.
    locks
        .lock("job", LockOptions::new())
        .await
        .expect("free")
        .release()
        .await
        .expect("release");
}

/// A caller without `fair` told the lock is busy before a line formed hears of the lock once the
/// line is empty, whether the last fair waiter was handed the lock by a holder of its own process
/// (`fair_in_holders_process`) or took it from the server.
async fn a_waiter_without_fair_hears_of_the_lock_once_the_line_is_empty(
    fair_in_holders_process: bool,
) {
    let server = RedisServer::start();
    let a = connect(&server).await;
    let b = connect(&server).await;
    let c = connect(&server).await;
    let holder = a
        .lock("job", LockOptions::new().ttl(Duration::from_secs(10)))
        .await
        .expect("free");
    let plain = tokio::spawn({
        let b = b.clone();
        async move { b.lock("job", LockOptions::new().wait(PATIENCE)).await }
    });
    let told = wait_until_async(PATIENCE, || {
        server
            .stored_lock("lock:{job}")
            .is_some_and(|lock| lock.waiting)
    });
    assert!(told.await, "the waiter without fair was never told busy");
    let in_line = tokio::spawn({
        let locks = if fair_in_holders_process {
            a.clone()
        } else {
            c.clone()
        };
        async move { locks.lock("job", fair(PATIENCE)).await }
    });
    // Only a fair waiter starts a line (the waiter without fair may join it once it exists).
    let queued = wait_until_async(PATIENCE, || line(&server, "job") >= Some(1));
    assert!(queued.await, "the fair waiter never got in line");
    holder.release().await.expect("release");
    let guard = in_line.await.expect("task").expect("the fair waiter first");
    guard.release().await.expect("release");
    let free_since = Instant::now();
    // Unannounced, it would sleep on until the first holder's 10 s lease had run out.
    let got = tokio::time::timeout(Duration::from_secs(5), plain).await;
    assert!(
        got.is_ok(),
        "lock free for {:?}, the waiter without fair still sleeps ({:?})",
        free_since.elapsed(),
        server.cmd(&["GET", "lock:{job}"])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_without_fair_hears_of_the_lock_after_a_hand_off_to_the_last_in_line() {
    a_waiter_without_fair_hears_of_the_lock_once_the_line_is_empty(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_without_fair_hears_of_the_lock_after_the_last_in_line_took_it() {
    a_waiter_without_fair_hears_of_the_lock_once_the_line_is_empty(false).await;
}

/// A fair holder whose guard is dropped wakes a waiter of its own process that waits without
/// having asked the server, as any holder does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_fair_holder_wakes_a_waiter_of_its_own_process() {
    let f = Deployment::redis().await;
    let options = LockOptions::new().ttl(Duration::from_secs(10)).fair(true);
    let holder = f.locks.lock("job", options).await.expect("free");
    let locks = f.locks.clone();
    let waiter = async move { locks.lock("job", LockOptions::new().wait(PATIENCE)).await };
    // It waits in its process without asking the server; its manager listens for releases
    // announced from elsewhere.
    let waiter = f.spawn_waiting("lock:{job}", 1, waiter).await;
    drop(holder);
    // Unannounced, it would sleep on until the 10 s lease had run out.
    let got = tokio::time::timeout(Duration::from_secs(5), waiter).await;
    assert!(got.is_ok(), "the lock is free, the waiter still sleeps");
}

/// `fair_turn` sets how long a lock freed for the first in line waits for it: a dead waiter
/// first in line holds the line up that long.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_turn_a_dead_waiter_costs_is_the_managers_fair_turn() {
    let server = RedisServer::start();
    let turn = Duration::from_secs(2);
    let (a, b) = with_turn(&server, turn).await;
    a_dead_waiter_first_in_line_costs_one_turn(&server, &a, &b, turn).await;
}
