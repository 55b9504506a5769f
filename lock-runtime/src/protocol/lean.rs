//! The lean paths of a plain lock on one server: a free lock taken in one transaction, and a
//! lock nobody waited for renewed and released by comparing its whole value. Everything else (a
//! busy lock to mark as awaited, a fair line, a kept or 0.2 lock, a lost counter, a value that
//! changed since it was written) falls back to the scripts, which read and write the same
//! value and count on the same counter.

use std::sync::LazyLock;

use redis::{Cmd, Pipeline, RedisResult, Value};

use super::scripts::{Lua, SEED, invoke, query_loading};
use super::value::held_owner;
use super::{MAX_TOKEN, NativeDelete, SEEDED};
use crate::blocker::Blocker;
use crate::key::Key;

/// Deletes KEYS[1] if it holds exactly ARGV[1]: the release of a server without a native
/// compare-and-delete. (pcall: a key of another type is simply not the value.)
static COMPARE_DELETE: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(
        "if #KEYS == 0 then return 0 end \
         if redis.pcall('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end \
         return 0",
    )
});

/// What the acquire transaction found.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Taken {
    /// The lock was free and is ours now, with this fencing token.
    Acquired { fence: u64 },
    /// Held by `owner` for `pttl` more milliseconds; `waiting` is its flag (`'0'`: nobody was
    /// told it is busy yet); `blocker`: who the holder is, if its value records that.
    Held {
        owner: String,
        waiting: char,
        pttl: u64,
        blocker: Option<Box<Blocker>>,
    },
    /// Taken, but the slot's counter had no token to give (absent, or lost): [`seed`] it.
    Unseeded,
    /// Taken past fair waiters in line, or maybe taken by a transaction that failed (a counter
    /// that is not a number, a right the user lacks): it must be given back
    /// (compare-and-delete) and asked for again by the script, which serves the line first or
    /// tells what is wrong.
    GiveBack,
    /// Anything else (a kept, reserved, 0.2 or foreign value, a counter to seed or that cannot
    /// be counted on): ask the script.
    Script,
}

/// What one lean attempt at a plain lock came to (see [`take`]).
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Took {
    /// Ours, with this fencing token.
    Acquired { fence: u64 },
    /// Held by the owner whose holder id is `holder` for `pttl` more milliseconds, and the
    /// caller need not mark it: the answer is busy.
    Busy {
        holder: u64,
        pttl: u64,
        blocker: Option<Box<Blocker>>,
    },
    /// Ask the script.
    Script,
    /// What the transaction may have taken as the value must be given back first
    /// ([`release`], then the release script if that deleted nothing), then the script asked.
    GiveBack,
}

/// One lean attempt of `token` at the plain lock `key`, writing `value` for `ttl_ms`: the
/// transaction of [`acquire`], and the seeding of a lost counter where it found one. `waits`:
/// the caller waits if the lock is busy, so that a lock nobody marked as awaited must be marked
/// (by the script); `joins`: the caller takes a place in a line of fair waiters that exists
/// (the script). Every request here may be sent again from the start: a grant whose answer was
/// lost is found held by `token`, and given back.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn take(
    conn: &mut impl redis::aio::ConnectionLike,
    key: &Key,
    counter: &str,
    token: &str,
    value: &str,
    ttl_ms: u64,
    waits: bool,
    joins: bool,
) -> RedisResult<Took> {
    Ok(match acquire(conn, key, counter, value, ttl_ms).await? {
        Taken::Acquired { fence } => Took::Acquired { fence },
        // Ours already (a request sent twice, whose first answer was lost with its
        // connection): whether a line formed meanwhile is unknown, so it is given back and the
        // script asked afresh.
        Taken::Held { owner, .. } if owner == token => Took::GiveBack,
        Taken::Held {
            owner,
            waiting,
            pttl,
            blocker,
        } => {
            // A waiter marks the lock as awaited, and joins a line that exists: the script.
            let script = match waiting {
                '0' => waits,
                '1' => false,
                _ => joins,
            };
            if script {
                Took::Script
            } else {
                Took::Busy {
                    holder: super::holder_id(&owner),
                    pttl,
                    blocker,
                }
            }
        }
        Taken::Unseeded => match seed(conn, &key.lock, counter, value).await? {
            Ok(Some(fence)) => Took::Acquired { fence },
            // Expired or deleted meanwhile: the script takes it afresh.
            Ok(None) => Took::Script,
            Err(()) => Took::GiveBack,
        },
        // Taken past a line of fair waiters, or maybe taken by a failed transaction.
        Taken::GiveBack => Took::GiveBack,
        Taken::Script => Took::Script,
    })
}

