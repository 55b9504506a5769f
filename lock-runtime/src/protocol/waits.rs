//! What a waiter publishes about its wait, for deadlock detection and for `lockctl`: one hash
//! per key prefix, `<prefix>waits:{waits}`, in one fixed Redis Cluster slot (the hash tag is
//! constant), so that every process reads every record with one `HVALS`. A field per waiting
//! call (its waiter id), its value one line of `name=value` pairs (see [`WaitRecord`]).
//!
//! Nothing is written for a call that is not waiting: an uncontended acquire costs nothing
//! here. A call that waits while its task holds other locks is published at the next tick of
//! its manager's detector; one that holds nothing only once it has waited a while (it cannot
//! be part of a cycle, and is published for `lockctl` to show who waits).
//!
//! A record carries its own deadline (`until`), which its process moves on at every tick; the
//! hash expires with the last write of any process, so a dead process leaves nothing behind.

use std::collections::{BTreeMap, HashMap, HashSet};

/// How far apart the clocks of a record's writer and its reader may be for the record to be
/// read as standing (see [`WaitRecord::stands_at`]).
pub const CLOCK_SKEW_MS: u64 = 5_000;

/// The fields of several copies of the hash (one per Redlock master) as one: each waiter once,
/// from the copy written last (the largest `at`; a field that is no record counts as written
/// never). In waiter id order.
pub fn newest_copies(fields: impl IntoIterator<Item = (String, String)>) -> Vec<(String, String)> {
    let written =
        |waiter: &str, text: &str| WaitRecord::parse(waiter, text).map_or(0, |record| record.at_ms);
    let mut newest: BTreeMap<String, (u64, String)> = BTreeMap::new();
    for (waiter, text) in fields {
        let at = written(&waiter, &text);
        match newest.get(&waiter) {
            Some((kept, _)) if *kept >= at => {}
            _ => {
                newest.insert(waiter, (at, text));
            }
        }
    }
    newest
        .into_iter()
        .map(|(waiter, (_, text))| (waiter, text))
        .collect()
}

/// The records standing at `now_ms` among the fields of every copy read (see
/// [`newest_copies`]), each waiter once, in waiter id order; fields that are no record are
/// skipped.
pub(crate) fn standing(
    fields: impl IntoIterator<Item = (String, String)>,
    now_ms: u64,
) -> Vec<WaitRecord> {
    newest_copies(fields)
        .into_iter()
        .filter_map(|(waiter, text)| WaitRecord::parse(&waiter, &text))
        .filter(|record| record.stands_at(now_ms))
        .collect()
}

/// The hash every waiter of the managers under `prefix` publishes to: `<prefix>waits:{waits}`.
/// No lock is stored under it (a lock's name begins with `{` after the prefix), and its hash
/// tag is constant, so it lies in one Redis Cluster slot per prefix.
pub(crate) fn waits_key(prefix: &str) -> String {
    format!("{prefix}waits:{{waits}}")
}

/// One write (and read) of the record of published waits, in one round trip: see
/// [`Store::waits`](crate::store::Store::waits).
#[derive(Debug, Default)]
pub struct WaitsUpdate {
    /// Records to write: waiter id and [`WaitRecord::format`].
    pub(crate) set: Vec<(String, String)>,
    /// Waiter ids to remove: waits that ended, and records found past their deadline.
    pub(crate) remove: Vec<String>,
    /// How long the hash outlives this write (when it writes).
    pub(crate) keep: std::time::Duration,
    /// Whether to read every record back.
    pub(crate) read: bool,
}

impl WaitsUpdate {
    /// Records to write, replacing any of the same waiter id: `(waiter id, record)`.
    pub fn set(&self) -> &[(String, String)] {
        &self.set
    }

    /// Waiter ids whose records to remove.
    pub fn remove(&self) -> &[String] {
        &self.remove
    }

    /// How long the whole record outlives this write, when it writes: a store lets it expire
    /// then (every live waiter writes again well before).
    pub fn keep(&self) -> std::time::Duration {
        self.keep
    }

