//! Why a request to a store failed, and whether sending it again may help.
//!
//! The distinction is made where the failure is seen (a dropped connection, a failover answer,
//! too few Redlock masters, too few replica acknowledgements), once, as a value: callers decide
//! on retries by asking it, never by downcasting or reading message text. It reaches them as
//! [`LockError::Backend`](crate::LockError::Backend) with its kind kept
//! (`LockError::from_failure`, here).

use std::fmt;
use std::time::Duration;

use crate::error::{BoxError, LockError};

/// A store request that failed: what happened (its message names the key and server where the
/// store knows them, never a password or an owner token), and whether sending it again may
/// help. The engine retries transient failures within the caller's wait and reports the rest
/// as [`LockError::Backend`](crate::LockError::Backend), keeping the kind
/// ([`LockError::is_retryable`](crate::LockError::is_retryable)).
///
/// ```
/// use lock_runtime::store::StoreError;
///
/// let down = StoreError::transient("connection to db-1:5432 refused");
/// assert!(down.is_transient());
/// assert!(!StoreError::permanent("table `locks` is missing: run the migration").is_transient());
/// ```
#[derive(Debug)]
pub struct StoreError {
    kind: Kind,
    source: BoxError,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// Sending the request again may succeed: a dropped or refused connection, a server busy
    /// loading or failing over, too few masters or replicas answering in time.
    Transient,
    /// No answer within `limit` (transient too); `None` when the connection gave up by its own
    /// timeout.
    TimedOut { limit: Option<Duration> },
    /// Sending it again will fail the same way: a refused command, bad credentials, data at the
    /// key that is not a lock.
    Permanent,
    /// Permanent, and the caller's own doing rather than the server's: two call sites that
    /// declare one semaphore with different numbers of permits. Reported as
    /// [`LockError::Config`](crate::LockError::Config).
    Config,
}

impl StoreError {
    /// A failure of `kind` (the Redis layer classifies its errors itself).
    pub(crate) fn of_kind(kind: Kind, source: BoxError) -> Self {
        StoreError { kind, source }
    }

    /// A failure that may go away if the request is sent again.
    pub fn transient(source: impl Into<BoxError>) -> Self {
        StoreError {
            kind: Kind::Transient,
            source: source.into(),
        }
    }

    /// A failure that sending the request again will not mend.
    pub fn permanent(source: impl Into<BoxError>) -> Self {
        StoreError {
            kind: Kind::Permanent,
            source: source.into(),
        }
    }

    /// A request the caller's own settings make wrong, not the store (two call sites that
    /// declare one semaphore with different numbers of permits): permanent, and reported as
    /// [`LockError::Config`](crate::LockError::Config).
    pub fn config(source: impl Into<BoxError>) -> Self {
        StoreError {
            kind: Kind::Config,
            source: source.into(),
        }
    }

    /// Whether this failure is the caller's settings' doing, not the server's (made with
    /// [`config`](Self::config)).
    pub fn is_config(&self) -> bool {
        self.kind == Kind::Config
    }

    /// No answer within `limit` (transient).
    pub fn timed_out(limit: Duration) -> Self {
        StoreError {
            kind: Kind::TimedOut { limit: Some(limit) },
            source: format!("no answer within {}", crate::shown::Shown(limit)).into(),
        }
    }

    /// `request`'s answer, or [`timed_out`](Self::timed_out) if none came within `limit`.
    pub(crate) async fn within<T>(
        limit: Duration,
        request: impl std::future::Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        tokio::time::timeout(limit, request)
            .await
            .unwrap_or_else(|_| Err(StoreError::timed_out(limit)))
    }

    /// Whether sending the request again may succeed. Requests are idempotent for the same
    /// owner token, so retrying them is safe.
    pub fn is_transient(&self) -> bool {
        !matches!(self.kind, Kind::Permanent | Kind::Config)
    }

    /// `Some` if the request got no answer in time: with the limit where it is known, `None`
    /// when the connection gave up by its own timeout.
    pub(crate) fn timeout(&self) -> Option<Option<Duration>> {
        match self.kind {
            Kind::TimedOut { limit } => Some(limit),
            _ => None,
        }
    }

    /// The underlying error, for [`LockError::Backend`](crate::LockError::Backend).
    pub(crate) fn into_source(self) -> BoxError {
        self.source
    }
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.source.fmt(f)
    }
}

impl std::error::Error for StoreError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source.source()
    }
}

/// A request whose pinned runtime shut down: permanent, it cannot be served any more.
impl From<crate::background::RuntimeGone> for StoreError {
    fn from(gone: crate::background::RuntimeGone) -> Self {
        StoreError::permanent(gone)
    }
}

/// A store's failure in the public error, its kind kept: made here, beside what it reads.
impl LockError {
    /// `failure` during `operation`: transient if it is.
    pub(crate) fn from_failure(
        operation: &'static str,
        key: Option<&str>,
        server: &str,
        failure: StoreError,
    ) -> Self {
        let transient = failure.is_transient();
        Self::backend_with(operation, key, server, failure.into_source(), transient)
    }

    /// A store's failure during `operation` (`"connect"`, `"acquire"`, ...) on `server`, as
    /// the public error: [`LockError::Backend`], retryable if the failure is transient. For a
    /// store's own code that returns a `LockError`, such as a factory of managers.
    ///
    /// ```
    /// use lock_runtime::LockError;
    /// use lock_runtime::store::StoreError;
    ///
    /// let err = LockError::from_store("connect", "db-1:5432", StoreError::transient("refused"));
    /// assert!(err.is_retryable());
    /// assert!(err.to_string().contains("db-1:5432"));
    /// ```
    pub fn from_store(operation: &'static str, server: &str, failure: StoreError) -> Self {
        Self::from_failure(operation, None, server, failure)
    }
}