/// `MULTI; SET lock value NX PX ttl GET; PTTL lock; EXISTS line; INCR counter; EXEC`: one round
/// trip that takes a free lock with a token from the slot's counter, or reads who holds it. A
/// busy attempt still counts the counter up, which keeps tokens rising.
pub(crate) async fn acquire(
    conn: &mut impl redis::aio::ConnectionLike,
    key: &Key,
    counter: &str,
    value: &str,
    ttl_ms: u64,
) -> RedisResult<Taken> {
    // Each command sized for its arguments up front (a command keeps their bytes in one
    // buffer): built with `pipe().cmd().arg()`, its buffers grew argument by argument, a
    // dozen reallocations per acquire.
    let queue = key.queue();
    let mut set = Cmd::with_capacity(7, key.lock.len() + value.len() + 32);
    set.arg("SET")
        .arg(&key.lock)
        .arg(value)
        .arg("NX")
        .arg("PX")
        .arg(ttl_ms)
        .arg("GET");
    let mut pttl = Cmd::with_capacity(2, key.lock.len() + 4);
    pttl.arg("PTTL").arg(&key.lock);
    let mut exists = Cmd::with_capacity(2, queue.len() + 6);
    exists.arg("EXISTS").arg(&queue);
    let mut incr = Cmd::with_capacity(2, counter.len() + 4);
    incr.arg("INCR").arg(counter);
    let mut pipe = Pipeline::with_capacity(4);
    pipe.atomic()
        .add_command(set)
        .add_command(pttl)
        .add_command(exists)
        .add_command(incr);
    let answers: Vec<Value> = match pipe.query_async(conn).await {
        Ok(answers) => answers,
        // A command of the transaction failed on the server (a key of another type, a counter
        // that is not a number, a right the user lacks): the SET may have been applied all the
        // same. Give back what it may have taken; the script tells what is wrong.
        Err(err) if !crate::backend::is_transient(&err) => return Ok(Taken::GiveBack),
        Err(err) => return Err(err),
    };
    Ok(read(&answers))
}

fn read(answers: &[Value]) -> Taken {
    let [set, pttl, line, counted] = answers else {
        return Taken::Script;
    };
    match (set, pttl, line, counted) {
        (Value::Nil, _, Value::Int(0), Value::Int(fence)) => match u64::try_from(*fence) {
            Ok(fence) if (SEEDED..MAX_TOKEN).contains(&fence) => Taken::Acquired { fence },
            Ok(fence) if fence > 0 && fence < SEEDED => Taken::Unseeded,
            _ => Taken::GiveBack,
        },
        (Value::Nil, _, _, _) => Taken::GiveBack,
        (Value::BulkString(held), Value::Int(pttl), _, _) => {
            match (held_owner(held), u64::try_from(*pttl)) {
                (Some((owner, waiting)), Ok(pttl)) => Taken::Held {
                    owner: owner.to_owned(),
                    waiting,
                    pttl,
                    // The value the `SET ... GET` answered is the whole of it: no request more.
                    blocker: std::str::from_utf8(held)
                        .ok()
                        .and_then(|value| Blocker::from_value(value, None))
                        .map(Box::new),
                },
                _ => Taken::Script,
            }
        }
        _ => Taken::Script,
    }
}

/// Hands the lock the transaction took as `value` a token from the counter, which starts again
/// from the server time: `Some(token)`, or `None` if the lock holds something else now (then
/// the script decides). An error if the counter cannot be counted on.
pub(crate) async fn seed(
    conn: &mut impl redis::aio::ConnectionLike,
    lock: &str,
    counter: &str,
    value: &str,
) -> RedisResult<Result<Option<u64>, ()>> {
    let mut invocation = SEED.prepare_invoke();
    invocation.key(lock).key(counter).arg(value);
    let answer: i64 = invoke(&invocation, &SEED, conn).await?;
    Ok(match answer {
        -2 => Err(()),
        0 => Ok(None),
        fence => Ok(u64::try_from(fence).ok()),
    })
}

