//! Leader election (`LockManager::elect`) on every backend: one leader among contenders, a
//! successor elected at once when the leader steps down, drops its handle or shuts its manager
//! down, within the lease when its process is SIGKILLed, and a new term after a lost lease.
//!
//! Each manager stands for one process (a real child process where a crash matters). Memory
//! runs what needs no second process and no outside write; single Redis runs everything;
//! Sentinel, Cluster and Redlock share one deployment each among their tests, every test under
//! a name of its own.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::{Duration, Instant};

use lock_runtime::{ElectionOptions, Leadership, LostReason};
use lock_tests::prelude::*;
use lock_tests::{Masters, RedisCluster, SentinelSetup};

const CONTENDER: &str = env!("CARGO_BIN_EXE_contender");

fn ttl(ttl: Duration) -> ElectionOptions {
    ElectionOptions::new().ttl(ttl)
}

/// Where the contenders meet.
enum Deployment {
    Memory(String),
    Redis(RedisServer),
    Sentinel(Arc<SentinelSetup>),
    Cluster(Arc<RedisCluster>),
    Redlock(Arc<Masters>),
}

/// The deployment of this kind the tests running now share: started by the first that needs
/// it, stopped when the last one using it is done.
fn shared<T>(slot: &Mutex<Weak<T>>, start: impl FnOnce() -> T) -> Arc<T> {
    let mut shared = slot.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(running) = shared.upgrade() {
        return running;
    }
    let running = Arc::new(start());
    *shared = Arc::downgrade(&running);
    running
}

impl Deployment {
    /// A memory table of its own: managers connected to its URL share it, as processes share
    /// a server.
    async fn memory() -> Deployment {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        Deployment::Memory(format!(
            "memory://election-{}",
            NEXT.fetch_add(1, Ordering::Relaxed)
        ))
    }

    async fn redis() -> Deployment {
        Deployment::Redis(blocking(RedisServer::start).await)
    }

    async fn sentinel() -> Deployment {
        static SHARED: Mutex<Weak<SentinelSetup>> = Mutex::new(Weak::new());
        Deployment::Sentinel(blocking(|| shared(&SHARED, || SentinelSetup::start(0, 1))).await)
    }

    async fn cluster() -> Deployment {
        static SHARED: Mutex<Weak<RedisCluster>> = Mutex::new(Weak::new());
        Deployment::Cluster(blocking(|| shared(&SHARED, || RedisCluster::start(3, 0))).await)
    }

    async fn redlock() -> Deployment {
        static SHARED: Mutex<Weak<Masters>> = Mutex::new(Weak::new());
        Deployment::Redlock(blocking(|| shared(&SHARED, || Masters::start(3))).await)
    }

    fn url(&self) -> String {
        match self {
            Deployment::Memory(url) => url.clone(),
            Deployment::Redis(server) => server.url(),
            Deployment::Sentinel(setup) => setup.url(),
            Deployment::Cluster(cluster) => cluster.url(),
            Deployment::Redlock(masters) => masters.url(),
        }
    }

    fn log(&self) -> String {
        match self {
            Deployment::Memory(_) => String::new(),
            Deployment::Redis(server) => server.log(),
            Deployment::Sentinel(setup) => setup.log(),
            Deployment::Cluster(cluster) => cluster.log(),
            Deployment::Redlock(masters) => masters.log(),
        }
    }

    /// A manager of its own: another process, as far as the locks can tell. (Requests may take
    /// a while on a loaded machine: 500 ms let a step-down's release time out at load 18.)
    async fn manager(&self) -> LockManager {
        LockManager::builder()
            .url(self.url())
            .request_timeout(Duration::from_secs(2))
            .build()
            .await
            .unwrap_or_else(|err| panic!("connect: {err}\n{}", self.log()))
    }

    /// Deletes the lock `name` behind its holder's back, as `redis-cli DEL` would.
    fn delete(&self, name: &str) {
        let key = format!("lock:{{{name}}}");
        match self {
            Deployment::Memory(_) => panic!("a memory table cannot be written from outside"),
            Deployment::Redis(server) => {
                server.cmd(&["DEL", &key]);
            }
            Deployment::Sentinel(setup) => {
                setup.master().cmd(&["DEL", &key]);
            }
            Deployment::Cluster(cluster) => {
                cluster.master_for_key(&key).cmd(&["DEL", &key]);
            }
            Deployment::Redlock(masters) => {
                for node in masters.nodes() {
                    node.cmd(&["DEL", &key]);
                }
            }
        }
    }
}

async fn blocking<T: Send + 'static>(start: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(start)
        .await
        .expect("deployment started")
}

