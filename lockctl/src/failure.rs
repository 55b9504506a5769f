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

    /// `what` failed on `server`: a Redis error with its context, and where the server's
    /// answer was not Redis's protocol at all, what to check.
    pub(crate) fn redis(what: &str, server: &str, err: &redis::RedisError) -> Self {
        if err.kind() == redis::ErrorKind::Parse {
            return Failure::failed(format!(
                "{what} on {server}: the server did not answer as Redis does ({err}): check \
                 that the URL's port is the Redis server's, and that TLS matches (rediss:// for \
                 a server that speaks TLS, redis:// for one that does not)"
            ));
        }
        Failure::failed(format!("{what} on {server}: {err}"))
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
