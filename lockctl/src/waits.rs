//! Who waits for which lock, as waiting calls publish them (`lock_runtime::inspect::waits_key`),
//! read through the store's inspection side, and the deadlocks among them. A record stands
//! while its process keeps writing it; the store leaves out one whose deadline has passed (its
//! process died, or its wait ended and it was not removed yet), as the runtime leaves it out.

use std::time::{Duration, UNIX_EPOCH};

use lock_runtime::inspect::{self, WaitRecord};
use serde::Serialize;

use crate::deployment::Deployment;
use crate::failure::Failure;

/// The standing records of the waits published under `prefix`, in waiter id order.
pub(crate) async fn standing(
    deployment: &Deployment,
    prefix: &str,
) -> Result<Vec<WaitRecord>, Failure> {
    let read = deployment.inspect()?.waits(prefix).await;
    read.map_err(Failure::store)
}

/// One deadlock, as `lockctl deadlocks --json` prints it. The field names are stable: scripts
/// read them.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct CycleView {
    /// Each member waits for a lock the next one holds, the last for one the first holds.
    pub(crate) members: Vec<MemberView>,
}

/// One waiting call of a deadlock.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct MemberView {
    /// The lock it waits for, by name.
    pub(crate) waits_for: String,
    /// The locks its task holds, by name.
    pub(crate) holds: Vec<String>,
    pub(crate) host: Option<String>,
    pub(crate) pid: Option<u32>,
    pub(crate) app: Option<String>,
    /// When its wait began, RFC 3339 (the waiter's clock).
    pub(crate) waiting_since: String,
    /// It is the member that gives up (it chose `Deadlock::Fail`, and is the youngest wait of
    /// those that did); none does if no member chose it.
    pub(crate) gives_up: bool,
}

/// One call waiting for the lock `show` shows.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct WaiterView {
    pub(crate) host: Option<String>,
    pub(crate) pid: Option<u32>,
    pub(crate) app: Option<String>,
    /// When its wait began, RFC 3339 (the waiter's clock).
    pub(crate) waiting_since: String,
    /// The locks its task holds meanwhile, by name.
    pub(crate) holds: Vec<String>,
}

/// The deadlocks among `records`.
pub(crate) fn deadlocks(prefix: &str, records: &[WaitRecord]) -> Vec<CycleView> {
    inspect::find_cycles(records)
        .iter()
        .map(|cycle| {
            let gives_up = inspect::victim(cycle).map(|victim| victim.waiter.clone());
            CycleView {
                members: cycle
                    .iter()
                    .map(|member| MemberView {
                        waits_for: name(prefix, &member.waits_for),
                        holds: holds(prefix, member),
                        host: member.host.clone(),
                        pid: member.pid,
                        app: member.app.clone(),
                        waiting_since: since(member),
                        gives_up: gives_up.as_deref() == Some(member.waiter.as_str()),
                    })
                    .collect(),
            }
        })
        .collect()
}

/// The calls among `records` that wait for the lock stored at `stored`, longest waiting first.
pub(crate) fn waiting_for(prefix: &str, records: &[WaitRecord], stored: &str) -> Vec<WaiterView> {
    let mut waiting: Vec<&WaitRecord> = records
        .iter()
        .filter(|record| record.waits_for == stored)
        .collect();
    waiting.sort_by(|a, b| (a.since_ms, &a.waiter).cmp(&(b.since_ms, &b.waiter)));
    waiting
        .into_iter()
        .map(|record| WaiterView {
            host: record.host.clone(),
            pid: record.pid,
            app: record.app.clone(),
            waiting_since: since(record),
            holds: holds(prefix, record),
        })
        .collect()
}

/// The name of the lock stored at `stored`; the stored key itself where it names none (as the
/// runtime names it).
fn name(prefix: &str, stored: &str) -> String {
    inspect::lock_name(prefix, stored).unwrap_or_else(|| stored.to_owned())
}

/// What `record`'s task holds, by name (the record names each holder by a token id, not
/// shown).
fn holds(prefix: &str, record: &WaitRecord) -> Vec<String> {
    record
        .holds
        .iter()
        .map(|(stored, _)| name(prefix, stored))
        .collect()
}

fn since(record: &WaitRecord) -> String {
    let at = UNIX_EPOCH + Duration::from_millis(record.since_ms);
    humantime::format_rfc3339_millis(at).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(waits: &str, at: u64, holds: &[&str]) -> String {
        let mut text = format!(
            "waits={waits} since=1000 at={at} until={} fail=0",
            at + 5000
        );
        for held in holds {
            text.push_str(&format!(" hold={held}#abc"));
        }
        text
    }

    #[test]
    fn a_cycle_names_its_locks_and_who_gives_up() {
        let mut a = WaitRecord::parse("0a", &text("lock:{y}", 2000, &["lock:{x}"])).expect("a");
        let mut b = WaitRecord::parse("0b", &text("lock:{x}", 2000, &["lock:{y}"])).expect("b");
        let cycles = deadlocks("lock:", &[a.clone(), b.clone()]);
        assert_eq!(cycles.len(), 1);
        let members = &cycles[0].members;
        assert_eq!(members[0].waits_for, "y");
        assert_eq!(members[0].holds, ["x"]);
        assert_eq!(members[0].waiting_since, "1970-01-01T00:00:01.000Z");
        assert!(members.iter().all(|member| !member.gives_up));
        a.fail = true;
        b.fail = true;
        b.since_ms = 1500;
        let cycles = deadlocks("lock:", &[a.clone(), b.clone()]);
        let gives_up: Vec<&str> = cycles[0]
            .members
            .iter()
            .filter(|member| member.gives_up)
            .map(|member| member.waits_for.as_str())
            .collect();
        assert_eq!(gives_up, ["x"], "the youngest wait: b's");
        let waiting = waiting_for("lock:", &[b, a], "lock:{x}");
        assert_eq!(waiting.len(), 1);
        assert_eq!(waiting[0].holds, ["y"]);
    }
}