/// Waits for `leadership` to be elected, at most `within`.
async fn elected_within(leadership: &Leadership, within: Duration, log: &str) -> u64 {
    tokio::time::timeout(within, leadership.elected())
        .await
        .unwrap_or_else(|_| panic!("not elected within {within:?}\n{log}"))
        .unwrap_or_else(|err| panic!("election failed: {err}\n{log}"))
}

/// The one of `contenders` that is elected first, with its fencing token.
async fn first_elected(contenders: &[Leadership], within: Duration, log: &str) -> (usize, u64) {
    let found = wait_until_async(within, || contenders.iter().any(Leadership::is_leader)).await;
    assert!(found, "nobody elected within {within:?}\n{log}");
    let leaders: Vec<_> = contenders
        .iter()
        .enumerate()
        .filter(|(_, leadership)| leadership.is_leader())
        .collect();
    assert_eq!(leaders.len(), 1, "{leaders:?}\n{log}");
    let (index, leader) = leaders[0];
    (
        index,
        leader.fencing_token().expect("the leader has a token"),
    )
}

async fn contenders(
    deployment: &Deployment,
    name: &str,
    count: usize,
    options: ElectionOptions,
) -> (Vec<LockManager>, Vec<Leadership>) {
    let mut managers = Vec::new();
    let mut leaderships = Vec::new();
    for _ in 0..count {
        let locks = deployment.manager().await;
        leaderships.push(locks.elect(name, options).expect("campaign starts"));
        managers.push(locks);
    }
    (managers, leaderships)
}

async fn exactly_one_leader_among_contenders(deployment: &Deployment, name: &str) {
    let log = deployment.log();
    let (_managers, contenders) = contenders(deployment, name, 3, ttl(ms(1500))).await;
    let (leader, token) = first_elected(&contenders, PATIENCE, &log).await;
    // Across several renewals (every 500 ms), the same one leads, under the same term and token.
    let until = Instant::now() + ms(1600);
    let watched = wait_until_async(PATIENCE, || {
        let leading: Vec<usize> = (0..contenders.len())
            .filter(|&i| contenders[i].is_leader())
            .collect();
        assert_eq!(leading, [leader], "{}", deployment.log());
        assert_eq!(contenders[leader].fencing_token(), Some(token));
        assert_eq!(contenders[leader].term(), 1);
        Instant::now() >= until
    });
    assert!(watched.await);
    for (i, other) in contenders.iter().enumerate().filter(|&(i, _)| i != leader) {
        assert_eq!((i, other.term(), other.fencing_token()), (i, 0, None));
    }
}

async fn stepping_down_elects_the_next_at_once(deployment: &Deployment, name: &str) {
    let log = deployment.log();
    // A lease far longer than the hand-over may take: the successor is woken by the release.
    let (_managers, mut contenders) = contenders(deployment, name, 3, ttl(ms(20_000))).await;
    let (leader, token) = first_elected(&contenders, PATIENCE, &log).await;
    let stepping_down = contenders.remove(leader);
    let started = Instant::now();
    stepping_down.step_down().await.expect("released");
    let (_, next) = first_elected(&contenders, PATIENCE, &log).await;
    // Unannounced, the next would wait for the 20 s lease to run out.
    let took = started.elapsed();
    assert!(took < ms(10_000), "{took:?}\n{}", deployment.log());
    assert!(next > token, "{next} after {token}");
}

async fn dropping_the_handle_steps_down(deployment: &Deployment, name: &str) {
    let log = deployment.log();
    let (_managers, mut contenders) = contenders(deployment, name, 2, ttl(ms(20_000))).await;
    let (leader, token) = first_elected(&contenders, PATIENCE, &log).await;
    let started = Instant::now();
    drop(contenders.remove(leader));
    let next = elected_within(&contenders[0], PATIENCE, &log).await;
    // Unannounced, the next would wait for the 20 s lease to run out.
    let took = started.elapsed();
    assert!(took < ms(10_000), "{took:?}\n{}", deployment.log());
    assert!(next > token, "{next} after {token}");
}

