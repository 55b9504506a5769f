//! The steps of a lock written once over a connection, for every deployment: acquire (the lean
//! transaction where [`Holder::takes_lean`] lets it, the script otherwise), release, leave and
//! hand-over ([`Steps`]), renewals that compare the value natively, and the acquire that waits
//! for replicas.

use std::time::Duration;

use redis::{RedisError, RedisResult, Value};

use super::calls::{Call, Holder, renew_invocation};
use super::replicas::{Pool, Replication};
use crate::backend::{
    Acquire, AcquireReply, Ask, HandOff, Release, Renewal, StoreError, acquire_answer,
    hand_off_answer, steal_answer,
};
use crate::background::Lifeline;
use crate::key::Key;
use crate::lease::Lease;
use crate::protocol::scripts::{HANDOFF, RENEW};
use crate::protocol::scripts::{invoke, query_each_loading, query_loading};
use crate::protocol::{self, Announce, Capabilities, lean, millis};
use crate::store::{Notice, Stolen};

/// A connection the steps of a lock run on: one server's shared connection, or a Cluster's
/// routed to the master of the key's slot.
pub(super) trait Link: redis::aio::ConnectionLike + Send {
    /// The answer of a script call, as the deployment reports it (a Cluster tells a script its
    /// node forgot again as a slot that moved).
    fn settle<T>(answer: RedisResult<T>) -> RedisResult<T> {
        answer
    }
}

/// The steps of a lock on one Redis master, written once over any [`Link`] to it: who takes
/// the locks and what the master can do without scripts, and how its releases are announced.
pub(super) struct Steps<'a> {
    pub(super) holder: &'a Holder,
    pub(super) capabilities: &'a Capabilities,
    pub(super) announce: Announce,
}

