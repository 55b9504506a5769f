//! Redlock: one lock over N independent Redis masters. A lock is held when a majority
//! (N/2 + 1) of the masters granted it within its validity time; every request goes to all
//! masters in parallel, each bounded by a per-node timeout much smaller than the ttl.
//!
//! Redlock buys availability (a minority of masters may be down) and some efficiency. It does
//! not make a lease lock correct under pauses and clock jumps; fencing tokens do (and under
//! Redlock they are weaker too: see `LockManager::connect`).
//!
//! A master that gives no answer within the node timeout falls silent: acquires, renewals and
//! subscriptions leave it out, and releases go to it without being waited for, until it
//! answers a `PING` again. Waiting out its timeout on every attempt would keep each attempt's
//! grants on the other masters held that long, so contenders that split those masters between
//! them would go on splitting them until the master is back; the requests would also queue up
//! in its sockets, and when it resumed it would grant the lock to attempts given up long ago.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use futures_util::FutureExt;
use futures_util::future::join_all;
use tokio::time::Instant;

use super::connection::RedisSettings;
use super::feed::Hearers;
use super::single::RedisBackend;
use crate::backend::{
    Acquire, Ask, Booking, BoxFuture, Line, Release, Renewal, Store, StoreError, whole,
};
use crate::background::Background;
use crate::backoff::jitter;
use crate::deployment::{Deployment, DeploymentKind};
use crate::error::LockError;
use crate::key::Key;
use crate::lease::drift_margin;
use crate::protocol::waits::WaitsUpdate;
use crate::shape::Shape;
use crate::store::HolderId;
use crate::url;
use crate::waiters::Waiters;

/// The per-node timeout is the smaller of this and a tenth of the ttl.
const MAX_NODE_TIMEOUT: Duration = Duration::from_millis(250);
/// How many times a release asks the masters that gave no answer before it reports the failure
/// (the guard then goes on in the background): a release is owner-checked, so asking again is
/// always safe, and one slow answer on a loaded machine should not fail it.
const RELEASE_ROUNDS: usize = 3;
const MIN_NODE_TIMEOUT: Duration = Duration::from_millis(5);
/// How often a silent master is sent a `PING` to see whether it answers again.
const PROBE_INTERVAL: Duration = Duration::from_millis(50);
/// How long a request sent to a silent master, or one that gave no answer, waits for the
/// answer nobody else waits for.
const BACKGROUND_LIMIT: Duration = Duration::from_secs(10);

pub(crate) struct RedlockBackend {
    /// The inspection side, connected on first use.
    inspect: super::inspect::RedisInspect,
    nodes: Vec<Arc<Node>>,
    quorum: usize,
    /// The managers that hear the notices of every master.
    hearers: Arc<Hearers>,
    describe: String,
    server: String,
}

/// One master.
struct Node {
    redis: RedisBackend,
    /// Gave no answer within the node timeout, and has not answered a probe since.
    silent: AtomicBool,
    /// The probe of a silent master; started again when the runtime it ran on shut down.
    probe: Mutex<Option<tokio::task::JoinHandle<()>>>,
    background: Background,
}

impl Node {
    /// No answer within the node timeout: leave the master out until a probe gets one.
    fn fell_silent(self: &Arc<Self>) {
        if self.silent.swap(true, Ordering::AcqRel) {
            return;
        }
        tracing::warn!(
            server = self.redis.server(),
            "redlock master gives no answer; leaving it out until it answers a PING"
        );
        self.start_probe();
    }

    fn start_probe(self: &Arc<Self>) {
        let probing = self.background.spawn(probe(Arc::downgrade(self)));
        *self.probe.lock().unwrap_or_else(PoisonError::into_inner) = Some(probing);
    }

    /// Whether the master is left out; a silent master whose probe died with its runtime is
    /// probed again from the caller's.
    fn is_silent(self: &Arc<Self>) -> bool {
        if !self.silent.load(Ordering::Acquire) {
            return false;
        }
        let probe_gone = self
            .probe
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
            .is_none_or(tokio::task::JoinHandle::is_finished);
        // A finished probe also clears `silent` first: look again before starting one.
        if probe_gone && self.silent.load(Ordering::Acquire) {
            self.start_probe();
        }
        true
    }
}

