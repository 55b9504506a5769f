//! An election you can watch and steer: who leads (`LockManager::leader`), the changes of
//! leadership (`LockManager::observe`), the candidates, resignation, priority, and a term
//! resumed after a restart, on memory, a real Redis server and a real PostgreSQL server.
//!
//! Each manager stands for one process; a process that dies or hangs is a manager pinned to a
//! runtime of its own whose only thread is blocked: nothing of it runs any more, and its lock
//! stays until its lease ends, as a killed process leaves it (shutting the runtime down
//! instead would drop its guards, whose drop may still release the lock). Run with
//! `--nocapture` to see the measured latencies.

use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::{Duration, Instant};

use lock_runtime::{
    ElectionOptions, LeaderInfo, LeaderWatch, Leadership, LostReason, Term, inspect::token_id,
};
use lock_tests::PostgresServer;
use lock_tests::prelude::*;

/// Where the processes meet.
enum Place {
    Memory(String),
    Redis(Arc<RedisServer>),
    Postgres(Arc<PostgresServer>),
}

/// The server of this kind the tests running now share (each test under a name of its own).
fn shared<T>(slot: &Mutex<Weak<T>>, start: impl FnOnce() -> T) -> Arc<T> {
    let mut shared = slot.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(running) = shared.upgrade() {
        return running;
    }
    let running = Arc::new(start());
    *shared = Arc::downgrade(&running);
    running
}

async fn blocking<T: Send + 'static>(start: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(start)
        .await
        .expect("server started")
}

impl Place {
    async fn memory() -> Place {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let next = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Place::Memory(format!("memory://election-control-{next}"))
    }

    async fn redis() -> Place {
        static SHARED: Mutex<Weak<RedisServer>> = Mutex::new(Weak::new());
        Place::Redis(blocking(|| shared(&SHARED, RedisServer::start)).await)
    }

    async fn postgres() -> Place {
        static SHARED: Mutex<Weak<PostgresServer>> = Mutex::new(Weak::new());
        Place::Postgres(blocking(|| shared(&SHARED, PostgresServer::start)).await)
    }

    fn kind(&self) -> &'static str {
        match self {
            Place::Memory(_) => "memory",
            Place::Redis(_) => "redis",
            Place::Postgres(_) => "postgres",
        }
    }

    fn url(&self) -> String {
        match self {
            Place::Memory(url) => url.clone(),
            Place::Redis(server) => server.url(),
            Place::Postgres(server) => server.url(),
        }
    }

    fn log(&self) -> String {
        match self {
            Place::Memory(_) => String::new(),
            Place::Redis(server) => server.log(),
            Place::Postgres(server) => server.log(),
        }
    }

    /// A manager of its own, named `app`: another process, as far as the election can tell.
    async fn manager(&self, app: &str) -> LockManager {
        self.builder(app)
            .build()
            .await
            .unwrap_or_else(|err| panic!("connect: {err}\n{}", self.log()))
    }

    fn builder(&self, app: &str) -> lock_runtime::LockManagerBuilder {
        LockManager::builder()
            .url(self.url())
            .app_name(app)
            .request_timeout(Duration::from_secs(2))
    }

    /// A process of its own: a manager pinned to a runtime with its own thread, which the
    /// test can kill or hang.
    async fn process(&self, app: &str) -> Process {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("runtime");
        let builder = self.builder(app).runtime(runtime.handle().clone());
        let locks = runtime
            .spawn(async move { builder.build().await })
            .await
            .expect("built")
            .unwrap_or_else(|err| panic!("connect: {err}\n{}", self.log()));
        Process {
            runtime: Some(runtime),
            locks,
            thaw: None,
        }
    }
}

/// A manager on a runtime of its own.
struct Process {
    runtime: Option<tokio::runtime::Runtime>,
    locks: LockManager,
    thaw: Option<std::sync::mpsc::Sender<()>>,
}

