//! Fencing for data a service keeps in Redis (a string, a hash, a list ... under one key): the
//! claim, and a claim with a command on the data, as one server-side step.
//!
//! The resource is the data key ([`Fence::resource`]). Its fence, the highest token that
//! claimed it (and the holder id of the claim, for a fence that has one: see [`Fence`]), lives
//! in a key of its own in the same Cluster slot, [`fence_key`]. Every call
//! here is one script call (`EVALSHA`, and `EVAL` when the server does not know the script: a
//! first use, a restart, a failover, `SCRIPT FLUSH`) that reads the fence, refuses or goes on,
//! runs the command on the data key, and raises the fence, with nothing else running between:
//!
//! | call | what it does on the server |
//! |---|---|
//! | [`claim`] | raises the fence to the token, or refuses ([`FenceError::Stale`]) if it is higher |
//! | [`check`] | refuses unless the fence is the token: `Stale` if higher, [`FenceError::NotClaimed`] if lower or unset |
//! | [`claim_get`] | a claim and `GET` of the data key: a read that a newer holder's claim shuts out |
//! | [`set`] | a claim and `SET` (with an expiry if given) |
//! | [`hset`] | a claim and `HSET` of fields |
//! | [`del`] | a claim and `DEL` |
//! | [`command`] | a claim and one command of the caller's on the data key (`INCRBY`, `RPUSH`, `ZADD` ...) |
//!
//! A refused call runs no command and leaves the fence as it was; so does a command the server
//! answers with an error (a wrong type, a bad argument): [`FenceError::Store`], naming the
//! resource and the step. A holder claims before its first read (with [`claim`] or
//! [`claim_get`]), and then writes with [`set`], [`hset`], [`del`] or [`command`]: each write
//! claims again, so it is refused once a newer holder has claimed, and the newer holder reads
//! nothing its predecessor wrote after being overtaken.
//!
//! ```no_run
//! use lock_runtime::fence::{Fence, FenceError, redis as fenced};
//!
//! # async fn body(mut conn: redis::aio::MultiplexedConnection) -> Result<(), FenceError> {
//! let fence = Fence::current()?.on("cart:7"); // the data key, this section's token
//! let cart: Option<String> = fenced::claim_get(&mut conn, &fence).await?;
//! let updated = format!("{}+apple", cart.unwrap_or_default());
//! fenced::set(&mut conn, &fence, updated, None).await?; // refused if overtaken since
//!
//! let stock = Fence::current()?.on("stock:apple");
//! let left: i64 =
//!     fenced::command(&mut conn, &stock, redis::cmd("DECRBY").arg("stock:apple").arg(1)).await?;
//! # let _ = left;
//! # Ok(())
//! # }
//! ```
//!
//! Every function takes any async connection of redis-rs: a `MultiplexedConnection`, a
//! `ConnectionManager`, a Cluster's `ClusterConnection`. The connection is the caller's: the
//! data's server, which need not be the lock's.
//!
//! What the fence needs from the server: that its key is kept as long as the data, so
//!
//! - no eviction policy of the `allkeys-*` kind may drop it (the fence key has no expiry, so
//!   `noeviction` and the `volatile-*` policies keep it); and nothing of the application's may
//!   delete or expire it. [`del`] deletes the data, never the fence.
//! - a restart that loses the data (no persistence) loses the fence with it, and a failover to a
//!   replica that missed the last writes can lose the last claims with the last writes; a
//!   holder overtaken just then is no longer refused. The data's own durability is the fence's.

use std::sync::LazyLock;
use std::time::Duration;

use redis::aio::ConnectionLike;
use redis::{Arg, Cmd, FromRedisValue, Script, ToSingleRedisArg, Value};

use super::{Fence, FenceError};
use crate::protocol::scripts::is_noscript;
use crate::protocol::slots::{slot, tag_in};

/// The script: the fence's claim or check, and a command on the data key (scripts/fence.lua).
const SOURCE: &str = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/fence.lua"));

/// The script's hash, for `EVALSHA`.
static SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(SOURCE));

