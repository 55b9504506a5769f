//! What the connect of one Redis server checks once: that it answers in Redis's protocol with
//! the credentials given, runs scripts, grants the rights the library needs, does not evict
//! lock keys, and lets this user publish to lock channels.

use redis::{RedisError, RedisResult};

use super::connection::{Conn, describe_error};
use crate::error::LockError;
use crate::protocol::Capabilities;

/// Checks once, at connect, what would otherwise fail on every call or silently: that the
/// connection is authenticated, that the server runs scripts, that it does not evict lock keys,
/// and whether the user may publish to lock channels (a Redis 7 ACL user is created without channel rights).
/// Returns whether release notifications can flow, and what the server offers beyond scripts.
pub(super) async fn probe(
    conn: &mut Conn,
    server: &str,
    key_prefix: &str,
) -> Result<(bool, Capabilities), LockError> {
    if let Err(err) = redis::cmd("PING").query_async::<()>(conn).await {
        if !speaks_redis(&err) {
            return Err(crate::backend::connect_error(server, &err));
        }
        let reason = if err.code() == Some("NOAUTH") {
            "authentication required: the server asks for a password and the URL gives none; \
             write redis://:PASSWORD@host:port, or redis://USER:PASSWORD@host:port for an ACL \
             user"
                .to_owned()
        } else {
            describe_error(&err)
        };
        // Bad credentials recur; a server that is not up yet may come up.
        let transient = err.code() != Some("NOAUTH") && crate::backend::is_transient(&err);
        return Err(LockError::backend_with(
            "connect",
            None,
            server,
            reason.into(),
            transient,
        ));
    }
    check_rights(conn, server, key_prefix).await?;
    // Managed services may refuse CONFIG: then there is nothing to tell.
    let policy: RedisResult<Vec<String>> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("maxmemory-policy")
        .query_async(conn)
        .await;
    if let Some(policy) = policy.ok().as_ref().and_then(|answer| answer.get(1))
        && evicts_lock_keys(policy)
    {
        tracing::warn!(
            server,
            policy = %policy,
            "maxmemory-policy {policy} lets the server evict held locks under memory pressure, \
             and a second holder then gets in: run locks on a server with maxmemory-policy \
             noeviction"
        );
    }
    let capabilities = Capabilities::probe(conn, key_prefix).await;
    tracing::debug!(server, protocol = %capabilities.describe(), "lock protocol");
    // Last, so that the connection's last command says a lock client connected (tools and
    // tests look for it in CLIENT LIST).
    let channel = format!("{key_prefix}{{lock-runtime:permission-probe}}");
    let published: RedisResult<i64> = redis::cmd("PUBLISH")
        .arg(&channel)
        .arg("")
        .query_async(conn)
        .await;
    match published {
        Err(err) if err.code() == Some("NOPERM") => {
            tracing::warn!(
                server,
                "this user may not publish to lock channels (`{key_prefix}*`): releases are not \
                 announced and waiters wait for leases to run out; grant the channels, e.g. \
                 ACL SETUSER <user> &{key_prefix}*"
            );
            Ok((false, capabilities))
        }
        _ => Ok((true, capabilities)),
    }
}

/// The commands the library runs on the lock keys besides `EVAL` (which the connect runs to ask
/// about them): those of the `ACL SETUSER` line of docs/SERVERS.md ("ACL rights"), which a unit
/// test compares this with.
const NEEDED: &[&str] = &[
    "evalsha",
    "get",
    "set",
    "del",
    "incr",
    "pexpire",
    "pttl",
    "persist",
    "exists",
    "time",
    "type",
    "hget",
    "zadd",
    "zrem",
    "zrange",
    "zrangebyscore",
    "zremrangebyscore",
    "zcard",
    "zscore",
    "hset",
    "hdel",
    "hgetall",
    "multi",
    "exec",
    "info",
    "ping",
];

