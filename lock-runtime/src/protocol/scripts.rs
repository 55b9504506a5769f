//! The Lua scripts as the server runs them: each script's text after the preludes it uses,
//! cached by an `EVAL` that does nothing, called by `EVALSHA`, and loaded again when the server
//! forgot them.

use std::sync::LazyLock;

use redis::{
    Cmd, ErrorKind, FromRedisValue, Pipeline, RedisError, RedisResult, Script, ServerErrorKind,
    Value,
};

/// The text of a script of `scripts/` as the server runs it: the preludes every script starts
/// with (rights.lua: the user's rights; value.lua: the stored value and the token's short id;
/// queue.lua: fencing tokens and the line of fair waiters), then the script. `light` leaves
/// queue.lua out, for the renewal: the watchdog's pipelines run it for every lease.
macro_rules! script_text {
    (light $file:literal) => {
        concat!(
            include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/rights.lua")),
            include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/value.lua")),
            include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/", $file))
        )
    };
    ($file:literal) => {
        concat!(
            include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/rights.lua")),
            include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/value.lua")),
            include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/queue.lua")),
            include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/", $file))
        )
    };
}
pub(crate) use script_text;

/// Takes a lock, or answers who holds it (acquire.lua).
pub(crate) static ACQUIRE: LazyLock<Lua> = LazyLock::new(|| Lua::new(script_text!("acquire.lua")));
/// Renews a lock's, a permit's, a read share's or a write hold's lease (renew.lua).
pub(crate) static RENEW: LazyLock<Lua> =
    LazyLock::new(|| Lua::new(script_text!(light "renew.lua")));
/// Releases a lock (release.lua).
pub(crate) static RELEASE: LazyLock<Lua> = LazyLock::new(|| Lua::new(script_text!("release.lua")));
/// Hands a lock to a waiter of the same process (handoff.lua).
pub(crate) static HANDOFF: LazyLock<Lua> = LazyLock::new(|| Lua::new(script_text!("handoff.lua")));
/// Takes a lock whoever holds it and tells its holder (steal.lua).
pub(crate) static STEAL: LazyLock<Lua> = LazyLock::new(|| Lua::new(script_text!("steal.lua")));
/// Takes a semaphore's permit (semaphore.lua).
pub(crate) static SEMAPHORE: LazyLock<Lua> =
    LazyLock::new(|| Lua::new(script_text!("semaphore.lua")));
/// Gives a permit back (permit_release.lua).
pub(crate) static PERMIT_RELEASE: LazyLock<Lua> =
    LazyLock::new(|| Lua::new(script_text!("permit_release.lua")));
/// Takes a read share or the write hold (rw_acquire.lua).
pub(crate) static RW_ACQUIRE: LazyLock<Lua> =
    LazyLock::new(|| Lua::new(script_text!("rw_acquire.lua")));
/// Gives a read share or the write hold back (rw_release.lua).
pub(crate) static RW_RELEASE: LazyLock<Lua> =
    LazyLock::new(|| Lua::new(script_text!("rw_release.lua")));
/// A writer stops waiting (rw_leave.lua).
pub(crate) static RW_LEAVE: LazyLock<Lua> =
    LazyLock::new(|| Lua::new(script_text!("rw_leave.lua")));
/// A fair waiter leaves the line (leave.lua).
pub(crate) static LEAVE: LazyLock<Lua> = LazyLock::new(|| Lua::new(script_text!("leave.lua")));
/// Hands a token to a lock the acquire's transaction took from a lost counter (seed.lua).
pub(crate) static SEED: LazyLock<Lua> = LazyLock::new(|| Lua::new(script_text!("seed.lua")));

/// One of the lock scripts, with its source kept for putting it in a server's cache.
pub(crate) struct Lua {
    script: Script,
    source: &'static str,
}

impl Lua {
    pub(crate) fn new(source: &'static str) -> Self {
        Lua {
            script: Script::new(source),
            source,
        }
    }

    /// Puts the script in the server's cache with an `EVAL` that does nothing (every script
    /// returns at once when given no keys). Unlike `SCRIPT LOAD`, this needs no rights beyond
    /// running scripts, so users of a Redis 7 ACL without `+script` work too.
    async fn cache(&self, conn: &mut impl redis::aio::ConnectionLike) -> RedisResult<()> {
        redis::cmd("EVAL")
            .arg(self.source)
            .arg(0)
            .query_async::<redis::Value>(conn)
            .await?;
        Ok(())
    }
}

