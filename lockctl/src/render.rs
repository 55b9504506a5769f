//! How locks are printed: aligned columns for people, JSON (`--json`) for scripts.

use std::io::Write;
use std::time::Duration;

use serde::Serialize;

use crate::deployment::Deployment;
use crate::failure::Failure;
use crate::read::{HolderEntry, LockView};
use crate::waits::{CycleView, WaiterView};

#[derive(Serialize)]
struct ListJson<'a> {
    /// The deployment, without its password.
    deployment: String,
    locks: &'a [LockView],
}

#[derive(Serialize)]
struct ShowJson<'a> {
    deployment: String,
    key: &'a str,
    /// The lock on each server that may hold it (every Redlock master; one elsewhere).
    locks: &'a [LockView],
    /// The calls that wait for the lock, as they publish their waits, longest waiting first;
    /// `null` if the published waits could not be read.
    waiters: Option<&'a [WaiterView]>,
}

pub(crate) fn print_list(
    deployment: &Deployment,
    locks: &[LockView],
    json: bool,
) -> Result<(), Failure> {
    if json {
        return print_json(&ListJson {
            deployment: deployment.shown().to_owned(),
            locks,
        });
    }
    let with_server = deployment.several();
    let mut rows = vec![{
        let mut header = vec![
            "KEY", "KIND", "STATE", "HOLDER", "APP", "AGE", "LEASE", "FENCE", "WAITERS", "LINE",
        ];
        if with_server {
            header.push("SERVER");
        }
        header.into_iter().map(str::to_owned).collect::<Vec<_>>()
    }];
    for lock in locks {
        let mut row = vec![
            lock.key.clone(),
            lock.kind.to_owned(),
            lock.state.clone(),
            holder(lock),
            lock.app.clone().unwrap_or_else(|| "-".into()),
            millis(lock.age_ms.map(|age| age as i64)),
            millis(lock.lease_ms),
            fence(lock),
            lock.waiters.to_string(),
            lock.line_length.to_string(),
        ];
        if with_server {
            row.push(lock.server.clone());
        }
        rows.push(row);
    }
    let mut out = String::new();
    table(&mut out, &rows);
    if locks.is_empty() {
        out.push_str("(no locks)\n");
    }
    write_out(&out)
}

pub(crate) fn print_show(
    deployment: &Deployment,
    key: &str,
    locks: &[LockView],
    waiters: Option<&[WaiterView]>,
    json: bool,
) -> Result<(), Failure> {
    if json {
        return print_json(&ShowJson {
            deployment: deployment.shown().to_owned(),
            key,
            locks,
            waiters,
        });
    }
    let mut out = String::new();
    for lock in locks {
        let mut fields: Vec<(&str, String)> = vec![
            ("key", lock.key.clone()),
            ("kind", lock.kind.to_owned()),
            ("stored as", lock.stored_key.clone()),
            ("server", lock.server.clone()),
            ("state", lock.state.clone()),
        ];
        if let Some(holders) = &lock.holders {
            shared_fields(&mut fields, lock, holders);
        } else if lock.state != "absent" {
            fields.extend([
                ("fence", fence(lock)),
                (
                    "holder id",
                    lock.holder_id.clone().unwrap_or_else(|| "-".into()),
                ),
                ("host", lock.host.clone().unwrap_or_else(|| "-".into())),
                ("pid", lock.pid.map_or("-".into(), |pid| pid.to_string())),
                ("app", lock.app.clone().unwrap_or_else(|| "-".into())),
                ("held for", millis(lock.age_ms.map(|age| age as i64))),
                ("lease left", millis(lock.lease_ms)),
                ("waiters", lock.waiters.to_string()),
                (
                    "release announced",
                    if lock.announced { "yes" } else { "no" }.into(),
                ),
                ("fair line", lock.line_length.to_string()),
            ]);
            if let Some(next) = &lock.reserved_for {
                fields.push(("reserved for", next.clone()));
                fields.push(("reserved for another", millis(lock.reserved_ms)));
            }
        }
        let width = fields.iter().map(|(name, _)| name.len()).max().unwrap_or(0);
        for (name, value) in &fields {
            out.push_str(&format!("{name:<width$}  {value}\n"));
        }
        if let Some(line) = &lock.line {
            out.push_str("line:\n");
            for entry in line {
                out.push_str(&format!(
                    "  {:>3}. {}  entry ends in {}\n",
                    entry.position,
                    entry.waiter_id,
                    millis(entry.expires_in_ms)
                ));
            }
        }
        out.push('\n');
    }
    if let Some(waiters) = waiters.filter(|waiters| !waiters.is_empty()) {
        waiting_calls(&mut out, key, waiters);
    }
    write_out(out.trim_end_matches('\n'))?;
    write_out("\n")
}