/// Pings a silent master until it answers (or the backend is gone).
async fn probe(node: Weak<Node>) {
    loop {
        tokio::time::sleep(PROBE_INTERVAL).await;
        let Some(ping) = node.upgrade().map(|node| node.redis.ping()) else {
            return;
        };
        if let Ok(Ok(())) = tokio::time::timeout(MAX_NODE_TIMEOUT, ping).await {
            if let Some(node) = node.upgrade() {
                node.silent.store(false, Ordering::Release);
                tracing::info!(server = node.redis.server(), "redlock master answers again");
            }
            return;
        }
    }
}

/// Runs `request` in the background, bounded by `limit`: for a silent master, whose answer
/// nobody waits for. The request is still sent, and served when the master resumes.
fn in_background<F>(background: &Background, limit: Duration, request: F)
where
    F: std::future::Future + Send + 'static,
{
    background.spawn(async move {
        let _ = tokio::time::timeout(limit, request).await;
    });
}

/// One node's answer, or why there is none.
type NodeAnswer<T> = Result<T, StoreError>;

impl RedlockBackend {
    pub(crate) async fn connect(
        settings: RedisSettings<'_>,
        waiters: Arc<Waiters>,
    ) -> Result<Self, LockError> {
        let node_urls = node_urls(settings.url)?;
        let servers: Vec<String> = node_urls.iter().map(|u| url::server_of(u)).collect();
        let server = servers.join(",");
        let quorum = node_urls.len() / 2 + 1;
        waiters.set_quorum(quorum);
        // One channel for every master, in the first master's database: each master's
        // steals publish on the channel its hearers subscribe to.
        let db = node_urls
            .first()
            .map_or(0, |url| crate::protocol::url_db(url));
        let hearers = Hearers::new(&crate::protocol::notices_channel(settings.key_prefix, db));
        let connected = join_all(node_urls.iter().map(|node_url| {
            let settings = RedisSettings {
                url: node_url,
                clocked_tokens: true,
                ..settings
            };
            RedisBackend::open(settings, waiters.clone(), hearers.clone(), true)
        }))
        .await;
        let reachable = connected.iter().filter(|node| node.is_ok()).count();
        if reachable < quorum {
            // A shortfall of the quorum: masters come back, unless every one that failed was
            // refused for good (a TLS certificate not trusted, say): then so is the next try.
            let transient = connected
                .iter()
                .filter_map(|node| node.as_ref().err())
                .any(LockError::is_retryable);
            let first = connected
                .into_iter()
                .find_map(Result::err)
                .map_or_else(String::new, |err| format!(": {err}"));
            return Err(LockError::backend_with(
                "connect",
                None,
                &server,
                format!(
                    "only {reachable} of {} masters reachable, {quorum} needed{first}",
                    node_urls.len()
                )
                .into(),
                transient,
            ));
        }
        let mut nodes = Vec::with_capacity(node_urls.len());
        for (node, node_url) in connected.into_iter().zip(&node_urls) {
            let redis = match node {
                Ok(node) => node,
                Err(err) => {
                    tracing::warn!(error = %err, "redlock master unreachable at startup; will keep trying it");
                    let settings = RedisSettings {
                        url: node_url,
                        clocked_tokens: true,
                        ..settings
                    };
                    RedisBackend::open(settings, waiters.clone(), hearers.clone(), false).await?
                }
            };
            nodes.push(Arc::new(Node {
                redis,
                silent: AtomicBool::new(false),
                probe: Mutex::new(None),
                background: settings.background.clone(),
            }));
        }
        if nodes.len() % 2 == 0 {
            tracing::warn!(
                masters = nodes.len(),
                "redlock over an even number of masters tolerates no more failures than one fewer"
            );
        }
        Ok(RedlockBackend {
            inspect: super::inspect::RedisInspect::new(&settings),
            describe: format!("redlock over {} masters {server}", nodes.len()),
            nodes,
            quorum,
            hearers,
            server,
        })
    }

    /// Which masters to ask: those not silent, or all of them when too few of those are left
    /// for a majority.
    fn asked(&self) -> Vec<bool> {
        let listening: Vec<bool> = self.nodes.iter().map(|node| !node.is_silent()).collect();
        if listening.iter().filter(|&&asked| asked).count() >= self.quorum {
            listening
        } else {
            vec![true; self.nodes.len()]
        }
    }