async fn shutdown_steps_down_and_ends_the_campaign(deployment: &Deployment, name: &str) {
    let log = deployment.log();
    let (managers, contenders) = contenders(deployment, name, 2, ttl(ms(20_000))).await;
    let (leader, token) = first_elected(&contenders, PATIENCE, &log).await;
    let follower = 1 - leader;
    let started = Instant::now();
    managers[leader].shutdown().await.expect("shut down");
    assert!(!contenders[leader].is_leader());
    let next = elected_within(&contenders[follower], PATIENCE, &log).await;
    // Unannounced, the next would wait for the 20 s lease to run out.
    let took = started.elapsed();
    assert!(took < ms(10_000), "{took:?}\n{}", deployment.log());
    assert!(next > token, "{next} after {token}");
    assert_eq!(contenders[leader].deposed().await, LostReason::ShutDown);
    let err = contenders[leader]
        .elected()
        .await
        .expect_err("the campaign is over");
    assert!(err.is_shut_down(), "{err}");
    let err = managers[leader]
        .elect(name, ElectionOptions::new())
        .expect_err("no new campaign on a shut down manager");
    assert!(err.is_shut_down(), "{err}");
}

/// The leader is another process, SIGKILLed while it leads: nobody releases its lock, and a
/// contender takes over once its lease has run out.
async fn a_killed_leader_is_replaced_within_its_lease(deployment: &Deployment, name: &str) {
    let lease = ms(1000);
    let mut leader = Command::new(CONTENDER)
        .args(["lead", &deployment.url(), name, "1000"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn the leader");
    let stdout = leader.stdout.take().expect("stdout");
    let line = blocking(move || {
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).map(|_| line)
    })
    .await
    .expect("the leader reports");
    let Some(token) = line.trim().strip_prefix("leader ") else {
        panic!("{line:?}\n{}", deployment.log());
    };
    let token: u64 = token.parse().expect("a fencing token");

    let locks = deployment.manager().await;
    let successor = locks.elect(name, ttl(lease)).expect("campaign starts");
    // A while in which a successor that took over from a live leader would show (it cannot
    // fail a correct election, however slow the machine).
    let early = tokio::time::timeout(ms(300), successor.elected()).await;
    assert!(early.is_err(), "{early:?}\n{}", deployment.log());
    leader.kill().expect("SIGKILL the leader");
    let killed = Instant::now();
    leader.wait().expect("reaped");

    let next = elected_within(&successor, PATIENCE, &deployment.log()).await;
    let took = killed.elapsed();
    // The lease was renewed at most `lease` before the kill; a margin for the wake-up on a
    // loaded machine.
    assert!(took < lease + ms(4000), "{took:?}\n{}", deployment.log());
    assert!(next > token, "{next} after {token}");
}

/// The lock is deleted behind the leader's back: the leader learns it at its next renewal, is
/// told its term ended, and campaigns again (and wins, being alone).
async fn a_lost_lease_ends_the_term_and_the_campaign_goes_on(deployment: &Deployment, name: &str) {
    let log = deployment.log();
    let locks = deployment.manager().await;
    let lease = ms(3000);
    let leadership = locks.elect(name, ttl(lease)).expect("campaign starts");
    let first = elected_within(&leadership, PATIENCE, &log).await;
    assert_eq!(leadership.term(), 1);
    let deleted = Instant::now();
    deployment.delete(name);
    let reason = tokio::time::timeout(PATIENCE, leadership.deposed()).await;
    let took = deleted.elapsed();
    // Found at the next renewal, a third of the lease later: not by the lease running out.
    assert_eq!(reason, Ok(LostReason::NotOwner), "{}", deployment.log());
    assert!(took < lease, "{took:?}\n{}", deployment.log());
    let second = elected_within(&leadership, PATIENCE, &log).await;
    assert_eq!(leadership.term(), 2);
    assert!(second > first, "{second} after {first}");
}

/// Generates one test per behaviour on a backend, as `<backend>::<behaviour>`.
macro_rules! on {
    ($backend:ident: $($behaviour:ident),+ $(,)?) => {
        mod $backend {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $behaviour() {
                    let deployment = super::Deployment::$backend().await;
                    super::$behaviour(&deployment, stringify!($behaviour)).await;
                }
            )+
        }
    };
}

on!(memory:
    exactly_one_leader_among_contenders,
    stepping_down_elects_the_next_at_once,
    dropping_the_handle_steps_down,
    shutdown_steps_down_and_ends_the_campaign,
);

on!(redis:
    exactly_one_leader_among_contenders,
    stepping_down_elects_the_next_at_once,
    dropping_the_handle_steps_down,
    shutdown_steps_down_and_ends_the_campaign,
    a_killed_leader_is_replaced_within_its_lease,
    a_lost_lease_ends_the_term_and_the_campaign_goes_on,
);

on!(sentinel:
    exactly_one_leader_among_contenders,
    stepping_down_elects_the_next_at_once,
    a_killed_leader_is_replaced_within_its_lease,
    a_lost_lease_ends_the_term_and_the_campaign_goes_on,
);