/// `SET lock value IFEQ value PX ttl` (Valkey 8.1, Redis 8.4): renews a lock that still holds
/// exactly the `value` its acquire wrote, for `ttl_ms` from now; sets nothing otherwise (gone,
/// or changed since: marked as awaited, handed on, someone else's). One command of the
/// watchdog's pipeline; read its answer with [`renewed`].
pub(crate) fn renew(lock: &str, value: &str, ttl_ms: u64) -> Cmd {
    let mut set = Cmd::with_capacity(7, lock.len() + 2 * value.len() + 32);
    set.arg("SET")
        .arg(lock)
        .arg(value)
        .arg("IFEQ")
        .arg(value)
        .arg("PX")
        .arg(ttl_ms);
    set
}

/// Whether a [`renew`] renewed the lock. Anything else (not set, or an error such as a key of
/// another type) says only that the value is not the one written: the renewal script then
/// decides whether the lock is still ours.
pub(crate) fn renewed(answer: &Value) -> bool {
    matches!(answer, Value::Okay)
}

/// What a native hand-over came to (see [`hand_off`]).
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Passed {
    /// The waiter holds the lock now, with this fencing token.
    Handed { fence: u64 },
    /// The lock holds another value than the holder's acquire wrote (marked as awaited, a
    /// fair line formed, gone): nothing was written, and the hand-over script decides.
    Script,
    /// The waiter's value may have been written without a token to give it (a counter lost
    /// and not seeded, or one that cannot be counted on), and may have been marked since: it
    /// must be given back under the waiter's owner token (compare-and-delete, then the release
    /// script), and the waiter asks itself. If it was not written, the lock is still the
    /// holder's, and the hand-over script decides.
    GiveBack,
}

/// `MULTI; SET lock to_value IFEQ from_value PX ttl; GET lock; INCR counter; EXEC` (Valkey 8.1,
/// Redis 8.4): hands a lock that still holds exactly the value its holder's acquire wrote (so
/// nobody elsewhere was told it is busy and no fair line formed) to the waiter's `to_value`,
/// with a token from the slot's counter, in one round trip and without a script. The counter
/// counts up also when nothing was handed over, which keeps tokens rising. The `GET` finds a
/// hand-over sent twice (its first answer lost with its connection) handed already. A counter
/// that had no token to give is seeded as after an acquire.
pub(crate) async fn hand_off(
    conn: &mut impl redis::aio::ConnectionLike,
    lock: &str,
    counter: &str,
    from_value: &str,
    to_value: &str,
    ttl_ms: u64,
) -> RedisResult<Passed> {
    let mut set = Cmd::with_capacity(7, lock.len() + from_value.len() + to_value.len() + 32);
    set.arg("SET")
        .arg(lock)
        .arg(to_value)
        .arg("IFEQ")
        .arg(from_value)
        .arg("PX")
        .arg(ttl_ms);
    let mut get = Cmd::with_capacity(2, lock.len() + 4);
    get.arg("GET").arg(lock);
    let mut incr = Cmd::with_capacity(2, counter.len() + 4);
    incr.arg("INCR").arg(counter);
    let mut pipe = Pipeline::with_capacity(3);
    pipe.atomic()
        .add_command(set)
        .add_command(get)
        .add_command(incr);
    let answers: Vec<Value> = match pipe.query_async(conn).await {
        Ok(answers) => answers,
        // A command failed on the server (a counter that is not a number, say): the SET may
        // have been applied all the same.
        Err(err) if !crate::backend::is_transient(&err) => return Ok(Passed::GiveBack),
        Err(err) => return Err(err),
    };
    let [set, held, counted] = answers.as_slice() else {
        return Ok(Passed::GiveBack);
    };
    let handed = matches!(set, Value::Okay)
        || matches!(held, Value::BulkString(held) if held.as_slice() == to_value.as_bytes());
    if !handed {
        return Ok(Passed::Script);
    }
    Ok(match counted {
        Value::Int(fence) => match u64::try_from(*fence) {
            Ok(fence) if (SEEDED..MAX_TOKEN).contains(&fence) => Passed::Handed { fence },
            Ok(fence) if fence > 0 && fence < SEEDED => {
                match seed(conn, lock, counter, to_value).await? {
                    Ok(Some(fence)) => Passed::Handed { fence },
                    // Marked or gone meanwhile, or a counter that cannot be counted on.
                    Ok(None) | Err(()) => Passed::GiveBack,
                }
            }
            _ => Passed::GiveBack,
        },
        _ => Passed::GiveBack,
    })
}