    /// Whether to answer every record kept (after the writes and removals).
    pub fn read(&self) -> bool {
        self.read
    }

    /// Whether there is nothing to send.
    pub fn is_empty(&self) -> bool {
        self.set.is_empty() && self.remove.is_empty() && !self.read
    }

    /// The update as one pipeline on the hash `key`: `HSET`, `HDEL`, `PEXPIRE` and `HGETALL`
    /// as needed; its answer is the records read ([`WaitsUpdate::answer`]).
    pub(crate) fn pipeline(&self, key: &str) -> redis::Pipeline {
        let mut pipe = redis::pipe();
        if !self.set.is_empty() {
            let mut hset = redis::cmd("HSET");
            hset.arg(key);
            for (field, value) in &self.set {
                hset.arg(field).arg(value);
            }
            pipe.add_command(hset).ignore();
            pipe.cmd("PEXPIRE")
                .arg(key)
                .arg(super::millis(self.keep))
                .ignore();
        }
        if !self.remove.is_empty() {
            pipe.cmd("HDEL").arg(key).arg(&self.remove).ignore();
        }
        if self.read {
            pipe.cmd("HGETALL").arg(key);
        }
        pipe
    }

    /// What the pipeline of this update answered: the records read (none if it did not read).
    pub(crate) fn answer(
        &self,
        reply: Vec<redis::Value>,
    ) -> redis::RedisResult<Vec<(String, String)>> {
        match reply.into_iter().next() {
            Some(value) if self.read => {
                redis::FromRedisValue::from_redis_value(value).map_err(redis::RedisError::from)
            }
            _ => Ok(Vec::new()),
        }
    }
}

/// One waiting call, as its process publishes it.
///
/// Keys are stored keys (`lock:{order:42}`; [`lock_name`](crate::inspect::lock_name) gives the
/// name), and holders are named by the 12 hex digits of
/// [`StoredLock::token_id`](crate::inspect::StoredLock::token_id), never by an owner token.
///
/// Stored as one line of `name=value` pairs: `waits=<key> since=<ms> at=<ms> until=<ms>
/// fail=<0|1>`, then, where known, `by=<id> host=<h> pid=<p> app=<a>`, and `hold=<key>#<id>`
/// for each lock held, each value with `%`, space, `#`, tab, CR and LF escaped as `%XX`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct WaitRecord {
    /// The waiting call's id: 16 hex digits, random, unique per call.
    pub waiter: String,
    /// The stored key of the lock it waits for.
    pub waits_for: String,
    /// The holder the last busy answer named (its token id), if the server named one.
    pub blocked_by: Option<String>,
    /// The locks its task holds while it waits: stored key and the token id of its lease.
    pub holds: Vec<(String, String)>,
    /// When the wait began (the waiter's wall clock, ms since the Unix epoch).
    pub since_ms: u64,
    /// When the record was last written (the waiter's wall clock): it moves on at every tick
    /// of a live waiter.
    pub at_ms: u64,
    /// Until when the record stands unless written again (the waiter's wall clock).
    pub until_ms: u64,
    /// Whether the call asked to fail rather than wait in a deadlock (`deadlock = "fail"`).
    pub fail: bool,
    /// The waiter's host name, pid and app name.
    pub host: Option<String>,
    /// The waiter's process id.
    pub pid: Option<u32>,
    /// The waiter's app name.
    pub app: Option<String>,
}

impl WaitRecord {
    /// The record as stored, in the format [`WaitRecord`] describes.
    pub(crate) fn format(&self) -> String {
        use std::fmt::Write as _;
        let mut out = String::with_capacity(96 + self.waits_for.len());
        // Writing to a String cannot fail.
        let _ = write!(
            out,
            "waits={} since={} at={} until={} fail={}",
            Escaped(&self.waits_for),
            self.since_ms,
            self.at_ms,
            self.until_ms,
            u8::from(self.fail)
        );
        if let Some(by) = &self.blocked_by {
            let _ = write!(out, " by={}", Escaped(by));
        }
        if let Some(host) = &self.host {
            let _ = write!(out, " host={}", Escaped(host));
        }
        if let Some(pid) = self.pid {
            let _ = write!(out, " pid={pid}");
        }
        if let Some(app) = &self.app {
            let _ = write!(out, " app={}", Escaped(app));
        }
        for (key, id) in &self.holds {
            let _ = write!(out, " hold={}#{}", Escaped(key), Escaped(id));
        }
        out
    }

