//! `shutdown()` before a process exits: when it returns, nothing of the process is left on the
//! server (no lock, no writer's waiting mark, no place in the line of fair waiters, nothing an
//! acquire on the wire took), and every call of it waits for that, not only the first.
//!
//! The process that shuts down is an [`Instance`]: a manager on a runtime of its own, ended
//! right after `shutdown()` returns, so that whatever it had left to send is never sent.

use std::future::Future;
use std::time::Duration;

use lock_runtime::LockManagerBuilder;
use lock_runtime::inspect::{queue_key, read_write_keys, waits_key};
use lock_tests::prelude::*;
use tokio::time::Instant;

/// Another process: a manager on a runtime of its own, whose tasks end where they are when it
/// exits.
struct Instance {
    runtime: tokio::runtime::Runtime,
    locks: LockManager,
}

impl Instance {
    async fn start(url: &str) -> Instance {
        Instance::with(LockManager::builder().url(url)).await
    }

    async fn with(builder: LockManagerBuilder) -> Instance {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("a runtime for the instance");
        let locks = runtime
            .spawn(builder.build())
            .await
            .expect("connect task")
            .unwrap_or_else(|err| panic!("connect: {err}"));
        Instance { runtime, locks }
    }

    /// Runs `task` on the instance, with its manager.
    fn spawn<F, Fut>(&self, task: F) -> tokio::task::JoinHandle<Fut::Output>
    where
        F: FnOnce(LockManager) -> Fut,
        Fut: Future + Send + 'static,
        Fut::Output: Send + 'static,
    {
        self.runtime.spawn(task(self.locks.clone()))
    }

    /// `shutdown()` on the instance's runtime, and how long it took.
    async fn shut_down(&self) -> Duration {
        let started = Instant::now();
        self.spawn(|locks| async move { locks.shutdown().await })
            .await
            .expect("shutdown task")
            .expect("shutdown");
        started.elapsed()
    }

    /// The process exits: its tasks end where they are and send nothing more.
    fn exit(self) {
        self.runtime.shutdown_background();
    }
}

/// Takes and gives back a read share of `key` at once: false if a writer holds or waits.
async fn reads_at_once(locks: &LockManager, key: &str) -> bool {
    match locks.read_lock(key, LockOptions::new()).await {
        Ok(share) => {
            share.release().await.expect("release the probe");
            true
        }
        Err(err) if err.is_busy() => false,
        Err(err) => panic!("read probe of `{key}` failed: {err}"),
    }
}

/// A writer waits (readers hold): an instance that shuts down and exits then must not hold up
/// new readers with the writer's waiting mark, which would last the writer's 20 s lease.
async fn a_writer_waiting_at_shutdown_holds_up_no_reader(deployment: Deployment) {
    let key = "shutdown:catalog";
    let readers = deployment.connect().await;
    let share = deployment
        .locks
        .read_lock(key, LockOptions::new())
        .await
        .expect("free");
    let instance = Instance::start(deployment.url()).await;
    let _writer = instance.spawn(|locks| async move {
        let options = LockOptions::new()
            .ttl(Duration::from_secs(20))
            .wait(Duration::from_secs(60));
        locks.write_lock(key, options).await.map(drop)
    });
    assert!(
        eventually(|| async { !reads_at_once(&readers, key).await }).await,
        "the writer never waited\n{}",
        deployment.log()
    );
    let took = instance.shut_down().await;
    instance.exit();
    let mark = read_write_keys("lock:", key).expect("key").writer_waiting;
    if let Some(server) = deployment.server_of(&mark) {
        assert_eq!(server.cmd(&["EXISTS", &mark]), "0", "{}", server.log());
    }
    let started = Instant::now();
    let read = readers
        .read_lock(key, LockOptions::new().wait(Duration::from_secs(5)))
        .await;
    let waited = started.elapsed();
    eprintln!("shutdown took {took:?}; a reader waited {waited:?} after it");
    let read = read.unwrap_or_else(|err| panic!("{err} after {waited:?}\n{}", deployment.log()));
    assert!(
        waited < Duration::from_secs(2),
        "a reader waited {waited:?} for the writer's mark\n{}",
        deployment.log()
    );
    read.release().await.expect("release");
    share.release().await.expect("release");
}

lock_tests::on_backends!([memory, redis][a_writer_waiting_at_shutdown_holds_up_no_reader]);

fn fair(wait: Duration) -> LockOptions {
    LockOptions::new().wait(wait).fair(true)
}

