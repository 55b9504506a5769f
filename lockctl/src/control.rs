//! `lockctl revoke` (ask a lock's holder to let go) and `lockctl steal` (take the lock from it
//! with a new fencing token), each with an audit line naming who asked and why.

use std::io::Write;
use std::time::{Duration, SystemTime};

use lock_runtime::{LockError, LockOptions};
use serde::Serialize;

use crate::deployment::Deployment;
use crate::failure::Failure;
use crate::read::{self, LockView};
use crate::render::{json_to, write_to};

/// What `revoke` and `steal` were asked, and where they write.
pub(crate) struct Asked<'a> {
    pub(crate) prefix: &'a str,
    pub(crate) key: &'a str,
    pub(crate) reason: &'a str,
    pub(crate) json: bool,
    /// What the command says: stdout.
    pub(crate) out: &'a mut dyn Write,
    /// Audit lines and notes: stderr.
    pub(crate) err: &'a mut dyn Write,
}

/// The holder a command addressed, as `lockctl show` names it; never the owner token.
#[derive(Debug, Serialize)]
struct HolderJson {
    holder_id: Option<String>,
    host: Option<String>,
    pid: Option<u64>,
    app: Option<String>,
    since_ms: Option<u64>,
    age_ms: Option<u64>,
    server: String,
}

impl From<&LockView> for HolderJson {
    fn from(view: &LockView) -> HolderJson {
        HolderJson {
            holder_id: view.holder_id.clone(),
            host: view.host.clone(),
            pid: view.pid,
            app: view.app.clone(),
            since_ms: view.since_ms,
            age_ms: view.age_ms,
            server: view.server.clone(),
        }
    }
}

#[derive(Serialize)]
struct RevokeJson<'a> {
    deployment: &'a str,
    key: &'a str,
    action: &'static str,
    asked_by: String,
    reason: &'a str,
    holder: HolderJson,
}

#[derive(Serialize)]
struct StealJson<'a> {
    deployment: &'a str,
    key: &'a str,
    action: &'static str,
    asked_by: String,
    reason: &'a str,
    /// The holder it was taken from (its id, as `holder_id` elsewhere); `null`: it was free.
    victim_id: Option<String>,
    /// The holder as read just before the steal; `null`: none was read.
    victim: Option<HolderJson>,
    fencing_token: u64,
    held_ms: u64,
    released: bool,
}

/// Asks the holder of the plain lock `key` to let go, after naming it; the holder decides.
pub(crate) async fn revoke(deployment: &Deployment, asked: Asked<'_>) -> Result<(), Failure> {
    let views = read::show(deployment, asked.prefix, asked.key).await?;
    let held = plain_holder(asked.key, &views)?.ok_or_else(|| {
        Failure::failed(format!(
            "lock `{}` is not held ({}): nobody to ask",
            asked.key,
            states(&views)
        ))
    })?;
    let asked_reason = reason_or_none(asked.reason);
    deployment
        .manager()
        .request_release(asked.key, asked_reason)
        .await
        .map_err(|err| refused(err, "ask holders to release"))?;
    let operator = crate::unlock::operator();
    audit(
        asked.err,
        &format!(
            "{operator} asked the holder of `{}` on {} to release it ({}): {}",
            asked.key,
            held.server,
            reason_shown(asked.reason),
            crate::unlock::describe(held)
        ),
    );
    if asked.json {
        return json_to(
            asked.out,
            &RevokeJson {
                deployment: deployment.shown(),
                key: asked.key,
                action: "revoke",
                asked_by: operator,
                reason: asked.reason,
                holder: HolderJson::from(held),
            },
        );
    }
    let text = format!(
        "asked the holder of `{key}` on {server} to release it:\n{holder}\
         The holder decides: it keeps the lock until it releases it (a holder that does not \
         watch for the request, or was cut off from the store, never hears it).\n\
         Check with `lockctl show {key}`: the holder id changes, or the lock is free, once it \
         let go; `lockctl steal {key} --reason ..` takes it without asking.\n",
        key = asked.key,
        server = held.server,
        holder = holder_fields(held),
    );
    write_to(asked.out, &text)
}

/// What `steal` does beyond [`Asked`]: the lease of the stolen lock and how long to hold it.
pub(crate) struct StealHow {
    pub(crate) ttl: Option<Duration>,
    /// `None`: release at once (a fenced unlock).
    pub(crate) hold: Option<Duration>,
}

