//! A [tower] layer that holds a [`lock_runtime`] lock around each request: one request at a time
//! per key, across every instance of a service, without writing the glue in each handler.
//!
//! The key comes from a function of the request (a path parameter, a header such as
//! `Idempotency-Key`, the authenticated user); a request it returns `None` for passes through
//! unlocked. While the lock is held the handler runs with the lock's [`FencingToken`] in the
//! request's extensions. When the lock is busy the layer answers `409 Conflict` (or `423
//! Locked`) with `Retry-After` from the holder's remaining lease, after waiting up to the
//! options' `wait`; when the lease is lost while the handler runs, the handler is dropped and the
//! answer is `503 Service Unavailable`; when the lock server cannot be reached, `503` too. The
//! lock is released when the handler's response is ready.
//!
//! ```no_run
//! use std::time::Duration;
//! use axum::{Extension, Router, routing::post};
//! use lock_runtime::{LockManager, LockOptions};
//! use lock_tower::{FencingToken, LockLayer};
//!
//! async fn pay(Extension(token): Extension<FencingToken>) -> String {
//!     format!("paid under fencing token {}", token.0)
//! }
//!
//! # async fn serve() -> Result<(), Box<dyn std::error::Error>> {
//! let locks = LockManager::connect("redis://127.0.0.1:6379").await?;
//! // One payment at a time per Idempotency-Key, across every instance.
//! let layer = LockLayer::new(locks, |request: &http::Request<axum::body::Body>| {
//!     let key = request.headers().get("idempotency-key")?.to_str().ok()?;
//!     Some(format!("payment:{key}"))
//! })
//! .options(LockOptions::new().wait(Duration::from_millis(200)));
//! let app: Router = Router::new().route("/pay", post(pay)).layer(layer);
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await?;
//! axum::serve(listener, app).await?;
//! # Ok(())
//! # }
//! ```
//!
//! [tower]: https://docs.rs/tower

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http::{HeaderValue, Request, Response, StatusCode, header};
use lock_runtime::{LockError, LockManager, LockOptions, LostReason};
use tower_layer::Layer;
use tower_service::Service;

/// The fencing token of the lock held around the request, in its extensions: pass it to the
/// storage the handler reads and writes, which refuses tokens lower than the highest it has seen
/// (on reads too: see "What a lock does NOT guarantee" in docs/GUARANTEES.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FencingToken(pub u64);

/// How a request that found the lock busy is answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnBusy {
    /// `409 Conflict` (the default).
    #[default]
    Conflict,
    /// `423 Locked` (WebDAV's status, used by some APIs for a resource being edited).
    Locked,
}

impl OnBusy {
    fn status(self) -> StatusCode {
        match self {
            OnBusy::Conflict => StatusCode::CONFLICT,
            OnBusy::Locked => StatusCode::LOCKED,
        }
    }
}

/// Holds a lock around every request whose key function returns a key. See the crate docs.
pub struct LockLayer<K> {
    shared: Shared<K>,
}

impl<K> Clone for LockLayer<K> {
    fn clone(&self) -> Self {
        LockLayer {
            shared: self.shared.clone(),
        }
    }
}

struct Shared<K> {
    locks: LockManager,
    key: Arc<K>,
    options: LockOptions,
    on_busy: OnBusy,
}

impl<K> Clone for Shared<K> {
    fn clone(&self) -> Self {
        Shared {
            locks: self.locks.clone(),
            key: self.key.clone(),
            options: self.options,
            on_busy: self.on_busy,
        }
    }
}

impl<K> LockLayer<K> {
    /// Locks each request under the key `key` returns for it (`None`: not locked). The options
    /// default to `LockOptions::new()` (try once, 30 s lease renewed while the handler runs).
    pub fn new(locks: LockManager, key: K) -> Self {
        LockLayer {
            shared: Shared {
                locks,
                key: Arc::new(key),
                options: LockOptions::new(),
                on_busy: OnBusy::Conflict,
            },
        }
    }

