//! What a normal shutdown logs for a request it interrupts: one calm line for the lock it
//! released, nothing at WARN. In a test binary of its own: the log is captured on the test's
//! thread.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::routing::post;
use http::{Request, StatusCode};
use lock_runtime::LockManager;
use lock_tests::logs::{Level, Logged};
use lock_tests::wait_until_async;
use lock_tower::LockLayer;
use tower::ServiceExt;

#[tokio::test(flavor = "current_thread")]
async fn a_shutdown_under_a_request_logs_one_calm_line() {
    let logged = Logged::default();
    let _capture = logged.capture(Level::INFO);
    let locks = LockManager::builder()
        .url("memory://tower-shutdown-logged")
        .build()
        .await
        .expect("memory manager");
    let entered = Arc::new(AtomicBool::new(false));
    let layer = LockLayer::new(locks.clone(), |_: &Request<Body>| Some("report".to_owned()));
    let app = Router::new()
        .route(
            "/report",
            post({
                let entered = entered.clone();
                move || async move {
                    entered.store(true, Ordering::SeqCst);
                    // A handler that ends only when it is dropped.
                    std::future::pending::<()>().await;
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
        wait_until_async(Duration::from_secs(10), || entered.load(Ordering::SeqCst)).await,
        "the handler runs under the lock"
    );
    locks.shutdown().await.expect("shutdown");
    let answer = call.await.expect("task").expect("answered");
    assert_eq!(answer.status(), StatusCode::SERVICE_UNAVAILABLE);

    let text = logged.text();
    assert!(!text.contains("WARN"), "{text}");
    assert_eq!(
        text.matches("lock released by shutdown").count(),
        1,
        "{text}"
    );
    assert!(text.contains("report"), "{text}");
}
