//! The layer around an axum app, driven in-process with concurrent requests, on a real server.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::Path;
use axum::routing::{get, post};
use axum::{Extension, Router};
use http::{Request, StatusCode, header};
use lock_runtime::{LockManager, LockOptions};
use lock_tests::RedisServer;
use lock_tower::{FencingToken, LockLayer, OnBusy};
use tower::ServiceExt;

async fn connect(server: &RedisServer) -> LockManager {
    LockManager::connect(&server.url())
        .await
        .unwrap_or_else(|err| panic!("connect: {err}\n{}", server.log()))
}

/// `/orders/{user}` is locked per user; `/health` is not locked.
fn app(
    locks: LockManager,
    options: LockOptions,
    on_busy: OnBusy,
    running: Arc<AtomicU32>,
) -> Router {
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
                    let running = running.clone();
                    async move {
                        let inside = running.fetch_add(1, Ordering::SeqCst) + 1;
                        tokio::time::sleep(Duration::from_millis(300)).await;
                        running.fetch_sub(1, Ordering::SeqCst);
                        format!("{user} {} {inside}", token.0)
                    }
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_request_per_key_at_a_time_the_other_is_told_to_come_back() {
    let server = RedisServer::start();
    let running = Arc::new(AtomicU32::new(0));
    let app = app(
        connect(&server).await,
        LockOptions::new(),
        OnBusy::Conflict,
        running.clone(),
    );
    let first = tokio::spawn(app.clone().oneshot(order("ann")));
    tokio::time::sleep(Duration::from_millis(100)).await;
    let second = app.clone().oneshot(order("ann")).await.expect("answered");
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
    // Another key is not held up.
    let other = app.clone().oneshot(order("bob")).await.expect("answered");
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
        "released after the response"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_wait_concurrent_requests_take_turns_and_tokens_rise() {
    let server = RedisServer::start();
    let running = Arc::new(AtomicU32::new(0));
    let options = LockOptions::new().wait(Duration::from_secs(10));
    let app = app(
        connect(&server).await,
        options,
        OnBusy::Conflict,
        running.clone(),
    );
    let started = Instant::now();
    let answers: Vec<_> = futures_join(
        (0..4)
            .map(|_| tokio::spawn(app.clone().oneshot(order("cat"))))
            .collect(),
    )
    .await;
    let mut tokens = Vec::new();
    for answer in answers {
        assert_eq!(answer.status(), StatusCode::OK);
        let text = body(answer).await;
        let words: Vec<&str> = text.split(' ').collect();
        // Never two handlers at once for one user.
        assert_eq!(words[2], "1", "{text}");
        tokens.push(words[1].parse::<u64>().expect("token"));
    }
    // One after the other: four handlers of 300 ms.
    assert!(
        started.elapsed() >= Duration::from_millis(1150),
        "{:?}",
        started.elapsed()
    );
    tokens.sort_unstable();
    tokens.dedup();
    assert_eq!(tokens.len(), 4, "every request its own fencing token");
}

async fn futures_join(
    tasks: Vec<tokio::task::JoinHandle<Result<http::Response<Body>, std::convert::Infallible>>>,
) -> Vec<http::Response<Body>> {
    let mut answers = Vec::new();
    for task in tasks {
        answers.push(task.await.expect("task").expect("answered"));
    }
    answers
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_lock_can_be_answered_423_locked() {
    let server = RedisServer::start();
    let app = app(
        connect(&server).await,
        LockOptions::new(),
        OnBusy::Locked,
        Arc::default(),
    );
    let first = tokio::spawn(app.clone().oneshot(order("dan")));
    tokio::time::sleep(Duration::from_millis(100)).await;
    let second = app.oneshot(order("dan")).await.expect("answered");
    assert_eq!(second.status(), StatusCode::LOCKED);
    assert!(second.headers().contains_key(header::RETRY_AFTER));
    assert_eq!(
        first.await.expect("task").expect("answered").status(),
        StatusCode::OK
    );
}

/// A lease lost while the handler runs drops the handler and answers 503.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_lease_drops_the_handler_and_answers_503() {
    let server = RedisServer::start();
    let finished = Arc::new(AtomicU32::new(0));
    let layer = LockLayer::new(connect(&server).await, |_: &Request<Body>| {
        Some("report".to_owned())
    })
    .options(LockOptions::new().ttl(Duration::from_secs(1)));
    let app = Router::new()
        .route(
            "/report",
            post({
                let finished = finished.clone();
                move || async move {
                    tokio::time::sleep(Duration::from_secs(3)).await;
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
    tokio::time::sleep(Duration::from_millis(100)).await;
    // Someone removes the lock: the next renewal (ttl / 3) finds it gone.
    server.cmd(&["DEL", "lock:{report}"]);
    let answer = tokio::time::timeout(Duration::from_secs(2), call)
        .await
        .expect("answered before the handler would have finished")
        .expect("task")
        .expect("answered");
    assert_eq!(answer.status(), StatusCode::SERVICE_UNAVAILABLE);
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(finished.load(Ordering::SeqCst), 0, "the handler ran on");
}

/// Without a lock server the request is not served unlocked: 503.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_lock_server_answers_503() {
    let server = RedisServer::start();
    let locks = connect(&server).await;
    server.kill();
    let app = app(locks, LockOptions::new(), OnBusy::Conflict, Arc::default());
    let answer = app.oneshot(order("eve")).await.expect("answered");
    assert_eq!(answer.status(), StatusCode::SERVICE_UNAVAILABLE);
}
