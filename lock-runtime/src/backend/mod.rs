//! The small interface every deployment implements: acquire, renew, release, and being told of
//! releases.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use crate::blocker::Blocker;
use crate::key::StoredKey;
use crate::protocol::waits::WaitsUpdate;
use crate::shape::Shape;

mod failure;
pub(crate) mod memory;
pub(crate) mod redis;

pub(crate) use failure::{Failure, connect_error, is_transient};

pub(crate) type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

pub(crate) use crate::protocol::FAIR_TURN;

/// What an acquire asks besides the lock itself.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Ask {
    /// The caller has waited for this lock (others of its process may still wait): its
    /// release is then announced even if nobody else is told the lock is busy.
    pub(crate) waited: bool,
    /// Whether a busy lock puts the caller in the line of fair waiters.
    pub(crate) line: Line,
    /// The caller waits if the lock is busy (even where it takes no place in a line): a busy
    /// lock must then announce its release.
    pub(crate) waits: bool,
    /// When this attempt began (wall clock, ms): what the lock's value says in `since=`. The
    /// holder's release compares the value it wrote.
    pub(crate) since_ms: u64,
}

impl Ask {
    /// Whether a busy answer puts the caller in a line of fair waiters that exists.
    pub(crate) fn joins(&self) -> bool {
        self.line != Line::No
    }
}

/// Whether an acquire of a busy lock takes a place in the line of fair waiters (see queue.lua).
/// Nobody jumps a line that exists, whichever they choose.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) enum Line {
    /// The caller does not wait.
    #[default]
    No,
    /// The caller waits, and takes a place in line if fair waiters are in line already.
    IfAny,
    /// The caller waits in line (`fair = true`).
    Fair,
}

impl Line {
    /// acquire.lua's ARGV[5].
    pub(crate) fn as_arg(self) -> &'static str {
        match self {
            Line::No => "",
            Line::IfAny => "line",
            Line::Fair => "fair",
        }
    }
}

/// The answer to an acquire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Acquire {
    /// Ours, with this fencing token.
    Acquired { fence: u64 },
    /// Held by someone else for about this long (`None`: the lock has no expiry). `holder`
    /// tells owners apart across servers (see acquire.lua) where the backend knows it.
    /// `in_line`: the caller has a place in the line of fair waiters, which it must keep by
    /// asking again within its lease, and leave if it stops waiting. `blocker`: who holds it,
    /// as its value records (a plain lock whose holder recorded metadata).
    Busy {
        remaining: Option<Duration>,
        holder: Option<u64>,
        in_line: bool,
        blocker: Option<Box<Blocker>>,
    },
}