/// Deletes the lock if it holds exactly `value`: natively where the server can, by a two-line
/// script otherwise. `false` if it holds anything else (marked as awaited, kept, lost): the
/// release script then decides.
pub(crate) async fn release(
    conn: &mut impl redis::aio::ConnectionLike,
    lock: &str,
    value: &str,
    native: Option<NativeDelete>,
) -> RedisResult<bool> {
    let deleted: RedisResult<i64> = match native {
        Some(NativeDelete::DelIfEq) => {
            redis::cmd("DELIFEQ")
                .arg(lock)
                .arg(value)
                .query_async(conn)
                .await
        }
        Some(NativeDelete::DelEx) => {
            redis::cmd("DELEX")
                .arg(lock)
                .arg("IFEQ")
                .arg(value)
                .query_async(conn)
                .await
        }
        None => {
            // `EVALSHA <sha> 1 lock value` as one command sized up front: a script invocation
            // copies the key and value into vectors of its own, then again into its command,
            // sent as a pipeline of one. This is every release on a server before Redis 8.4.
            let sha = COMPARE_DELETE.get_hash();
            let mut call = Cmd::with_capacity(5, sha.len() + lock.len() + value.len() + 8);
            call.arg("EVALSHA").arg(sha).arg(1).arg(lock).arg(value);
            query_loading(&call, &COMPARE_DELETE, conn).await
        }
    };
    match deleted {
        Ok(deleted) => Ok(deleted == 1),
        Err(err) if not_this_value(&err, native.is_some()) => Ok(false),
        Err(err) => Err(err),
    }
}