    /// Reads a record stored under the field `waiter`, in the format [`WaitRecord`] describes;
    /// `None` if it is not one (names it does not know are skipped: a later version may add
    /// some).
    pub fn parse(waiter: &str, text: &str) -> Option<WaitRecord> {
        let mut record = WaitRecord {
            waiter: waiter.to_owned(),
            waits_for: String::new(),
            blocked_by: None,
            holds: Vec::new(),
            since_ms: 0,
            at_ms: 0,
            until_ms: 0,
            fail: false,
            host: None,
            pid: None,
            app: None,
        };
        for pair in text.split(' ') {
            let (name, value) = pair.split_once('=')?;
            match name {
                "waits" => record.waits_for = unescape(value)?,
                "by" => record.blocked_by = Some(unescape(value)?),
                "since" => record.since_ms = value.parse().ok()?,
                "at" => record.at_ms = value.parse().ok()?,
                "until" => record.until_ms = value.parse().ok()?,
                "fail" => record.fail = value == "1",
                "host" => record.host = Some(unescape(value)?),
                "pid" => record.pid = value.parse().ok(),
                "app" => record.app = Some(unescape(value)?),
                "hold" => {
                    let (key, id) = value.split_once('#')?;
                    record.holds.push((unescape(key)?, unescape(id)?));
                }
                _ => {}
            }
        }
        (!record.waits_for.is_empty()).then_some(record)
    }

    /// Whether the record still stands at `now_ms` on the reader's clock, allowing
    /// [`CLOCK_SKEW_MS`] between the writer's clock and the reader's.
    pub fn stands_at(&self, now_ms: u64) -> bool {
        self.until_ms.saturating_add(CLOCK_SKEW_MS) >= now_ms
    }

    /// Whether this record's task holds `key` under the holder `id` (any holder of it when
    /// `id` is `None`).
    fn holds(&self, key: &str, id: Option<&str>) -> bool {
        self.holds
            .iter()
            .any(|(held, holder)| held == key && id.is_none_or(|id| id == holder))
    }
}

/// The cycles in `records`: each a list of records where each one waits for a lock the next
/// one holds, and the last for one the first holds (the holder the waiter's busy answer named,
/// where it named one). Each cycle once, starting at its smallest waiter id; cycles of more
/// than 32 calls are not followed.
pub fn find_cycles(records: &[WaitRecord]) -> Vec<Vec<WaitRecord>> {
    const LONGEST: usize = 32;
    let mut ids: Vec<usize> = (0..records.len()).collect();
    ids.sort_by(|&a, &b| records[a].waiter.cmp(&records[b].waiter));
    // Who holds what each waiter waits for.
    let next: Vec<Vec<usize>> = records
        .iter()
        .map(|waiter| {
            ids.iter()
                .copied()
                .filter(|&other| {
                    records[other].waiter != waiter.waiter
                        && records[other].holds(&waiter.waits_for, waiter.blocked_by.as_deref())
                })
                .collect()
        })
        .collect();
    let rank: HashMap<usize, usize> = ids.iter().enumerate().map(|(at, &id)| (id, at)).collect();
    let mut found = Vec::new();
    let mut seen = HashSet::new();
    for &start in &ids {
        // Only through waiters after `start`: every cycle is found from its smallest member.
        let mut path = vec![start];
        let mut choices = vec![0usize];
        while let Some(choice) = choices.last_mut() {
            let at = *path.last().unwrap_or(&start);
            let Some(&to) = next[at].get(*choice) else {
                path.pop();
                choices.pop();
                continue;
            };
            *choice += 1;
            if to == start {
                let members: Vec<usize> = path.clone();
                if seen.insert(members.clone()) {
                    found.push(members.iter().map(|&m| records[m].clone()).collect());
                }
            } else if rank[&to] > rank[&start] && !path.contains(&to) && path.len() < LONGEST {
                path.push(to);
                choices.push(0);
            }
        }
    }
    found
}