/// The calls waiting for `key`: one row each.
fn waiting_calls(out: &mut String, key: &str, waiters: &[WaiterView]) {
    let calls = if waiters.len() == 1 { "call" } else { "calls" };
    out.push_str(&format!("waiting for {key}: {} {calls}\n", waiters.len()));
    let mut rows = vec![
        ["HOST", "PID", "APP", "WAITING SINCE", "HOLDS"]
            .map(str::to_owned)
            .to_vec(),
    ];
    for waiter in waiters {
        rows.push(vec![
            waiter.host.clone().unwrap_or_else(|| "-".into()),
            waiter.pid.map_or("-".into(), |pid| pid.to_string()),
            waiter.app.clone().unwrap_or_else(|| "-".into()),
            waiter.waiting_since.clone(),
            names(&waiter.holds),
        ]);
    }
    table(out, &rows);
    out.push('\n');
}

/// The deadlocks found: `no deadlock`, or for each its members, one row each, and who gives
/// up. With `json`, the cycles as an array (`[]` when there is none).
pub(crate) fn print_deadlocks(cycles: &[CycleView], json: bool) -> Result<(), Failure> {
    if json {
        return print_json(&cycles);
    }
    if cycles.is_empty() {
        return write_out("no deadlock\n");
    }
    let mut out = String::new();
    for (at, cycle) in cycles.iter().enumerate() {
        out.push_str(&format!(
            "deadlock {} of {}, {} waiting calls: each waits for a lock the next one holds, \
             the last for one the first holds\n",
            at + 1,
            cycles.len(),
            cycle.members.len()
        ));
        let mut rows = vec![
            [
                "WAITS FOR",
                "HOLDS",
                "HOST",
                "PID",
                "APP",
                "WAITING SINCE",
                "GIVES UP",
            ]
            .map(str::to_owned)
            .to_vec(),
        ];
        for member in &cycle.members {
            rows.push(vec![
                member.waits_for.clone(),
                names(&member.holds),
                member.host.clone().unwrap_or_else(|| "-".into()),
                member.pid.map_or("-".into(), |pid| pid.to_string()),
                member.app.clone().unwrap_or_else(|| "-".into()),
                member.waiting_since.clone(),
                if member.gives_up { "yes" } else { "-" }.into(),
            ]);
        }
        table(&mut out, &rows);
        if !cycle.members.iter().any(|member| member.gives_up) {
            out.push_str(
                "nobody gives up: no member chose Deadlock::Fail; each waits until its wait \
                 budget runs out, or its lock is force-released\n",
            );
        }
        out.push('\n');
    }
    write_out(out.trim_end_matches('\n'))?;
    write_out("\n")
}

/// Lock names, `, `-separated; `-` for none.
fn names(names: &[String]) -> String {
    if names.is_empty() {
        "-".into()
    } else {
        names.join(", ")
    }
}

/// The fields of a semaphore or a read-write lock, then one line per holder.
fn shared_fields(fields: &mut Vec<(&str, String)>, lock: &LockView, holders: &[HolderEntry]) {
    fields.push((
        "fence",
        lock.fence.map_or("-".into(), |fence| fence.to_string()),
    ));
    if let Some(permits) = lock.permits {
        fields.push(("permits", permits.to_string()));
    }
    if let Some(mode) = lock.mode {
        fields.push(("held for", mode.to_owned()));
    }
    fields.push(("holders", holders.len().to_string()));
    for holder in holders {
        fields.push((
            "  holder",
            format!(
                "{} {}, lease left {}",
                holder.holder_id,
                holder.holds,
                millis(Some(holder.lease_ms))
            ),
        ));
    }
    if holders.is_empty() {
        // Only a key version 0.2 left: the next grant takes it over.
        fields.push(("0.2 fence kept for", millis(lock.lease_ms)));
    }
    if let Some(waiting) = lock.writer_waiting {
        fields.push(("writer waiting", if waiting { "yes" } else { "no" }.into()));
    }
    fields.push(("waiters", lock.waiters.to_string()));
}

