//! The steps of a lock written once over a connection, for every deployment: the answers of
//! the scripts and of the lean transactions, renewals that compare the value natively, the
//! native hand-over, and the acquire that waits for replicas.

use std::time::Duration;

use redis::{RedisError, RedisResult, Value};

use super::calls::{Holder, renew_invocation};
use super::replicas::{Pool, Replication};
use super::scripts::RENEW;
use crate::backend::{
    Acquire, AcquireReply, Ask, Failure, HandOff, Release, Renewal, acquire_answer,
};
use crate::background::Lifeline;
use crate::key::StoredKey;
use crate::lease::Lease;
use crate::protocol::scripts::{query_each_loading, query_loading};
use crate::protocol::{self, Capabilities, lean, millis};

/// The policy of a deployment with `wait_for_replicas`, and the idle connections its acquires
/// wait on (see [`acquire_replicated`]).
pub(super) type Replicated<C> = (Replication, Pool<(C, Lifeline)>);

/// The acquire of every deployment with `wait_for_replicas` (one server, Sentinel, Cluster):
/// takes `key` on a connection of its own and, once granted, waits for the replicas to
/// acknowledge it (see [`Replication::confirm`]); a shortfall gives the grant back and fails
/// transiently. Never the lean path: the script answers, as it would without replicas.
///
/// `WAIT` blocks the connection it is sent on, so never the shared one: an idle one of the
/// pool (one whose runtime shut down is dropped), else one `open` makes, whose response timeout
/// covers the `WAIT` (see [`ReplicaAcks::response_timeout`]). An idle one the server closed
/// meanwhile (its `timeout`, a restart) is replaced by a fresh one, which the acquire goes out
/// on again (with the same token it confirms its own grant). `routed` sends the calls of `key`
/// on a connection. It goes back to the pool only if the acquire succeeded.
#[allow(clippy::too_many_arguments)]
pub(super) async fn acquire_replicated<C, R: redis::aio::ConnectionLike>(
    (replication, pool): &Replicated<C>,
    open: impl Future<Output = Result<(C, Lifeline), Failure>>,
    routed: impl Fn(&C) -> R,
    holder: &Holder,
    key: &StoredKey,
    token: &str,
    ttl: Duration,
    ask: Ask,
) -> Result<Acquire, Failure> {
    let call = &holder.acquire(key, token, ttl, ask, replication.announce);
    let send = |conn: &C| {
        let mut conn = routed(conn);
        async move { call.run::<AcquireReply>(&mut conn).await }
    };
    let idle = std::iter::from_fn(|| pool.take()).find(|(_, lifeline)| !lifeline.is_cut());
    let sent = match idle {
        Some(idle) => match send(&idle.0).await {
            Err(err) if err.is_connection_dropped() => None,
            answer => Some((idle, answer)),
        },
        None => None,
    };
    let ((conn, lifeline), answer) = match sent {
        Some(sent) => sent,
        None => {
            let fresh = open.await?;
            let answer = send(&fresh.0).await;
            (fresh, answer)
        }
    };
    let acquired = acquire_answer(key, answer?)?;
    let answer = if matches!(acquired, Acquire::Acquired { .. }) {
        let mut conn = routed(&conn);
        confirmed(&mut conn, holder, key, token, ttl, replication)
            .await
            .map(|()| acquired)
    } else {
        Ok(acquired)
    };
    if answer.is_ok() {
        pool.put((conn, lifeline));
    }
    answer
}

/// Waits on `conn`, where `key` was just granted to `token`, for the replicas to acknowledge
/// it; a shortfall gives the grant back and fails transiently.
async fn confirmed<C: redis::aio::ConnectionLike>(
    conn: &mut C,
    holder: &Holder,
    key: &StoredKey,
    token: &str,
    ttl: Duration,
    replication: &Replication,
) -> Result<(), Failure> {
    let Err(failure) = replication.confirm(conn, ttl).await else {
        return Ok(());
    };
    let give_back = holder.release(key, token, 0, replication.announce);
    // If this fails too, the caller's clean-up of a failed attempt releases it.
    let _: RedisResult<i64> = give_back.run(conn).await;
    Err(failure)
}

/// The release script's answer (see release.lua).
pub(super) fn release_answer(answer: i64) -> Release {
    match answer {
        // 2: freed for the first fair waiter in line.
        1 | 2 => Release::Released,
        0 => Release::NotOwner,
        _ => Release::Gone,
    }
}

/// What a lean attempt answers the acquire: granted, or busy; `None` where the script is asked
/// (after the caller gave back what [`lean::Took::GiveBack`] may have taken).
pub(super) fn lean_answer(took: &lean::Took) -> Option<Acquire> {
    match took {
        lean::Took::Acquired { fence } => Some(Acquire::Acquired { fence: *fence }),
        lean::Took::Busy {
            holder,
            pttl,
            blocker,
        } => Some(Acquire::Busy {
            remaining: Some(Duration::from_millis(*pttl)),
            holder: Some(*holder),
            in_line: false,
            blocker: blocker.clone(),
        }),
        lean::Took::Script | lean::Took::GiveBack => None,
    }
}

/// The value the acquire of `lease` wrote, where a renewal can compare it natively: a lock
/// nobody was told is busy (see [`Lease::written_plain`]), on a server with `SET ... IFEQ`.
pub(super) fn written_value(
    capabilities: &Capabilities,
    holder: &Holder,
    lease: &Lease,
) -> Option<String> {
    if !capabilities.set_ifeq || !lease.stored.is_lock() {
        return None;
    }
    let since_ms = lease.written_plain()?;
    Some(holder.held_value(&lease.token, '0', since_ms))
}

