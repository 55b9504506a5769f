//! The layer around an axum app, driven in-process with concurrent requests, on a real server.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use axum::body::Body;
use axum::extract::Path;
use axum::routing::{get, post};
use axum::{Extension, Router};
use http::{Request, StatusCode, header};
use lock_tests::prelude::*;
use lock_tower::{FencingToken, LockLayer, OnBusy};
use tokio::sync::Semaphore;
use tower::ServiceExt;

/// The locked handler as the test sees it: who is inside, the most at once, the fencing tokens
/// in the order their requests came in, and a gate each request waits at until the test lets it
/// out, so that "a request is inside" is a state to wait for, not a time to sleep.
#[derive(Clone)]
struct Inside {
    running: Arc<AtomicU32>,
    most: Arc<AtomicU32>,
    tokens: Arc<Mutex<Vec<u64>>>,
    gate: Arc<Semaphore>,
}

impl Inside {
    fn new() -> Self {
        Inside {
            running: Arc::default(),
            most: Arc::default(),
            tokens: Arc::default(),
            gate: Arc::new(Semaphore::new(0)),
        }
    }

    /// The fencing tokens of the requests that came in, in the order they came in.
    fn tokens(&self) -> Vec<u64> {
        self.tokens
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The most handlers that were inside at once.
    fn most(&self) -> u32 {
        self.most.load(Ordering::SeqCst)
    }

    /// Waits until `n` requests came in.
    async fn wait_entered(&self, n: usize) {
        assert!(
            wait_until_async(PATIENCE, || self.tokens().len() >= n).await,
            "{n} requests should have come in, {} did",
            self.tokens().len()
        );
    }

    /// Lets `n` requests out of the handler.
    fn let_out(&self, n: usize) {
        self.gate.add_permits(n);
    }

    /// Counts the request in, waits at the gate, counts it out. Answers the user, the fencing
    /// token and how many were inside when it came in.
    async fn serve(&self, user: String, token: FencingToken) -> String {
        let now = self.running.fetch_add(1, Ordering::SeqCst) + 1;
        self.most.fetch_max(now, Ordering::SeqCst);
        self.tokens
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(token.0);
        self.gate.acquire().await.expect("never closed").forget();
        self.running.fetch_sub(1, Ordering::SeqCst);
        format!("{user} {} {now}", token.0)
    }
}

/// `/orders/{user}` is locked per user; `/health` is not locked.
fn app(locks: LockManager, options: LockOptions, on_busy: OnBusy, inside: Inside) -> Router {
    let layer = LockLayer::new(locks, |request: &Request<Body>| {
        let user = request.uri().path().strip_prefix("/orders/")?;
        Some(format!("orders:{user}"))
    })
    .options(options)
    .on_busy(on_busy);
    Router::new()
        .route(
            "/orders/{user}",
            post(
                move |Path(user): Path<String>, Extension(token): Extension<FencingToken>| {
                    let inside = inside.clone();
                    async move { inside.serve(user, token).await }
                },
            ),
        )
        .route("/health", get(|| async { "ok" }))
        .layer(layer)
}

fn order(user: &str) -> Request<Body> {
    Request::post(format!("/orders/{user}"))
        .body(Body::empty())
        .expect("request")
}

async fn body(response: http::Response<Body>) -> String {
    let bytes = axum::body::to_bytes(response.into_body(), 1 << 16)
        .await
        .expect("body");
    String::from_utf8_lossy(&bytes).into_owned()
}

/// The answer to a request that must be refused at once: had it been let in, it would wait at
/// the gate.
async fn refused(
    request: impl Future<Output = Result<http::Response<Body>, std::convert::Infallible>>,
) -> http::Response<Body> {
    tokio::time::timeout(PATIENCE, request)
        .await
        .expect("refused, not let in while the lock is held")
        .expect("answered")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_request_per_key_at_a_time_the_other_is_told_to_come_back() {
    let server = RedisServer::start();
    let inside = Inside::new();
    let app = app(
        connect(&server).await,
        LockOptions::new(),
        OnBusy::Conflict,
        inside.clone(),
    );
    let first = tokio::spawn(app.clone().oneshot(order("ann")));
    inside.wait_entered(1).await;
    let second = refused(app.clone().oneshot(order("ann"))).await;
    assert_eq!(second.status(), StatusCode::CONFLICT);
    let retry_after: u64 = second
        .headers()
        .get(header::RETRY_AFTER)
        .expect("Retry-After")
        .to_str()
        .expect("text")
        .parse()
        .expect("seconds");
    // The holder's lease: 30 s by default, renewed.
    assert!((20..=30).contains(&retry_after), "{retry_after}");
    // Another key is not held up: its request comes in while the first one is still inside.
    let other = tokio::spawn(app.clone().oneshot(order("bob")));
    inside.wait_entered(2).await;
    inside.let_out(2);
    let other = other.await.expect("task").expect("answered");
    assert_eq!(other.status(), StatusCode::OK);
    let first = first.await.expect("task").expect("answered");
    assert_eq!(first.status(), StatusCode::OK);
    let text = body(first).await;
    let mut words = text.split(' ');
    assert_eq!(words.next(), Some("ann"));
    let token: u64 = words.next().expect("token").parse().expect("number");
    assert!(token > 0);
    // Unlocked routes pass through.
    let health = app
        .oneshot(
            Request::get("/health")
                .body(Body::empty())
                .expect("request"),
        )
        .await
        .expect("answered");
    assert_eq!(health.status(), StatusCode::OK);
    assert!(
        !server.holds_lock("lock:{orders:ann}"),
        "released before the response\n{}",
        server.log()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_wait_concurrent_requests_take_turns_and_tokens_rise() {
    let server = RedisServer::start();
    let inside = Inside::new();
    let app = app(
        connect(&server).await,
        LockOptions::new().wait(PATIENCE),
        OnBusy::Conflict,
        inside.clone(),
    );
    let requests: Vec<_> = (0..4)
        .map(|_| tokio::spawn(app.clone().oneshot(order("cat"))))
        .collect();
    // Each request is let out once it is inside; the others wait for the lock meanwhile.
    for turn in 1..=4 {
        inside.wait_entered(turn).await;
        assert_eq!(inside.most(), 1, "never two handlers at once for one user");
        inside.let_out(1);
    }
    for request in requests {
        let answer = request.await.expect("task").expect("answered");
        assert_eq!(answer.status(), StatusCode::OK);
        let text = body(answer).await;
        assert!(text.ends_with(" 1"), "alone inside: {text}");
    }
    assert_eq!(inside.most(), 1, "never two handlers at once for one user");
    // Every request its own fencing token, each higher than the one before it.
    let tokens = inside.tokens();
    assert_eq!(tokens.len(), 4, "{tokens:?}");
    assert!(
        tokens.windows(2).all(|pair| pair[0] < pair[1]),
        "{tokens:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_lock_can_be_answered_423_locked() {
    let server = RedisServer::start();
    let inside = Inside::new();
    let app = app(
        connect(&server).await,
        LockOptions::new(),
        OnBusy::Locked,
        inside.clone(),
    );
    let first = tokio::spawn(app.clone().oneshot(order("dan")));
    inside.wait_entered(1).await;
    let second = refused(app.oneshot(order("dan"))).await;
    assert_eq!(second.status(), StatusCode::LOCKED);
    assert!(second.headers().contains_key(header::RETRY_AFTER));
    inside.let_out(1);
    assert_eq!(
        first.await.expect("task").expect("answered").status(),
        StatusCode::OK
    );
}

/// Sets its flag when dropped: tells that a handler's future was dropped, not left running.
struct DropFlag(Arc<AtomicBool>);

impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// A lease lost while the handler runs drops the handler and answers 503.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_lease_drops_the_handler_and_answers_503() {
    let server = RedisServer::start();
    let entered = Arc::new(AtomicBool::new(false));
    let dropped = Arc::new(AtomicBool::new(false));
    let finished = Arc::new(AtomicU32::new(0));
    let layer = LockLayer::new(connect(&server).await, |_: &Request<Body>| {
        Some("report".to_owned())
    })
    .options(LockOptions::new().ttl(ms(1000)));
    let app = Router::new()
        .route(
            "/report",
            post({
                let (entered, dropped, finished) =
                    (entered.clone(), dropped.clone(), finished.clone());
                move || async move {
                    let _alive = DropFlag(dropped);
                    entered.store(true, Ordering::SeqCst);
                    // A handler that ends only when it is dropped.
                    std::future::pending::<()>().await;
                    finished.fetch_add(1, Ordering::SeqCst);
                    "done"
                }
            }),
        )
        .layer(layer);
    let call = tokio::spawn(
        app.oneshot(
            Request::post("/report")
                .body(Body::empty())
                .expect("request"),
        ),
    );
    assert!(
        wait_until_async(PATIENCE, || entered.load(Ordering::SeqCst)).await,
        "the handler runs under the lock\n{}",
        server.log()
    );
    assert!(server.holds_lock("lock:{report}"), "{}", server.log());
    // Someone removes the lock: the next renewal (ttl / 3) finds it gone.
    server.cmd(&["DEL", "lock:{report}"]);
    let answer = tokio::time::timeout(PATIENCE, call)
        .await
        .expect("answered although the handler never finishes")
        .expect("task")
        .expect("answered");
    assert_eq!(answer.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(dropped.load(Ordering::SeqCst), "the handler was dropped");
    assert_eq!(finished.load(Ordering::SeqCst), 0, "the handler ran on");
}

/// Without a lock server the request is not served unlocked: 503.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_lock_server_answers_503() {
    let server = RedisServer::start();
    let locks = connect(&server).await;
    server.kill();
    let app = app(locks, LockOptions::new(), OnBusy::Conflict, Inside::new());
    let answer = app.oneshot(order("eve")).await.expect("answered");
    assert_eq!(answer.status(), StatusCode::SERVICE_UNAVAILABLE);
}
