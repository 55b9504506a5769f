//! Who waits for which lock, as waiting calls publish it (`lock_runtime::inspect::waits_key`),
//! and the deadlocks among them.
//!
//! The records live in one hash per prefix: on a cluster on the master of its slot, on every
//! Redlock master a copy of its own (of two copies of one record the one written last counts),
//! elsewhere on the one server. A record stands while its process keeps writing it; one whose
//! deadline has passed (its process died, or its wait ended and it was not removed yet) is
//! left out, as the runtime leaves it out.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use lock_runtime::inspect::{self, DeploymentKind, WaitRecord};
use serde::Serialize;

use crate::failure::Failure;
use crate::nodes::Nodes;

/// The standing records of the waits published under `prefix`, in waiter id order.
pub(crate) async fn standing(nodes: &Nodes, prefix: &str) -> Result<Vec<WaitRecord>, Failure> {
    let key = inspect::waits_key(prefix);
    let mut copies = Vec::new();
    let mut why = Vec::new();
    for node in nodes.for_key(&key).await? {
        let read: Result<Vec<(String, String)>, Failure> = nodes
            .query(
                node,
                &format!("reading the published waits `{key}`"),
                redis::cmd("HGETALL").arg(&key),
            )
            .await;
        match read {
            Ok(fields) => copies.push(fields),
            Err(err) => why.push(err),
        }
    }
    // Every Redlock master has a copy: one that answers is enough, as for the runtime.
    if copies.is_empty() || (nodes.kind() != DeploymentKind::Redlock && !why.is_empty()) {
        let mut why = why.into_iter();
        return Err(why
            .next()
            .unwrap_or_else(|| Failure::failed(format!("no server holds `{key}`"))));
    }
    for err in why {
        eprintln!("lockctl: {err}; read the other masters' copies");
    }
    Ok(standing_at(merge(copies), now_ms()))
}

/// The records of every copy read, each waiter once (see [`inspect::newest_copies`]). Fields
/// that are no record are skipped.
fn merge(copies: Vec<Vec<(String, String)>>) -> Vec<WaitRecord> {
    inspect::newest_copies(copies.into_iter().flatten())
        .into_iter()
        .filter_map(|(waiter, text)| WaitRecord::parse(&waiter, &text))
        .collect()
}

/// The records still standing at `now_ms` (this machine's clock).
fn standing_at(records: Vec<WaitRecord>, now_ms: u64) -> Vec<WaitRecord> {
    records
        .into_iter()
        .filter(|record| record.stands_at(now_ms))
        .collect()
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_millis() as u64)
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
    fn copies_of_one_record_merge_to_the_one_written_last() {
        let older = vec![
            ("01".to_owned(), text("lock:{a}", 2000, &[])),
            ("02".to_owned(), text("lock:{b}", 2000, &[])),
        ];
        let newer = vec![
            ("01".to_owned(), text("lock:{a}", 2400, &["lock:{c}"])),
            ("03".to_owned(), "not a record".to_owned()),
        ];
        let merged = merge(vec![newer.clone(), older.clone()]);
        assert_eq!(merged.len(), 2, "{merged:?}");
        assert_eq!(merged[0].waiter, "01");
        assert_eq!(merged[0].at_ms, 2400);
        assert_eq!(merged[0].holds.len(), 1);
        assert_eq!(merge(vec![older, newer]), merged, "whatever the order read");
    }

    #[test]
    fn records_past_their_deadline_and_the_skew_are_left_out() {
        let records = merge(vec![vec![
            ("01".to_owned(), text("lock:{a}", 10_000, &[])),
            ("02".to_owned(), text("lock:{a}", 1_000, &[])),
        ]]);
        // 01 stands until 15 000, 02 until 6 000; each 5 s more for the clocks' skew.
        let kept = standing_at(records, 12_000);
        assert_eq!(kept.len(), 1, "{kept:?}");
        assert_eq!(kept[0].waiter, "01");
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