on!(cluster:
    exactly_one_leader_among_contenders,
    stepping_down_elects_the_next_at_once,
    a_killed_leader_is_replaced_within_its_lease,
    a_lost_lease_ends_the_term_and_the_campaign_goes_on,
);

on!(redlock:
    exactly_one_leader_among_contenders,
    stepping_down_elects_the_next_at_once,
    a_killed_leader_is_replaced_within_its_lease,
    a_lost_lease_ends_the_term_and_the_campaign_goes_on,
);

/// A server that stops answering ends the term before the server would let anyone else lead,
/// and once it answers again the campaign wins a new term by itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_cut_off_from_the_server_stops_leading_before_its_lease_ends_and_leads_again() {
    let server = blocking(RedisServer::start).await;
    let locks = LockManager::builder()
        .url(server.url())
        .request_timeout(ms(200))
        .build()
        .await
        .unwrap_or_else(|err| panic!("connect: {err}\n{}", server.log()));
    let leadership = locks
        .elect("cut-off", ttl(ms(900)))
        .expect("campaign starts");
    let first = elected_within(&leadership, PATIENCE, &server.log()).await;
    server.pause();
    // The last renewal the server answered was sent before the pause: one lease after the
    // pause began, the handle no longer leads, whenever the task saying so gets to run.
    let paused = Instant::now();
    tokio::time::sleep_until((paused + ms(900)).into()).await;
    assert!(
        !leadership.is_leader(),
        "still leading a lease after the pause"
    );
    let reason = tokio::time::timeout(PATIENCE, leadership.deposed())
        .await
        .expect("told");
    assert_eq!(reason, LostReason::Expired);
    server.resume();
    let second = elected_within(&leadership, PATIENCE, &server.log()).await;
    assert_eq!(leadership.term(), 2);
    assert!(second > first, "{second} after {first}");
}

/// The campaign runs in a task of its own: a task of the same process that holds the lock of
/// the name is another owner, and the campaign waits for its release like any contender.
/// (On tokio's paused clock: a minute passes as soon as every task waits.)
#[tokio::test(start_paused = true)]
async fn a_task_holding_the_lock_of_the_name_keeps_the_campaign_waiting() {
    let locks = LockManager::memory();
    let guard = locks
        .lock("held-by-a-task", LockOptions::new())
        .await
        .expect("free");
    let leadership = locks
        .elect("held-by-a-task", ElectionOptions::new())
        .expect("campaign starts");
    let early = tokio::time::timeout(Duration::from_secs(60), leadership.elected()).await;
    assert!(early.is_err(), "elected beside the task's lock: {early:?}");
    assert!(!leadership.is_leader());
    let token = guard.fencing_token();
    guard.release().await.expect("released");
    let elected = elected_within(&leadership, Duration::from_secs(1), "").await;
    assert!(elected > token);
}

/// A campaign waiting for the leadership is woken by its manager's shutdown and ends. (On
/// tokio's paused clock, a sleep ends only once every other task waits: the campaign does.)
#[tokio::test(start_paused = true)]
async fn shutdown_ends_a_campaign_that_waits() {
    let leader = LockManager::connect("memory://waiting-at-shutdown")
        .await
        .expect("memory");
    let follower = LockManager::connect("memory://waiting-at-shutdown")
        .await
        .expect("memory");
    let leading = leader
        .elect("waits", ElectionOptions::new())
        .expect("campaign starts");
    elected_within(&leading, Duration::from_secs(1), "").await;
    let waiting = follower
        .elect("waits", ElectionOptions::new())
        .expect("campaign starts");
    tokio::time::sleep(ms(50)).await;
    assert!(!waiting.is_leader());
    follower.shutdown().await.expect("shut down");
    let err = tokio::time::timeout(Duration::from_secs(1), waiting.elected())
        .await
        .expect("told at once")
        .expect_err("never elected");
    assert!(err.is_shut_down(), "{err}");
    assert!(leading.is_leader());
}

#[tokio::test]
async fn a_campaign_with_unusable_options_is_refused_at_the_call() {
    let locks = LockManager::memory();
    for (name, options) in [
        ("zero-ttl", ttl(Duration::ZERO)),
        ("", ElectionOptions::new()),
    ] {
        let err = locks.elect(name, options).expect_err("refused");
        assert!(matches!(err, LockError::Config(_)), "{err}");
    }
}

#[test]
fn a_campaign_outside_a_runtime_is_refused_with_a_reason() {
    let locks = LockManager::memory();
    let err = locks
        .elect("no-runtime", ElectionOptions::new())
        .expect_err("refused");
    assert!(err.to_string().contains("outside a tokio runtime"), "{err}");
}