/// The commands [`command`] runs: those that act on one key, given as their first argument,
/// and name no other key, never block, and do not delete the key by name alone but for `DEL`
/// and `UNLINK` on the data key itself. Anything else is refused before it is sent.
const ONE_KEY_COMMANDS: &[&str] = &[
    // strings
    "GET",
    "SET",
    "SETNX",
    "SETEX",
    "PSETEX",
    "GETSET",
    "GETDEL",
    "GETEX",
    "APPEND",
    "STRLEN",
    "GETRANGE",
    "SETRANGE",
    "INCR",
    "INCRBY",
    "INCRBYFLOAT",
    "DECR",
    "DECRBY",
    "SETBIT",
    "GETBIT",
    "BITCOUNT",
    "BITPOS",
    "BITFIELD", // the key itself
    "DEL",
    "UNLINK",
    "EXISTS",
    "TOUCH",
    "TYPE",
    "TTL",
    "PTTL",
    "EXPIRE",
    "PEXPIRE",
    "EXPIREAT",
    "PEXPIREAT",
    "PERSIST", // hashes
    "HSET",
    "HSETNX",
    "HMSET",
    "HGET",
    "HMGET",
    "HGETALL",
    "HDEL",
    "HEXISTS",
    "HINCRBY",
    "HINCRBYFLOAT",
    "HKEYS",
    "HVALS",
    "HLEN",
    "HSTRLEN", // lists
    "LPUSH",
    "RPUSH",
    "LPUSHX",
    "RPUSHX",
    "LPOP",
    "RPOP",
    "LRANGE",
    "LINDEX",
    "LLEN",
    "LSET",
    "LTRIM",
    "LREM",
    "LINSERT",
    "LPOS", // sets
    "SADD",
    "SREM",
    "SMEMBERS",
    "SISMEMBER",
    "SMISMEMBER",
    "SCARD",
    "SPOP",
    "SRANDMEMBER",
    // sorted sets
    "ZADD",
    "ZREM",
    "ZINCRBY",
    "ZSCORE",
    "ZMSCORE",
    "ZCARD",
    "ZCOUNT",
    "ZRANGE",
    "ZRANGEBYSCORE",
    "ZREVRANGE",
    "ZREVRANGEBYSCORE",
    "ZRANK",
    "ZREVRANK",
    "ZREMRANGEBYRANK",
    "ZREMRANGEBYSCORE",
    "ZPOPMIN",
    "ZPOPMAX", // streams
    "XADD",
    "XLEN",
    "XRANGE",
    "XREVRANGE",
    "XDEL",
    "XTRIM", // HyperLogLog
    "PFADD",
];

/// Of [`ONE_KEY_COMMANDS`], those that take any number of keys: allowed with the data key alone.
const MANY_KEY_COMMANDS: &[&str] = &["DEL", "UNLINK", "EXISTS", "TOUCH"];

/// The key that keeps the fence of the data key `resource`: `fence:{<n>}:<resource>`, `n` the
/// smallest number whose text, as a hash tag, puts a key in the resource's Redis Cluster slot.
/// So one script reaches both keys on a Cluster, whatever braces the resource has, and no two
/// resources share a fence key (the resource is read back from it after the first `}:`).
///
/// The fence key must outlive the data: see [the module's notes](self). Where the data's
/// server restricts the keys a user may touch (an ACL's `~pattern`), allow `fence:*` too.
///
/// ```
/// use lock_runtime::fence::redis::fence_key;
///
/// assert_eq!(fence_key("cart:7"), "fence:{8065}:cart:7"); // both in slot 9546
/// assert!(fence_key("{user:3}:profile").ends_with("}:{user:3}:profile"));
/// ```
pub fn fence_key(resource: &str) -> String {
    format!("fence:{{{}}}:{resource}", tag_in(slot(resource)))
}

/// Claims the resource: raises its fence to the token, or refuses with [`FenceError::Stale`] if
/// a newer holder's token is there, or this token with another holder id (a token the lock's
/// store handed out twice: `current == offered`). Claiming again with the same token and holder
/// is accepted. Claim before the first read of the resource (or read with [`claim_get`]).
///
/// ```no_run
/// # use lock_runtime::fence::{Fence, FenceError, redis as fenced};
/// # async fn f(conn: &mut redis::aio::MultiplexedConnection, guard: &lock_runtime::LockGuard) -> Result<(), FenceError> {
/// fenced::claim(conn, &Fence::of(guard)).await?;
/// # Ok(()) }
/// ```
pub async fn claim<C>(conn: &mut C, fence: &Fence) -> Result<(), FenceError>
where
    C: ConnectionLike + Send,
{
    let _: Value = call(conn, fence, Condition::Claim, None, "claim").await?;
    Ok(())
}