/// The member of `cycle` that gives up when waiters ask to fail in a deadlock: the youngest
/// wait (the latest `since`, the larger waiter id if two began in one millisecond) among the
/// members that asked to fail; `None` if none did. Every process computes the same.
pub fn victim(cycle: &[WaitRecord]) -> Option<&WaitRecord> {
    cycle
        .iter()
        .filter(|member| member.fail)
        .max_by(|a, b| (a.since_ms, &a.waiter).cmp(&(b.since_ms, &b.waiter)))
}

/// A cycle's identity across ticks: its members' waiter ids, sorted.
pub(crate) fn cycle_id(cycle: &[WaitRecord]) -> Vec<String> {
    let mut ids: Vec<String> = cycle.iter().map(|member| member.waiter.clone()).collect();
    ids.sort();
    ids
}

/// When each member of a cycle was last written: a record whose `at` moves on between two
/// readings belongs to a process that is alive and still waiting.
pub(crate) fn written_at(cycle: &[WaitRecord]) -> BTreeMap<String, u64> {
    cycle
        .iter()
        .map(|member| (member.waiter.clone(), member.at_ms))
        .collect()
}

/// A value with the characters that would end it escaped as `%XX`.
pub(crate) struct Escaped<'a>(pub(crate) &'a str);

impl std::fmt::Display for Escaped<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for c in self.0.chars() {
            match c {
                '%' | ' ' | '#' | '\t' | '\r' | '\n' | '=' => write!(f, "%{:02X}", c as u32)?,
                c => f.write_fmt(format_args!("{c}"))?,
            }
        }
        Ok(())
    }
}