/// A fair waiter whose instance shut down and exited leaves the line: the waiter behind it
/// gets the lock at the release, not a whole turn (10 s here) after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fair_waiter_shut_down_leaves_the_line_and_costs_nobody_a_turn() {
    let key = "shutdown:fair";
    let server = RedisServer::start();
    let queue = queue_key(&format!("lock:{{{key}}}"));
    let builder = LockManager::builder()
        .url(server.url())
        .fair_turn(Duration::from_secs(10));
    let holder = builder.clone().build().await.expect("connect");
    let behind = builder.clone().build().await.expect("connect");
    let held = holder.lock(key, LockOptions::new()).await.expect("free");
    let instance = Instance::with(builder).await;
    let _first = instance.spawn(|locks| async move {
        locks
            .lock(key, fair(Duration::from_secs(60)))
            .await
            .map(drop)
    });
    let in_line = |count: &'static str| {
        let server = &server;
        let queue = &queue;
        move || async move { server.cmd(&["ZCARD", queue]) == count }
    };
    assert!(eventually(in_line("1")).await, "{}", server.log());
    let second = tokio::spawn(async move {
        let guard = behind.lock(key, fair(Duration::from_secs(60))).await?;
        let acquired = Instant::now();
        guard.release().await?;
        Ok::<_, LockError>(acquired)
    });
    assert!(eventually(in_line("2")).await, "{}", server.log());
    let took = instance.shut_down().await;
    instance.exit();
    assert_eq!(
        server.cmd(&["ZCARD", &queue]),
        "1",
        "the instance's place is still in line\n{}",
        server.log()
    );
    let released = Instant::now();
    held.release().await.expect("release");
    let acquired = second.await.expect("task").expect("acquired");
    let waited = acquired - released;
    eprintln!(
        "shutdown took {took:?}; the waiter behind got the lock {waited:?} after the release"
    );
    assert!(
        waited < Duration::from_secs(5),
        "the waiter behind waited {waited:?}, a turn of the instance that left\n{}",
        server.log()
    );
}

/// Acquires on the wire (a slow link) when `shutdown()` is called are granted after it was
/// called: what they took is given back before it returns, so nothing is held once the
/// instance exits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquires_on_the_wire_at_shutdown_leave_nothing_held_when_it_returns() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.addr());
    let instance = Instance::start(&proxy.url()).await;
    // The scripts are known to the server before the link slows down.
    instance
        .spawn(|locks| async move {
            locks
                .lock("shutdown:warm", LockOptions::new())
                .await?
                .release()
                .await
        })
        .await
        .expect("task")
        .expect("warm up");
    proxy.set_delay(ms(250));
    let keys: Vec<String> = (0..4).map(|i| format!("shutdown:wire:{i}")).collect();
    for key in &keys {
        let key = key.clone();
        let _acquire = instance.spawn(|locks| async move {
            let options = LockOptions::new().ttl(Duration::from_secs(30));
            locks.lock(key, options).await.map(drop)
        });
    }
    let held = |key: &String| {
        server
            .stored_lock(&format!("lock:{{{key}}}"))
            .is_some_and(|lock| lock.is_busy())
    };
    // Granted on the server, the answers still on their way back.
    assert!(
        eventually(|| async { keys.iter().all(held) }).await,
        "{}",
        server.log()
    );
    let took = instance.shut_down().await;
    instance.exit();
    let left: Vec<&String> = keys.iter().filter(|key| held(key)).collect();
    eprintln!("shutdown took {took:?}; held after it: {left:?}");
    assert!(
        left.is_empty(),
        "held after shutdown returned: {left:?}\n{}",
        server.log()
    );
}

/// A second `shutdown()` while the first still releases (a signal handler and a drop path)
/// returns when the release is done, not at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_shutdown_returns_when_the_releases_are_done() {
    let key = "shutdown:twice";
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.addr());
    let locks = LockManager::connect(&proxy.url()).await.expect("connect");
    let _held = locks.lock(key, LockOptions::new()).await.expect("free");
    proxy.set_delay(ms(200));
    let first = tokio::spawn({
        let locks = locks.clone();
        async move { locks.shutdown().await }
    });
    assert!(eventually(|| async { locks.is_shut_down() }).await);
    let started = Instant::now();
    locks.shutdown().await.expect("second shutdown");
    let took = started.elapsed();
    let stored = server.stored_lock(&format!("lock:{{{key}}}"));
    eprintln!("the second shutdown took {took:?}; the lock after it: {stored:?}");
    assert!(
        !stored.is_some_and(|lock| lock.is_busy()),
        "the second shutdown returned after {took:?} with the lock still held\n{}",
        server.log()
    );
    first.await.expect("task").expect("first shutdown");
}