    /// The lock options: `wait` is how long a request waits for a busy lock before it is
    /// answered as busy. The metrics label defaults to `http`.
    pub fn options(mut self, options: LockOptions) -> Self {
        self.shared.options = options;
        self
    }

    /// How a busy lock is answered (default `409 Conflict`).
    pub fn on_busy(mut self, on_busy: OnBusy) -> Self {
        self.shared.on_busy = on_busy;
        self
    }
}

impl<S, K> Layer<S> for LockLayer<K> {
    type Service = LockService<S, K>;

    fn layer(&self, inner: S) -> Self::Service {
        LockService {
            inner,
            shared: self.shared.clone(),
        }
    }
}

/// The service [`LockLayer`] wraps around an inner one.
pub struct LockService<S, K> {
    inner: S,
    shared: Shared<K>,
}

impl<S: Clone, K> Clone for LockService<S, K> {
    fn clone(&self) -> Self {
        LockService {
            inner: self.inner.clone(),
            shared: self.shared.clone(),
        }
    }
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

impl<S, K, ReqBody, ResBody> Service<Request<ReqBody>> for LockService<S, K>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    K: Fn(&Request<ReqBody>) -> Option<String> + Send + Sync + 'static,
    ReqBody: Send + 'static,
    ResBody: Default + Send + 'static,
{
    type Response = Response<ResBody>;
    type Error = S::Error;
    type Future = BoxFuture<Result<Response<ResBody>, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: Request<ReqBody>) -> Self::Future {
        // The inner service that was polled ready serves this request; the clone serves the next.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let Some(key) = (self.shared.key)(&request) else {
            return Box::pin(inner.call(request));
        };
        let shared = self.shared.clone();
        Box::pin(async move {
            let options = match shared.options.label_value() {
                Some(_) => shared.options,
                None => shared.options.label("http"),
            };
            let guard = match shared.locks.lock(key, options).await {
                Ok(guard) => guard,
                Err(err) => return Ok(refused(&err, shared.on_busy)),
            };
            request
                .extensions_mut()
                .insert(FencingToken(guard.fencing_token()));
            let answered = tokio::select! {
                biased;
                reason = guard.lost() => {
                    if reason == LostReason::ShutDown {
                        // What a stopping process expects: one calm line.
                        tracing::info!(key = guard.key(), "lock released by shutdown; the handler was dropped");
                    } else {
                        tracing::warn!(key = guard.key(), %reason, "lock lost while the request ran; the handler was dropped");
                    }
                    None
                }
                answered = inner.call(request) => Some(answered),
            };
            match answered {
                Some(answered) => {
                    match guard.release().await {
                        Ok(()) => {}
                        Err(LockError::LeaseLost {
                            key,
                            reason: LostReason::ShutDown,
                            ..
                        }) => tracing::info!(key = %key, "lock released by shutdown"),
                        Err(err) => {
                            tracing::warn!(error = %err, "request served, but its lock's release failed");
                        }
                    }
                    answered
                }
                // Dropped: the lock is most likely gone already; released in the background.
                None => Ok(status(StatusCode::SERVICE_UNAVAILABLE, None)),
            }
        })
    }
}

/// The answer to a request whose lock was not taken.
fn refused<B: Default>(err: &LockError, on_busy: OnBusy) -> Response<B> {
    match err {
        LockError::Busy { retry_after, .. } => status(on_busy.status(), *retry_after),
        // Another request of the same task holds it: the same as busy to this client.
        LockError::HeldByThisTask { .. } => status(on_busy.status(), None),
        other => {
            tracing::warn!(error = %other, "request not served: its lock could not be taken");
            status(StatusCode::SERVICE_UNAVAILABLE, None)
        }
    }
}

fn status<B: Default>(status: StatusCode, retry_after: Option<Duration>) -> Response<B> {
    let mut response = Response::new(B::default());
    *response.status_mut() = status;
    if let Some(after) = retry_after {
        // Whole seconds, rounded up: a client that comes back sooner finds it still busy.
        let seconds = after.as_secs() + u64::from(after.subsec_nanos() > 0);
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(seconds.max(1)));
    }
    response
}