/// A value [`Escaped`] wrote, as it was; `None` for a broken escape.
pub(crate) fn unescape(value: &str) -> Option<String> {
    if !value.contains('%') {
        return Some(value.to_owned());
    }
    let mut bytes = Vec::with_capacity(value.len());
    let mut rest = value.as_bytes();
    while let Some((&byte, tail)) = rest.split_first() {
        if byte == b'%' {
            let hex = std::str::from_utf8(tail.get(..2)?).ok()?;
            bytes.push(u8::from_str_radix(hex, 16).ok()?);
            rest = &tail[2..];
        } else {
            bytes.push(byte);
            rest = tail;
        }
    }
    String::from_utf8(bytes).ok()
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
    fn copies_of_one_record_stand_as_the_one_written_last() {
        let older = vec![
            ("01".to_owned(), text("lock:{a}", 2000, &[])),
            ("02".to_owned(), text("lock:{b}", 2000, &[])),
        ];
        let newer = vec![
            ("01".to_owned(), text("lock:{a}", 2400, &["lock:{c}"])),
            ("03".to_owned(), "not a record".to_owned()),
        ];
        let merged = standing(newer.iter().chain(&older).cloned(), 0);
        assert_eq!(merged.len(), 2, "{merged:?}");
        assert_eq!(merged[0].waiter, "01");
        assert_eq!(merged[0].at_ms, 2400);
        assert_eq!(merged[0].holds.len(), 1);
        let other_order = standing(older.into_iter().chain(newer), 0);
        assert_eq!(other_order, merged, "whatever the order read");
    }

    #[test]
    fn records_past_their_deadline_and_the_skew_do_not_stand() {
        let fields = vec![
            ("01".to_owned(), text("lock:{a}", 10_000, &[])),
            ("02".to_owned(), text("lock:{a}", 1_000, &[])),
        ];
        // 01 stands until 15 000, 02 until 6 000; each 5 s more for the clocks' skew.
        let kept = standing(fields, 12_000);
        assert_eq!(kept.len(), 1, "{kept:?}");
        assert_eq!(kept[0].waiter, "01");
    }

    fn record(waiter: &str, waits: &str, by: Option<&str>, holds: &[(&str, &str)]) -> WaitRecord {
        WaitRecord {
            waiter: waiter.to_owned(),
            waits_for: waits.to_owned(),
            blocked_by: by.map(str::to_owned),
            holds: holds
                .iter()
                .map(|(k, id)| ((*k).to_owned(), (*id).to_owned()))
                .collect(),
            since_ms: 1000,
            at_ms: 1200,
            until_ms: 6200,
            fail: false,
            host: Some("web 1".to_owned()),
            pid: Some(42),
            app: Some("a=b#c%d".to_owned()),
        }
    }

    #[test]
    fn a_record_reads_back_as_written_whatever_its_keys_hold() {
        let mut written = record(
            "00ff",
            "lock:{a b#c%d=e\n}",
            Some("abc"),
            &[("lock:{x y}", "123"), ("lock:{#}", "456")],
        );
        written.fail = true;
        let text = written.format();
        assert!(!text.contains('\n'), "{text}");
        assert_eq!(WaitRecord::parse("00ff", &text), Some(written.clone()));
        written.host = None;
        written.pid = None;
        written.app = None;
        written.blocked_by = None;
        assert_eq!(WaitRecord::parse("00ff", &written.format()), Some(written));
        assert_eq!(WaitRecord::parse("1", "nonsense"), None);
        assert_eq!(WaitRecord::parse("1", "since=1"), None);
        // A later version's names are skipped.
        let later =
            WaitRecord::parse("1", "waits=k since=1 at=2 until=3 fail=0 new=x").expect("read");
        assert_eq!(later.waits_for, "k");
    }

    #[test]
    fn two_waiters_holding_what_the_other_waits_for_are_one_cycle() {
        let a = record("01", "B", Some("hb"), &[("A", "ha")]);
        let b = record("02", "A", Some("ha"), &[("B", "hb")]);
        let bystander = record("03", "A", Some("ha"), &[]);
        let cycles = find_cycles(&[bystander.clone(), b.clone(), a.clone()]);
        assert_eq!(cycles.len(), 1, "{cycles:?}");
        assert_eq!(cycle_id(&cycles[0]), ["01", "02"]);
        // Another holder of `B` now: the record of the old one's wait is stale.
        let moved_on = record("01", "B", Some("other"), &[("A", "ha")]);
        assert!(find_cycles(&[moved_on, b.clone()]).is_empty());
        // Nobody named: the key decides.
        let unnamed = record("01", "B", None, &[("A", "ha")]);
        assert_eq!(find_cycles(&[unnamed, b]).len(), 1);
    }

    #[test]
    fn three_waiters_in_a_ring_are_one_cycle_found_once() {
        let a = record("0a", "B", None, &[("A", "1")]);
        let b = record("0b", "C", None, &[("B", "2")]);
        let c = record("0c", "A", None, &[("C", "3")]);
        let cycles = find_cycles(&[c.clone(), a.clone(), b.clone()]);
        assert_eq!(cycles.len(), 1, "{cycles:?}");
        assert_eq!(cycle_id(&cycles[0]), ["0a", "0b", "0c"]);
        // The chain a -> b -> c without the last link is no cycle.
        let c_free = record("0c", "D", None, &[("C", "3")]);
        assert!(find_cycles(&[a, b, c_free]).is_empty());
    }

    #[test]
    fn the_youngest_wait_that_asked_to_fail_is_the_victim() {
        let mut a = record("0a", "B", None, &[("A", "1")]);
        let mut b = record("0b", "A", None, &[("B", "2")]);
        assert_eq!(victim(&[a.clone(), b.clone()]), None);
        a.fail = true;
        b.fail = true;
        a.since_ms = 5;
        b.since_ms = 4;
        assert_eq!(
            victim(&[a.clone(), b.clone()]).map(|v| v.waiter.as_str()),
            Some("0a")
        );
        b.since_ms = 5;
        assert_eq!(
            victim(&[a.clone(), b.clone()]).map(|v| v.waiter.as_str()),
            Some("0b")
        );
        // Only who asked to fail gives up.
        b.fail = false;
        assert_eq!(victim(&[a, b]).map(|v| v.waiter.as_str()), Some("0a"));
    }
}
