//! `lockctl unlock`: force-releasing a lock whatever its holder, with a confirmation and an
//! audit line.

use std::io::{BufRead, IsTerminal, Write};
use std::time::SystemTime;

use lock_runtime::store::{Recorded, Unlocked};

use crate::deployment::Deployment;
use crate::failure::Failure;
use crate::read::{self, LockView};

/// Force-releases `key` in every place that holds it (after asking, unless `yes`), and prints
/// one audit line per place on stderr. Only the holder read (and confirmed) is removed: one
/// that took the lock meanwhile is left alone.
pub(crate) async fn unlock(
    deployment: &Deployment,
    prefix: &str,
    key: &str,
    yes: bool,
) -> Result<(), Failure> {
    let inspect = deployment.inspect()?;
    let views = read::show(deployment, prefix, key).await?;
    let (locks, shared): (Vec<&LockView>, Vec<&LockView>) =
        views.iter().partition(|view| view.holders.is_none());
    let busy: Vec<&LockView> = locks
        .into_iter()
        .filter(|view| matches!(view.state.as_str(), "held" | "kept"))
        .collect();
    if let (true, Some(held)) = (
        busy.is_empty(),
        shared.iter().find(|view| view.state == "held"),
    ) {
        return Err(Failure::failed(format!(
            "`{key}` is a {} held by {} holder(s) on {}, not a lock: lockctl force-releases locks \
             only; each of its holds comes back by itself when its lease ends (the last in {} \
             ms; `lockctl show {key}` lists them)",
            held.kind,
            held.holders.as_ref().map_or(0, Vec::len),
            held.server,
            held.lease_ms.unwrap_or(0),
        )));
    }
    if busy.is_empty() {
        let states: Vec<String> = views
            .iter()
            .map(|view| format!("{} on {}", view.state, view.server))
            .collect();
        return Err(Failure::failed(format!(
            "lock `{key}` is not held ({}): nothing to unlock",
            states.join(", ")
        )));
    }
    if !yes {
        confirm(key, &busy)?;
    }
    let mut unlocked = 0;
    for view in busy {
        let server = &view.server;
        let done = inspect.unlock(prefix, &view.info).await;
        let (removed, outcome) = match done.map_err(Failure::store)? {
            Unlocked::Released { removed } => (removed, "released, waiters told"),
            Unlocked::ServedNext { removed } => (
                removed,
                "freed for the first fair waiter in line, who was told",
            ),
            Unlocked::AlreadyFree => {
                eprintln!("lockctl: `{key}` on {server} was released meanwhile");
                continue;
            }
            Unlocked::Changed { now } => {
                eprintln!(
                    "lockctl: `{key}` on {server} changed meanwhile (now {}): left as it is; run \
                     unlock again to remove that holder",
                    now.map_or("?".into(), |now| describe_recorded(&now))
                );
                continue;
            }
            _ => {
                return Err(Failure::failed(format!(
                    "`{}` on {server} does not hold a lock: left untouched",
                    view.stored_key
                )));
            }
        };
        unlocked += 1;
        eprintln!(
            "lockctl audit: {} {} force-released `{key}` on {}: {}; {outcome}",
            humantime::format_rfc3339_seconds(SystemTime::now()),
            operator(),
            server,
            removed
                .as_ref()
                .map_or_else(|| describe(view), describe_recorded),
        );
        println!("unlocked `{key}` on {server}");
    }
    if unlocked == 0 {
        return Err(Failure::failed(format!("lock `{key}` was not unlocked")));
    }
    Ok(())
}

/// Asks on the terminal; refuses when there is none to ask on.
fn confirm(key: &str, busy: &[&LockView]) -> Result<(), Failure> {
    let stdin = std::io::stdin();
    if !stdin.is_terminal() {
        return Err(Failure::usage(format!(
            "refusing to force-release `{key}` without confirmation: stdin is not a terminal; \
             pass --yes to unlock without asking"
        )));
    }
    let mut stderr = std::io::stderr();
    for view in busy {
        let _ = writeln!(stderr, "`{key}` on {}: {}", view.server, describe(view));
    }
    let _ = write!(
        stderr,
        "Force-release `{key}`? Its holder loses it at its next renewal. [y/N] "
    );
    let _ = stderr.flush();
    let mut answer = String::new();
    stdin
        .lock()
        .read_line(&mut answer)
        .map_err(|err| Failure::failed(format!("cannot read the answer: {err}")))?;
    if matches!(answer.trim().to_ascii_lowercase().as_str(), "y" | "yes") {
        Ok(())
    } else {
        Err(Failure::failed(format!("`{key}` left as it was")))
    }
}

/// The holder as the audit line names it; never the owner token.
pub(crate) fn describe(view: &LockView) -> String {
    format!(
        "{} holder host={} pid={} app={} fence={} id={}",
        view.state,
        view.host.as_deref().unwrap_or("-"),
        view.pid.map_or("-".into(), |pid| pid.to_string()),
        view.app.as_deref().unwrap_or("-"),
        view.fence.map_or("-".into(), |fence| fence.to_string()),
        view.holder_id.as_deref().unwrap_or("-"),
    )
}

fn describe_recorded(holder: &Recorded) -> String {
    format!(
        "{} holder host={} pid={} app={} fence={} id={}",
        holder.state,
        holder.host.as_deref().unwrap_or("-"),
        holder.pid.map_or("-".into(), |pid| pid.to_string()),
        holder.app.as_deref().unwrap_or("-"),
        holder.fence.map_or("-".into(), |fence| fence.to_string()),
        holder.holder_id.as_deref().unwrap_or("-"),
    )
}

/// `user@host` of whoever runs lockctl.
pub(crate) fn operator() -> String {
    let user = std::env::var("USER")
        .or_else(|_| std::env::var("LOGNAME"))
        .ok()
        .filter(|user| !user.is_empty())
        .or_else(uid)
        .unwrap_or_else(|| "unknown".into());
    format!("{user}@{}", gethostname::gethostname().to_string_lossy())
}

/// `uid=<n>` of this process, where no login name is in the environment (cron, containers).
fn uid() -> Option<String> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|line| line.starts_with("Uid:"))?;
    let real = line.split_whitespace().nth(1)?;
    Some(format!("uid={real}"))
}