impl Steps<'_> {
    /// Takes `key` for `token`: by one transaction where the lean path may be taken and
    /// decides, by the script otherwise.
    pub(super) async fn acquire<C: Link>(
        &self,
        conn: &mut C,
        key: &Key,
        token: &str,
        ttl: Duration,
        ask: Ask,
    ) -> Result<Acquire, StoreError> {
        if self.holder.takes_lean(self.capabilities, key, ask)
            && let Some(answer) = self.acquire_lean(conn, key, token, ttl, ask).await?
        {
            return Ok(answer);
        }
        // The script's call is built only where it is sent: a free lock taken by the
        // transaction never needs it, and building it (five key names, the holder text) was a
        // good part of the client's work per acquire.
        let call = self.holder.acquire(key, token, ttl, ask, self.announce);
        let answer = C::settle(call.run(conn).await)?;
        acquire_answer(key, answer)
    }

    /// Takes a free plain lock in one transaction (see [`lean::take`]), or answers busy where
    /// that needs no script; `None` where the script must decide.
    async fn acquire_lean<C: Link>(
        &self,
        conn: &mut C,
        key: &Key,
        token: &str,
        ttl: Duration,
        ask: Ask,
    ) -> Result<Option<Acquire>, StoreError> {
        let value = self.holder.attempt_value(token, ask);
        let counter = key.counter();
        let (waits, joins) = (ask.waits, ask.joins());
        let took = lean::take(
            conn,
            key,
            &counter,
            token,
            &value,
            millis(ttl),
            waits,
            joins,
        )
        .await?;
        let answer = lean_answer(&took);
        if took == lean::Took::GiveBack {
            self.give_back_lean(conn, key, token, &value).await?;
        }
        Ok(answer)
    }

    /// Gives back what a transaction of `token` may have taken as `value`: deleted if it still
    /// holds that value; if it holds ours marked since (a waiter told it is busy, a fair waiter
    /// that joined the line), released by the script, which frees it for the first in line or
    /// announces it, so that the attempt that follows cannot re-enter past them. Whether
    /// anything of `token`'s was there to give back.
    async fn give_back_lean<C: Link>(
        &self,
        conn: &mut C,
        key: &Key,
        token: &str,
        value: &str,
    ) -> Result<bool, StoreError> {
        let native = self.capabilities.native_delete;
        if lean::release(conn, &key.lock, value, native).await? {
            return Ok(true);
        }
        let released = self.release(conn, key, token, Duration::ZERO).await?;
        Ok(released == Release::Released)
    }

    /// Releases `key` if `token` holds it, keeping it busy for `keep` more when that is not
    /// zero (see [`Holder::release`]).
    pub(super) async fn release<C: Link>(
        &self,
        conn: &mut C,
        key: &Key,
        token: &str,
        keep: Duration,
    ) -> Result<Release, StoreError> {
        let keep_ms = if keep.is_zero() { 0 } else { millis(keep) };
        release_by(
            conn,
            &self.holder.release(key, token, keep_ms, self.announce),
        )
        .await
    }

    /// Releases `lease` by comparing the whole value its acquire wrote, where nobody was told
    /// it is busy (see [`lean::release`]); otherwise, or if the value changed, by the script.
    /// The script's call is built only when it is sent: most releases never need it.
    pub(super) async fn release_lease<C: Link>(
        &self,
        conn: &mut C,
        lease: &Lease,
        keep: Duration,
    ) -> Result<Release, StoreError> {
        if keep.is_zero()
            && lease.stored.shape.compares_its_value()
            && let Some(since_ms) = lease.written_plain()
        {
            let value = self.holder.held_value(&lease.token, '0', since_ms);
            let native = self.capabilities.native_delete;
            if lean::release(conn, &lease.stored.lock, &value, native).await? {
                return Ok(Release::Released);
            }
        }
        self.release(conn, &lease.stored, &lease.token, keep).await
    }

    /// Takes the plain lock `key` for `token` and `ttl` whoever holds it, with a new fencing
    /// token, and tells its holder on the notices channel, in one script (see steal.lua).
    pub(super) async fn steal<C: Link>(
        &self,
        conn: &mut C,
        key: &Key,
        token: &str,
        ttl: Duration,
        from: &str,
    ) -> Result<Stolen, StoreError> {
        let call = self.holder.steal(key, token, ttl, from);
        let answer = C::settle(call.run(conn).await)?;
        steal_answer(key, answer)
    }

    /// Tells `notice` on the notices channel: one `PUBLISH`.
    pub(super) async fn announce<C: Link>(
        &self,
        conn: &mut C,
        notice: &Notice,
    ) -> Result<(), StoreError> {
        let _heard: i64 = self.holder.announce(notice).query_async(conn).await?;
        Ok(())
    }

    /// `token` leaves the line of waiters for `key` (see [`Holder::leave`]).
    pub(super) async fn leave<C: Link>(
        &self,
        conn: &mut C,
        key: &Key,
        token: &str,
    ) -> Result<(), StoreError> {
        leave_by(conn, &self.holder.leave(key, token, self.announce)).await
    }

    /// Hands the lock of `from` to `to`: natively where the server can and the value is still
    /// the one its acquire wrote (see [`native_hand_off`]), by handoff.lua otherwise.
    pub(super) async fn hand_off<C: Link>(
        &self,
        conn: &mut C,
        from: &Lease,
        to: &Lease,
    ) -> Result<HandOff, StoreError> {
        let key = &from.stored;
        let native = native_hand_off(self.capabilities, self.holder, from, to, conn).await?;
        let link = &mut *conn;
        let give_back = move |to_value: String| async move {
            self.give_back_lean(link, key, &to.token, &to_value).await
        };
        if let Some(answer) = settle_native(native, give_back).await? {
            return Ok(answer);
        }
        let ttl = to.options.ttl;
        let invocation = self
            .holder
            .hand_off(key, &from.token, &to.token, ttl, self.announce);
        let answer = C::settle(invoke(&invocation, &HANDOFF, conn).await)?;
        hand_off_answer(answer)
    }
}