/// A writer's acquire on the wire (a slow link) when `shutdown()` is called is refused after
/// it was called, and the refusal left the writer's waiting mark: it is taken away before
/// `shutdown()` returns, so readers elsewhere are not held up once the instance exits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_on_the_wire_at_shutdown_leaves_no_mark() {
    let key = "shutdown:wire-writer";
    let server = RedisServer::start();
    let readers = connect(&server).await;
    let share = readers
        .read_lock(key, LockOptions::new())
        .await
        .expect("free");
    let proxy = FaultProxy::start(server.addr());
    let instance = Instance::start(&proxy.url()).await;
    // The scripts are known to the server before the link slows down.
    instance
        .spawn(|locks| async move { reads_at_once(&locks, key).await })
        .await
        .expect("task");
    proxy.set_delay(ms(250));
    let _writer = instance.spawn(|locks| async move {
        let options = LockOptions::new()
            .ttl(Duration::from_secs(20))
            .wait(Duration::from_secs(60));
        locks.write_lock(key, options).await.map(drop)
    });
    let mark = read_write_keys("lock:", key).expect("key").writer_waiting;
    // Marked on the server, the answer still on its way back.
    assert!(
        eventually(|| async { server.cmd(&["EXISTS", &mark]) == "1" }).await,
        "{}",
        server.log()
    );
    let took = instance.shut_down().await;
    instance.exit();
    let left = server.cmd(&["PTTL", &mark]);
    eprintln!("shutdown took {took:?}; the mark's PTTL after it: {left}");
    assert_eq!(left, "-2", "the writer's mark is left\n{}", server.log());
    assert!(reads_at_once(&readers, key).await, "{}", server.log());
    share.release().await.expect("release");
}

/// One round of the flash sale's shape on an instance that shuts down mid-flight: 240 tasks of
/// 80 users, each holding its user's lock and waiting inside it for one hot key, which is
/// handed from task to task. `shutdown()` comes `after` the start; once it returned and the
/// instance exited, neither the hot key nor any user's key may be held, and no wait of the
/// instance may be left published.
async fn nested_round(deployment: &Deployment, round: usize, after: Duration) -> Vec<String> {
    let hot = format!("shutdown:stock:{round}");
    let users: Vec<String> = (0..80)
        .map(|user| format!("shutdown:order:{round}:{user}"))
        .collect();
    let instance = Instance::start(deployment.url()).await;
    for task in 0..240 {
        let user = users[task % users.len()].clone();
        let hot = hot.clone();
        let _section = instance.spawn(|locks| async move {
            let options = LockOptions::new()
                .ttl(Duration::from_secs(30))
                .wait(Duration::from_secs(20));
            let inner = locks.clone();
            locks
                .run_locked(user.to_owned(), options, async move {
                    // As the flash sale: look up the user's orders, then take one from stock.
                    tokio::time::sleep(ms(1)).await;
                    inner
                        .run_locked(hot, options, async {
                            tokio::time::sleep(ms(1)).await;
                            Ok::<_, LockError>(())
                        })
                        .await
                })
                .await
        });
    }
    tokio::time::sleep(after).await;
    instance.shut_down().await;
    instance.exit();
    let mut held = Vec::new();
    // Nor the record of a wait that the deadlock detector published.
    let waits = waits_key("lock:");
    for server in deployment.data_servers() {
        if server.cmd(&["EXISTS", &waits]) == "1" {
            held.push(format!("{waits}: {}", server.cmd(&["HGETALL", &waits])));
        }
    }
    for key in std::iter::once(&hot).chain(&users) {
        if !deployment.is_free(key).await {
            held.push(key.clone());
        }
    }
    held
}

/// A hot key handed over between nested sections while the manager shuts down is left free
/// when `shutdown()` returns: the hand-over to a waiter that shutdown is cancelling gives the
/// lock back, on every backend.
async fn a_hot_key_handed_over_at_shutdown_is_left_free(deployment: Deployment) {
    const ROUNDS: usize = 12;
    let mut failed = Vec::new();
    for round in 0..ROUNDS {
        let after = ms(60 + (round as u64 * 37) % 140);
        let held = nested_round(&deployment, round, after).await;
        if !held.is_empty() {
            failed.push(format!(
                "round {round} (shutdown after {after:?}): {held:?}"
            ));
        }
    }
    assert!(
        failed.is_empty(),
        "held after shutdown returned:\n{}\n{}",
        failed.join("\n"),
        deployment.log()
    );
}