/// Checks that the resource's fence is this token, changing nothing: [`FenceError::Stale`] if
/// it is higher (overtaken) or this token claimed by another holder id, [`FenceError::NotClaimed`]
/// if lower or unset (never claimed with this token). For a step outside the resource that must not go on once overtaken; the fence
/// can still be raised right after the answer, so a write to the resource goes through
/// [`set`], [`hset`], [`del`] or [`command`] instead, which claim in the same step.
pub async fn check<C>(conn: &mut C, fence: &Fence) -> Result<(), FenceError>
where
    C: ConnectionLike + Send,
{
    let _: Value = call(conn, fence, Condition::Check, None, "check").await?;
    Ok(())
}

/// Claims the resource and reads it (`GET` of the data key) in one step: the value as it was
/// while the fence was this token. Refused ([`FenceError::Stale`]) if a newer holder claimed.
///
/// ```no_run
/// # use lock_runtime::fence::{Fence, FenceError, redis as fenced};
/// # async fn f(conn: &mut redis::aio::MultiplexedConnection) -> Result<(), FenceError> {
/// let fence = Fence::current()?;
/// let balance: Option<i64> = fenced::claim_get(conn, &fence).await?;
/// # Ok(()) }
/// ```
pub async fn claim_get<C, T>(conn: &mut C, fence: &Fence) -> Result<T, FenceError>
where
    C: ConnectionLike + Send,
    T: FromRedisValue,
{
    call(
        conn,
        fence,
        Condition::Claim,
        Some(("GET", Vec::new())),
        "claim and GET",
    )
    .await
}

/// Claims the resource and sets the data key to `value` (`SET`, with `PX` if `expiry` is given:
/// the data's expiry, never the fence's), in one step. Refused ([`FenceError::Stale`]) if a
/// newer holder claimed; then nothing is written.
///
/// ```no_run
/// # use lock_runtime::fence::{Fence, FenceError, redis as fenced};
/// # use std::time::Duration;
/// # async fn f(conn: &mut redis::aio::MultiplexedConnection) -> Result<(), FenceError> {
/// let fence = Fence::current()?;
/// fenced::set(conn, &fence, "shipped", Some(Duration::from_secs(3600))).await?;
/// # Ok(()) }
/// ```
pub async fn set<C, V>(
    conn: &mut C,
    fence: &Fence,
    value: V,
    expiry: Option<Duration>,
) -> Result<(), FenceError>
where
    C: ConnectionLike + Send,
    V: ToSingleRedisArg,
{
    let mut args = value.to_redis_args();
    if let Some(expiry) = expiry {
        // Under a millisecond is a millisecond: PX 0 is an error.
        let millis = expiry.as_millis().max(1);
        args.push(b"PX".to_vec());
        args.push(millis.to_string().into_bytes());
    }
    let _: Value = call(
        conn,
        fence,
        Condition::Claim,
        Some(("SET", args)),
        "fenced SET",
    )
    .await?;
    Ok(())
}

/// Claims the resource and sets `fields` of the hash at the data key (`HSET`), in one step:
/// the number of fields that were new. Refused ([`FenceError::Stale`]) if a newer holder
/// claimed; then no field is written. An empty `fields` is the server's error.
///
/// ```no_run
/// # use lock_runtime::fence::{Fence, FenceError, redis as fenced};
/// # async fn f(conn: &mut redis::aio::MultiplexedConnection) -> Result<(), FenceError> {
/// let fence = Fence::current()?.on("order:42");
/// fenced::hset(conn, &fence, &[("state", "paid"), ("by", "worker-3")]).await?;
/// # Ok(()) }
/// ```
pub async fn hset<C, F, V>(
    conn: &mut C,
    fence: &Fence,
    fields: &[(F, V)],
) -> Result<u64, FenceError>
where
    C: ConnectionLike + Send,
    F: ToSingleRedisArg,
    V: ToSingleRedisArg,
{
    let mut args = Vec::with_capacity(fields.len() * 2);
    for (field, value) in fields {
        args.extend(field.to_redis_args());
        args.extend(value.to_redis_args());
    }
    call(
        conn,
        fence,
        Condition::Claim,
        Some(("HSET", args)),
        "fenced HSET",
    )
    .await
}

