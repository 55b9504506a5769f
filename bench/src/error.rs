//! One error type for everything a benchmark run can fail on.

use std::fmt;

/// A failure that stops a measurement: the message says which step failed and why.
#[derive(Debug)]
pub struct BenchError(String);

impl BenchError {
    pub fn new(message: impl Into<String>) -> Self {
        BenchError(message.into())
    }

    pub fn from_redis(step: &str, err: redis::RedisError) -> Self {
        BenchError(format!("{step}: {err}"))
    }
}

impl fmt::Display for BenchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for BenchError {}

impl From<lock_runtime::LockError> for BenchError {
    fn from(err: lock_runtime::LockError) -> Self {
        BenchError(err.to_string())
    }
}

impl From<rslock::LockError> for BenchError {
    fn from(err: rslock::LockError) -> Self {
        BenchError(format!("rslock: {err}"))
    }
}

impl From<redis::RedisError> for BenchError {
    fn from(err: redis::RedisError) -> Self {
        BenchError(err.to_string())
    }
}

impl From<sqlx::Error> for BenchError {
    fn from(err: sqlx::Error) -> Self {
        BenchError(format!("postgres: {err}"))
    }
}

impl From<std::io::Error> for BenchError {
    fn from(err: std::io::Error) -> Self {
        BenchError(err.to_string())
    }
}