impl Acquire {
    /// A busy answer that names no holder: one of several holders (a semaphore, a read-write
    /// lock), or a backend that records none.
    pub(crate) fn busy(remaining: Option<Duration>, in_line: bool) -> Acquire {
        Acquire::Busy {
            remaining,
            holder: None,
            in_line,
            blocker: None,
        }
    }
}

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
pub(crate) fn acquire_answer(key: &StoredKey, reply: AcquireReply) -> Result<Acquire, Failure> {
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
                Failure::permanent(format!("the server handed out fencing token {value}"))
            })?,
        }),
        0 => {
            let holder = u64::try_from(holder).ok().filter(|&holder| holder != 0);
            // Several holders have no one blocker; the holder's digest names it.
            let blocker = match (recorded, holder) {
                (Some(recorded), Some(holder)) if key.is_lock() => {
                    Blocker::from_value(&recorded, Some(crate::protocol::holder_hex(holder)))
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
        -2 if key.is_lock() => Err(Failure::permanent(format!(
            "the fence counter `{}` of `{}` (or the token a 0.2 value of the lock carries) holds \
             a value tokens cannot continue from (not a number, or 2^53 and above); the lock was \
             not taken. Delete the counter only once no storage still checks tokens of locks in \
             its slot",
            key.counter().escape_debug(),
            key.lock.escape_debug()
        ))),
        // A semaphore's and a read-write lock's tokens come from the same counter, and the
        // last token 0.2 kept beside them raises it once.
        -2 => Err(Failure::permanent(format!(
            "the fence counter `{}` of `{}` (or `{}`, the last token 0.2 kept for it) holds a \
             value tokens cannot continue from (not a number, or 2^53 and above); nothing was \
             taken. Delete it only once no storage still checks tokens of keys in its slot",
            key.counter().escape_debug(),
            key.lock.escape_debug(),
            key.fence_of_0_2().escape_debug()
        ))),
        -3 => Err(permits_differ(key, value)),
        _ => Err(other_data(key)),
    }
}

/// The error of an acquire that found other data than `key`'s shape keeps at one of its keys.
fn other_data(key: &StoredKey) -> Failure {
    Failure::permanent(match key.shape {
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
pub(crate) fn permits_differ(key: &StoredKey, held: i64) -> Failure {
    let declared = key.shape.permits().unwrap_or_default();
    Failure::config(format!(
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

/// The answer to a release.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Release {
    Released,
    /// Someone else holds the lock now (or the key holds other data): it was left untouched.
    NotOwner,
    /// Nothing at the key: the lease had run out.
    Gone,
}

/// The answer to a hand-off (see [`Backend::hand_off`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HandOff {
    /// The waiter holds the lock now, with this fencing token.
    Handed {
        fence: u64,
    },
    /// Someone else was told the lock is busy, so it was released (and announced) instead.
    Released,
    /// As for a release.
    NotOwner,
    Gone,
}

/// What handoff.lua answered, `{status, fence}`, as a [`HandOff`]; a counter it cannot count on
/// is a permanent failure (the holder then releases as usual).
pub(crate) fn hand_off_answer((status, fence): (i64, i64)) -> Result<HandOff, Failure> {
    match status {
        1 => Ok(HandOff::Handed {
            fence: u64::try_from(fence).map_err(|_| {
                Failure::permanent(format!("the server handed out fencing token {fence}"))
            })?,
        }),
        2 => Ok(HandOff::Released),
        0 => Ok(HandOff::NotOwner),
        -2 => Err(Failure::permanent(
            "the fence counter of the lock's slot holds a value tokens cannot continue from \
             (not a number, negative, or 2^53 and above): nothing was handed over"
                .to_owned(),
        )),
        _ => Ok(HandOff::Gone),
    }
}

/// One lease to renew. It shares the lease rather than copying its key and token: a batch may
/// hold ten thousand of these at once.
#[derive(Clone)]
pub(crate) struct Renewal {
    pub(crate) lease: std::sync::Arc<crate::lease::Lease>,
    pub(crate) ttl: Duration,
}

impl Renewal {
    /// The stored lock key.
    pub(crate) fn key(&self) -> &str {
        &self.lease.stored.lock
    }

    pub(crate) fn token(&self) -> &str {
        &self.lease.token
    }
}

/// Where a renewal batch's answers go as they arrive: `(indices into the batch, the answer
/// for each of them, or why that part of the batch got none)`. See [`Backend::renew`].
pub(crate) type Booking<'a> =
    &'a (dyn Fn(&[usize], Result<Vec<Option<bool>>, Failure>) + Send + Sync);

/// Every index of `batch`: for a backend that answers the whole batch at once.
pub(crate) fn whole(batch: &[Renewal]) -> Vec<usize> {
    (0..batch.len()).collect()
}

/// A deployment that can hold locks. Implementations never block and never panic on I/O.
pub(crate) trait Backend: Send + Sync + 'static {
    /// What this is, for the startup log: `redis 127.0.0.1:6379`, `memory`.
    fn describe(&self) -> &str;

    /// The server named in error messages (host and port, never credentials).
    fn server(&self) -> &str;

    /// One round trip: take the lock with `token` for `ttl`, or report the holder's remaining
    /// lease (see [`Ask`] for the rest).
    fn acquire<'a>(
        &'a self,
        key: &'a StoredKey,
        token: &'a str,
        ttl: Duration,
        ask: Ask,
    ) -> BoxFuture<'a, Result<Acquire, Failure>>;

    /// Where an acquire of `key` waits before it is sent, outside its request timeout: `None`
    /// (it is sent at once) everywhere but in the test kit, whose closed gate
    /// (`testing::Gate`) holds it here for as long as the test keeps it closed.
    fn gate<'a>(&'a self, key: &'a StoredKey) -> Option<BoxFuture<'a, ()>> {
        let _ = key;
        None
    }

    /// Whether fair waiting (`fair = true`) works here: where one server orders the line.
    fn fair(&self) -> bool {
        true
    }

    /// Whether keys of `shape` can be held here, or why not. Every backend holds locks;
    /// semaphores (taken and released by the same calls as a lock) need one server to count
    /// the holders, and read-write locks one server to see the readers and the writer.
    fn supports(&self, shape: Shape) -> Result<(), &'static str> {
        let _ = shape;
        Ok(())
    }

    /// One round trip: `token` leaves the line of fair waiters for `key`; if the lock was freed
    /// for it, it is freed for the next in line. Nothing to do where nobody waits in line.
    fn leave<'a>(
        &'a self,
        key: &'a StoredKey,
        token: &'a str,
    ) -> BoxFuture<'a, Result<(), Failure>> {
        let _ = (key, token);
        Box::pin(std::future::ready(Ok(())))
    }

    /// Renews a batch, one round trip per node or slot group where the deployment has several,
    /// and hands each group's answers to `book` as soon as they arrive: per listed index into
    /// `batch`, `Some(true)` if renewed, `Some(false)` if not ours, `None` if no verdict (the
    /// lease is tried again); `Err` when that group got no answer at all. Every index is booked
    /// at most once. The future ends when every group has been booked; the caller may drop it
    /// sooner, and then the groups not yet booked simply never are.
    ///
    /// Why a callback rather than one answer for the whole batch: on a cluster one stalled
    /// shard would otherwise hold back (or, under a timeout, throw away) the answers of the
    /// healthy ones. The caller keeps the deadlines, one per lease (it knows each lease's ttl
    /// and local deadline), so the backends need none of their own beyond their request
    /// timeouts; a backend that needs all its answers first (Redlock's majority per lease)
    /// books once at the end, as before.
    fn renew<'a>(&'a self, batch: &'a [Renewal], book: Booking<'a>) -> BoxFuture<'a, ()>;

    /// One round trip: release the lock if `token` owns it; with `keep > 0` leave it to expire then.
    fn release<'a>(
        &'a self,
        key: &'a StoredKey,
        token: &'a str,
        keep: Duration,
    ) -> BoxFuture<'a, Result<Release, Failure>>;

    /// Releases a held lease as [`release`](Backend::release) does; a backend that can release
    /// a lock nobody waited for more cheaply, knowing what its acquire wrote, does so here.
    fn release_lease<'a>(
        &'a self,
        lease: &'a crate::lease::Lease,
        keep: Duration,
    ) -> BoxFuture<'a, Result<Release, Failure>> {
        self.release(&lease.stored, &lease.token, keep)
    }

    /// Whether [`hand_off`](Backend::hand_off) works here: where one script on one server can
    /// move a lock from one owner to the next (not Redlock, whose majority would need every
    /// master to agree; not with `wait_for_replicas`, whose grants wait for replicas).
    fn hands_off(&self) -> bool {
        false
    }

    /// One round trip: if the lease `from` holds its lock and nobody else was told it is busy,
    /// give it to the lease `to` (same key) for its ttl at once, with a new fencing token;
    /// otherwise release it as [`release`](Backend::release) does. Only called where
    /// [`hands_off`](Backend::hands_off).
    fn hand_off<'a>(
        &'a self,
        from: &'a crate::lease::Lease,
        to: &'a crate::lease::Lease,
    ) -> BoxFuture<'a, Result<HandOff, Failure>> {
        let _ = (from, to);
        Box::pin(std::future::ready(Err(Failure::permanent(format!(
            "{} cannot hand a lock over",
            self.describe()
        )))))
    }

    /// Start delivering release notifications for `key` to the manager's waiters; resolves once
    /// notifications are flowing, so a retry after it cannot miss a release.
    fn watch<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<(), Failure>>;

    /// Stop delivering notifications for `key`. Never blocks.
    fn unwatch(&self, key: &str);

    /// Whether releases are announced to [`watch`](Backend::watch)ers at all (a user without
    /// rights on the lock channels cannot publish or subscribe): if not, every waiter watches
    /// the lease's expiry itself.
    fn notifies(&self) -> bool {
        true
    }

    /// One round trip to the server (on a cluster, the master of the slot) that keeps `key`,
    /// the hash of published waits (see [`crate::protocol::waits`]): writes, removes and reads
    /// records as `update` says. The records read, by waiter id. On Redlock, every master
    /// that answers keeps a copy, and the records read are those of all of them.
    fn waits<'a>(
        &'a self,
        key: &'a str,
        update: &'a WaitsUpdate,
    ) -> BoxFuture<'a, Result<Vec<(String, String)>, Failure>>;

    /// Whether the next attempt of an acquire that was busy or failed may send the same owner
    /// token. Where it may, a retry confirms a grant whose answer was lost. A deployment that
    /// gives back what a failed attempt took, possibly after that attempt returned, says no:
    /// a give-back that lands after the next attempt's grant under the same token would remove
    /// that grant, and the holder would go on without a majority.
    fn retry_with_same_token(&self) -> bool {
        true
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
        let key = StoredKey::new("lock:", "k").expect("valid");
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
        assert_eq!(named, holder);
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
        let semaphore = StoredKey::of("lock:", "k", crate::shape::Shape::Semaphore { permits: 2 })
            .expect("valid");
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