/// Claims the resource and deletes the data key (`DEL`), in one step: whether it existed. The
/// fence stays, so a holder overtaken before the delete is still refused after it. Refused
/// ([`FenceError::Stale`]) if a newer holder claimed; then nothing is deleted.
pub async fn del<C>(conn: &mut C, fence: &Fence) -> Result<bool, FenceError>
where
    C: ConnectionLike + Send,
{
    let deleted: u64 = call(
        conn,
        fence,
        Condition::Claim,
        Some(("DEL", Vec::new())),
        "fenced DEL",
    )
    .await?;
    Ok(deleted > 0)
}

/// Claims the resource and runs `cmd` on its data key, in one step, answering the command's
/// reply. Refused ([`FenceError::Stale`]) if a newer holder claimed; then the command does not
/// run.
///
/// `cmd` is one command whose first argument is the data key ([`Fence::resource`]) and that
/// touches no other key: a command of strings, hashes, lists, sets, sorted sets or streams on one
/// key (`INCRBY`, `HINCRBY`, `RPUSH`, `SADD`, `ZADD`, `XADD` ..., reads too), `EXPIRE`, or `DEL`
/// of that key alone. Any other (another key, several keys, a blocking or server command) is
/// refused before it is sent, as [`FenceError::Store`]: a fence guards one key, and a second key
/// in another slot would fail on a Cluster anyway.
///
/// ```no_run
/// # use lock_runtime::fence::{Fence, FenceError, redis as fenced};
/// # async fn f(conn: &mut redis::aio::MultiplexedConnection) -> Result<(), FenceError> {
/// let fence = Fence::current()?.on("stock:sku-9");
/// let left: i64 =
///     fenced::command(conn, &fence, redis::cmd("DECRBY").arg(fence.resource()).arg(2)).await?;
/// # Ok(()) }
/// ```
pub async fn command<C, T>(conn: &mut C, fence: &Fence, cmd: &Cmd) -> Result<T, FenceError>
where
    C: ConnectionLike + Send,
    T: FromRedisValue,
{
    let (name, args) = one_key_command(fence, cmd)?;
    let step = format!("fenced {name}");
    call(
        conn,
        fence,
        Condition::Claim,
        Some((name.as_str(), args)),
        &step,
    )
    .await
}

/// The name of `cmd` (upper case) and its arguments after the data key, or why it is refused.
fn one_key_command(fence: &Fence, cmd: &Cmd) -> Result<(String, Vec<Vec<u8>>), FenceError> {
    let refuse = |name: &str, why: String| {
        FenceError::store(
            fence.resource(),
            format!("redis: fenced {name}"),
            UnfencedCommand(why),
        )
    };
    let mut parts = Vec::with_capacity(cmd.args_iter().len());
    for arg in cmd.args_iter() {
        match arg {
            Arg::Simple(bytes) => parts.push(bytes),
            _ => return Err(refuse("command", "a cursor is not an argument here".into())),
        }
    }
    let Some((name, rest)) = parts.split_first() else {
        return Err(refuse("command", "the command is empty".into()));
    };
    let name = String::from_utf8_lossy(name).to_ascii_uppercase();
    if !ONE_KEY_COMMANDS.contains(&name.as_str()) {
        return Err(refuse(
            &name,
            format!("{name} is not a command on one key that a fence can guard"),
        ));
    }
    let Some((key, args)) = rest.split_first() else {
        return Err(refuse(&name, format!("{name} names no key")));
    };
    if *key != fence.resource().as_bytes() {
        return Err(refuse(
            &name,
            format!("{name} must name the fence's resource as its key, and no other"),
        ));
    }
    if MANY_KEY_COMMANDS.contains(&name.as_str()) && !args.is_empty() {
        return Err(refuse(
            &name,
            format!("{name} of the fence's resource alone"),
        ));
    }
    Ok((name, args.iter().map(|arg| arg.to_vec()).collect()))
}

/// A command [`command`] does not send: why.
#[derive(Debug)]
struct UnfencedCommand(String);

