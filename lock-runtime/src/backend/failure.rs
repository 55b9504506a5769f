//! How a Redis error counts as a [`StoreError`]: transient or permanent, and a refused command
//! or connect told as what to change.

use redis::{ErrorKind, RedisError, ServerErrorKind};

use crate::error::{BoxError, LockError};
use crate::store::StoreError;
use crate::store::error::Kind;

/// How a Redis error counts: transient for a dropped or refused connection, a timeout, or a
/// server busy loading or failing over; permanent otherwise. A command the user may not run is
/// told as such (see `refused_command`).
impl From<RedisError> for StoreError {
    fn from(err: RedisError) -> Self {
        let kind = if err.is_timeout() {
            Kind::TimedOut { limit: None }
        } else if is_transient(&err) {
            Kind::Transient
        } else {
            Kind::Permanent
        };
        let source = match refused_command(&err) {
            Some(refused) => refused.into(),
            None => Box::new(err) as BoxError,
        };
        StoreError::of_kind(kind, source)
    }
}

/// What the server said if it refused a command to this user (ACL), told as such and naming the
/// command where the answer does, with the grant that mends it; `None` for any other error.
///
/// Recognised: the server's own refusal of a command sent (`NOPERM ... run the '<command>'
/// command`, worded a little differently by each version), the one a script raises when it
/// asks for its rights before writing (rights.lua, Redis 7.0 and later: worded as the server's),
/// and a refusal inside a script that did not ask first (Redis 6.x, whose text does not name
/// the command: "The user executing the script can't run this command", or "can't access" a
/// key or channel).
pub(crate) fn refused_command(err: &RedisError) -> Option<String> {
    let said = err.to_string();
    let refused = err.code() == Some("NOPERM")
        || said.contains("NOPERM ")
        || said.contains("The user executing the script can't");
    if !refused {
        return None;
    }
    let text = said.to_ascii_lowercase();
    let named = text
        .split_once("run the '")
        .and_then(|(_, rest)| rest.split_once('\''))
        .map(|(command, _)| command)
        .filter(|command| {
            !command.is_empty()
                && command
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '|' || c == '-' || c == '_')
        });
    const RIGHTS: &str = "the rights the library needs are in docs/SERVERS.md, \"ACL rights\"";
    Some(match named {
        Some(command) => {
            let grant = command.replace('|', " +");
            format!(
                "the server refused the command {} for this user (ACL): grant it with ACL \
                 SETUSER <user> +{grant} (and the lock keys, ~<prefix>*); {RIGHTS}. It said: \
                 {said}",
                command.to_ascii_uppercase()
            )
        }
        None => format!(
            "the server refused a command (or a key or channel of it) to this user (ACL): \
             grant the user every right the library needs; {RIGHTS}. It said: {said}"
        ),
    })
}

/// Whether a Redis error may go away if the request is sent again. A NOSCRIPT that survived
/// caching the script means the node changed in between (a failover or a moved slot).
pub(crate) fn is_transient(err: &RedisError) -> bool {
    err.is_io_error()
        || err.is_timeout()
        || err.is_connection_dropped()
        || err.is_connection_refusal()
        || matches!(
            err.kind(),
            ErrorKind::Server(
                ServerErrorKind::TryAgain
                    | ServerErrorKind::ClusterDown
                    | ServerErrorKind::MasterDown
                    | ServerErrorKind::BusyLoading
                    | ServerErrorKind::ReadOnly
                    | ServerErrorKind::NoScript
            )
        )
}

