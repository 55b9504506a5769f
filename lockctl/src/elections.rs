//! `lockctl elections` and `lockctl election NAME`: who leads each election and who campaigns,
//! read as the library reads them (`LockManager::elections`, `leader`, `candidates`): the
//! leader is the holder of the election's lock, the candidates are the records the campaigns
//! keep of themselves.

use std::time::{Duration, SystemTime};

use lock_runtime::{Candidate, ElectionInfo, LeaderInfo};
use serde::Serialize;

use crate::deployment::Deployment;
use crate::failure::Failure;
use crate::render::{print_json, table, write_out};

/// A leader, as printed. The field names are stable: scripts read them.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct LeaderView {
    /// An id of the term's owner token (never the token).
    pub(crate) holder: String,
    pub(crate) host: Option<String>,
    pub(crate) pid: Option<u32>,
    pub(crate) app: Option<String>,
    /// The term's fencing token.
    pub(crate) fencing_token: Option<u64>,
    /// When the term began, RFC 3339 (the leader's clock).
    pub(crate) since: Option<String>,
}

/// A candidate, as printed.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct CandidateView {
    pub(crate) id: String,
    pub(crate) host: Option<String>,
    pub(crate) pid: Option<u32>,
    pub(crate) app: Option<String>,
    pub(crate) priority: u32,
    /// When it began campaigning, RFC 3339 (its clock).
    pub(crate) since: String,
    pub(crate) leading: bool,
    pub(crate) resigned: bool,
}

/// An election, as printed.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct ElectionView {
    pub(crate) name: String,
    pub(crate) leader: Option<LeaderView>,
    pub(crate) candidates: Vec<CandidateView>,
}

fn time(at: SystemTime) -> String {
    humantime::format_rfc3339_millis(at).to_string()
}

fn leader_view(leader: &LeaderInfo) -> LeaderView {
    LeaderView {
        holder: leader.holder_id.clone(),
        host: leader.host.clone(),
        pid: leader.pid,
        app: leader.app.clone(),
        fencing_token: leader.fencing_token,
        since: leader.since.map(time),
    }
}

fn candidate_view(candidate: &Candidate) -> CandidateView {
    CandidateView {
        id: candidate.id.clone(),
        host: candidate.host.clone(),
        pid: candidate.pid,
        app: candidate.app.clone(),
        priority: candidate.priority,
        since: time(candidate.since),
        leading: candidate.leading,
        resigned: candidate.resigned,
    }
}

fn election_view(election: &ElectionInfo) -> ElectionView {
    ElectionView {
        name: election.name.clone(),
        leader: election.leader.as_ref().map(leader_view),
        candidates: election.candidates.iter().map(candidate_view).collect(),
    }
}

/// Every election with a candidate now.
pub(crate) async fn list(deployment: &Deployment) -> Result<Vec<ElectionView>, Failure> {
    let elections = deployment.manager().elections().await;
    let elections = elections.map_err(Failure::lock)?;
    Ok(elections.iter().map(election_view).collect())
}

/// The election `name`: its leader, and its candidates where the store keeps them (`None`
/// where it does not).
pub(crate) async fn show(
    deployment: &Deployment,
    name: &str,
) -> Result<(Option<LeaderView>, Option<Vec<CandidateView>>), Failure> {
    let manager = deployment.manager();
    let leader = manager.leader(name).await.map_err(Failure::lock)?;
    let candidates = match manager.candidates(name).await {
        Ok(candidates) => Some(candidates.iter().map(candidate_view).collect()),
        Err(lock_runtime::LockError::Config(_)) => None,
        Err(err) => return Err(Failure::lock(err)),
    };
    Ok((leader.as_ref().map(leader_view), candidates))
}

fn dash(text: Option<String>) -> String {
    text.unwrap_or_else(|| "-".into())
}

/// How long ago `since` (RFC 3339) was, shortly: `3m 12s`.
fn age(since: Option<&str>) -> String {
    let Some(at) = since.and_then(|since| humantime::parse_rfc3339(since).ok()) else {
        return "-".into();
    };
    let age = SystemTime::now().duration_since(at).unwrap_or_default();
    humantime::format_duration(Duration::from_secs(age.as_secs())).to_string()
}

pub(crate) fn print_list(elections: &[ElectionView], json: bool) -> Result<(), Failure> {
    if json {
        return print_json(&elections);
    }
    let mut rows = vec![
        [
            "ELECTION",
            "LEADER",
            "HOST",
            "PID",
            "APP",
            "TOKEN",
            "FOR",
            "CANDIDATES",
        ]
        .map(str::to_owned)
        .to_vec(),
    ];
    for election in elections {
        let leader = election.leader.as_ref();
        rows.push(vec![
            election.name.clone(),
            dash(leader.map(|leader| leader.holder.clone())),
            dash(leader.and_then(|leader| leader.host.clone())),
            dash(leader.and_then(|leader| leader.pid.map(|pid| pid.to_string()))),
            dash(leader.and_then(|leader| leader.app.clone())),
            dash(leader.and_then(|leader| leader.fencing_token.map(|token| token.to_string()))),
            age(leader.and_then(|leader| leader.since.as_deref())),
            election.candidates.len().to_string(),
        ]);
    }
    let mut out = String::new();
    table(&mut out, &rows);
    if elections.is_empty() {
        out.push_str("(no elections)\n");
    }
    write_out(&out)
}

#[derive(Serialize)]
struct ShowJson<'a> {
    name: &'a str,
    leader: Option<&'a LeaderView>,
    /// `null` where the store keeps no candidates' records.
    candidates: Option<&'a [CandidateView]>,
}

pub(crate) fn print_show(
    name: &str,
    leader: Option<&LeaderView>,
    candidates: Option<&[CandidateView]>,
    json: bool,
) -> Result<(), Failure> {
    if json {
        return print_json(&ShowJson {
            name,
            leader,
            candidates,
        });
    }
    let mut out = format!("election {name}\n");
    match leader {
        Some(leader) => {
            out.push_str(&format!(
                "leader:     holder {} ({}pid {} on {}), fencing token {}, since {} ({} ago)\n",
                leader.holder,
                leader
                    .app
                    .as_ref()
                    .map(|app| format!("app {app:?}, "))
                    .unwrap_or_default(),
                dash(leader.pid.map(|pid| pid.to_string())),
                dash(leader.host.clone()),
                dash(leader.fencing_token.map(|token| token.to_string())),
                dash(leader.since.clone()),
                age(leader.since.as_deref()),
            ));
        }
        None => out.push_str("leader:     nobody\n"),
    }
    let Some(candidates) = candidates else {
        out.push_str("candidates: not recorded by this store\n");
        return write_out(&out);
    };
    out.push_str(&format!("candidates: {}\n", candidates.len()));
    let mut rows = vec![
        [
            "PRIORITY",
            "HOST",
            "PID",
            "APP",
            "CAMPAIGNING",
            "STATE",
            "ID",
        ]
        .map(str::to_owned)
        .to_vec(),
    ];
    for candidate in candidates {
        let state = match (candidate.leading, candidate.resigned) {
            (true, _) => "leading",
            (false, true) => "resigned",
            (false, false) => "waiting",
        };
        rows.push(vec![
            candidate.priority.to_string(),
            dash(candidate.host.clone()),
            dash(candidate.pid.map(|pid| pid.to_string())),
            dash(candidate.app.clone()),
            age(Some(&candidate.since)),
            state.to_owned(),
            candidate.id.clone(),
        ]);
    }
    table(&mut out, &rows);
    write_out(&out)
}