impl std::fmt::Display for UnfencedCommand {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "not sent: {}", self.0)
    }
}

impl std::error::Error for UnfencedCommand {}

/// An error the server answered the command with (a wrong type, a bad argument): the command
/// did not run, and the fence was left as it was.
#[derive(Debug)]
struct CommandFailed(String);

impl std::fmt::Display for CommandFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "the command failed, nothing changed: {}", self.0)
    }
}

impl std::error::Error for CommandFailed {}

/// What the fence must allow for the step to go on.
#[derive(Clone, Copy)]
enum Condition {
    /// The fence is at most the token; raised to it.
    Claim,
    /// The fence is the token.
    Check,
}

/// One call of the script: the condition, and the command (its name and arguments after the
/// data key) if any. `step` names it in errors.
async fn call<C, T>(
    conn: &mut C,
    fence: &Fence,
    condition: Condition,
    command: Option<(&str, Vec<Vec<u8>>)>,
    step: &str,
) -> Result<T, FenceError>
where
    C: ConnectionLike + Send,
    T: FromRedisValue,
{
    let store_error =
        |err: redis::RedisError| FenceError::store(fence.resource(), format!("redis: {step}"), err);
    let request = |eval: &str, script: &str| {
        let mut cmd = redis::cmd(eval);
        cmd.arg(script)
            .arg(2)
            .arg(fence_key(fence.resource()))
            .arg(fence.resource())
            .arg(fence.token().to_string())
            .arg(match condition {
                Condition::Claim => "claim",
                Condition::Check => "check",
            })
            .arg(fence.holder().unwrap_or(""));
        match &command {
            Some((name, args)) => cmd.arg(*name).arg(args),
            None => cmd.arg(""),
        };
        cmd
    };
    let answer: Value = match request("EVALSHA", SCRIPT.get_hash())
        .query_async(conn)
        .await
    {
        Err(err) if is_noscript(&err) => request("EVAL", SOURCE).query_async(conn).await,
        answer => answer,
    }
    .map_err(store_error)?;
    settle(fence, answer).map_err(|err| match err {
        Settled::Refused(refusal) => refusal,
        Settled::Failed(message) => FenceError::store(
            fence.resource(),
            format!("redis: {step}"),
            CommandFailed(message),
        ),
        Settled::Unexpected(err) => store_error(err),
    })
}

/// Why a script's answer is not the command's reply.
enum Settled {
    /// The fence refused.
    Refused(FenceError),
    /// The server refused the command.
    Failed(String),
    /// The answer is not what the script answers, or the reply not what the caller asked for.
    Unexpected(redis::RedisError),
}