impl Process {
    /// Campaigns on the process's runtime.
    async fn elect(&self, name: &str, options: ElectionOptions) -> Leadership {
        let locks = self.locks.clone();
        let name = name.to_owned();
        self.runtime()
            .spawn(async move { locks.elect(name, options).expect("campaign starts") })
            .await
            .expect("spawned")
    }

    fn runtime(&self) -> &tokio::runtime::Runtime {
        self.runtime.as_ref().expect("alive")
    }

    /// Ends the process's runtime (at the end of a test).
    fn kill(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }

    /// The process hangs (or dies, as far as the store can tell): its only worker thread
    /// blocks until the process is dropped.
    async fn hang(&mut self) {
        let (thaw, frozen) = std::sync::mpsc::channel::<()>();
        let (hung, hanging) = tokio::sync::oneshot::channel();
        self.runtime().spawn(async move {
            let _ = hung.send(());
            let _ = frozen.recv();
        });
        hanging.await.expect("hung");
        self.thaw = Some(thaw);
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.thaw.take();
        self.kill();
    }
}

fn options(ttl_ms: u64) -> ElectionOptions {
    ElectionOptions::new().ttl(ms(ttl_ms))
}

/// `options(ttl_ms)` for a campaign that gives way in a test that expects another to take
/// over: a grace far longer than a loaded machine may take to (waiting ends at the take-over
/// anyway), so that the one giving way does not win again first.
fn giving_way(ttl_ms: u64) -> ElectionOptions {
    options(ttl_ms).grace(Duration::from_secs(10))
}

async fn elected_within(leadership: &Leadership, within: Duration, log: &str) -> u64 {
    tokio::time::timeout(within, leadership.elected())
        .await
        .unwrap_or_else(|_| panic!("not elected within {within:?}\n{log}"))
        .unwrap_or_else(|err| panic!("election failed: {err}\n{log}"))
}

/// The id `lockctl` and `LeaderInfo` name the holder of `term` by.
fn holder_of(term: &Term) -> String {
    let text = term.to_secret_text();
    let token = text.split(' ').nth(2).expect("a token");
    token_id(token)
}

/// The leader `locks` reads once it satisfies `wanted`.
async fn leader_once(
    locks: &LockManager,
    name: &str,
    wanted: impl Fn(Option<&LeaderInfo>) -> bool,
) -> Option<LeaderInfo> {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let leader = locks.leader(name).await.expect("read the leader");
        if wanted(leader.as_ref()) || Instant::now() >= deadline {
            assert!(
                wanted(leader.as_ref()),
                "never became what was wanted: {leader:?}"
            );
            return leader;
        }
        tokio::time::sleep(ms(10)).await;
    }
}

/// The next change `watch` wakes with, and when it woke.
async fn next_change(watch: &mut LeaderWatch, log: &str) -> (Option<LeaderInfo>, Instant) {
    let changed = tokio::time::timeout(PATIENCE, watch.changed())
        .await
        .unwrap_or_else(|_| panic!("no change seen within {PATIENCE:?}\n{log}"));
    (changed, Instant::now())
}

async fn the_leader_read_is_the_winner(place: &Place, name: &str) {
    let log = place.log();
    let alpha = place.manager("alpha").await;
    let beta = place.manager("beta").await;
    let first = alpha.elect(name, options(3000)).expect("campaign");
    let token = elected_within(&first, PATIENCE, &log).await;
    let second = beta.elect(name, options(3000)).expect("campaign");
    let term = first.current_term().expect("leading");
    assert_eq!(term.fencing_token(), token);
    for read in [beta.leader(name).await, second.leader().await] {
        let leader = read.expect("read").expect("a leader");
        assert_eq!(leader.holder_id, holder_of(&term), "{log}");
        assert_eq!(leader.fencing_token, Some(token));
        assert_eq!(leader.app.as_deref(), Some("alpha"));
        assert_eq!(leader.pid, Some(std::process::id()));
        assert!(leader.host.is_some(), "{leader:?}");
        let since = leader.since.expect("since");
        let age = since.elapsed().unwrap_or_default();
        assert!(age < Duration::from_secs(60), "{age:?}");
    }
    first.step_down().await.expect("stepped down");
    let next = elected_within(&second, PATIENCE, &log).await;
    let leader = leader_once(&alpha, name, |leader| {
        leader.is_some_and(|leader| leader.fencing_token == Some(next))
    })
    .await
    .expect("a leader");
    assert_eq!(leader.app.as_deref(), Some("beta"));
    second.step_down().await.expect("stepped down");
    leader_once(&alpha, name, |leader| leader.is_none()).await;
}

