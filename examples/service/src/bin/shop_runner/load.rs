//! The load generator: concurrent HTTP requests spread over the instances, as a load balancer
//! would, moving a request on to another instance when one stops answering.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::{Request, StatusCode};
use hyper_util::client::legacy::Client as HyperClient;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use lock_service_examples::shop::wire::{self, OrderAnswer, Outcome};
use tokio::sync::oneshot;

/// The HTTP client: pooled keep-alive connections, HTTP/1.
pub(crate) type Client = HyperClient<HttpConnector, Body>;

/// An answer is a small JSON document; anything longer is not one.
const MAX_ANSWER: usize = 64 * 1024;
/// How long one attempt may take; a lock waits at most 10 s, each of two.
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(30);

pub(crate) fn client() -> Client {
    HyperClient::builder(TokioExecutor::new()).build_http()
}

/// Whether the service at `addr` answers its health check.
pub(crate) async fn is_healthy(client: &Client, addr: SocketAddr) -> bool {
    let Ok(request) =
        Request::get(format!("http://{addr}{}", wire::HEALTH_PATH)).body(Body::empty())
    else {
        return false;
    };
    matches!(client.request(request).await, Ok(response) if response.status() == StatusCode::OK)
}

/// The load: every user sends `requests_per_user` orders, back to back on different instances,
/// so that a user's duplicate clicks are in flight together.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Plan {
    pub(crate) users: u64,
    pub(crate) requests_per_user: u64,
    pub(crate) concurrency: usize,
}

impl Plan {
    pub(crate) fn requests(&self) -> u64 {
        self.users * self.requests_per_user
    }
}

/// One instance as the load generator sees it.
struct Target {
    name: String,
    addr: SocketAddr,
    /// It refused a connection: skipped from then on.
    down: AtomicBool,
}

/// Answers counted for one instance.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Served {
    pub(crate) answered: u64,
    pub(crate) placed: u64,
}

/// What the load saw.
#[derive(Debug, Default)]
pub(crate) struct Results {
    pub(crate) elapsed: Duration,
    /// Of every answered request, from its first attempt to its answer; sorted.
    pub(crate) latencies: Vec<Duration>,
    pub(crate) outcomes: BTreeMap<&'static str, u64>,
    pub(crate) served: BTreeMap<String, Served>,
    /// Requests no instance answered.
    pub(crate) unanswered: u64,
    /// Attempts that failed on one instance and were sent to the next.
    pub(crate) retries: u64,
    /// Up to three transport errors, for the report.
    pub(crate) errors: Vec<String>,
    /// From the start to the last `placed` answer: how long selling the stock took.
    pub(crate) selling: Duration,
}

impl Results {
    /// The answers with `outcome`.
    pub(crate) fn count(&self, outcome: Outcome) -> u64 {
        self.outcomes.get(outcome.name()).copied().unwrap_or(0)
    }

    /// The latency below which a fraction `q` of the answers came.
    pub(crate) fn percentile(&self, q: f64) -> Duration {
        if self.latencies.is_empty() {
            return Duration::ZERO;
        }
        let rank = (q * self.latencies.len() as f64).ceil() as usize;
        self.latencies[rank.clamp(1, self.latencies.len()) - 1]
    }
}

/// Shared by the workers.
struct Shared {
    client: Client,
    targets: Vec<Target>,
    plan: Plan,
    next: AtomicUsize,
    started: Instant,
    placed: AtomicU64,
    /// Placed orders after which each sender is told; taken when told.
    milestones: Mutex<Vec<(u64, Option<oneshot::Sender<()>>)>>,
    results: Mutex<Results>,
}