    /// Sends `request` to the masters `asked` names, all at once, each bounded by `limit`; a
    /// master that gives no answer in time falls silent. The others' answers are errors.
    async fn all<'a, T, F>(
        &'a self,
        asked: &[bool],
        limit: Duration,
        request: F,
    ) -> Vec<NodeAnswer<T>>
    where
        F: Fn(&'a RedisBackend) -> BoxFuture<'a, Result<T, StoreError>>,
    {
        join_all(self.nodes.iter().zip(asked).map(|(node, &asked)| {
            let answer = asked.then(|| request(&node.redis));
            async move {
                let Some(answer) = answer else {
                    return Err(StoreError::transient(format!(
                        "{} was left out: it gave no answer lately",
                        node.redis.server()
                    )));
                };
                match tokio::time::timeout(limit, answer).await {
                    Ok(answer) => answer,
                    Err(_) => {
                        node.fell_silent();
                        Err(StoreError::transient(format!(
                            "{} gave no answer within {}",
                            node.redis.server(),
                            crate::shown::Shown(limit)
                        )))
                    }
                }
            }
        }))
        .await
    }

    /// Too few masters answered for a majority: transient, since masters that were paused,
    /// restarting or briefly unreachable answer again, and an acquire retries within its wait.
    fn too_few(&self, answered: usize, answers: Vec<NodeAnswer<impl Sized>>) -> StoreError {
        let first = answers
            .into_iter()
            .find_map(Result::err)
            .map_or_else(String::new, |err| format!("; first error: {err}"));
        StoreError::transient(format!(
            "only {answered} of {} masters answered, {} needed{first}",
            self.nodes.len(),
            self.quorum
        ))
    }
}

/// What the masters' answers to a release say, `None` while the masters that have not answered
/// could still change it.
///
/// The lock was ours only if a majority still held our copies: a copy that outlived the lease
/// on one master (an acquire that reached it late) is not the lock, which another owner may
/// hold on the others by now.
fn release_verdict(known: &[Option<Release>], quorum: usize) -> Option<Release> {
    let count = |wanted: Release| {
        known
            .iter()
            .filter(|&&answer| answer == Some(wanted))
            .count()
    };
    let released = count(Release::Released);
    let silent = known.iter().filter(|answer| answer.is_none()).count();
    if released >= quorum {
        return Some(Release::Released);
    }
    if released + silent >= quorum {
        return None;
    }
    if count(Release::NotOwner) > 0 {
        return Some(Release::NotOwner);
    }
    Some(Release::Gone)
}

fn node_timeout(ttl: Duration) -> Duration {
    (ttl / 10).clamp(MIN_NODE_TIMEOUT, MAX_NODE_TIMEOUT)
}

/// The owner that holds the lock on at least `quorum` of the masters that answered busy
/// (`(holder, remaining lease)` each), with the shortest lease it has left there; `None` when
/// no owner does, as when contenders split the masters between them.
fn majority_holder(
    busy: &[(Option<HolderId>, Option<Duration>)],
    quorum: usize,
) -> Option<(HolderId, Option<Duration>)> {
    busy.iter()
        .filter_map(|(holder, _)| *holder)
        .find_map(|owner| {
            let theirs = busy.iter().filter(|(holder, _)| *holder == Some(owner));
            // A lease without expiry (`None`) counts only when there is no other.
            (theirs.clone().count() >= quorum)
                .then(|| (owner, theirs.filter_map(|(_, remaining)| *remaining).min()))
        })
}

/// `redlock://[user:pass@]h1:p1,h2:p2,...[/db][?query]` as one `redis://` URL per master
/// (`redlocks://` gives `rediss://`); see [`Deployment::parse`].
fn node_urls(url: &str) -> Result<Vec<String>, LockError> {
    let deployment = Deployment::parse(url)?;
    if deployment.kind() != DeploymentKind::Redlock {
        return Err(LockError::Config(format!(
            "`{}` is not a redlock URL",
            deployment.shown()
        )));
    }
    Ok(deployment.node_urls())
}