async fn a_watch_wakes_at_each_change_of_leader(place: &Place, name: &str) {
    let log = place.log();
    let observer = place.manager("observer").await;
    let mut watch = observer.observe(name).await.expect("observe");
    assert_eq!(watch.leader(), None);
    let alpha = place.manager("alpha").await;
    let beta = place.manager("beta").await;

    let first = alpha.elect(name, options(3000)).expect("campaign");
    let token = elected_within(&first, PATIENCE, &log).await;
    let won = Instant::now();
    let (seen, woke) = next_change(&mut watch, &log).await;
    assert_eq!(seen.expect("a leader").fencing_token, Some(token), "{log}");
    let elected_latency = woke.saturating_duration_since(won);

    let second = beta.elect(name, options(3000)).expect("campaign");
    first.step_down().await.expect("stepped down");
    let next = elected_within(&second, PATIENCE, &log).await;
    let won = Instant::now();
    let woke = loop {
        let (seen, woke) = next_change(&mut watch, &log).await;
        if seen.is_some_and(|leader| leader.fencing_token == Some(next)) {
            break woke;
        }
    };
    let handover_latency = woke.saturating_duration_since(won);

    let stepped = Instant::now();
    second.step_down().await.expect("stepped down");
    let (seen, woke) = next_change(&mut watch, &log).await;
    assert_eq!(seen, None, "{log}");
    let nobody_latency = woke.saturating_duration_since(stepped);
    println!(
        "{}: watch latency: elected {elected_latency:?}, handed over {handover_latency:?}, \
         nobody (from the step-down call) {nobody_latency:?}",
        place.kind()
    );
}

async fn a_watch_polling_more_often_sees_a_change_sooner(place: &Place, name: &str) {
    let log = place.log();
    let observer = place.manager("observer").await;
    let mut watch = observer.observe(name).await.expect("observe");
    watch.set_poll_interval(ms(50));
    let alpha = place.manager("alpha").await;
    let first = alpha.elect(name, options(3000)).expect("campaign");
    let token = elected_within(&first, PATIENCE, &log).await;
    let won = Instant::now();
    let (seen, woke) = next_change(&mut watch, &log).await;
    assert_eq!(seen.expect("a leader").fencing_token, Some(token), "{log}");
    let elected_latency = woke.saturating_duration_since(won);
    let stepped = Instant::now();
    first.step_down().await.expect("stepped down");
    let (seen, woke) = next_change(&mut watch, &log).await;
    assert_eq!(seen, None, "{log}");
    let nobody_latency = woke.saturating_duration_since(stepped);
    println!(
        "{}: watch latency polling every 50 ms: elected {elected_latency:?}, nobody (from the \
         step-down call) {nobody_latency:?}",
        place.kind()
    );
    // Well before the 3 s lease would end, however loaded the machine.
    assert!(nobody_latency < ms(2900), "{nobody_latency:?}\n{log}");
}

