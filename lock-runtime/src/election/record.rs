//! What an election keeps besides its lock: one record per campaign (who campaigns, from where,
//! with which priority, and, while it leads, its term), in the store's keyed records with
//! expiry (the ones the deadlock detector publishes waits in: [`Store::waits`]), under one key
//! per prefix, `<prefix>elections:{elections}`, in one Redis Cluster slot. A campaign writes its
//! record when it starts and at every change, and again every `ttl / 3`; each record carries its
//! own deadline, so one whose process died stops counting `ttl` after its last write.
//!
//! Who leads is never read from here alone: the lock says who holds it, and a record whose
//! term names that holder adds what the lock does not keep.
//!
//! [`Store::waits`]: crate::store::Store::waits

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::error::LockError;
use crate::protocol::waits::{CLOCK_SKEW_MS, Escaped, WaitsUpdate, unescape};
use crate::store::Store;

/// How long the records outlive the last write of any campaign: longer than any campaign
/// waits between two writes (`MAX_TTL / 3`), so a live campaign's record is never dropped.
const KEEP: Duration = Duration::from_secs(3 * 3600);

/// The key of the records of every election under `prefix`. No lock is stored under it (a
/// lock's name begins with `{` after the prefix).
pub(crate) fn records_key(prefix: &str) -> String {
    format!("{prefix}elections:{{elections}}")
}

/// Now by this process's wall clock, in ms since the Unix epoch.
pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |now| u64::try_from(now.as_millis()).unwrap_or(u64::MAX))
}

/// A wall-clock time in ms since the Unix epoch.
pub(crate) fn at_ms(ms: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(ms)
}

/// The term a record's campaign leads, as it wrote it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TermRecord {
    /// The id of the term's owner token (12 hex digits, as the lock names its holder).
    pub(crate) holder: String,
    pub(crate) fence: u64,
    /// When the term began (its leader's wall clock).
    pub(crate) elected_ms: u64,
}

/// One campaign's record. Stored as one line of `name=value` pairs: `election=<name>
/// priority=<p> since=<ms> until=<ms>`, then where known `host=<h> pid=<p> app=<a>`,
/// `resigned=1` while it gives way after a resignation, and `holder=<id> fence=<f>
/// elected=<ms>` while it leads; values escaped as the published waits' are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Record {
    /// The campaign's id: 16 hex digits, random (the field it is stored under).
    pub(crate) id: String,
    pub(crate) election: String,
    pub(crate) priority: u32,
    /// When the campaign began.
    pub(crate) since_ms: u64,
    /// Until when the record stands unless written again.
    pub(crate) until_ms: u64,
    pub(crate) host: Option<String>,
    pub(crate) pid: Option<u32>,
    pub(crate) app: Option<String>,
    pub(crate) resigned: bool,
    pub(crate) term: Option<TermRecord>,
}

impl Record {
    /// The record as stored.
    pub(crate) fn format(&self) -> String {
        use std::fmt::Write as _;
        let mut out = format!(
            "election={} priority={} since={} until={}",
            Escaped(&self.election),
            self.priority,
            self.since_ms,
            self.until_ms
        );
        // Writing to a String cannot fail.
        if let Some(host) = &self.host {
            let _ = write!(out, " host={}", Escaped(host));
        }
        if let Some(pid) = self.pid {
            let _ = write!(out, " pid={pid}");
        }
        if let Some(app) = &self.app {
            let _ = write!(out, " app={}", Escaped(app));
        }
        if self.resigned {
            out.push_str(" resigned=1");
        }
        if let Some(term) = &self.term {
            let _ = write!(
                out,
                " holder={} fence={} elected={}",
                Escaped(&term.holder),
                term.fence,
                term.elected_ms
            );
        }
        out
    }

