//! What a holder asked to let go is told: [`ReleaseRequest`].

/// A request that the holder of a lock let go: what
/// [`LockGuard::release_requested`](crate::LockGuard::release_requested) and
/// [`CurrentLock::release_requested`](crate::CurrentLock::release_requested) resolve with.
/// The holder decides what to do: finish, or stop and release.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReleaseRequest {
    key: String,
    from: String,
}

impl ReleaseRequest {
    pub(crate) fn new(key: &str, from: &str) -> ReleaseRequest {
        ReleaseRequest {
            key: key.to_owned(),
            from: from.to_owned(),
        }
    }

    /// The lock's key, as the application named it.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// Who asked, and why, in their own words (`lockctl revoke` writes the user, host and
    /// reason).
    pub fn from(&self) -> &str {
        &self.from
    }
}

impl std::fmt::Display for ReleaseRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "release of `{}` requested", self.key.escape_debug())?;
        if !self.from.is_empty() {
            write!(f, " by {}", self.from.escape_debug())?;
        }
        Ok(())
    }
}