async fn a_campaigning_follower_s_watch_sees_a_hand_over_at_the_release(place: &Place, name: &str) {
    let log = place.log();
    let alpha = place.manager("alpha").await;
    let beta = place.manager("beta").await;
    let first = alpha.elect(name, options(3000)).expect("campaign");
    elected_within(&first, PATIENCE, &log).await;
    let second = beta.elect(name, options(3000)).expect("campaign");
    let mut watch = beta.observe(name).await.expect("observe");
    if let Place::Redis(_) = place {
        // The follower's campaign waits, subscribed to the lock's releases.
        let inspect = alpha.inspect().expect("inspectable");
        let subscribed = eventually(|| async {
            let shown = inspect.show("lock:", name).await.expect("show");
            shown.iter().any(|lock| lock.waiters > 0)
        })
        .await;
        assert!(subscribed, "{log}");
    }
    let stepped = Instant::now();
    first.step_down().await.expect("stepped down");
    let next = elected_within(&second, PATIENCE, &log).await;
    let (seen, woke) = next_change(&mut watch, &log).await;
    let took = woke.saturating_duration_since(stepped);
    assert_eq!(
        seen.expect("the successor").fencing_token,
        Some(next),
        "{log}"
    );
    println!(
        "{}: a campaigning follower's watch saw the hand-over {took:?} after the step-down call",
        place.kind()
    );
}

async fn a_watch_sees_a_crashed_leader_s_term_end_at_its_lease_end(place: &Place, name: &str) {
    let log = place.log();
    let observer = place.manager("observer").await;
    let mut doomed = place.process("doomed").await;
    let leadership = doomed.elect(name, options(1500)).await;
    elected_within(&leadership, PATIENCE, &log).await;
    let mut watch = observer.observe(name).await.expect("observe");
    leader_once(&observer, name, |leader| leader.is_some()).await;
    if watch.leader().is_none() {
        next_change(&mut watch, &log).await.0.expect("a leader");
    }
    doomed.hang().await;
    let killed = Instant::now();
    let (seen, woke) = next_change(&mut watch, &log).await;
    assert_eq!(seen, None, "{log}");
    let took = woke.saturating_duration_since(killed);
    println!(
        "{}: a killed leader's end seen after {took:?} (ttl 1.5 s)",
        place.kind()
    );
    assert!(took < ms(1500) + ms(3000), "{took:?}");
    drop(leadership);
}

async fn candidates_are_listed_and_dropped_when_they_stop(place: &Place, name: &str) {
    let log = place.log();
    let alpha = place.manager("alpha").await;
    let beta = place.manager("beta").await;
    let low = alpha
        .elect(name, options(3000).priority(1))
        .expect("campaign");
    elected_within(&low, PATIENCE, &log).await;
    let high = beta
        .elect(name, options(3000).priority(5))
        .expect("campaign");
    let both = wait_for_candidates(&alpha, name, 2).await;
    assert_eq!(
        both.iter()
            .map(|candidate| (
                candidate.app.as_deref(),
                candidate.priority,
                candidate.leading
            ))
            .collect::<Vec<_>>(),
        [(Some("beta"), 5, false), (Some("alpha"), 1, true)],
        "highest priority first: {both:?}"
    );
    assert!(
        both.iter()
            .all(|candidate| candidate.pid == Some(std::process::id()))
    );
    assert_eq!(high.candidates().await.expect("read"), both);
    high.step_down().await.expect("stepped down");
    let left = wait_for_candidates(&alpha, name, 1).await;
    assert_eq!(left[0].app.as_deref(), Some("alpha"));
    drop(low);
    wait_for_candidates(&alpha, name, 0).await;
}

async fn wait_for_candidates(
    locks: &LockManager,
    name: &str,
    count: usize,
) -> Vec<lock_runtime::Candidate> {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let candidates = locks.candidates(name).await.expect("read candidates");
        if candidates.len() == count {
            return candidates;
        }
        assert!(Instant::now() < deadline, "{candidates:?}, not {count}");
        tokio::time::sleep(ms(10)).await;
    }
}