lock_tests::on_backends! {
    mod nested;
    [memory, redis, sentinel, cluster, redlock][a_hot_key_handed_over_at_shutdown_is_left_free]
}

/// A section that ends while a waiter of this process waits for its lock hands the lock to the
/// waiter in one request. When shutdown aborts the outer section around it while that request
/// is on the wire (a slow link), the hand-over still lands: the lock it gave the waiter is
/// given back before `shutdown()` returns, not left held for the waiter's lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hand_over_on_the_wire_when_shutdown_aborts_its_section_leaves_nothing_held() {
    let hot = "shutdown:stock:wire";
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.addr());
    let instance = Instance::start(&proxy.url()).await;
    // The first hand-over makes the server know its script.
    let (go, waiter) = hand_over_pending(&instance, &server, hot).await;
    go.send(()).expect("the holder waits");
    waiter.await.expect("task").expect("handed the lock");
    let (go, _waiter) = hand_over_pending(&instance, &server, hot).await;
    // The hand-over takes 400 ms there and back; the section ends and sends it now.
    proxy.set_delay(ms(200));
    go.send(()).expect("the holder waits");
    instance.shut_down().await;
    let left = server.stored_lock(&format!("lock:{{{hot}}}"));
    instance.exit();
    assert!(
        !left.as_ref().is_some_and(|lock| lock.is_busy()),
        "`{hot}` held when shutdown returned: {left:?}\n{}",
        server.log()
    );
}

/// A section of `hot` nested in a section of another key, on the instance, and a second task
/// waiting in the instance's line for `hot`: the sender ends the section, which hands `hot`
/// to the waiter, whose task ends with the section it then runs.
async fn hand_over_pending(
    instance: &Instance,
    server: &RedisServer,
    hot: &'static str,
) -> (
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<Result<(), LockError>>,
) {
    let options = LockOptions::new()
        .ttl(Duration::from_secs(30))
        .wait(Duration::from_secs(60));
    let (entered, in_hot) = tokio::sync::oneshot::channel();
    let (go, gone) = tokio::sync::oneshot::channel::<()>();
    let _holder = instance.spawn(|locks| async move {
        let inner = locks.clone();
        let outer = format!("{hot}:outer");
        locks
            .run_locked(outer, options, async move {
                inner
                    .run_locked(hot.to_owned(), options, async move {
                        let _ = entered.send(());
                        let _ = gone.await;
                        Ok::<_, LockError>(())
                    })
                    .await
            })
            .await
    });
    in_hot.await.expect("the holder entered the hot section");
    let waiter = instance.spawn(|locks| async move {
        locks
            .run_locked(hot.to_owned(), options, async { Ok::<_, LockError>(()) })
            .await
    });
    // The waiter subscribes to the key's releases as it joins this process's line, right
    // before it offers to take the lock from the holder.
    let channel = format!("lock:{{{hot}}}");
    assert!(
        eventually(|| async { server.cmd(&["PUBSUB", "NUMSUB", &channel]).ends_with("\n1") }).await,
        "the waiter never joined the line\n{}",
        server.log()
    );
    (go, waiter)
}

/// A call that waits long enough has its wait published (for deadlock detection and
/// `lockctl`); once `shutdown()` returned, nothing of the process is left in the hash of
/// published waits either.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_published_wait_is_taken_off_before_shutdown_returns() {
    let key = "shutdown:published";
    let server = RedisServer::start();
    let holder = connect(&server).await;
    let held = holder.lock(key, LockOptions::new()).await.expect("free");
    let instance = Instance::start(&server.url()).await;
    let _waiter = instance.spawn(|locks| async move {
        let options = LockOptions::new().wait(Duration::from_secs(60));
        locks.lock(key, options).await.map(drop)
    });
    let waits = waits_key("lock:");
    assert!(
        eventually(|| async { server.cmd(&["HLEN", &waits]) == "1" }).await,
        "the wait was never published\n{}",
        server.log()
    );
    instance.shut_down().await;
    let left = server.cmd(&["HGETALL", &waits]);
    instance.exit();
    assert!(
        left == "(empty array)",
        "published waits left after shutdown returned: {left}\n{}",
        server.log()
    );
    held.release().await.expect("release");
}