/// Runs `plan` against the instances at `targets` (name, address). Each of `milestones`
/// (placed orders, sender) is told once that many orders are placed.
pub(crate) async fn run(
    client: Client,
    targets: Vec<(String, SocketAddr)>,
    plan: Plan,
    milestones: Vec<(u64, oneshot::Sender<()>)>,
) -> Results {
    let started = Instant::now();
    let shared = Arc::new(Shared {
        client,
        started,
        targets: targets
            .into_iter()
            .map(|(name, addr)| Target {
                name,
                addr,
                down: AtomicBool::new(false),
            })
            .collect(),
        plan,
        next: AtomicUsize::new(0),
        placed: AtomicU64::new(0),
        milestones: Mutex::new(
            milestones
                .into_iter()
                .map(|(placed, sender)| (placed, Some(sender)))
                .collect(),
        ),
        results: Mutex::new(Results::default()),
    });
    let workers: Vec<_> = (0..plan.concurrency.max(1))
        .map(|_| tokio::spawn(worker(shared.clone())))
        .collect();
    for worker in workers {
        // A worker only panics on a bug; its requests are then missing from the figures.
        if let Err(err) = worker.await {
            record(&shared, |results| {
                results.errors.push(format!("worker: {err}"))
            });
        }
    }
    let mut results = std::mem::take(&mut *lock(&shared.results));
    results.elapsed = started.elapsed();
    results.latencies.sort_unstable();
    results
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

fn record(shared: &Shared, update: impl FnOnce(&mut Results)) {
    update(&mut lock(&shared.results));
}

async fn worker(shared: Arc<Shared>) {
    let total = shared.plan.requests();
    loop {
        let index = shared.next.fetch_add(1, Ordering::Relaxed) as u64;
        if index >= total {
            return;
        }
        let per_user = shared.plan.requests_per_user.max(1);
        let user_id = index / per_user;
        // A user's first request goes to instance `user_id % n`, the others to the next ones.
        let first = (user_id + index % per_user) as usize;
        let started = Instant::now();
        match send(&shared, first, user_id).await {
            Some(answer) => answered(&shared, answer, started.elapsed()),
            None => record(&shared, |results| results.unanswered += 1),
        }
    }
}

/// Sends one order, starting with instance `first % n` and moving on to another one when an
/// instance fails. Retrying is safe: a user's second order is answered `duplicate`.
async fn send(shared: &Shared, first: usize, user_id: u64) -> Option<OrderAnswer> {
    let n = shared.targets.len();
    // Half the users move on forwards, half backwards, so a dead instance's share is spread
    // over the others instead of all falling on its successor. Both steps visit every instance.
    let step = if user_id.is_multiple_of(2) {
        1
    } else {
        n.saturating_sub(1).max(1)
    };
    for attempt in 0..n {
        let target = &shared.targets[(first + attempt * step) % n];
        if target.down.load(Ordering::Relaxed) {
            continue;
        }
        match order(&shared.client, target.addr, user_id).await {
            Ok(answer) => return Some(answer),
            Err(failure) => {
                if failure.refused {
                    target.down.store(true, Ordering::Relaxed);
                }
                record(shared, |results| {
                    results.retries += 1;
                    if results.errors.len() < 3 {
                        results
                            .errors
                            .push(format!("{}: {}", target.name, failure.message));
                    }
                });
            }
        }
    }
    None
}

fn answered(shared: &Shared, answer: OrderAnswer, latency: Duration) {
    let now = shared.started.elapsed();
    if answer.outcome == Outcome::Placed {
        let placed = shared.placed.fetch_add(1, Ordering::Relaxed) + 1;
        for (after, sender) in lock(&shared.milestones).iter_mut() {
            if placed >= *after
                && let Some(sender) = sender.take()
            {
                let _ = sender.send(());
            }
        }
    }
    record(shared, |results| {
        results.latencies.push(latency);
        *results.outcomes.entry(answer.outcome.name()).or_default() += 1;
        let served = results.served.entry(answer.instance).or_default();
        served.answered += 1;
        if answer.outcome == Outcome::Placed {
            served.placed += 1;
            results.selling = results.selling.max(now);
        }
        if let Some(error) = answer.error
            && results.errors.len() < 3
        {
            results.errors.push(error);
        }
    });
}

/// An attempt that got no answer.
struct Failure {
    /// The connection was refused: the instance is gone.
    refused: bool,
    message: String,
}

impl Failure {
    fn other(message: impl Into<String>) -> Failure {
        Failure {
            refused: false,
            message: message.into(),
        }
    }
}

async fn order(client: &Client, addr: SocketAddr, user_id: u64) -> Result<OrderAnswer, Failure> {
    let uri = format!("http://{addr}{}", wire::order_path(user_id));
    let request = Request::post(uri)
        .body(Body::empty())
        .map_err(|err| Failure::other(err.to_string()))?;
    let response = tokio::time::timeout(ATTEMPT_TIMEOUT, client.request(request))
        .await
        .map_err(|_| Failure::other(format!("no answer within {ATTEMPT_TIMEOUT:?}")))?
        .map_err(|err| Failure {
            refused: err.is_connect(),
            message: with_causes(&err),
        })?;
    let status = response.status();
    let body = axum::body::to_bytes(Body::new(response.into_body()), MAX_ANSWER)
        .await
        .map_err(|err| Failure::other(format!("reading the answer: {err}")))?;
    serde_json::from_slice(&body)
        .map_err(|err| Failure::other(format!("answer {status} is not an order answer: {err}")))
}

/// An error and its causes on one line: hyper's own message ("client error (SendRequest)")
/// says little without them.
fn with_causes(err: &dyn std::error::Error) -> String {
    let mut message = err.to_string();
    let mut cause = err.source();
    while let Some(err) = cause {
        message.push_str(": ");
        message.push_str(&err.to_string());
        cause = err.source();
    }
    message
}
