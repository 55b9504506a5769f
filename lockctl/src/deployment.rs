//! The deployment lockctl reads: a manager connected to its URL, as the application's are,
//! and its store's inspection side.

use std::time::Duration;

use lock_runtime::LockManager;
use lock_runtime::store::Inspect;

use crate::failure::Failure;

/// The deployment the locks are read from: its store's inspection side, and how it is named.
pub(crate) struct Deployment {
    /// Kept alive for as long as the inspection side is used.
    manager: LockManager,
    /// The URL as it may be shown: without its password.
    shown: String,
    /// The locks live in several places (a cluster's masters, Redlock's masters): each is
    /// named in the list.
    several: bool,
}

impl Deployment {
    /// Connects to the deployment at `url`, as the library does, with the key prefix the
    /// locks were taken with.
    pub(crate) async fn connect(
        url: &str,
        prefix: &str,
        timeout: Duration,
    ) -> Result<Deployment, Failure> {
        if url
            .get(..9)
            .is_some_and(|scheme| scheme.eq_ignore_ascii_case("memory://"))
        {
            return Err(Failure::usage(
                "memory:// locks live inside one process: there is nothing to look at from \
                 outside; give the Redis deployment the application uses",
            ));
        }
        let manager = LockManager::builder()
            .url(url)
            .key_prefix(prefix)
            .request_timeout(timeout)
            // Who a request to let go, a steal and a lock held by `steal --hold` name.
            .app_name(format!("lockctl {}", crate::unlock::operator()))
            .build()
            .await
            .map_err(Failure::lock)?;
        let mut deployment = Deployment {
            manager,
            shown: lock_runtime::inspect::redact_url(url),
            several: false,
        };
        let places = deployment.inspect()?.places().await;
        deployment.several = places.map_err(Failure::store)?.len() > 1;
        Ok(deployment)
    }

    /// A deployment over `manager` (a `memory://` one shared by name, in this process).
    #[cfg(test)]
    pub(crate) async fn over(manager: LockManager, shown: &str) -> Deployment {
        Deployment {
            manager,
            shown: shown.to_owned(),
            several: false,
        }
    }

    /// Its manager: what asks a holder to let go, steals, and reads elections.
    pub(crate) fn manager(&self) -> &LockManager {
        &self.manager
    }

    /// The inspection side of its store; an error for a store that has none.
    pub(crate) fn inspect(&self) -> Result<&dyn Inspect, Failure> {
        self.manager.inspect().ok_or_else(|| {
            Failure::usage(format!(
                "the store `{}` cannot be inspected: it offers no inspection side \
                 (lock_runtime::store::Store::inspect), so lockctl cannot list, show or unlock \
                 its locks",
                self.manager.backend()
            ))
        })
    }

    /// The URL as it may be shown.
    pub(crate) fn shown(&self) -> &str {
        &self.shown
    }

    /// Whether the locks live in several places.
    pub(crate) fn several(&self) -> bool {
        self.several
    }
}