/// Whether a compare-and-delete's error says only that it deleted nothing because the key holds
/// no string (a lock of 0.1, someone else's data), so that the release script decides and says
/// what is wrong: `WRONGTYPE` from `DELIFEQ` and the script, but a plain `ERR` with a text of its
/// own from Redis 8.4's `DELEX`. Told by the answer's kind, never its text: a native command
/// the probe found answers no other `ERR` (one from a server that stopped knowing it, after a
/// failover to an older one, sends the release to the script too, which is right there). Any
/// other error is the release's: a right taken away (`NOPERM`) would be refused to the script
/// as well, and one that passes (a failover, a load) is sent again.
fn not_this_value(err: &redis::RedisError, native: bool) -> bool {
    use redis::{ErrorKind, ServerErrorKind};
    match err.kind() {
        ErrorKind::Server(ServerErrorKind::ResponseError) => native,
        _ => err.code() == Some("WRONGTYPE"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error(reply: &[u8]) -> redis::RedisError {
        redis::parse_redis_value(reply)
            .and_then(Value::extract_error)
            .expect_err("an error reply")
    }

    #[test]
    fn a_compare_and_delete_on_a_key_of_another_type_goes_to_the_script_on_every_server() {
        let wrong_type =
            error(b"-WRONGTYPE Operation against a key holding the wrong kind of value\r\n");
        // DELIFEQ (Valkey 9.0) and the script.
        assert!(not_this_value(&wrong_type, true));
        assert!(not_this_value(&wrong_type, false));
        // DELEX ... IFEQ (Redis 8.4 and later).
        let delex = error(b"-ERR Key should be of string type if conditions are specified\r\n");
        assert!(not_this_value(&delex, true));
        // An error the script raised is the release's.
        let script = error(b"-ERR user_script:1: Script attempted to access a non local key\r\n");
        assert!(!not_this_value(&script, false));
        // A right taken away would be refused to the release script too; errors that pass are
        // sent again.
        for reply in [
            &b"-NOPERM User u has no permissions to run the 'evalsha' command\r\n"[..],
            b"-LOADING Redis is loading the dataset in memory\r\n",
            b"-READONLY You can't write against a read only replica.\r\n",
            b"-TRYAGAIN Multiple keys request during rehashing of slot\r\n",
        ] {
            for native in [true, false] {
                assert!(
                    !not_this_value(&error(reply), native),
                    "{}",
                    String::from_utf8_lossy(reply)
                );
            }
        }
        let dropped =
            redis::RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionReset));
        assert!(!not_this_value(&dropped, true));
    }

    #[test]
    fn a_renewal_compares_the_whole_value_and_sets_it_again() {
        let value = "held token=t waiting=0 since=5 host=h pid=1 app=a b";
        let packed = renew("lock:{k}", value, 3000).get_packed_command();
        let expected = format!(
            "*7\r\n$3\r\nSET\r\n$8\r\nlock:{{k}}\r\n${len}\r\n{value}\r\n$4\r\nIFEQ\r\n\
             ${len}\r\n{value}\r\n$2\r\nPX\r\n$4\r\n3000\r\n",
            len = value.len()
        );
        assert_eq!(String::from_utf8(packed).expect("text"), expected);
        assert!(renewed(&Value::Okay));
        // Not set: gone, or changed since it was written.
        assert!(!renewed(&Value::Nil));
        let wrong_type = redis::parse_redis_value(
            b"-WRONGTYPE Operation against a key holding the wrong kind of value\r\n",
        )
        .expect("a reply");
        assert!(!renewed(&wrong_type));
    }

    fn bulk(text: &str) -> Value {
        Value::BulkString(text.as_bytes().to_vec())
    }

    #[test]
    fn a_transaction_that_found_the_lock_free_is_read_as_the_script_would_answer() {
        let fence = 1_795_000_000_000_000;
        let free = |line: i64, counted: Value| {
            read(&[Value::Nil, Value::Int(500), Value::Int(line), counted])
        };
        assert_eq!(
            free(0, Value::Int(fence)),
            Taken::Acquired {
                fence: fence as u64
            }
        );
        // A lost counter starts again at 1: seed.lua seeds it.
        assert_eq!(free(0, Value::Int(1)), Taken::Unseeded);
        // 2^53 cannot be counted on by the scripts, nor can a negative counter: the script
        // reports them.
        for counted in [Value::Int(1 << 53), Value::Int(-4), Value::Nil] {
            assert_eq!(free(0, counted), Taken::GiveBack);
        }
        // Taken past a line of fair waiters.
        assert_eq!(free(1, Value::Int(fence)), Taken::GiveBack);
    }

    #[test]
    fn a_transaction_that_found_the_lock_held_is_read_as_the_script_would_answer() {
        let held = |value: &str, pttl: i64| {
            read(&[
                bulk(value),
                Value::Int(pttl),
                Value::Int(0),
                Value::Int(1_795_000_000_000_000),
            ])
        };
        let marked = "held token=abc waiting=1 since=1 host=h pid=1 app=";
        assert_eq!(
            held(marked, 700),
            Taken::Held {
                owner: "abc".into(),
                waiting: '1',
                pttl: 700,
                blocker: Blocker::from_value(marked, None).map(Box::new),
            }
        );
        let Taken::Held {
            blocker: Some(blocker),
            ..
        } = held(
            "held token=abc waiting=0 since=1 host=web-1 pid=42 app=billing",
            700,
        )
        else {
            panic!("the holder is named");
        };
        assert_eq!(blocker.holder_id, crate::protocol::token_id("abc"));
        assert_eq!(
            (blocker.host.as_deref(), blocker.pid, blocker.app.as_deref()),
            (Some("web-1"), Some(42), Some("billing"))
        );
        // Without holder metadata there is nobody to name.
        assert!(matches!(
            held("held token=abc waiting=0", 700),
            Taken::Held { blocker: None, .. }
        ));
        for other in [
            "kept waiting=0",
            "free next=t until=5",
            "held fence=1 token=t waiting=0",
        ] {
            assert_eq!(held(other, 700), Taken::Script, "{other}");
        }
        // No expiry: not a lock of ours.
        assert_eq!(held("held token=abc waiting=0", -1), Taken::Script);
    }
}
