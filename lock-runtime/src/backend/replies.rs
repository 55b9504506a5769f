//! What the Redis scripts answer, read as the store's answers.

use std::time::Duration;

use crate::blocker::Blocker;
use crate::key::Key;
use crate::shape::Shape;
use crate::store::{Acquire, HandOff, HolderId, Stolen, StoreError};

/// What acquire.lua, semaphore.lua or rw_acquire.lua answered: `{status, value, holder,
/// in_line}`, and from acquire.lua a fifth element when busy, what the holder's value records
/// of it (`''` if nothing; see acquire.lua). An answer of four elements is read as one whose
/// fifth is `''`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct AcquireReply {
    status: i64,
    value: i64,
    holder: i64,
    in_line: i64,
    /// The holder's value without its owner token, if it records holder metadata.
    recorded: Option<String>,
}

impl ::redis::FromRedisValue for AcquireReply {
    fn from_redis_value(value: ::redis::Value) -> Result<Self, ::redis::ParsingError> {
        let ::redis::Value::Array(items) = value else {
            return Err(format!("an acquire answered {value:?}, not an array").into());
        };
        let len = items.len();
        let mut items = items.into_iter();
        let mut number = || -> Result<i64, ::redis::ParsingError> {
            match items.next() {
                Some(item) => i64::from_redis_value(item),
                None => Err(format!("an acquire answered {len} elements, not 4 or 5").into()),
            }
        };
        let (status, value, holder, in_line) = (number()?, number()?, number()?, number()?);
        let recorded = match items.next() {
            None | Some(::redis::Value::Nil) => None,
            Some(item) => Some(String::from_redis_value(item)?).filter(|text| !text.is_empty()),
        };
        if items.next().is_some() {
            return Err(format!("an acquire answered {len} elements, not 4 or 5").into());
        }
        Ok(AcquireReply {
            status,
            value,
            holder,
            in_line,
            recorded,
        })
    }
}

/// What acquire.lua (or semaphore.lua, rw_acquire.lua) answered (see [`AcquireReply`]) as an
/// [`Acquire`].
pub(crate) fn acquire_answer(key: &Key, reply: AcquireReply) -> Result<Acquire, StoreError> {
    let AcquireReply {
        status,
        value,
        holder,
        in_line,
        recorded,
    } = reply;
    match status {
        1 => Ok(Acquire::Acquired {
            fence: u64::try_from(value).map_err(|_| {
                StoreError::permanent(format!("the server handed out fencing token {value}"))
            })?,
        }),
        0 => {
            let holder = u64::try_from(holder).ok().and_then(HolderId::from_raw);
            // Several holders have no one blocker; the holder's digest names it.
            let blocker = match (recorded, holder) {
                (Some(recorded), Some(holder)) if key.shape.waits_for_one_holder() => {
                    Blocker::from_value(&recorded, Some(crate::protocol::holder_hex(holder.get())))
                        .map(Box::new)
                }
                _ => None,
            };
            Ok(Acquire::Busy {
                remaining: u64::try_from(value).ok().map(Duration::from_millis),
                holder,
                in_line: in_line == 1,
                blocker,
            })
        }
        -2 => Err(unusable_counter(key)),
        -3 => Err(permits_differ(key, value)),
        _ => Err(other_data(key)),
    }
}

/// The error of a grant whose counter (or a 0.2 value's token) holds a value tokens cannot
/// continue from: nothing was taken.
fn unusable_counter(key: &Key) -> StoreError {
    StoreError::permanent(match key.shape {
        Shape::Lock => format!(
            "the fence counter `{}` of `{}` (or the token a 0.2 value of the lock carries) \
             holds a value tokens cannot continue from (not a number, or 2^53 and above); \
             the lock was not taken. Delete the counter only once no storage still checks \
             tokens of locks in its slot",
            key.counter().escape_debug(),
            key.lock.escape_debug()
        ),
        // A semaphore's and a read-write lock's tokens come from the same counter, and the
        // last token 0.2 kept beside them raises it once.
        Shape::Semaphore { .. } | Shape::Read | Shape::Write => format!(
            "the fence counter `{}` of `{}` (or `{}`, the last token 0.2 kept for it) holds \
             a value tokens cannot continue from (not a number, or 2^53 and above); nothing \
             was taken. Delete it only once no storage still checks tokens of keys in its \
             slot",
            key.counter().escape_debug(),
            key.lock.escape_debug(),
            key.fence_of_0_2().escape_debug()
        ),
    })
}

/// What steal.lua answered, `{status, fencing token, victim's holder id}`, as a [`Stolen`].
pub(crate) fn steal_answer(
    key: &Key,
    (status, fence, victim): (i64, i64, i64),
) -> Result<Stolen, StoreError> {
    match status {
        1 => Ok(Stolen {
            fence: u64::try_from(fence).map_err(|_| {
                StoreError::permanent(format!("the server handed out fencing token {fence}"))
            })?,
            victim: u64::try_from(victim).ok().and_then(HolderId::from_raw),
        }),
        -2 => Err(unusable_counter(key)),
        _ => Err(other_data(key)),
    }
}

