//! What the locks do, as metrics through the [`metrics`](https://docs.rs/metrics) facade (cargo
//! feature `metrics`; without it every function here is empty). The application installs a
//! recorder (a Prometheus exporter, say); with none installed the facade drops everything.
//!
//! Names and attributes follow OpenTelemetry's conventions for a library (a `lock.` namespace,
//! durations in seconds). Every series is labelled by `lock.name`: the attribute's key
//! *template* (`order:<user_id>`), or the label given with
//! [`LockOptions::label`](crate::LockOptions::label), never the rendered key, so that the number
//! of series stays bounded; without a label, `unlabelled`.
//!
//! The series of store calls (`lock.acquire.request.duration`, `lock.busy_answers`,
//! `lock.renewals`, `lock.release.failures`) are counted by a layer around the manager's store
//! ([`layer::measured`]), whatever the store; the others are the engine's own events.
//!
//! | metric | kind | attributes | what |
//! |---|---|---|---|
//! | `lock.acquire.duration` | histogram, s | `lock.name`, `lock.outcome` | a `lock()` call from start to end, waiting included: `acquired`, `busy`, `error`, `held_by_this_task`, `shut_down` |
//! | `lock.acquire.request.duration` | histogram, s | `lock.name` | one acquire request to the server, answered |
//! | `lock.acquisitions` | counter | `lock.name`, `lock.outcome` | `lock()` calls, by outcome |
//! | `lock.busy_answers` | counter | `lock.name` | acquire requests the server answered "busy" |
//! | `lock.hold.duration` | histogram, s | `lock.name` | from acquisition to release (or drop) |
//! | `lock.held` | gauge | `lock.name` | locks held through this process now |
//! | `lock.waiting` | gauge | `lock.name` | calls of this process waiting in line for a lock now (told it is busy, or behind a holder of this process) |
//! | `lock.renewals` | counter | `lock.renewal.outcome` | lease renewals: `renewed`, `not_owner`, `no_answer` |
//! | `lock.lease.losses` | counter | `lock.name`, `lock.lost.reason` | leases lost while held: `not_owner`, `expired`, `max_hold_exceeded`, `shut_down`, `stolen` |
//! | `lock.steals` | counter | `lock.name` | locks this process took from their holder ([`LockManager::steal`](crate::LockManager::steal)) |
//! | `lock.release_requests` | counter | `lock.name` | requests to let go its holders heard ([`LockManager::request_release`](crate::LockManager::request_release)), the first per hold |
//! | `lock.release.failures` | counter | `lock.name` | releases the server did not confirm (the lock then expires with its lease) |

use std::time::Duration;

use crate::error::LostReason;

pub(crate) mod layer;

/// The `lock.name` of a lock without a label.
#[cfg(feature = "metrics")]
const UNLABELLED: &str = "unlabelled";

#[cfg(feature = "metrics")]
fn name(label: Option<&'static str>) -> &'static str {
    label.unwrap_or(UNLABELLED)
}

/// A `lock()` call ended with `outcome` after `took`.
#[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
pub(crate) fn acquire(label: Option<&'static str>, outcome: &'static str, took: Duration) {
    #[cfg(feature = "metrics")]
    {
        let labels = [("lock.name", name(label)), ("lock.outcome", outcome)];
        metrics::histogram!("lock.acquire.duration", &labels).record(took.as_secs_f64());
        metrics::counter!("lock.acquisitions", &labels).increment(1);
    }
}

/// One acquire request was answered after `took`; `busy`: the lock was held by someone else.
#[cfg(feature = "metrics")]
fn acquire_request(label: Option<&'static str>, took: Duration, busy: bool) {
    let labels = [("lock.name", name(label))];
    metrics::histogram!("lock.acquire.request.duration", &labels).record(took.as_secs_f64());
    if busy {
        metrics::counter!("lock.busy_answers", &labels).increment(1);
    }
}

/// A lock was handed to its caller.
#[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
pub(crate) fn held(label: Option<&'static str>) {
    #[cfg(feature = "metrics")]
    metrics::gauge!("lock.held", "lock.name" => name(label)).increment(1.0);
}

/// A caller joined (`1.0`) or left (`-1.0`) the line of waiters for a lock.
#[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
pub(crate) fn waiting(label: Option<&'static str>, change: f64) {
    #[cfg(feature = "metrics")]
    metrics::gauge!("lock.waiting", "lock.name" => name(label)).increment(change);
}

/// A lock handed to its caller was released or dropped after `held_for()` (asked only with
/// the feature on: the lease's start is behind its mutex).
#[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
pub(crate) fn released(label: Option<&'static str>, held_for: impl FnOnce() -> Duration) {
    #[cfg(feature = "metrics")]
    {
        let lock = name(label);
        metrics::gauge!("lock.held", "lock.name" => lock).decrement(1.0);
        metrics::histogram!("lock.hold.duration", "lock.name" => lock)
            .record(held_for().as_secs_f64());
    }
}

/// Answers to one batch of renewals.
#[cfg(feature = "metrics")]
fn renewals(renewed: u64, not_owner: u64, no_answer: u64) {
    for (outcome, count) in [
        ("renewed", renewed),
        ("not_owner", not_owner),
        ("no_answer", no_answer),
    ] {
        if count > 0 {
            metrics::counter!("lock.renewals", "lock.renewal.outcome" => outcome).increment(count);
        }
    }
}

/// A held lease was lost.
#[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
pub(crate) fn lease_lost(label: Option<&'static str>, reason: LostReason) {
    #[cfg(feature = "metrics")]
    {
        let reason = match reason {
            LostReason::NotOwner => "not_owner",
            LostReason::Expired => "expired",
            LostReason::MaxHoldExceeded => "max_hold_exceeded",
            LostReason::ShutDown => "shut_down",
            LostReason::Stolen => "stolen",
        };
        metrics::counter!(
            "lock.lease.losses",
            "lock.name" => name(label),
            "lock.lost.reason" => reason
        )
        .increment(1);
    }
}

/// This process took a lock by a steal (`lock.steals`).
#[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
pub(crate) fn stolen(label: Option<&'static str>) {
    #[cfg(feature = "metrics")]
    metrics::counter!("lock.steals", "lock.name" => name(label)).increment(1);
}

/// A holder of this process was asked to let go (`lock.release_requests`).
#[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
pub(crate) fn release_requested(label: Option<&'static str>) {
    #[cfg(feature = "metrics")]
    metrics::counter!("lock.release_requests", "lock.name" => name(label)).increment(1);
}

/// A call gave up in a deadlock (`lock.deadlocks`).
#[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
pub(crate) fn deadlock(label: Option<&'static str>) {
    #[cfg(feature = "metrics")]
    metrics::counter!("lock.deadlocks", "lock.name" => name(label)).increment(1);
}

/// A release was not confirmed by the server.
#[cfg(feature = "metrics")]
fn release_failed(label: Option<&'static str>) {
    metrics::counter!("lock.release.failures", "lock.name" => name(label)).increment(1);
}
