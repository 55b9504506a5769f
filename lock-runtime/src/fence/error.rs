//! What a fenced claim or write answers when it is refused, or cannot be made.

/// Why a claim or a fenced write did not happen. A refusal ([`Stale`](FenceError::Stale),
/// [`NotClaimed`](FenceError::NotClaimed)) means the resource is guarded by a newer holder of the
/// lock, or this holder never claimed it: nothing the call was to write was written, and the
/// transaction it ran in must not commit anything the holder read or computed from the resource.
/// Roll it back and give up the section; the lock is no longer this holder's to use.
///
/// Matching a refusal:
///
/// ```
/// use lock_runtime::fence::FenceError;
///
/// fn describe(err: &FenceError) -> String {
///     match err {
///         FenceError::Stale { current, offered, .. } => {
///             format!("overtaken: the resource is at token {current}, ours is {offered}")
///         }
///         other => other.to_string(),
///     }
/// }
/// # let err = FenceError::Stale { resource: "cart:7".into(), current: 9, offered: 4 };
/// # assert!(describe(&err).starts_with("overtaken"));
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FenceError {
    /// A holder with a higher fencing token has claimed the resource: this holder was overtaken
    /// (its lease expired, or the lock was taken from it) and must not read or write it on.
    /// `current == offered` when another holder claimed with the same token: a lock store that
    /// lost its counter's last writes (a restart without persistence, a failover) handed the
    /// token out twice, and the other holder claimed first (see [`Fence`](super::Fence)).
    #[error(
        "resource `{resource}` refused fencing token {offered}: another holder of its lock claimed \
         it with token {current}{}. This holder lost its lock; roll back and give up the section",
        if current == offered { " (the same token, handed out twice by a lock store that lost its counter)" } else { "" }
    )]
    Stale {
        /// The resource, as the fence names it.
        resource: String,
        /// The resource's fence: the highest token that claimed it.
        current: u64,
        /// The token this holder offered.
        offered: u64,
    },
    /// A fenced write or check found the resource not claimed with this token (`current` is
    /// lower, or `None`: never claimed): claim it ([`Fence`](super::Fence)'s `claim`) before
    /// the first read, in the transaction of the read or an earlier one.
    #[error(
        "resource `{resource}` is not claimed by fencing token {offered} (its fence is {}): \
         claim it before reading it, then write",
        match current { Some(token) => token.to_string(), None => "unset".to_string() }
    )]
    NotClaimed {
        /// The resource, as the fence names it.
        resource: String,
        /// The resource's fence, lower than the token, or `None` if never claimed.
        current: Option<u64>,
        /// The token this holder offered.
        offered: u64,
    },
    /// [`Fence::current`](super::Fence::current) was called outside a locked section: there is
    /// no lock, so no token.
    #[error(
        "no lock is held by this task, so there is no fencing token to claim `{resource}` with: \
         call this inside a #[distributed_lock] body or a LockGuard::scope, or build the fence \
         from the guard with Fence::of"
    )]
    NoLock {
        /// The resource the claim was for, if named (the held lock's key otherwise).
        resource: String,
    },
    /// The token does not fit the store's integers (SQL's `BIGINT` holds up to `i64::MAX`).
    #[error(
        "fencing token {offered} for resource `{resource}` is above {limit}, the largest the \
         fence's column holds"
    )]
    TokenRange {
        /// The resource.
        resource: String,
        /// The token offered.
        offered: u64,
        /// The largest token the store holds.
        limit: u64,
    },
    /// The resource's store could not be asked, or answered something the fence does not
    /// understand: nothing is known to be claimed or written. Where a transaction was in use,
    /// roll it back.
    #[error("fence of resource `{resource}` on {store}: {source}")]
    Store {
        /// The resource.
        resource: String,
        /// Which store, and which step (`postgres: claim`, `redis: fenced SET`).
        store: String,
        /// What the store's client said.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync + 'static>,
    },
}

impl FenceError {
    /// True for a refusal ([`Stale`](FenceError::Stale) or
    /// [`NotClaimed`](FenceError::NotClaimed)): the resource is someone else's now, or was never
    /// this holder's; not worth retrying with the same token.
    pub fn is_refusal(&self) -> bool {
        matches!(
            self,
            FenceError::Stale { .. } | FenceError::NotClaimed { .. }
        )
    }

    /// The error of a store's client, with which store and step.
    pub fn store(
        resource: &str,
        store: impl Into<String>,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> FenceError {
        FenceError::Store {
            resource: resource.to_owned(),
            store: store.into(),
            source: Box::new(source),
        }
    }
}