/// The hand-over of the lock of `from` to `to` without a script, where the server has `SET ...
/// IFEQ` and the holder's value is still the one its acquire wrote (see [`lean::hand_off`]):
/// `None` if it cannot be; otherwise what it came to, with the value it wrote for `to` (which
/// [`lean::Passed::GiveBack`] gives back). A lock handed over so holds the plain value of
/// `to`, which its renewals and release compare in turn.
pub(super) async fn native_hand_off(
    capabilities: &Capabilities,
    holder: &Holder,
    from: &Lease,
    to: &Lease,
    conn: &mut impl redis::aio::ConnectionLike,
) -> RedisResult<Option<(lean::Passed, String)>> {
    let Some(from_value) = written_value(capabilities, holder, from) else {
        return Ok(None);
    };
    let since_ms = protocol::now_ms();
    let to_value = holder.held_value(&to.token, '0', since_ms);
    let key = &from.stored;
    let passed = lean::hand_off(
        conn,
        &key.lock,
        &key.counter(),
        &from_value,
        &to_value,
        millis(to.options.ttl),
    )
    .await?;
    if let lean::Passed::Handed { .. } = passed {
        to.record_attempt(since_ms, true);
    }
    Ok(Some((passed, to_value)))
}

/// What a [`native_hand_off`] came to, as the hand-over's answer: handed; or its value given
/// back by `give_back` (see [`lean::Passed::GiveBack`]), which says whether anything of the
/// waiter's was there, and then the waiter asks itself. `None`: the hand-over script decides
/// (nothing was tried, the value changed, or nothing was written and the lock is still the
/// holder's).
pub(super) async fn settle_native<F>(
    native: Option<(lean::Passed, String)>,
    give_back: impl FnOnce(String) -> F,
) -> Result<Option<HandOff>, Failure>
where
    F: Future<Output = Result<bool, Failure>>,
{
    Ok(match native {
        Some((lean::Passed::Handed { fence }, _)) => Some(HandOff::Handed { fence }),
        Some((lean::Passed::GiveBack, to_value)) => {
            give_back(to_value).await?.then_some(HandOff::Released)
        }
        Some((lean::Passed::Script, _)) | None => None,
    })
}

/// Renews `renewals` on `conn` in one pipeline: those whose `written` value is known (see
/// [`written_value`]) by `SET ... IFEQ` (see [`lean::renew`]), the others by renew.lua. A
/// compare that finds another value (a waiter marked the lock as awaited, or it is gone) is
/// settled by renew.lua in a second pipeline of those alone: a marked lock is still renewed, a
/// lost one is found lost, as by the script alone. `Some(true)` renewed, `Some(false)` not
/// ours, in order.
pub(super) async fn renew_comparing(
    renewals: &[&Renewal],
    written: &[Option<String>],
    conn: &mut impl redis::aio::ConnectionLike,
) -> RedisResult<Vec<Option<bool>>> {
    if written.iter().all(Option::is_none) {
        return renew_by_script(renewals.iter().copied(), conn).await;
    }
    let mut pipe = redis::pipe();
    // Each answer apart: a key of another type fails its own compare, not the batch.
    pipe.ignore_errors();
    for (renewal, value) in renewals.iter().zip(written) {
        match value {
            Some(value) => {
                let lock = &renewal.lease.stored.lock;
                pipe.add_command(lean::renew(lock, value, millis(renewal.ttl)));
            }
            None => {
                pipe.invoke_script(&renew_invocation(renewal));
            }
        }
    }
    let answers = query_each_loading(&pipe, &RENEW, conn).await?;
    if answers.len() != renewals.len() {
        return Err(RedisError::from((
            redis::ErrorKind::UnexpectedReturnType,
            "renewal pipeline answered with the wrong number of results",
        )));
    }
    let mut renewed = Vec::with_capacity(renewals.len());
    let mut changed = Vec::new();
    for (i, (answer, value)) in answers.into_iter().zip(written).enumerate() {
        if value.is_some() {
            if lean::renewed(&answer) {
                renewed.push(Some(true));
            } else {
                renewed.push(None);
                changed.push(i);
            }
            continue;
        }
        let answer: i64 = match answer {
            Value::ServerError(err) => return Err(RedisError::from(err)),
            answer => redis::from_redis_value(answer)?,
        };
        renewed.push(Some(answer == 1));
    }
    if !changed.is_empty() {
        let by_script = renew_by_script(changed.iter().map(|&i| renewals[i]), conn).await?;
        for (&i, answer) in changed.iter().zip(by_script) {
            if answer == Some(true) {
                // Still ours, marked: the next renewals and the release go to the script.
                renewals[i].lease.value_changed();
            }
            renewed[i] = answer;
        }
    }
    Ok(renewed)
}

/// Renews `renewals` by renew.lua, in one pipeline: `Some(true)` renewed, `Some(false)` not
/// ours, in order.
async fn renew_by_script<'a>(
    renewals: impl Iterator<Item = &'a Renewal>,
    conn: &mut impl redis::aio::ConnectionLike,
) -> RedisResult<Vec<Option<bool>>> {
    let invocations: Vec<_> = renewals.map(renew_invocation).collect();
    let mut pipe = redis::pipe();
    for invocation in &invocations {
        pipe.invoke_script(invocation);
    }
    let answers: Vec<i64> = query_loading(&pipe, &RENEW, conn).await?;
    Ok(answers
        .into_iter()
        .map(|answer| Some(answer == 1))
        .collect())
}
