//! What went wrong, with its context (which key, which server), and the exit code it means.

use std::fmt;

/// A failed command: the message says what was being done, where, and why.
#[derive(Debug)]
pub(crate) struct Failure {
    message: String,
    usage: bool,
}

impl Failure {
    /// Something failed while doing what was asked (exit code 1).
    pub(crate) fn failed(message: impl Into<String>) -> Self {
        Failure {
            message: message.into(),
            usage: false,
        }
    }

    /// What was asked cannot be done as asked (exit code 2).
    pub(crate) fn usage(message: impl Into<String>) -> Self {
        Failure {
            message: message.into(),
            usage: true,
        }
    }

    /// A store's inspection side failed: a usage error where the request was wrong (an empty
    /// key), else a failure (its message names the server).
    pub(crate) fn store(err: lock_runtime::store::StoreError) -> Self {
        if err.is_config() {
            Failure::usage(err.to_string())
        } else {
            Failure::failed(err.to_string())
        }
    }

    /// The deployment could not be connected to: a usage error for a URL or setting that
    /// cannot work, else a failure.
    pub(crate) fn lock(err: lock_runtime::LockError) -> Self {
        if matches!(err, lock_runtime::LockError::Config(_)) {
            Failure::usage(err.to_string())
        } else {
            Failure::failed(err.to_string())
        }
    }

    pub(crate) fn exit_code(&self) -> u8 {
        if self.usage { 2 } else { 1 }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}