/// Answers which of the commands in `ARGV[2..]` this user may not run on the key `ARGV[1]`
/// (`redis.acl_check_cmd`, Redis 7.0 and later and Valkey); nothing where the server cannot
/// say. `EVALSHA` is asked about with its key count: Redis 7.0 reads the count of a command
/// whose keys follow one even where it is missing, and crashes.
const RIGHTS_SCRIPT: &str = "local check = redis.acl_check_cmd
if not check then return {} end
local refused = {}
for i = 2, #ARGV do
  local allowed
  if ARGV[i] == 'evalsha' then
    allowed = check('evalsha', '0', '1', ARGV[1])
  else
    allowed = check(ARGV[i], ARGV[1])
  end
  if not allowed then refused[#refused + 1] = ARGV[i] end
end
return refused";

/// Checks at connect that the server runs scripts (nothing can be locked without them: an
/// error now, not at every acquire), and asks it which of the rights the library needs this
/// user lacks: logged once, naming them and the grant, since only the calls that need them
/// fail (plain locks need no sorted sets, say).
async fn check_rights(conn: &mut Conn, server: &str, key_prefix: &str) -> Result<(), LockError> {
    // Not the permission probe's channel, whose publish marks one connect (tools and tests
    // count them).
    let probe_key = format!("{key_prefix}{{lock-runtime:rights}}");
    let asked: RedisResult<Vec<String>> = redis::cmd("EVAL")
        .arg(RIGHTS_SCRIPT)
        .arg(0)
        .arg(&probe_key)
        .arg(NEEDED)
        .query_async(conn)
        .await;
    match asked {
        Err(err) if refuses_command(&err) => Err(LockError::backend(
            "connect",
            None,
            server,
            format!(
                "the server refuses Lua scripts ({}); locks need EVALSHA and EVAL: grant them \
                 (ACL SETUSER <user> +evalsha +eval) or use a server that allows scripting",
                describe_error(&err)
            ),
        )),
        Ok(refused) if !refused.is_empty() => {
            let names = refused.join(" ").to_ascii_uppercase();
            let grant: String = refused
                .iter()
                .map(|command| format!(" +{command}"))
                .collect();
            tracing::warn!(
                server,
                refused = %names,
                "this user may not run {names} on the lock keys (`{key_prefix}*`): the calls \
                 that need them fail, naming the command (plain locks need GET SET DEL INCR \
                 PEXPIRE PTTL TIME; fair locks, semaphores and read-write locks the sorted-set \
                 commands; deadlock detection across processes HSET HDEL HGETALL); grant them \
                 with ACL SETUSER <user>{grant} (docs/SERVERS.md, \"ACL rights\")"
            );
            Ok(())
        }
        // Granted, a server that cannot say, or one that failed otherwise: the first call tells.
        _ => Ok(()),
    }
}

/// Whether the server refused a command as such (an ACL without it, a service that disabled or
/// renamed it), rather than failing to run it. Told by the error's kind where it has one of its
/// own (`NOPERM`); an unknown command has none (`ERR`, on Redis and Valkey alike), so only
/// there is the server's own message read, from its start and in any case (Redis 6.0 wrote
/// "Unknown subcommand", 6.2 and later "unknown subcommand"). An error a script raised (its
/// text changed across servers: Valkey 8.0, 9.1) never counts.
fn refuses_command(err: &RedisError) -> bool {
    use redis::{ErrorKind, ServerErrorKind};
    match err.kind() {
        ErrorKind::Server(ServerErrorKind::NoPerm) => true,
        ErrorKind::Server(ServerErrorKind::ResponseError) => {
            let detail = err.detail().unwrap_or_default().trim_start();
            ["unknown command", "unknown subcommand"]
                .iter()
                .any(|start| {
                    detail
                        .get(..start.len())
                        .is_some_and(|head| head.eq_ignore_ascii_case(start))
                })
        }
        _ => false,
    }
}

/// Whether a `maxmemory-policy` can evict a lock key: every policy but `noeviction` can, since
/// lock keys carry an expiry (`volatile-*`) and are keys like any other (`allkeys-*`).
fn evicts_lock_keys(policy: &str) -> bool {
    policy != "noeviction"
}

/// Whether the answer behind `err` was in Redis's protocol at all: not when the bytes that came
/// back could not be read as one (an HTTP server, a TLS server spoken to in plain text).
fn speaks_redis(err: &RedisError) -> bool {
    err.kind() != redis::ErrorKind::Parse
}

#[cfg(test)]
mod tests {
    use redis::Value;

    use super::*;

    #[test]
    fn the_rights_asked_at_connect_are_the_documented_ones() {
        let doc = include_str!("../../../../docs/SERVERS.md");
        let section = doc.split_once("## ACL rights").expect("the section").1;
        let line = section
            .lines()
            .find(|line| line.starts_with("ACL SETUSER"))
            .expect("the line");
        let mut documented: Vec<&str> = line
            .split_whitespace()
            .filter_map(|word| word.strip_prefix('+'))
            .filter(|command| *command != "eval")
            // Run by the subscription and the release announcements, asked about apart.
            .filter(|command| !["publish", "subscribe", "unsubscribe"].contains(command))
            .collect();
        let mut asked = NEEDED.to_vec();
        documented.sort_unstable();
        asked.sort_unstable();
        assert_eq!(asked, documented);
    }

    fn error(reply: &[u8]) -> RedisError {
        redis::parse_redis_value(reply)
            .and_then(Value::extract_error)
            .expect_err("an error reply")
    }

    #[test]
    fn a_refused_command_is_told_by_its_kind_on_every_server() {
        for reply in [
            // Redis 7 and Valkey 8 and 9: the ACL.
            &b"-NOPERM this user has no permissions to run the 'eval' command\r\n"[..],
            b"-NOPERM User u has no permissions to run the 'eval' command\r\n",
            // Disabled or renamed, on Redis and Valkey alike.
            b"-ERR unknown command 'EVAL', with args beginning with: 'return 1' '0' \r\n",
            b"-ERR unknown subcommand 'SHARDNUMSUB'. Try PUBSUB HELP.\r\n",
            // Redis 6.0.
            b"-ERR Unknown subcommand or wrong number of arguments for 'X'. Try PUBSUB HELP.\r\n",
        ] {
            assert!(
                refuses_command(&error(reply)),
                "{}",
                String::from_utf8_lossy(reply)
            );
        }
        for reply in [
            // What a script raises, as Redis 7 and as Redis 6 and Valkey word it.
            &b"-ERR user_script:1: Script attempted to access nonexistent global variable 'x' script: 1, on @user_script:1.\r\n"[..],
            b"-ERR Error running script (call to f_0123): @user_script:1: unknown command\r\n",
            b"-NOSCRIPT No matching script. Please use EVAL.\r\n",
            b"-BUSY Redis is busy running a script.\r\n",
        ] {
            assert!(!refuses_command(&error(reply)), "{}", String::from_utf8_lossy(reply));
        }
    }
}