async fn resigning_hands_the_leadership_to_another_and_campaigns_on(place: &Place, name: &str) {
    let log = place.log();
    let alpha = place.manager("alpha").await;
    let beta = place.manager("beta").await;
    let first = alpha.elect(name, giving_way(3000)).expect("campaign");
    let token = elected_within(&first, PATIENCE, &log).await;
    let second = beta.elect(name, options(3000)).expect("campaign");
    let resigned = Instant::now();
    first.resign().await.expect("resigned");
    let next = elected_within(&second, PATIENCE, &log).await;
    println!(
        "{}: resign to the other's election: {:?}",
        place.kind(),
        resigned.elapsed()
    );
    assert!(next > token);
    assert!(!first.is_leader());
    assert_eq!(first.deposed().await, LostReason::NotOwner);
    // Still campaigning: the next change of hands comes back to it.
    second.step_down().await.expect("stepped down");
    let again = elected_within(&first, PATIENCE, &log).await;
    assert!(again > next);
    first.step_down().await.expect("stepped down");
}

async fn a_crashed_leader_s_lock_delay_keeps_the_leadership_from_everyone(
    place: &Place,
    name: &str,
) {
    let log = place.log();
    let delay = ms(2000);
    let delayed = ElectionOptions::new()
        .ttl(Duration::from_secs(1))
        .lock_delay(Duration::from_secs(2));
    let mut doomed = place.process("doomed").await;
    let leadership = doomed.elect(name, delayed).await;
    let token = elected_within(&leadership, PATIENCE, &log).await;
    let heir = place.manager("heir").await;
    let next = heir.elect(name, delayed).expect("campaign");
    doomed.hang().await; // its lease is lost without a release
    let hung = Instant::now();
    let won = elected_within(&next, PATIENCE + delay, &log).await;
    let took = hung.elapsed();
    println!(
        "{}: a crashed leader's heir elected after {took:?} (ttl 1 s, lock-delay 2 s)",
        place.kind()
    );
    // The lock outlives its last renewal (at most a third of the ttl before the hang) by the
    // ttl and the delay: nobody leads before the delay has passed.
    assert!(took >= delay, "{took:?}\n{log}");
    assert!(won > token);
    next.step_down().await.expect("stepped down");
}

async fn stepping_down_hands_over_at_once_despite_the_lock_delay(place: &Place, name: &str) {
    let log = place.log();
    let delayed = options(3000).lock_delay(Duration::from_secs(600));
    let alpha = place.manager("alpha").await;
    let beta = place.manager("beta").await;
    let first = alpha.elect(name, delayed).expect("campaign");
    let token = elected_within(&first, PATIENCE, &log).await;
    let second = beta.elect(name, delayed).expect("campaign");
    first.step_down().await.expect("stepped down");
    // Within the test's patience, far below the ten minutes' delay.
    let next = elected_within(&second, PATIENCE, &log).await;
    assert!(next > token);
    second.step_down().await.expect("stepped down");
}

async fn resigning_without_leading_does_nothing(place: &Place, name: &str) {
    let log = place.log();
    let alpha = place.manager("alpha").await;
    let beta = place.manager("beta").await;
    let first = alpha.elect(name, options(3000)).expect("campaign");
    let token = elected_within(&first, PATIENCE, &log).await;
    let second = beta.elect(name, options(3000)).expect("campaign");
    second.resign().await.expect("nothing to resign");
    assert_eq!(first.fencing_token(), Some(token), "the leader leads on");
    assert!(!second.is_leader());
    // The campaign that resigned nothing goes on as before.
    first.step_down().await.expect("stepped down");
    assert!(elected_within(&second, PATIENCE, &log).await > token);
    second.step_down().await.expect("stepped down");
}

async fn the_highest_priority_wins_when_the_leader_resigns(place: &Place, name: &str) {
    let log = place.log();
    let sitting = place.manager("sitting").await;
    let low_locks = place.manager("low").await;
    let high_locks = place.manager("high").await;
    let leader = sitting.elect(name, options(3000)).expect("campaign");
    elected_within(&leader, PATIENCE, &log).await;
    let low = low_locks
        .elect(name, giving_way(3000).priority(1))
        .expect("campaign");
    let high = high_locks
        .elect(name, giving_way(3000).priority(9))
        .expect("campaign");
    wait_for_candidates(&sitting, name, 3).await;
    // No preemption: the sitting leader leads on.
    assert!(leader.is_leader() && !high.is_leader() && !low.is_leader());
    leader.step_down().await.expect("stepped down");
    elected_within(&high, PATIENCE, &log).await;
    assert!(!low.is_leader());
    // The highest resigns: the next live one wins.
    high.resign().await.expect("resigned");
    elected_within(&low, PATIENCE, &log).await;
    drop((high, low));
}

