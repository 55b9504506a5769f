use lock_runtime::{LockError, LockManager, distributed_lock};

#[derive(Debug, PartialEq)]
enum AppError {
    Parse,
    Lock(String),
}

impl From<LockError> for AppError {
    fn from(err: LockError) -> Self {
        AppError::Lock(err.to_string())
    }
}

impl From<std::num::ParseIntError> for AppError {
    fn from(_: std::num::ParseIntError) -> Self {
        AppError::Parse
    }
}

// `return` and `?` leave the body, which still runs inside the locked section, and `?`
// converts into the fn's own error type, exactly as without the attribute.
#[distributed_lock(key = "parse:<text>", manager = locks)]
async fn parse(locks: &LockManager, text: &str) -> Result<u64, AppError> {
    if text.is_empty() {
        return Ok(0);
    }
    let value: u64 = text.parse()?;
    for digit in text.chars() {
        if digit == '9' {
            return Ok(9);
        }
    }
    Ok(value)
}

// A body that only diverges.
#[distributed_lock(key = "fail:<code>", manager = locks)]
async fn always_fails(locks: &LockManager, code: u8) -> Result<(), AppError> {
    return Err(AppError::Lock(code.to_string()));
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let locks = LockManager::memory();
    assert_eq!(parse(&locks, "").await, Ok(0));
    assert_eq!(parse(&locks, "19").await, Ok(9));
    assert_eq!(parse(&locks, "12").await, Ok(12));
    assert_eq!(parse(&locks, "x").await, Err(AppError::Parse));
    assert_eq!(always_fails(&locks, 4).await, Err(AppError::Lock("4".into())));
}