impl RedlockBackend {
    /// Per lease: renewed on a majority, refused by so many that no majority is left, or
    /// neither (`None`: tried again).
    async fn renew_on_majority(&self, batch: &[Renewal]) -> Result<Vec<Option<bool>>, StoreError> {
        // Timed by the leases themselves, not the lock-delay their ttl may carry.
        let shortest = batch
            .iter()
            .map(|r| r.ttl.min(r.lease().ttl()))
            .min()
            .unwrap_or_default();
        let answers = self
            .all(&self.asked(), node_timeout(shortest), |node| {
                Box::pin(node.renew_pipelined(batch))
            })
            .await;
        let answered = answers.iter().filter(|answer| answer.is_ok()).count();
        if answered < self.quorum {
            return Err(self.too_few(answered, answers));
        }
        let unanswered = self.nodes.len() - answered;
        let renewed = (0..batch.len())
            .map(|i| {
                let granted = answers
                    .iter()
                    .filter(|answer| {
                        matches!(answer, Ok(renewed) if renewed.get(i) == Some(&Some(true)))
                    })
                    .count();
                if granted >= self.quorum {
                    Some(true)
                } else if granted + unanswered < self.quorum {
                    // Even the masters that did not answer could not make a majority.
                    Some(false)
                } else {
                    None
                }
            })
            .collect();
        Ok(renewed)
    }
}

impl Store for RedlockBackend {
    /// Read through connections of its own (see [`RedisInspect`](super::inspect::RedisInspect)).
    fn inspect(&self) -> Option<&dyn crate::store::Inspect> {
        Some(&self.inspect)
    }

    /// Published waits are kept beside the locks.
    fn keeps_waits(&self) -> bool {
        true
    }

    fn describe(&self) -> &str {
        &self.describe
    }

    /// No: a failed attempt's give-backs may still be on their way (one to a master that gave
    /// no answer is not waited for, and one to a restarted master is sent again after its
    /// script is loaded, behind the next attempt's acquire).
    fn retry_with_same_token(&self) -> bool {
        false
    }

    fn fair(&self) -> bool {
        false
    }