/// The error of a failed connect to `server`, transient as [`is_transient`] says. Two that
/// recur until the configuration changes say what to change instead: an answer that was not in
/// Redis's protocol at all (an HTTP server on the port, a TLS server spoken to in plain text),
/// and a TLS handshake the configuration decides (a CA not trusted, a client certificate
/// missing).
pub(crate) fn connect_error(server: &str, err: &RedisError) -> LockError {
    let shown = err.to_string();
    if err.kind() == ErrorKind::Parse {
        return LockError::backend(
            "connect",
            None,
            server,
            format!(
                "the server at {server} did not answer as Redis does ({shown}): check that the \
                 URL's port is the Redis server's, and that TLS matches (rediss:// for a server \
                 that speaks TLS, redis:// for one that does not)"
            ),
        );
    }
    let (shown, transient) = match crate::tls::handshake_failure(&shown) {
        Some(explained) => (explained, false),
        None => (shown, is_transient(err)),
    };
    LockError::backend_with("connect", None, server, shown.into(), transient)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn redis_errors_are_classified_where_they_are_seen() {
        let dropped = RedisError::from(std::io::Error::from(std::io::ErrorKind::BrokenPipe));
        assert!(StoreError::from(dropped).is_transient());
        let timeout = RedisError::from(std::io::Error::from(std::io::ErrorKind::TimedOut));
        let timeout = StoreError::from(timeout);
        assert!(timeout.is_transient() && timeout.timeout() == Some(None));
        let loading = RedisError::from((
            ErrorKind::Server(ServerErrorKind::BusyLoading),
            "LOADING Redis is loading the dataset in memory",
        ));
        assert!(StoreError::from(loading).is_transient());
        let refused = RedisError::from((
            ErrorKind::Server(ServerErrorKind::ResponseError),
            "NOPERM this user has no permissions to run the 'evalsha' command",
        ));
        assert!(!StoreError::from(refused).is_transient());
    }

    fn reply(bytes: &[u8]) -> RedisError {
        redis::parse_redis_value(bytes)
            .and_then(redis::Value::extract_error)
            .expect_err("an error reply")
    }

    #[test]
    fn a_refused_command_is_named_with_its_grant_on_every_server() {
        for (answer, command, grant) in [
            // Redis 6.x, a command sent.
            (
                &b"-NOPERM this user has no permissions to run the 'zscore' command or its subcommand\r\n"[..],
                "ZSCORE",
                "+zscore",
            ),
            // Redis 7 and Valkey.
            (
                b"-NOPERM User u has no permissions to run the 'evalsha' command\r\n",
                "EVALSHA",
                "+evalsha",
            ),
            // A script that asked for its rights first (rights.lua).
            (
                b"-NOPERM this user has no permissions to run the 'zscore' command on the key lock:{a}:queue:expiry (the lock script asked before writing anything, and wrote nothing) script: 0123, on @user_script:20.\r\n",
                "ZSCORE",
                "+zscore",
            ),
            // Redis 7.2 and later, a command a script ran without asking.
            (
                b"-ERR ACL failure in script: NOPERM User u has no permissions to run the 'zadd' command script: 0123, on @user_script:9.\r\n",
                "ZADD",
                "+zadd",
            ),
        ] {
            let err = reply(answer);
            let failure = StoreError::from(err);
            assert!(!failure.is_transient());
            let shown = failure.to_string();
            assert!(
                shown.contains(&format!("the server refused the command {command} for this user (ACL)")),
                "{shown}"
            );
            assert!(shown.contains(&format!("ACL SETUSER <user> {grant}")), "{shown}");
            assert!(!shown.contains("not a read-write lock"), "{shown}");
        }
        // Redis 6.x and 7.0 inside a script: the command is not named, the refusal is told.
        let unnamed = StoreError::from(reply(
            b"-ERR The user executing the script can't run this command or subcommand script: 0123, on @user_script:3.\r\n",
        ))
        .to_string();
        assert!(
            unnamed.contains("the server refused a command"),
            "{unnamed}"
        );
        assert!(unnamed.contains("ACL rights"), "{unnamed}");
        // Anything else is left as the server said it.
        let other = StoreError::from(reply(b"-WRONGTYPE Operation against a key\r\n")).to_string();
        assert!(!other.contains("refused"), "{other}");
    }

    #[test]
    fn made_failures_keep_their_kind_and_message() {
        let quorum = StoreError::transient("only 1 of 3 masters answered, 2 needed");
        assert!(quorum.is_transient() && quorum.timeout().is_none());
        assert_eq!(quorum.to_string(), "only 1 of 3 masters answered, 2 needed");
        assert!(!StoreError::permanent("foreign data").is_transient());
        let limit = Duration::from_millis(5);
        assert_eq!(StoreError::timed_out(limit).timeout(), Some(Some(limit)));
        assert_eq!(
            StoreError::timed_out(limit).to_string(),
            "no answer within 5ms"
        );
    }

    #[test]
    fn a_failure_keeps_whether_it_may_pass_in_the_public_error() {
        let from = |failure| LockError::from_failure("acquire", Some("k"), "127.0.0.1:1", failure);
        let quorum = StoreError::transient("only 1 of 3 masters answered, 2 needed");
        assert!(from(quorum).is_retryable());
        assert!(from(StoreError::timed_out(Duration::from_millis(5))).is_retryable());
        assert!(!from(StoreError::permanent("foreign data at the key")).is_retryable());
        assert!(!LockError::backend("connect", None, "127.0.0.1:1", "NOAUTH").is_retryable());
    }
}