/// Takes the plain lock `key` from its holder with a new fencing token, holds it for
/// `how.hold` (until Ctrl-C at most), and releases it.
pub(crate) async fn steal(
    deployment: &Deployment,
    asked: Asked<'_>,
    how: StealHow,
) -> Result<(), Failure> {
    if asked.reason.trim().is_empty() {
        return Err(Failure::usage(
            "steal needs a --reason: the holder's log and the audit line say it",
        ));
    }
    let views = read::show(deployment, asked.prefix, asked.key).await?;
    let before = plain_holder(asked.key, &views)?;
    let mut options = LockOptions::new();
    if let Some(ttl) = how.ttl {
        options = options.ttl(ttl);
    }
    let guard = deployment
        .manager()
        .steal(asked.key, options, asked.reason)
        .await
        .map_err(|err| refused(err, "steal locks"))?;
    let victim_id = guard.stolen_from().map(|id| id.to_string());
    // The holder read before, if it is the one the steal took the lock from.
    let victim = before.filter(|view| view.holder_id.is_some() && view.holder_id == victim_id);
    let token = guard.fencing_token();
    let operator = crate::unlock::operator();
    audit(
        asked.err,
        &format!(
            "{operator} stole `{}` ({}): new fencing token {token}; took it from the {}",
            asked.key,
            reason_shown(asked.reason),
            victim.map_or_else(
                || victim_id
                    .clone()
                    .map_or("nobody (it was free)".into(), |id| format!("id={id}")),
                crate::unlock::describe
            ),
        ),
    );
    if !asked.json {
        let from = match (&victim_id, victim) {
            (_, Some(view)) => format!("from its holder:\n{}", holder_fields(view)),
            (Some(id), None) => format!("from holder {id}\n"),
            (None, None) => "(it was free)\n".into(),
        };
        let text = format!(
            "stole `{}` with fencing token {token} {from}The former holder's lease is lost \
             (LostReason::Stolen); its writes through a fence with a lower token are refused.\n",
            asked.key,
        );
        write_to(asked.out, &text)?;
    }
    let held = hold(asked.out, asked.json, how.hold).await?;
    let released = guard.release().await;
    if let Err(err) = &released {
        audit(
            asked.err,
            &format!("the release of `{}` failed: {err}", asked.key),
        );
    }
    if asked.json {
        json_to(
            asked.out,
            &StealJson {
                deployment: deployment.shown(),
                key: asked.key,
                action: "steal",
                asked_by: operator,
                reason: asked.reason,
                victim_id,
                victim: victim.map(HolderJson::from),
                fencing_token: token,
                held_ms: u64::try_from(held.as_millis()).unwrap_or(u64::MAX),
                released: released.is_ok(),
            },
        )?;
    } else if released.is_ok() {
        write_to(asked.out, &format!("released `{}`\n", asked.key))?;
    }
    match released {
        Ok(()) => Ok(()),
        Err(err) => Err(Failure::failed(format!(
            "stole `{}` but its release failed: {err}; it ends with its lease",
            asked.key
        ))),
    }
}

/// Holds a stolen lock for `hold` (none: not at all), or until Ctrl-C; how long it was held.
async fn hold(
    out: &mut dyn Write,
    json: bool,
    hold: Option<Duration>,
) -> Result<Duration, Failure> {
    let Some(hold) = hold.filter(|hold| !hold.is_zero()) else {
        return Ok(Duration::ZERO);
    };
    if !json {
        write_to(
            out,
            &format!(
                "holding it for {} (Ctrl-C releases it sooner)\n",
                humantime::format_duration(hold)
            ),
        )?;
    }
    let began = tokio::time::Instant::now();
    tokio::select! {
        _ = tokio::time::sleep(hold) => {}
        _ = tokio::signal::ctrl_c() => {}
    }
    Ok(began.elapsed())
}

/// The held plain lock among `views`; an error if `key` is held only as a semaphore or a
/// read-write lock, which neither command addresses.
fn plain_holder<'v>(key: &str, views: &'v [LockView]) -> Result<Option<&'v LockView>, Failure> {
    let (locks, shared): (Vec<&LockView>, Vec<&LockView>) =
        views.iter().partition(|view| view.holders.is_none());
    let held = locks.into_iter().find(|view| view.state == "held");
    if held.is_none()
        && let Some(shared) = shared.iter().find(|view| view.state == "held")
    {
        return Err(Failure::failed(format!(
            "`{key}` is a {} on {}, not a lock: revoke and steal address plain locks only",
            shared.kind, shared.server
        )));
    }
    Ok(held)
}

