//! How a sqlx error counts as a [`StoreError`]: transient for a lost or refused connection, a
//! server shutting down or failing over, a pool that had no connection in time; permanent
//! otherwise. Messages name the server, the step and the key, never a password.

use sqlx::Row;
use sqlx::postgres::PgRow;

use crate::store::StoreError;

/// SQLSTATE classes and codes worth sending the request again for: connection exceptions
/// (08), operator intervention (57P: shutdown, crash, cannot connect now), a read-only
/// transaction (25006: the primary was demoted while it failed over), serialization failure
/// and deadlock (40001, 40P01), too many connections (53300).
fn transient_code(code: &str) -> bool {
    code.starts_with("08")
        || code.starts_with("57P")
        || matches!(code, "25006" | "40001" | "40P01" | "53300")
}

fn is_transient(err: &sqlx::Error) -> bool {
    match err {
        sqlx::Error::Io(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed
        | sqlx::Error::Protocol(_) => true,
        sqlx::Error::Database(db) => db.code().is_some_and(|code| transient_code(&code)),
        _ => false,
    }
}

/// Whether `err` says the connection was gone before the statement could run: the socket was
/// closed, or the server ended the backend (`57P01` terminated by an administrator, `57P02`
/// crash shutdown) and said so as the connection's last word.
pub(crate) fn connection_gone(err: &sqlx::Error) -> bool {
    match err {
        sqlx::Error::Io(_) => true,
        sqlx::Error::Database(db) => db
            .code()
            .is_some_and(|code| matches!(code.as_ref(), "57P01" | "57P02")),
        _ => false,
    }
}

/// `err` of `operation` (on the lock `key`) at `at` (`postgres host:port`).
pub(crate) fn failure(
    at: &str,
    operation: &str,
    key: Option<&str>,
    err: sqlx::Error,
) -> StoreError {
    let of_key = key.map(|key| format!(" of `{key}`")).unwrap_or_default();
    let said = format!("{at}: {operation}{of_key}: {err}");
    if is_transient(&err) {
        StoreError::transient(said)
    } else {
        StoreError::permanent(said)
    }
}

/// A failure to read or connect to `url` (shown as `shown`), with anything of its password
/// that the error's text repeats hidden.
pub(crate) fn connect_failure(shown: &str, url: &str, err: &sqlx::Error) -> StoreError {
    let mut said = format!("cannot connect to `{shown}`: {err}");
    for secret in secrets(url) {
        said = said.replace(&secret, "***");
    }
    if is_transient(err) {
        StoreError::transient(said)
    } else {
        StoreError::permanent(said)
    }
}

/// The password of `url` as written and percent-decoded (empty ones left out).
fn secrets(url: &str) -> Vec<String> {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let Some((userinfo, _)) = rest.rsplit_once('@') else {
        return Vec::new();
    };
    let Some((_, password)) = userinfo.split_once(':') else {
        return Vec::new();
    };
    let decoded = percent_encoding::percent_decode_str(password)
        .decode_utf8_lossy()
        .into_owned();
    [password.to_owned(), decoded]
        .into_iter()
        .filter(|secret| !secret.is_empty())
        .collect()
}

/// The column `column` of `row`, an answer of the step on `name` at `at`.
pub(crate) fn column<'r, T>(
    at: &str,
    name: &str,
    row: &'r PgRow,
    column: &str,
) -> Result<T, StoreError>
where
    T: sqlx::Decode<'r, sqlx::Postgres> + sqlx::Type<sqlx::Postgres>,
{
    row.try_get::<T, _>(column).map_err(|err| {
        StoreError::permanent(format!(
            "{at}: an answer about `{name}` did not read: {err}"
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_password_the_error_repeats_is_hidden() {
        let err = sqlx::Error::Configuration("bad port in u:s3cr%40t@h:x".into());
        let shown =
            connect_failure("postgres://u:***@h:x", "postgres://u:s3cr%40t@h:x", &err).to_string();
        assert!(!shown.contains("s3cr"), "{shown}");
        let err = sqlx::Error::Configuration("s3cr@t".into());
        let shown = connect_failure("x", "postgres://u:s3cr%40t@h:1", &err).to_string();
        assert!(!shown.contains("s3cr"), "{shown}");
    }

    #[test]
    fn connection_exceptions_are_transient() {
        for code in ["08006", "57P01", "25006", "40001", "53300"] {
            assert!(transient_code(code), "{code}");
        }
        for code in ["42P01", "23505", "42501"] {
            assert!(!transient_code(code), "{code}");
        }
    }
}