impl std::ops::Deref for Lua {
    type Target = Script;

    fn deref(&self) -> &Script {
        &self.script
    }
}

/// Whether the server answered that it does not know the script (a first use, a restart, a
/// failover, SCRIPT FLUSH): told by the error's code, not its text, which servers changed.
pub(crate) fn is_noscript(err: &RedisError) -> bool {
    err.kind() == ErrorKind::Server(ServerErrorKind::NoScript)
}

/// A request that calls a script: a pipeline, or one command (an `EVALSHA` built by hand).
pub(crate) trait ScriptCall {
    async fn send<T: FromRedisValue>(
        &self,
        conn: &mut impl redis::aio::ConnectionLike,
    ) -> RedisResult<T>;
}

impl ScriptCall for Pipeline {
    async fn send<T: FromRedisValue>(
        &self,
        conn: &mut impl redis::aio::ConnectionLike,
    ) -> RedisResult<T> {
        self.query_async(conn).await
    }
}

impl ScriptCall for Cmd {
    async fn send<T: FromRedisValue>(
        &self,
        conn: &mut impl redis::aio::ConnectionLike,
    ) -> RedisResult<T> {
        self.query_async(conn).await
    }
}

/// Sends a request that calls `script`; if the server does not know the script (a first use,
/// a restart, a failover, SCRIPT FLUSH), caches it and sends the request once more.
pub(crate) async fn query_loading<T: FromRedisValue>(
    request: &impl ScriptCall,
    script: &Lua,
    conn: &mut impl redis::aio::ConnectionLike,
) -> RedisResult<T> {
    match request.send(conn).await {
        Err(err) if is_noscript(&err) => {
            script.cache(conn).await?;
            request.send(conn).await
        }
        answer => answer,
    }
}

/// Sends a pipeline that mixes calls of `script` with other commands and answers each of them
/// apart (`ignore_errors`: one command's error fails no other); if the server did not know the
/// script, caches it and sends the pipeline once more. Every command in it must bear being
/// sent twice.
pub(crate) async fn query_each_loading(
    pipe: &Pipeline,
    script: &Lua,
    conn: &mut impl redis::aio::ConnectionLike,
) -> RedisResult<Vec<Value>> {
    let answers: Vec<Value> = pipe.query_async(conn).await?;
    let forgot = answers
        .iter()
        .any(|answer| matches!(answer, Value::ServerError(err) if err.kind() == Some(ServerErrorKind::NoScript)));
    if !forgot {
        return Ok(answers);
    }
    script.cache(conn).await?;
    pipe.query_async(conn).await
}

/// Runs one script call (`EVALSHA`), caching the script first if the server does not know it.
pub(crate) async fn invoke<T: FromRedisValue>(
    invocation: &redis::ScriptInvocation<'_>,
    script: &Lua,
    conn: &mut impl redis::aio::ConnectionLike,
) -> RedisResult<T> {
    let mut pipe = redis::pipe();
    pipe.invoke_script(invocation);
    let (answer,): (T,) = query_loading(&pipe, script, conn).await?;
    Ok(answer)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_forgotten_script_is_told_by_its_code_whatever_the_text() {
        for reply in [
            // Redis 5 to 8.
            &b"-NOSCRIPT No matching script. Please use EVAL.\r\n"[..],
            // Valkey 8.0 and later.
            b"-NOSCRIPT No matching script.\r\n",
        ] {
            let answer = redis::parse_redis_value(reply).expect("a reply");
            assert!(
                matches!(&answer, Value::ServerError(err) if err.kind() == Some(ServerErrorKind::NoScript))
            );
            let err = answer.extract_error().expect_err("an error");
            assert!(is_noscript(&err), "{err}");
        }
        let lua = redis::parse_redis_value(
            b"-ERR Error running script (call to f_0123): @user_script:1: NOSCRIPT in a message\r\n",
        )
        .and_then(Value::extract_error)
        .expect_err("an error");
        assert!(!is_noscript(&lua), "{lua}");
    }
}
