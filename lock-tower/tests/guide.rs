//! The users' guide's layer (docs/HTTP.md): its blocks are excerpts of this file, which builds
//! the app they show and sends it requests on `memory://` (`examples/tests/docs_code.rs` checks
//! that each block is still here, line for line).

use std::time::Duration;

use axum::routing::post;
use axum::{Extension, Router};
use http::{Request, StatusCode};
use lock_runtime::{LockManager, LockOptions};
use tower::ServiceExt;

use lock_tower::{FencingToken, LockLayer, OnBusy};

fn payments(locks: &LockManager) -> Router {
    // One payment at a time per Idempotency-Key; other requests pass through unlocked.
    let layer = LockLayer::new(
        locks.clone(),
        |request: &http::Request<axum::body::Body>| {
            let key = request.headers().get("idempotency-key")?.to_str().ok()?;
            Some(format!("payment:{key}"))
        },
    )
    .options(LockOptions::new().wait(Duration::from_millis(200))) // default: try once
    .on_busy(OnBusy::Conflict); // or OnBusy::Locked (423)
    Router::new().route("/pay", post(pay)).layer(layer)
}

async fn pay(Extension(token): Extension<FencingToken>) -> String {
    format!("paid with fencing token {}", token.0) // write with token.0
}

fn payment(key: &str) -> Request<axum::body::Body> {
    Request::post("/pay")
        .header("idempotency-key", key)
        .body(axum::body::Body::empty())
        .expect("request")
}

#[tokio::test]
async fn the_guide_s_layer_locks_a_payment_and_refuses_it_while_held() {
    let locks = LockManager::memory();
    let app = payments(&locks);

    let answer = app.clone().oneshot(payment("p-1")).await.expect("answer");
    assert_eq!(answer.status(), StatusCode::OK);

    let held = locks
        .lock("payment:p-1", LockOptions::new())
        .await
        .expect("free after the first request");
    let answer = app.oneshot(payment("p-1")).await.expect("answer");
    assert_eq!(answer.status(), StatusCode::CONFLICT);
    held.release().await.expect("release");
}