/// `host/pid`; for a semaphore or a read-write lock how many hold it; or `-`.
fn holder(lock: &LockView) -> String {
    if let Some(holders) = &lock.holders {
        return match (lock.permits, lock.mode) {
            _ if holders.is_empty() => "-".into(),
            (Some(permits), _) => format!("{}/{permits} permits", holders.len()),
            (None, Some("write")) => "writer".into(),
            _ if holders.len() == 1 => "1 reader".into(),
            _ => format!("{} readers", holders.len()),
        };
    }
    match (&lock.host, lock.pid) {
        (Some(host), Some(pid)) => format!("{host}/{pid}"),
        (Some(host), None) => host.clone(),
        (None, Some(pid)) => format!("?/{pid}"),
        (None, None) => "-".into(),
    }
}

/// A lock's fencing token as far as the stored data tells: the one it carries, or for a lock
/// in the current format `<=N`, the last token its slot's counter handed out (the holder's is
/// that one or an earlier one), or `-`.
fn fence(lock: &LockView) -> String {
    match (lock.fence, lock.fence_at_most) {
        (Some(fence), _) => fence.to_string(),
        (None, Some(at_most)) => format!("<={at_most}"),
        (None, None) => "-".into(),
    }
}

/// A duration in ms as `850ms`, `2s 300ms` or (from 10 s on, to the second) `1m 3s`, or `-`.
pub(crate) fn millis(ms: Option<i64>) -> String {
    match ms {
        Some(ms) if ms >= 10_000 => {
            humantime::format_duration(Duration::from_secs(ms as u64 / 1000)).to_string()
        }
        Some(ms) if ms >= 0 => {
            humantime::format_duration(Duration::from_millis(ms as u64)).to_string()
        }
        Some(ms) => format!(
            "-{}",
            humantime::format_duration(Duration::from_millis(ms.unsigned_abs()))
        ),
        None => "-".into(),
    }
}

pub(crate) fn table(out: &mut String, rows: &[Vec<String>]) {
    let columns = rows.first().map_or(0, Vec::len);
    let widths: Vec<usize> = (0..columns)
        .map(|column| {
            rows.iter()
                .map(|row| row[column].chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    for row in rows {
        let mut line = String::new();
        for (column, cell) in row.iter().enumerate() {
            if column + 1 == columns {
                line.push_str(cell);
            } else {
                line.push_str(&format!("{cell:<width$}  ", width = widths[column]));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
}

pub(crate) fn print_json(value: &impl Serialize) -> Result<(), Failure> {
    json_to(&mut std::io::stdout().lock(), value)
}

/// `value` as one line of JSON to `out` (stdout, or a test's buffer).
pub(crate) fn json_to(out: &mut dyn Write, value: &impl Serialize) -> Result<(), Failure> {
    let text = serde_json::to_string(value)
        .map_err(|err| Failure::failed(format!("cannot write JSON: {err}")))?;
    write_to(out, &format!("{text}\n"))
}

/// Writes to stdout; a closed pipe (`lockctl list | head`) ends quietly.
pub(crate) fn write_out(text: &str) -> Result<(), Failure> {
    write_to(&mut std::io::stdout().lock(), text)
}

/// Writes `text` to `out` (stdout, or a test's buffer); a closed pipe ends quietly.
pub(crate) fn write_to(out: &mut dyn Write, text: &str) -> Result<(), Failure> {
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => Ok(()),
        Err(err) if err.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(err) => Err(Failure::failed(format!("cannot write to stdout: {err}"))),
    }
}