/// A refusal of the store (it cannot do this) is a usage error; anything else a failure.
fn refused(err: LockError, what: &str) -> Failure {
    match err {
        LockError::Config(message) => {
            Failure::usage(format!("this store cannot {what}: {message}"))
        }
        other => Failure::failed(other.to_string()),
    }
}

fn holder_fields(view: &LockView) -> String {
    let since = view.since_ms.map_or("-".into(), |ms| {
        let at = SystemTime::UNIX_EPOCH + Duration::from_millis(ms);
        humantime::format_rfc3339_seconds(at).to_string()
    });
    let fields = [
        (
            "holder id",
            view.holder_id.clone().unwrap_or_else(|| "-".into()),
        ),
        ("host", view.host.clone().unwrap_or_else(|| "-".into())),
        ("pid", view.pid.map_or("-".into(), |pid| pid.to_string())),
        ("app", view.app.clone().unwrap_or_else(|| "-".into())),
        ("since", since),
        (
            "held for",
            crate::render::millis(view.age_ms.map(|age| age as i64)),
        ),
    ];
    fields
        .iter()
        .map(|(name, value)| format!("  {name:<10} {value}\n"))
        .collect()
}

fn states(views: &[LockView]) -> String {
    views
        .iter()
        .map(|view| format!("{} on {}", view.state, view.server))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The reason sent: `lockctl` alone where none was given.
fn reason_or_none(reason: &str) -> &str {
    if reason.trim().is_empty() {
        "lockctl revoke"
    } else {
        reason
    }
}

fn reason_shown(reason: &str) -> String {
    if reason.trim().is_empty() {
        "no reason given".into()
    } else {
        format!("reason: {reason}")
    }
}

fn audit(err: &mut dyn Write, line: &str) {
    let _ = writeln!(
        err,
        "lockctl audit: {} {line}",
        humantime::format_rfc3339_seconds(SystemTime::now())
    );
}

#[cfg(test)]
mod tests {
    //! `revoke` and `steal` over `memory://<name>`, shared with a holder in this process as
    //! processes share a server (the binary's tests reach real servers, and a store that
    //! refuses both: the SQLite example's `lockctl-sqlite`).

    use lock_runtime::{LockManager, LostReason};

    use super::*;

    const LONG: Duration = Duration::from_secs(60);

    /// A holder's manager (app `billing`) and lockctl's deployment on one memory table.
    async fn holder_and_lockctl(name: &str) -> (LockManager, Deployment) {
        let url = format!("memory://lockctl-{name}");
        let holder = LockManager::builder()
            .url(&url)
            .app_name("billing")
            .build()
            .await
            .expect("memory manager");
        let ops = LockManager::builder()
            .url(&url)
            .app_name(format!("lockctl {}", crate::unlock::operator()))
            .build()
            .await
            .expect("memory manager");
        (holder, Deployment::over(ops, &url).await)
    }

    /// What a command wrote to stdout and stderr, and how it ended.
    struct Said {
        out: String,
        err: String,
        done: Result<(), Failure>,
    }

    async fn run(
        deployment: &Deployment,
        key: &str,
        reason: &str,
        json: bool,
        steal_how: Option<StealHow>,
    ) -> Said {
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let asked = Asked {
            prefix: "lock:",
            key,
            reason,
            json,
            out: &mut out,
            err: &mut err,
        };
        let done = match steal_how {
            None => revoke(deployment, asked).await,
            Some(how) => steal(deployment, asked, how).await,
        };
        let said = Said {
            out: String::from_utf8_lossy(&out).into_owned(),
            err: String::from_utf8_lossy(&err).into_owned(),
            done,
        };
        println!("--- stdout\n{}--- stderr\n{}", said.out, said.err);
        said
    }

    fn at_once() -> Option<StealHow> {
        Some(StealHow {
            ttl: None,
            hold: None,
        })
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn revoke_names_the_holder_it_asked_and_the_holder_hears_who_asked() {
        let (holder, lockctl) = holder_and_lockctl("revoke").await;
        let options = LockOptions::new().ttl(LONG);
        let guard = holder.lock("order:42", options).await.expect("free");
        let said = run(&lockctl, "order:42", "deploy at 14:00", false, None).await;
        assert!(said.done.is_ok(), "{:?}", said.done);
        // memory:// records no host, pid or app (a server's store does): the id names it.
        for part in [
            "asked the holder of `order:42`",
            "holder id  ",
            "holder decides",
        ] {
            assert!(said.out.contains(part), "no `{part}` in\n{}", said.out);
        }
        assert!(said.out.contains("lockctl show order:42"), "{}", said.out);
        assert!(said.err.starts_with("lockctl audit: "), "{}", said.err);
        assert!(said.err.contains("reason: deploy at 14:00"), "{}", said.err);
        let request = tokio::time::timeout(LONG, guard.release_requested())
            .await
            .expect("the holder heard it");
        assert!(request.from().starts_with("lockctl "), "{request}");
        assert!(request.from().ends_with(": deploy at 14:00"), "{request}");
        assert!(guard.is_held(), "a request leaves the lock with its holder");
        guard.release().await.expect("released");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn revoke_json_names_the_holder_and_who_asked() {
        let (holder, lockctl) = holder_and_lockctl("revoke-json").await;
        let guard = holder
            .lock("job", LockOptions::new().ttl(LONG))
            .await
            .expect("free");
        let said = run(&lockctl, "job", "", true, None).await;
        assert!(said.done.is_ok(), "{:?}", said.done);
        let json: serde_json::Value = serde_json::from_str(&said.out).expect("one JSON line");
        assert_eq!(json["action"], "revoke");
        assert_eq!(json["key"], "job");
        assert!(
            json["holder"]["holder_id"]
                .as_str()
                .is_some_and(|id| id.len() == 12)
        );
        assert!(json["asked_by"].as_str().is_some_and(|by| by.contains('@')));
        assert!(said.err.contains("no reason given"), "{}", said.err);
        guard.release().await.expect("released");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn revoke_of_a_free_lock_says_nobody_holds_it() {
        let (_holder, lockctl) = holder_and_lockctl("revoke-free").await;
        let said = run(&lockctl, "idle", "x", false, None).await;
        let failure = said.done.expect_err("nothing to ask");
        assert!(failure.to_string().contains("is not held"), "{failure}");
        assert_eq!(failure.exit_code(), 1);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn steal_takes_the_lock_names_its_victim_and_releases_it_at_once() {
        let (holder, lockctl) = holder_and_lockctl("steal").await;
        let victim = holder
            .lock("import", LockOptions::new().ttl(LONG))
            .await
            .expect("free");
        let said = run(&lockctl, "import", "stuck for an hour", false, at_once()).await;
        assert!(said.done.is_ok(), "{:?}", said.done);
        let lost = tokio::time::timeout(LONG, victim.lost()).await;
        assert_eq!(lost.expect("told"), LostReason::Stolen);
        let token = format!("fencing token {}", victim.fencing_token() + 1);
        for part in [
            "stole `import`",
            &token,
            "from its holder",
            "released `import`",
        ] {
            assert!(said.out.contains(part), "no `{part}` in\n{}", said.out);
        }
        assert!(
            said.err.contains("reason: stuck for an hour"),
            "{}",
            said.err
        );
        // Released at once: free for anyone.
        let again = holder
            .lock("import", LockOptions::new().wait(Duration::ZERO))
            .await;
        again.expect("free after the steal").release().await.ok();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn steal_json_holds_for_hold_and_names_the_victims_id() {
        let (holder, lockctl) = holder_and_lockctl("steal-json").await;
        let victim = holder
            .lock("report", LockOptions::new().ttl(LONG))
            .await
            .expect("free");
        let how = StealHow {
            ttl: Some(Duration::from_secs(5)),
            hold: Some(Duration::from_millis(20)),
        };
        let said = run(&lockctl, "report", "rerun", true, Some(how)).await;
        assert!(said.done.is_ok(), "{:?}", said.done);
        let json: serde_json::Value = serde_json::from_str(&said.out).expect("one JSON line");
        assert_eq!(json["action"], "steal");
        assert!(json["victim_id"].as_str().is_some_and(|id| id.len() == 12));
        assert_eq!(json["victim_id"], json["victim"]["holder_id"]);
        assert!(json["fencing_token"].as_u64() > Some(victim.fencing_token()));
        assert!(json["held_ms"].as_u64() >= Some(20), "{json}");
        assert_eq!(json["released"], true);
        assert!(matches!(
            victim.release().await,
            Err(LockError::LeaseLost { .. })
        ));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn steal_without_a_reason_is_a_usage_error() {
        let (_holder, lockctl) = holder_and_lockctl("steal-no-reason").await;
        let said = run(&lockctl, "k", " ", false, at_once()).await;
        let failure = said.done.expect_err("refused");
        assert_eq!(failure.exit_code(), 2, "{failure}");
    }
}