/// The command's reply from the script's answer, or the refusal it says.
fn settle<T: FromRedisValue>(fence: &Fence, answer: Value) -> Result<T, Settled> {
    let unexpected = |what: &str| {
        Settled::Unexpected(redis::RedisError::from((
            redis::ErrorKind::UnexpectedReturnType,
            "unexpected answer from the fence's script",
            what.to_owned(),
        )))
    };
    let Value::Array(mut items) = answer else {
        return Err(unexpected("not an array"));
    };
    if items.len() != 2 {
        return Err(unexpected("not two items"));
    }
    let detail = items.pop().unwrap_or(Value::Nil);
    let outcome = items.pop().unwrap_or(Value::Nil);
    let outcome = String::from_redis_value(outcome).map_err(|_| unexpected("no outcome"))?;
    let token_of = |value: Value| -> Result<Option<u64>, Settled> {
        let text = String::from_redis_value(value).map_err(|_| unexpected("no fence"))?;
        if text.is_empty() {
            return Ok(None);
        }
        text.parse()
            .map(Some)
            .map_err(|_| unexpected("the fence key holds something other than a token"))
    };
    match outcome.as_str() {
        "ok" => T::from_redis_value(detail)
            .map_err(|err| Settled::Unexpected(redis::RedisError::from(err))),
        "stale" => Err(Settled::Refused(FenceError::Stale {
            resource: fence.resource().to_owned(),
            current: token_of(detail)?.ok_or_else(|| unexpected("stale without a fence"))?,
            offered: fence.token(),
        })),
        "unclaimed" => Err(Settled::Refused(FenceError::NotClaimed {
            resource: fence.resource().to_owned(),
            current: token_of(detail)?,
            offered: fence.token(),
        })),
        "error" => Err(Settled::Failed(
            String::from_redis_value(detail).unwrap_or_default(),
        )),
        _ => Err(unexpected("an unknown outcome")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fence_key_shares_the_slot_of_its_resource() {
        for resource in [
            "cart:7",
            "{user:3}:profile",
            "a}b",
            "x{}y}",
            "a{b",
            "{}",
            "",
            "orders:{2026}:{x}",
            "é{ü}",
        ] {
            let key = fence_key(resource);
            assert_eq!(slot(&key), slot(resource), "{key} for {resource}");
            assert_ne!(key, resource);
        }
        assert_eq!(
            fence_key("cart:7"),
            format!("fence:{{{}}}:cart:7", tag_in(slot("cart:7")))
        );
    }

    #[test]
    fn distinct_resources_get_distinct_fence_keys() {
        let resources = ["a", "{a}", "a}", "{a}:fence", "{a}b", "a}b", "b}a"];
        let keys: std::collections::HashSet<String> =
            resources.iter().map(|r| fence_key(r)).collect();
        assert_eq!(keys.len(), resources.len(), "{keys:?}");
    }

    fn refusal(cmd: &Cmd) -> String {
        match one_key_command(&Fence::new("k", 1), cmd) {
            Err(err @ FenceError::Store { .. }) => err.to_string(),
            other => panic!("expected a refusal, got {other:?}"),
        }
    }

    #[test]
    fn a_command_on_the_data_key_alone_is_accepted() {
        let (name, args) =
            one_key_command(&Fence::new("k", 1), redis::cmd("incrby").arg("k").arg(5))
                .expect("one key");
        assert_eq!(name, "INCRBY");
        assert_eq!(args, vec![b"5".to_vec()]);
        assert!(one_key_command(&Fence::new("k", 1), redis::cmd("DEL").arg("k")).is_ok());
    }

    #[test]
    fn a_command_on_another_key_or_on_several_is_refused_before_it_is_sent() {
        assert!(refusal(redis::cmd("INCRBY").arg("other").arg(5)).contains("fenced INCRBY"));
        assert!(refusal(redis::cmd("DEL").arg("k").arg("other")).contains("alone"));
        assert!(refusal(redis::cmd("RENAME").arg("k").arg("j")).contains("not a command"));
        assert!(refusal(&redis::cmd("FLUSHALL")).contains("not a command"));
        assert!(refusal(redis::cmd("BLPOP").arg("k").arg(0)).contains("not a command"));
        assert!(refusal(&redis::cmd("GET")).contains("names no key"));
        assert!(refusal(&redis::Cmd::new()).contains("empty"));
    }

    #[test]
    fn the_scripts_answers_become_replies_and_refusals() {
        let fence = Fence::new("k", 7);
        let bulk = |s: &str| Value::BulkString(s.as_bytes().to_vec());
        let ok: i64 = settle(&fence, Value::Array(vec![bulk("ok"), Value::Int(3)]))
            .unwrap_or_else(|_| panic!("ok"));
        assert_eq!(ok, 3);
        let stale = settle::<Value>(&fence, Value::Array(vec![bulk("stale"), bulk("9")]));
        assert!(matches!(
            stale,
            Err(Settled::Refused(FenceError::Stale {
                current: 9,
                offered: 7,
                ..
            }))
        ));
        let unset = settle::<Value>(&fence, Value::Array(vec![bulk("unclaimed"), bulk("")]));
        assert!(matches!(
            unset,
            Err(Settled::Refused(FenceError::NotClaimed {
                current: None,
                offered: 7,
                ..
            }))
        ));
        let big = format!("{}", u64::MAX);
        let stale = settle::<Value>(&fence, Value::Array(vec![bulk("stale"), bulk(&big)]));
        assert!(matches!(
            stale,
            Err(Settled::Refused(FenceError::Stale {
                current: u64::MAX,
                ..
            }))
        ));
        let junk = settle::<Value>(&fence, Value::Array(vec![bulk("stale"), bulk("x")]));
        assert!(matches!(junk, Err(Settled::Unexpected(_))));
        assert!(matches!(
            settle::<Value>(&fence, Value::Int(1)),
            Err(Settled::Unexpected(_))
        ));
    }
}