/// Unpinned, the campaign runs on the runtime `elect` was called on and ends with it; the
/// handle then says so instead of waiting forever.
#[test]
fn a_campaign_ends_with_the_runtime_it_ran_on() {
    let runtime = || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime")
    };
    let locks = LockManager::memory();
    let first = runtime();
    let leadership = first.block_on(async {
        let leadership = locks
            .elect("short-lived", ElectionOptions::new())
            .expect("campaign starts");
        elected_within(&leadership, PATIENCE, "").await;
        leadership
    });
    drop(first);
    assert!(!leadership.is_leader());
    let err = runtime()
        .block_on(leadership.elected())
        .expect_err("the campaign is gone");
    assert!(matches!(err, LockError::Backend { .. }), "{err}");
    assert!(err.to_string().contains("runtime"), "{err}");
}

/// `deposed()` reports the end of the term whose token `elected()` returned, even when the
/// campaign wins the next term before anyone asks: a leader working with a token never misses
/// that its term is over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deposed_reports_the_end_of_the_term_elected_returned_after_a_quick_re_election() {
    let server = blocking(RedisServer::start).await;
    let locks = LockManager::connect(&server.url())
        .await
        .unwrap_or_else(|err| panic!("connect: {err}\n{}", server.log()));
    let leadership = locks
        .elect("quick", ttl(ms(3000)))
        .expect("campaign starts");
    let first = elected_within(&leadership, PATIENCE, &server.log()).await;
    // Taken from outside: the next renewal finds no lock, and the campaign, alone, wins the
    // next term at once.
    server.cmd(&["DEL", "lock:{quick}"]);
    assert!(
        wait_until_async(PATIENCE, || leadership.term() >= 2).await,
        "no second term\n{}",
        server.log()
    );
    let reason = tokio::time::timeout(PATIENCE, leadership.deposed())
        .await
        .expect("the term of the first token is over");
    assert_eq!(reason, LostReason::NotOwner);
    // The next elected() reports the new term, and deposed() follows that one.
    let second = leadership.elected().await.expect("leading");
    assert!(second > first, "{second} after {first}");
    assert!(
        tokio::time::timeout(ms(300), leadership.deposed())
            .await
            .is_err(),
        "the second term goes on"
    );
}

/// The usual exit on SIGTERM: `shutdown()` with the handle alive. Stepping down afterwards
/// finds the term released already, which is not an error.
#[tokio::test]
async fn stepping_down_after_shutdown_is_not_an_error() {
    let locks = LockManager::memory();
    let leadership = locks
        .elect("sigterm", ElectionOptions::new())
        .expect("campaign");
    leadership.elected().await.expect("leads");
    locks.shutdown().await.expect("shutdown");
    assert!(!leadership.is_leader());
    leadership
        .step_down()
        .await
        .expect("nothing left to release");
}

/// A handle dropped just before `shutdown()` (the end of a scope, then shutdown) is released
/// before shutdown returns: it waits for the server's answer, here delayed by a paused server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_waits_for_the_release_of_a_handle_dropped_before_it() {
    let server = Arc::new(blocking(RedisServer::start).await);
    let locks = LockManager::builder()
        .url(server.url())
        .request_timeout(Duration::from_secs(2))
        .build()
        .await
        .unwrap_or_else(|err| panic!("connect: {err}\n{}", server.log()));
    let leadership = locks
        .elect("dropped", ttl(Duration::from_secs(10)))
        .expect("campaign");
    elected_within(&leadership, PATIENCE, &server.log()).await;
    server.pause();
    let shutting_down = Arc::new(AtomicBool::new(false));
    // The server stays paused a while into the shutdown, then answers.
    let resumer = {
        let (server, shutting_down) = (server.clone(), shutting_down.clone());
        std::thread::spawn(move || {
            let started = wait_until(PATIENCE, || shutting_down.load(Ordering::SeqCst));
            std::thread::sleep(ms(300));
            let resumed = Instant::now();
            server.resume();
            (started, resumed)
        })
    };
    drop(leadership);
    shutting_down.store(true, Ordering::SeqCst);
    locks.shutdown().await.expect("shutdown");
    let returned = Instant::now();
    let (started, resumed) = resumer.join().expect("resumer");
    assert!(started);
    assert!(
        returned >= resumed,
        "shutdown returned {:?} before the paused server could answer the release",
        resumed - returned
    );
    assert!(!server.holds_lock("lock:{dropped}"), "{}", server.log());
}
