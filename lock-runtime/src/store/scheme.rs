//! URL schemes of stores outside the crate: one registration, and `LockManager::connect`,
//! the builder's `url` and the test kit's `over_url` reach the store by its URL.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, LazyLock, PoisonError, RwLock};

use super::{BoxFuture, Store, StoreError};
use crate::error::LockError;

/// What connects a URL of a registered scheme to its store.
type Connect =
    dyn Fn(String) -> BoxFuture<'static, Result<Arc<dyn Store>, StoreError>> + Send + Sync;

static SCHEMES: LazyLock<RwLock<HashMap<String, Arc<Connect>>>> = LazyLock::new(Default::default);

/// The schemes of the library's own stores, which no registration may take (and `postgres`,
/// `postgresql` where the `postgres` feature is built in).
const OWN: [&str; 11] = [
    "redis",
    "rediss",
    "redis+cluster",
    "rediss+cluster",
    "redis+sentinel",
    "rediss+sentinel",
    "redlock",
    "redlocks",
    "redis+unix",
    "unix",
    "memory",
];

/// Makes `LockManager::connect("<scheme>://...")` (and the builder's `url`, and the test kit's
/// `over_url`) build a manager over the store that `connect` makes of the URL. For the rest of
/// the process; registering a scheme again replaces its `connect`. The scheme is matched
/// without regard to case; the library's own schemes (`redis`, `memory`, ...) are refused.
///
/// `connect` gets the URL as the caller gave it (with any password in it: never log it), and
/// fails with a [`StoreError`] that names the server.
///
/// ```
/// use std::sync::Arc;
/// use lock_runtime::store::{self, Store, StoreError};
///
/// # fn open(url: &str) -> Result<Arc<dyn Store>, StoreError> { Err(StoreError::permanent("")) }
/// store::register_scheme("mystore", |url| async move { open(&url) }).unwrap();
/// assert!(store::register_scheme("redis", |url| async move { open(&url) }).is_err());
/// ```
pub fn register_scheme<F, Fut>(scheme: &str, connect: F) -> Result<(), LockError>
where
    F: Fn(String) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Arc<dyn Store>, StoreError>> + Send + 'static,
{
    let scheme = scheme.to_ascii_lowercase();
    if !crate::url::is_scheme(&scheme) {
        return Err(LockError::Config(format!(
            "`{}` is not a URL scheme: a letter, then letters, digits, `+`, `-` or `.`",
            scheme.escape_debug()
        )));
    }
    let postgres =
        cfg!(feature = "postgres") && matches!(scheme.as_str(), "postgres" | "postgresql");
    if OWN.contains(&scheme.as_str()) || postgres {
        return Err(LockError::Config(format!(
            "the URL scheme `{scheme}` is the library's own and cannot be registered: choose \
             another name for the store's URLs"
        )));
    }
    let connect: Arc<Connect> = Arc::new(move |url| Box::pin(connect(url)));
    SCHEMES
        .write()
        .unwrap_or_else(PoisonError::into_inner)
        .insert(scheme, connect);
    Ok(())
}

/// The store a registered scheme makes of `url`, if its scheme is registered.
pub(crate) async fn connect(url: &str) -> Option<Result<Arc<dyn Store>, LockError>> {
    let (scheme, _) = crate::url::split_scheme(url)?;
    let connect = SCHEMES
        .read()
        .unwrap_or_else(PoisonError::into_inner)
        .get(&scheme.to_ascii_lowercase())
        .cloned()?;
    Some(connect(url.to_owned()).await.map_err(|failure| {
        LockError::from_failure("connect", None, &crate::url::redact(url), failure)
    }))
}