/// Runs a release `call` (see [`Holder::release`]) on `conn`.
pub(super) async fn release_by<C: Link>(
    conn: &mut C,
    call: &Call<'_>,
) -> Result<Release, StoreError> {
    let answer: i64 = C::settle(call.run(conn).await)?;
    Ok(release_answer(answer))
}

/// Runs a leave `call` (see [`Holder::leave`]) on `conn`.
pub(super) async fn leave_by<C: Link>(conn: &mut C, call: &Call<'_>) -> Result<(), StoreError> {
    let _: i64 = C::settle(call.run(conn).await)?;
    Ok(())
}

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
/// covers the `WAIT` (see
/// [`ReplicaAcks::response_timeout`](super::replicas::ReplicaAcks::response_timeout)). An idle
/// one the server closed meanwhile (its `timeout`, a restart) is replaced by a fresh one, which
/// the acquire goes out on again (with the same token it confirms its own grant). `routed`
/// sends the calls of `key` on a connection. It goes back to the pool only if the acquire
/// succeeded.
#[allow(clippy::too_many_arguments)]
pub(super) async fn acquire_replicated<C, R: Link>(
    (replication, pool): &Replicated<C>,
    open: impl Future<Output = Result<(C, Lifeline), StoreError>>,
    routed: impl Fn(&C) -> R,
    holder: &Holder,
    key: &Key,
    token: &str,
    ttl: Duration,
    ask: Ask,
) -> Result<Acquire, StoreError> {
    let call = &holder.acquire(key, token, ttl, ask, replication.announce);
    let send = |conn: &C| {
        let mut conn = routed(conn);
        async move { R::settle(call.run::<AcquireReply>(&mut conn).await) }
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

/// The steal of every deployment with `wait_for_replicas`: steal.lua on a connection of its
/// own (an idle one of the pool, else one `open` makes; see [`acquire_replicated`]), then a
/// wait for the replicas to acknowledge it. A shortfall gives the stolen lock back and fails
/// transiently: the holder it was taken from has lost it either way, and stealing again is
/// safe.
#[allow(clippy::too_many_arguments)]
pub(super) async fn steal_replicated<C, R: Link>(
    (replication, pool): &Replicated<C>,
    open: impl Future<Output = Result<(C, Lifeline), StoreError>>,
    routed: impl Fn(&C) -> R,
    holder: &Holder,
    key: &Key,
    token: &str,
    ttl: Duration,
    from: &str,
) -> Result<Stolen, StoreError> {
    let idle = std::iter::from_fn(|| pool.take()).find(|(_, lifeline)| !lifeline.is_cut());
    let (conn, lifeline) = match idle {
        Some(idle) => idle,
        None => open.await?,
    };
    let mut link = routed(&conn);
    let call = holder.steal(key, token, ttl, from);
    let stolen = steal_answer(key, R::settle(call.run(&mut link).await)?)?;
    confirmed(&mut link, holder, key, token, ttl, replication).await?;
    pool.put((conn, lifeline));
    Ok(stolen)
}

/// Waits on `conn`, where `key` was just granted to `token`, for the replicas to acknowledge
/// it; a shortfall gives the grant back and fails transiently.
async fn confirmed<C: redis::aio::ConnectionLike>(
    conn: &mut C,
    holder: &Holder,
    key: &Key,
    token: &str,
    ttl: Duration,
    replication: &Replication,
) -> Result<(), StoreError> {
    let Err(failure) = replication.confirm(conn, ttl).await else {
        return Ok(());
    };
    let give_back = holder.release(key, token, 0, replication.announce);
    // If this fails too, the caller's clean-up of a failed attempt releases it.
    let _: RedisResult<i64> = give_back.run(conn).await;
    Err(failure)
}

/// The release script's answer (see release.lua).
fn release_answer(answer: i64) -> Release {
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
            holder: crate::store::HolderId::from_raw(*holder),
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
    if !capabilities.set_ifeq || !lease.stored.shape.compares_its_value() {
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
) -> Result<Option<HandOff>, StoreError>
where
    F: Future<Output = Result<bool, StoreError>>,
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