async fn a_hung_high_priority_candidate_delays_the_low_one_by_one_grace_at_most(
    place: &Place,
    name: &str,
) {
    let log = place.log();
    let sitting = place.manager("sitting").await;
    let low_locks = place.manager("low").await;
    let mut hung = place.process("hung").await;
    let grace = ms(500);
    let ttl = 2000;
    let leader = sitting.elect(name, options(ttl)).expect("campaign");
    elected_within(&leader, PATIENCE, &log).await;
    let low = low_locks
        .elect(name, options(ttl).priority(1).grace(grace))
        .expect("campaign");
    let high = hung.elect(name, options(ttl).priority(9)).await;
    wait_for_candidates(&sitting, name, 3).await;
    hung.hang().await;
    let stepped = Instant::now();
    leader.step_down().await.expect("stepped down");
    elected_within(&low, PATIENCE, &log).await;
    let took = stepped.elapsed();
    println!(
        "{}: with a hung candidate of higher priority, the low one led after {took:?} \
         (grace {grace:?})",
        place.kind()
    );
    // At most: a waiter's retry at the lease end where no release reached it, plus the grace.
    assert!(took < ms(ttl) + grace + ms(3000), "{took:?}\n{log}");
    drop(high);
}

async fn a_resumed_term_keeps_its_fencing_token(place: &Place, name: &str) {
    let log = place.log();
    let observer = place.manager("observer").await;
    let mut crashed = place.process("before").await;
    // A lease far longer than starting a manager and resuming may take on a loaded machine.
    let before = crashed.elect(name, options(20_000)).await;
    let token = elected_within(&before, PATIENCE, &log).await;
    let saved = before.current_term().expect("leading").to_secret_text();
    crashed.hang().await; // dies: nothing of it runs any more
    drop(before);
    let held = observer.leader(name).await.expect("read").expect("held on");
    assert_eq!(held.fencing_token, Some(token));

    let after = place.manager("after").await;
    let term = Term::from_secret_text(&saved).expect("a term");
    let resumed = after
        .resume_election(&term, options(20_000))
        .expect("resume");
    let again = elected_within(&resumed, PATIENCE, &log).await;
    assert_eq!(again, token, "the same term, no new token");
    // The resumed leader's own record, on every store (the lock's row on PostgreSQL still
    // names the process that took it).
    let leader = leader_once(&observer, name, |leader| {
        leader.is_some_and(|leader| leader.app.as_deref() == Some("after"))
    })
    .await
    .expect("a leader");
    assert_eq!(leader.fencing_token, Some(token));
    assert_eq!(leader.holder_id, holder_of(&term));

    // The resumed term ends like any other: the lock taken from under it is seen at the next
    // renewal.
    let inspect = observer.inspect().expect("inspectable");
    let shown = inspect.show("lock:", name).await.expect("show");
    let lock = shown
        .iter()
        .find(|info| info.state == lock_runtime::store::LockState::Held)
        .expect("held");
    inspect.unlock("lock:", lock).await.expect("unlocked");
    let reason = tokio::time::timeout(PATIENCE, resumed.deposed())
        .await
        .unwrap_or_else(|_| panic!("not deposed\n{log}"));
    assert_eq!(reason, LostReason::NotOwner);
    let next = elected_within(&resumed, PATIENCE, &log).await;
    assert!(next > token);
    resumed.step_down().await.expect("stepped down");
}