/// The error of an acquire that found other data than `key`'s shape keeps at one of its keys.
fn other_data(key: &Key) -> StoreError {
    StoreError::permanent(match key.shape {
        Shape::Lock => format!(
            "key `{}` holds data that is not a lock; it was left untouched",
            key.lock.escape_debug()
        ),
        Shape::Semaphore { .. } | Shape::Read | Shape::Write => format!(
            "a key of {noun} `{}` holds data that is not a {noun}; it was left untouched",
            key.lock.escape_debug(),
            noun = key.shape.noun()
        ),
    })
}

/// The error of a caller that declares the semaphore `key` with another number of permits than
/// its holders (`held`) took it with: a mistake in the program, not the server's.
pub(crate) fn permits_differ(key: &Key, held: i64) -> StoreError {
    let declared = key.shape.permits().unwrap_or_default();
    StoreError::config(format!(
        "it is held with {} (a new number applies once no permit of the old one is held)",
        permits_mismatch(held, declared)
    ))
}

/// `<held> permits, but this call declares <declared>: ...`: what a semaphore declared with two
/// numbers of permits says, whether the server or this task's own hold found it.
pub(crate) fn permits_mismatch(held: impl std::fmt::Display, declared: u32) -> String {
    format!(
        "{held} permits, but this call declares {declared}: every call site of one semaphore \
         must declare the same number of permits"
    )
}

/// What handoff.lua answered, `{status, fence}`, as a [`HandOff`]; a counter it cannot count on
/// is a permanent failure (the holder then releases as usual).
pub(crate) fn hand_off_answer((status, fence): (i64, i64)) -> Result<HandOff, StoreError> {
    match status {
        1 => Ok(HandOff::Handed {
            fence: u64::try_from(fence).map_err(|_| {
                StoreError::permanent(format!("the server handed out fencing token {fence}"))
            })?,
        }),
        2 => Ok(HandOff::Released),
        0 => Ok(HandOff::NotOwner),
        -2 => Err(StoreError::permanent(
            "the fence counter of the lock's slot holds a value tokens cannot continue from \
             (not a number, negative, or 2^53 and above): nothing was handed over"
                .to_owned(),
        )),
        _ => Ok(HandOff::Gone),
    }
}

#[cfg(test)]
mod tests {
    use ::redis::{FromRedisValue, Value};

    use super::*;

    fn reply(items: Vec<Value>) -> AcquireReply {
        AcquireReply::from_redis_value(Value::Array(items)).expect("an answer")
    }

    #[test]
    fn busy_answers_of_four_or_five_elements_are_read() {
        let key = Key::lock("lock:", "k").expect("valid");
        let holder = crate::protocol::holder_id("abc");
        let int = |n: i64| Value::Int(n);
        let text = |t: &str| Value::BulkString(t.as_bytes().to_vec());
        let recorded = "held waiting=1 since=1000 host=web-1 pid=42 app=billing";
        // A busy answer of acquire.lua that names `holder` and what its value records.
        let named_busy = || {
            reply(vec![
                int(0),
                int(700),
                int(holder as i64),
                int(0),
                text(recorded),
            ])
        };
        let answer = acquire_answer(&key, named_busy()).expect("busy");
        let Acquire::Busy {
            remaining,
            holder: Some(named),
            in_line: false,
            blocker: Some(blocker),
        } = answer
        else {
            panic!("busy, named: {answer:?}");
        };
        assert_eq!(remaining, Some(Duration::from_millis(700)));
        assert_eq!(named.get(), holder);
        assert_eq!(blocker.holder_id, crate::protocol::token_id("abc"));
        assert_eq!(blocker.app.as_deref(), Some("billing"));
        // Four elements (semaphore.lua, rw_acquire.lua, a script of before), or nothing
        // recorded: nobody named.
        for items in [
            vec![int(0), int(700), int(holder as i64), int(0)],
            vec![int(0), int(700), int(holder as i64), int(0), text("")],
        ] {
            let answer = acquire_answer(&key, reply(items)).expect("busy");
            assert!(
                matches!(answer, Acquire::Busy { blocker: None, .. }),
                "{answer:?}"
            );
        }
        // Several holders: nobody is the one that blocks.
        let semaphore =
            Key::new("lock:", "k", crate::shape::Shape::Semaphore { permits: 2 }).expect("valid");
        let answer = acquire_answer(&semaphore, named_busy()).expect("busy");
        assert!(
            matches!(answer, Acquire::Busy { blocker: None, .. }),
            "{answer:?}"
        );
        assert_eq!(
            acquire_answer(&key, reply(vec![int(1), int(5), int(0), int(0)])).expect("taken"),
            Acquire::Acquired { fence: 5 }
        );
        for wrong in [
            Value::Array(vec![int(0), int(1), int(2)]),
            Value::Array(vec![int(0); 6]),
            Value::Int(1),
        ] {
            assert!(AcquireReply::from_redis_value(wrong).is_err());
        }
    }
}