    fn supports(&self, shape: Shape) -> Result<(), &'static str> {
        match shape {
            Shape::Lock => Ok(()),
            Shape::Semaphore { .. } => Err(
                "a semaphore over independent masters is not sound: each master counts its own \
             holders, and different majorities can admit more than its permits in all (with 2 \
             permits on 3 masters, three holders can each win two masters, with no fault at \
             all); use one Redis, Sentinel or Cluster for semaphores",
            ),
            Shape::Read | Shape::Write => Err(
                "a read-write lock over independent masters is not sound: each master sees its own \
             readers and writer, and a writer holding a majority does not keep readers off the \
             other masters' majorities (with 3 masters, a writer on two and readers on two \
             overlap on one master only where both win it), and a waiting writer's mark on some \
             masters holds no reader up on the rest; use one Redis, Sentinel or Cluster for \
             read-write locks",
            ),
        }
    }

    fn server(&self) -> &str {
        &self.server
    }

    /// The ttl asked carries the lock's lock-delay: the lease alone (`ttl - ask.lock_delay`)
    /// times the nodes and bounds the grant's validity.
    fn acquire<'a>(
        &'a self,
        key: &'a Key,
        token: &'a str,
        ttl: Duration,
        ask: Ask,
    ) -> BoxFuture<'a, Result<Acquire, StoreError>> {
        // No line of fair waiters: the masters could not agree on its order.
        let ask = Ask {
            line: Line::No,
            ..ask
        };
        Box::pin(async move {
            let start = Instant::now();
            let (kept, ttl) = (ttl, ttl.saturating_sub(ask.lock_delay));
            let limit = node_timeout(ttl);
            let asked = self.asked();
            let answers = self
                .all(&asked, limit, |node| node.acquire(key, token, kept, ask))
                .await;
            let mut granted = 0;
            let mut fence = 0;
            let mut busy = Vec::new();
            for answer in &answers {
                match answer {
                    Ok(Acquire::Acquired { fence: node_fence }) => {
                        granted += 1;
                        fence = fence.max(*node_fence);
                    }
                    Ok(Acquire::Busy {
                        remaining, holder, ..
                    }) => busy.push((*holder, *remaining)),
                    Err(_) => {}
                }
            }
            let elapsed = start.elapsed();
            let valid = ttl > elapsed + drift_margin(ttl);
            if granted >= self.quorum && valid {
                return Ok(Acquire::Acquired { fence });
            }
            // A minority, or too late: give back what we took before anyone waits on it.
            // While another owner holds a majority, quietly: announcing would wake the other
            // contenders' waiters only to find the lock still held, and their own give-backs
            // would wake ours, round and round until the owner releases. When the masters are
            // split between contenders, announce it: their give-backs are what frees the lock,
            // and nobody's lease has to run out first.
            let held = majority_holder(&busy, self.quorum);
            let quietly = held.is_some();
            let give_back =
                |node: &RedisBackend| -> BoxFuture<'static, Result<Release, StoreError>> {
                    if quietly {
                        node.give_back_quietly(key, token).boxed()
                    } else {
                        node.release_owned(key, token, Duration::ZERO).boxed()
                    }
                };
            // A master asked that gave no answer may still serve the request (it queues in
            // the socket of a paused one): the give-back follows it there, unwaited for.
            for ((node, &asked), answer) in self.nodes.iter().zip(&asked).zip(&answers) {
                if asked && answer.is_err() {
                    in_background(&node.background, BACKGROUND_LIMIT, give_back(&node.redis));
                }
            }
            if granted > 0 {
                let grants: Vec<bool> = answers
                    .iter()
                    .map(|answer| matches!(answer, Ok(Acquire::Acquired { .. })))
                    .collect();
                self.all(&grants, limit, |node| -> BoxFuture<'a, _> {
                    give_back(node)
                })
                .await;
            }
            if granted + busy.len() < self.quorum {
                return Err(self.too_few(granted + busy.len(), answers));
            }
            if let Some((owner, remaining)) = held {
                // Who holds the majority, as one of its masters records it: they all wrote
                // the same value.
                let blocker = answers.into_iter().find_map(|answer| match answer {
                    Ok(Acquire::Busy {
                        holder: Some(holder),
                        blocker,
                        ..
                    }) if holder == owner => blocker,
                    _ => None,
                });
                return Ok(Acquire::Busy {
                    remaining,
                    holder: None,
                    in_line: false,
                    blocker,
                });
            }
            // The masters were split between contenders, none with a majority: retry soon, at a
            // random moment. (Waiting out the lease the busy masters reported would wait for
            // grants that their contenders are giving back right now.) Nobody blocks for long.
            Ok(Acquire::busy(Some(jitter(limit * 2)), false))
        })
    }

    /// Booked once, when every master has answered or timed out: a lease's verdict needs a
    /// majority of the masters. That costs no lease more than its own bound: the node timeout
    /// (a tenth of the shortest ttl in the batch, at most 250 ms) is within a tenth of every
    /// lease's ttl, well inside the third of it the watchdog waits for an answer, and a master
    /// that gives none falls silent and is left out of the next batches.
    fn renew<'a>(&'a self, batch: &'a [Renewal], book: Booking<'a>) -> BoxFuture<'a, ()> {
        Box::pin(async move { book(&whole(batch), self.renew_on_majority(batch).await) })
    }

    fn release<'a>(
        &'a self,
        key: &'a Key,
        token: &'a str,
        keep: Duration,
    ) -> BoxFuture<'a, Result<Release, StoreError>> {
        Box::pin(async move {
            let asked = self.asked();
            for (node, &asked) in self.nodes.iter().zip(&asked) {
                if !asked {
                    in_background(
                        &node.background,
                        BACKGROUND_LIMIT,
                        node.redis.release_owned(key, token, keep),
                    );
                }
            }
            // What each master answered so far: a master that answered keeps its answer, and
            // only the silent ones are asked again, so a copy deleted in an earlier round
            // still counts as released.
            let mut known: Vec<Option<Release>> = vec![None; self.nodes.len()];
            let mut pending = asked;
            let mut round = 1;
            loop {
                let answers = self
                    .all(&pending, MAX_NODE_TIMEOUT, |node| {
                        node.release(key, token, keep)
                    })
                    .await;
                for (slot, answer) in known.iter_mut().zip(&answers) {
                    if let Ok(answer) = answer {
                        *slot = Some(*answer);
                    }
                }
                if let Some(verdict) = release_verdict(&known, self.quorum) {
                    return Ok(verdict);
                }
                if round == RELEASE_ROUNDS {
                    let answered = known.iter().flatten().count();
                    return Err(self.too_few(answered, answers));
                }
                round += 1;
                pending = known.iter().map(Option::is_none).collect();
            }
        })
    }

    fn waits<'a>(
        &'a self,
        key: &'a str,
        update: &'a WaitsUpdate,
    ) -> BoxFuture<'a, Result<Vec<(String, String)>, StoreError>> {
        Box::pin(async move {
            let answers = self
                .all(&self.asked(), MAX_NODE_TIMEOUT, |node| {
                    node.waits(key, update)
                })
                .await;
            if !answers.iter().any(Result::is_ok) {
                return Err(self.too_few(0, answers));
            }
            // Each master that answered has a copy: of two copies of one record, the one
            // written last.
            Ok(crate::protocol::waits::newest_copies(
                answers.into_iter().flatten().flatten(),
            ))
        })
    }

    fn watch<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            // A silent master's releases are announced on the others too.
            let answers = self
                .all(&self.asked(), MAX_NODE_TIMEOUT, |node| node.watch(key))
                .await;
            if answers.iter().any(Result::is_ok) {
                return Ok(());
            }
            Err(self.too_few(0, answers))
        })
    }

    fn unwatch(&self, key: &str) {
        for node in &self.nodes {
            node.redis.unwatch(key);
        }
    }

    fn notifies(&self) -> bool {
        self.nodes.iter().any(|node| node.redis.notifies())
    }

    /// On every master: each manager subscribes on every master, and so hears a notice once
    /// per master that took it while its subscription there was up. Hearing one twice is
    /// harmless: a request to let go resolves `release_requested()` once, and a lease is lost
    /// once.
    fn announces(&self) -> bool {
        self.nodes.iter().any(|node| node.redis.announces())
    }

    fn attach(&self, changes: &crate::store::Changes) {
        self.hearers.attach(changes);
    }

    /// Told once one master took it: a manager hears it through any one master.
    fn announce<'a>(
        &'a self,
        notice: &'a crate::store::Notice,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            let answers = self
                .all(&self.asked(), MAX_NODE_TIMEOUT, |node| {
                    node.announce(notice)
                })
                .await;
            if answers.iter().any(Result::is_ok) {
                return Ok(());
            }
            Err(self.too_few(0, answers))
        })
    }

    // No `steal`: a steal takes the lock whoever holds it, so each master grants every thief,
    // and two thieves at once could each count a majority of grants (each master keeping the
    // last one it served), both holding the lock until their next renewal. Redlock's safety
    // rests on a master granting a lock only while it is free, which a steal cannot keep; the
    // engine refuses `LockManager::steal` here with a configuration error.
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redlock_urls_become_one_redis_url_per_master() {
        assert_eq!(
            node_urls("redlock://:pw@a:1,b:2,c:3/2?protocol=resp3").expect("valid"),
            [
                "redis://:pw@a:1/2?protocol=resp3",
                "redis://:pw@b:2/2?protocol=resp3",
                "redis://:pw@c:3/2?protocol=resp3"
            ]
        );
        assert_eq!(
            node_urls("redlocks://a:1,b:2").expect("valid"),
            ["rediss://a:1", "rediss://b:2"]
        );
    }

    #[test]
    fn a_password_with_a_slash_or_question_mark_goes_to_every_master() {
        assert_eq!(
            node_urls("redlock://u:12/a?b@h1:1,h2:2/0").expect("valid"),
            ["redis://u:12/a?b@h1:1/0", "redis://u:12/a?b@h2:2/0"]
        );
    }

    #[test]
    fn a_redlock_url_without_masters_is_a_config_error() {
        let err = node_urls("redlock://user:s3cret@/0").expect_err("no masters");
        assert!(!err.to_string().contains("s3cret"), "{err}");
    }

    #[test]
    fn a_release_counts_only_a_majority_of_our_copies_as_the_lock() {
        use Release::{Gone, NotOwner, Released};
        assert_eq!(
            release_verdict(&[Some(Released), Some(Released), Some(NotOwner)], 2),
            Some(Released)
        );
        // A stale copy on one master while another owner holds the other two.
        assert_eq!(
            release_verdict(&[Some(NotOwner), Some(NotOwner), Some(Released)], 2),
            Some(NotOwner)
        );
        assert_eq!(
            release_verdict(&[Some(Gone), Some(Gone), Some(Released)], 2),
            Some(Gone)
        );
        // A silent master may still hold our copy: ask again.
        assert_eq!(
            release_verdict(&[Some(Released), None, Some(Gone)], 2),
            None
        );
        assert_eq!(
            release_verdict(&[Some(NotOwner), None, Some(NotOwner)], 2),
            Some(NotOwner)
        );
    }

    #[test]
    fn the_node_timeout_is_a_tenth_of_the_ttl_within_bounds() {
        assert_eq!(node_timeout(Duration::from_secs(30)), MAX_NODE_TIMEOUT);
        assert_eq!(
            node_timeout(Duration::from_millis(500)),
            Duration::from_millis(50)
        );
        assert_eq!(node_timeout(Duration::from_millis(10)), MIN_NODE_TIMEOUT);
    }

    #[test]
    fn only_one_owner_on_a_quorum_of_masters_is_a_majority_holder() {
        let s = Duration::from_secs;
        let id = |n| HolderId::from_raw(n).expect("not 0");
        let one = Some(id(1));
        assert_eq!(
            majority_holder(&[(one, Some(s(5))), (one, Some(s(3)))], 2),
            Some((id(1), Some(s(3))))
        );
        assert_eq!(
            majority_holder(&[(one, Some(s(5))), (Some(id(2)), Some(s(3)))], 2),
            None,
            "two contenders with one master each"
        );
        assert_eq!(
            majority_holder(
                &[(Some(id(2)), Some(s(1))), (one, None), (one, Some(s(4)))],
                2
            ),
            Some((id(1), Some(s(4))))
        );
        assert_eq!(
            majority_holder(&[(one, None), (one, None)], 2),
            Some((id(1), None))
        );
        assert_eq!(
            majority_holder(&[(None, Some(s(1))), (None, Some(s(1)))], 2),
            None
        );
        assert_eq!(majority_holder(&[], 2), None);
    }

    /// A short fuzz run (see `url::fuzz`).
    mod fuzz {
        use proptest::prelude::*;

        use super::super::node_urls;
        use crate::error::LockError;
        use crate::url::fuzz::{FUZZ_CASES, url_like, url_with_password};
        use crate::url::server_of;

        const REDLOCK: &[&str] = &["redlock://", "redlocks://"];

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(FUZZ_CASES))]

            #[test]
            fn reading_any_string_never_panics(url in url_like()) {
                match node_urls(&url) {
                    Ok(nodes) => {
                        prop_assert!(!nodes.is_empty());
                        for node in &nodes {
                            prop_assert!(
                                node.starts_with("redis://") || node.starts_with("rediss://"),
                                "{}", node
                            );
                        }
                    }
                    Err(LockError::Config(_)) => {}
                    Err(other) => prop_assert!(false, "not a config error: {other:?}"),
                }
            }

            /// The masters' addresses name the backend in every message.
            #[test]
            fn what_is_shown_never_contains_the_password(secret in url_with_password(REDLOCK)) {
                let shown = match node_urls(&secret.url) {
                    Ok(nodes) => nodes.iter().map(|n| server_of(n)).collect::<Vec<_>>().join(","),
                    Err(err) => format!("{err} {err:?}"),
                };
                prop_assert!(!secret.leaked_in(&shown), "{:?} shown as {}", secret.url, shown);
            }

            #[test]
            fn every_master_gets_the_credentials_and_the_tail(
                user in "[a-z]{0,4}",
                password in "[^*]{1,8}",
                hosts in prop::collection::vec("[a-z][a-z0-9.-]{0,6}:[0-9]{1,5}", 1..5),
                tail in "(/[0-9]{1,2})?(\\?[a-z]{1,6}=[a-z0-9]{0,4})?",
            ) {
                let url = format!("redlock://{user}:{password}@{}{tail}", hosts.join(","));
                let expected: Vec<String> = hosts
                    .iter()
                    .map(|host| format!("redis://{user}:{password}@{host}{tail}"))
                    .collect();
                prop_assert_eq!(node_urls(&url).map_err(|err| err.to_string()), Ok(expected));
            }
        }
    }
}