async fn a_term_resumed_after_it_expired_campaigns_anew(place: &Place, name: &str) {
    let log = place.log();
    let observer = place.manager("observer").await;
    let mut crashed = place.process("before").await;
    let before = crashed.elect(name, options(1000)).await;
    let token = elected_within(&before, PATIENCE, &log).await;
    let saved = before.current_term().expect("leading").to_secret_text();
    crashed.hang().await; // dies: nothing of it runs any more
    drop(before);
    leader_once(&observer, name, |leader| leader.is_none()).await;
    let term = Term::from_secret_text(&saved).expect("a term");
    let resumed = observer
        .resume_election(&term, options(1000))
        .expect("resume");
    let next = elected_within(&resumed, PATIENCE, &log).await;
    assert!(next > token, "a new term: {next} after {token}");
    resumed.step_down().await.expect("stepped down");
}

/// Generates one test per behaviour on a store, as `<store>::<behaviour>`.
macro_rules! on {
    ($place:ident: $($behaviour:ident),+ $(,)?) => {
        mod $place {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $behaviour() {
                    let place = super::Place::$place().await;
                    let name = concat!(stringify!($place), "-", stringify!($behaviour));
                    super::$behaviour(&place, name).await;
                }
            )+
        }
    };
}

// Not `a_hung_high_priority_candidate_delays_the_low_one_by_one_grace_at_most` on memory: the
// managers of one memory table share their waiters, so a release there may hand the lock to
// the hung candidate's waiting acquire, inside the one process they all are.
on!(memory:
    the_leader_read_is_the_winner,
    a_crashed_leader_s_lock_delay_keeps_the_leadership_from_everyone,
    stepping_down_hands_over_at_once_despite_the_lock_delay,
    a_watch_wakes_at_each_change_of_leader,
    a_watch_sees_a_crashed_leader_s_term_end_at_its_lease_end,
    candidates_are_listed_and_dropped_when_they_stop,
    resigning_hands_the_leadership_to_another_and_campaigns_on,
    resigning_without_leading_does_nothing,
    the_highest_priority_wins_when_the_leader_resigns,
    a_resumed_term_keeps_its_fencing_token,
    a_term_resumed_after_it_expired_campaigns_anew,
);

on!(redis:
    the_leader_read_is_the_winner,
    a_crashed_leader_s_lock_delay_keeps_the_leadership_from_everyone,
    stepping_down_hands_over_at_once_despite_the_lock_delay,
    a_campaigning_follower_s_watch_sees_a_hand_over_at_the_release,
    a_watch_wakes_at_each_change_of_leader,
    a_watch_polling_more_often_sees_a_change_sooner,
    a_watch_sees_a_crashed_leader_s_term_end_at_its_lease_end,
    candidates_are_listed_and_dropped_when_they_stop,
    resigning_hands_the_leadership_to_another_and_campaigns_on,
    the_highest_priority_wins_when_the_leader_resigns,
    a_hung_high_priority_candidate_delays_the_low_one_by_one_grace_at_most,
    a_resumed_term_keeps_its_fencing_token,
    a_term_resumed_after_it_expired_campaigns_anew,
);

on!(postgres:
    the_leader_read_is_the_winner,
    a_crashed_leader_s_lock_delay_keeps_the_leadership_from_everyone,
    stepping_down_hands_over_at_once_despite_the_lock_delay,
    a_campaigning_follower_s_watch_sees_a_hand_over_at_the_release,
    a_watch_wakes_at_each_change_of_leader,
    a_watch_polling_more_often_sees_a_change_sooner,
    a_watch_sees_a_crashed_leader_s_term_end_at_its_lease_end,
    candidates_are_listed_and_dropped_when_they_stop,
    resigning_hands_the_leadership_to_another_and_campaigns_on,
    the_highest_priority_wins_when_the_leader_resigns,
    a_hung_high_priority_candidate_delays_the_low_one_by_one_grace_at_most,
    a_resumed_term_keeps_its_fencing_token,
    a_term_resumed_after_it_expired_campaigns_anew,
);