    /// A record stored under the field `id`; `None` if it is not one (names it does not know
    /// are skipped: a later version may add some).
    pub(crate) fn parse(id: &str, text: &str) -> Option<Record> {
        let mut record = Record {
            id: id.to_owned(),
            election: String::new(),
            priority: 0,
            since_ms: 0,
            until_ms: 0,
            host: None,
            pid: None,
            app: None,
            resigned: false,
            term: None,
        };
        let (mut holder, mut fence, mut elected) = (None, None, 0);
        for pair in text.split(' ') {
            let (name, value) = pair.split_once('=')?;
            match name {
                "election" => record.election = unescape(value)?,
                "priority" => record.priority = value.parse().ok()?,
                "since" => record.since_ms = value.parse().ok()?,
                "until" => record.until_ms = value.parse().ok()?,
                "host" => record.host = Some(unescape(value)?),
                "pid" => record.pid = value.parse().ok(),
                "app" => record.app = Some(unescape(value)?),
                "resigned" => record.resigned = value == "1",
                "holder" => holder = Some(unescape(value)?),
                "fence" => fence = value.parse().ok(),
                "elected" => elected = value.parse().unwrap_or(0),
                _ => {}
            }
        }
        if let (Some(holder), Some(fence)) = (holder, fence) {
            record.term = Some(TermRecord {
                holder,
                fence,
                elected_ms: elected,
            });
        }
        (!record.election.is_empty()).then_some(record)
    }

    /// Whether it stands at `now_ms` (with the clock skew the published waits allow).
    pub(crate) fn stands_at(&self, now_ms: u64) -> bool {
        self.until_ms.saturating_add(CLOCK_SKEW_MS) >= now_ms
    }
}

/// Writes `record` (and removes the records `stale`), in one step.
pub(crate) async fn write(
    store: &dyn Store,
    prefix: &str,
    record: &Record,
    stale: Vec<String>,
) -> Result<(), crate::store::StoreError> {
    let update = WaitsUpdate {
        set: vec![(record.id.clone(), record.format())],
        remove: stale,
        keep: KEEP,
        read: false,
    };
    store.waits(&records_key(prefix), &update).await.map(drop)
}

/// Removes the record of the campaign `id`.
pub(crate) async fn remove(
    store: &dyn Store,
    prefix: &str,
    id: &str,
) -> Result<(), crate::store::StoreError> {
    let update = WaitsUpdate {
        remove: vec![id.to_owned()],
        ..WaitsUpdate::default()
    };
    store.waits(&records_key(prefix), &update).await.map(drop)
}

/// Every record that stands now, of every election under `prefix`, in id order.
pub(crate) async fn read(
    store: &dyn Store,
    prefix: &str,
) -> Result<Vec<Record>, crate::store::StoreError> {
    let update = WaitsUpdate {
        read: true,
        ..WaitsUpdate::default()
    };
    let fields = store.waits(&records_key(prefix), &update).await?;
    let now = now_ms();
    // Several copies of one record (one per Redlock master): the one written last, which
    // stands longest.
    let mut newest: std::collections::BTreeMap<String, Record> = Default::default();
    for record in fields
        .iter()
        .filter_map(|(id, text)| Record::parse(id, text))
    {
        match newest.get(&record.id) {
            Some(kept) if kept.until_ms >= record.until_ms => {}
            _ => {
                newest.insert(record.id.clone(), record);
            }
        }
    }
    Ok(newest
        .into_values()
        .filter(|record| record.stands_at(now))
        .collect())
}

/// The error for a part of an election that needs the records (`what`: "a priority of
/// `jobs`", "the elections") on a store that keeps none.
pub(crate) fn not_kept(store: &dyn Store, what: &str) -> LockError {
    LockError::Config(format!(
        "{} keeps no records of an election's candidates, so {what} cannot be had here: use a \
         store that keeps them (memory, any Redis deployment, PostgreSQL)",
        store.describe(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_reads_back_as_written() {
        let mut record = Record {
            id: "00ff".into(),
            election: "sched uler=%#".into(),
            priority: 7,
            since_ms: 1_000,
            until_ms: 5_000,
            host: Some("web 1".into()),
            pid: Some(42),
            app: Some("orders api".into()),
            resigned: true,
            term: Some(TermRecord {
                holder: "0123456789ab".into(),
                fence: 17,
                elected_ms: 2_000,
            }),
        };
        assert_eq!(
            Record::parse("00ff", &record.format()),
            Some(record.clone())
        );
        record.term = None;
        record.host = None;
        record.resigned = false;
        assert_eq!(Record::parse("00ff", &record.format()), Some(record));
        assert_eq!(Record::parse("x", "waits=lock:{a} since=1"), None);
    }
}
