//! The checks of an election where store support matters: reading who leads (the store's
//! inspection side), the candidates (its keyed records, [`Store::waits`]), and a term taken up
//! again by a renewal under a saved owner token. A store without a part refuses it with a
//! [`LockError::Config`] that says so, which passes.
//!
//! [`Store::waits`]: crate::store::Store::waits

use std::time::Duration;

use crate::election::{ElectionOptions, Leadership};
use crate::error::LockError;

use super::bounds::{LONG_TTL, PATIENCE, SOON, Verdict};
use super::process::{Processes, Stallable};

/// Waits for `leadership` to lead, at most `within`; its token.
async fn elected(leadership: &Leadership, within: Duration, who: &str) -> Result<u64, String> {
    tokio::time::timeout(within, leadership.elected())
        .await
        .map_err(|_| format!("{who} was not elected within {within:?}"))?
        .map_err(|err| format!("{who}'s campaign failed: {err}"))
}

/// A refusal that says what is missing passes; any other error fails.
fn refusal(err: &LockError, what: &str) -> Verdict {
    match err {
        LockError::Config(message) => Ok(format!("refused {what}: {message}")),
        other => Err(format!(
            "{what} failed with {other}; expected it to work or a configuration error saying \
             why not"
        )),
    }
}

/// Another process reads the leader the winner is, and a resignation elects the other
/// campaign at once.
pub(crate) async fn leader_is_read_and_resigns(p: &mut Processes<'_>) -> Verdict {
    let [first, second] = <[_; 2]>::try_from(p.spawn_many(2).await?)
        .map_err(|_| "two managers asked for".to_owned())?;
    let name = p.key("election");
    let options = ElectionOptions::new().ttl(LONG_TTL);
    let leading = first
        .elect(name.as_str(), options)
        .map_err(|err| format!("elect: {err}"))?;
    let token = elected(&leading, PATIENCE, "the first campaign").await?;
    let other = second
        .elect(name.as_str(), options)
        .map_err(|err| format!("elect: {err}"))?;
    let note = match second.leader(&name).await {
        Ok(Some(leader)) => {
            if leader.fencing_token.is_some_and(|read| read != token) {
                return Err(format!(
                    "the leader read has fencing token {:?}; the winner's is {token}",
                    leader.fencing_token
                ));
            }
            format!("read leader {}", leader.holder_id)
        }
        Ok(None) => return Err("nobody leads, by another process's read".into()),
        Err(err) => refusal(&err, "reading the leader")?,
    };
    leading
        .resign()
        .await
        .map_err(|err| format!("resign: {err}"))?;
    let next = elected(&other, SOON, "the other campaign, after the resignation").await?;
    if next <= token {
        return Err(format!("the next term's token {next} is not above {token}"));
    }
    Ok(format!(
        "{note}; a resignation elected the other within {SOON:?}"
    ))
}

/// The candidates are listed, highest priority first, where the store keeps their records.
pub(crate) async fn candidates_are_listed(p: &mut Processes<'_>) -> Verdict {
    let [first, second] = <[_; 2]>::try_from(p.spawn_many(2).await?)
        .map_err(|_| "two managers asked for".to_owned())?;
    let name = p.key("election");
    let options = ElectionOptions::new().ttl(LONG_TTL);
    let low = match first.elect(name.as_str(), options.priority(1)) {
        Ok(low) => low,
        Err(err) => return refusal(&err, "a priority"),
    };
    let high = second
        .elect(name.as_str(), options.priority(2))
        .map_err(|err| format!("elect: {err}"))?;
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        let listed = first
            .candidates(&name)
            .await
            .map_err(|err| format!("candidates: {err}"))?;
        let priorities: Vec<u32> = listed.iter().map(|candidate| candidate.priority).collect();
        if priorities == [2, 1] {
            break;
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(format!(
                "candidates listed with priorities {priorities:?}; expected [2, 1]"
            ));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    drop((low, high));
    Ok("two candidates listed, highest priority first".into())
}

/// A leader whose process stalls is resumed by another process from its saved term: the same
/// fencing token, at once.
pub(crate) async fn saved_term_resumes(p: &mut Processes<'_>) -> Verdict {
    let [first, second] = <[_; 2]>::try_from(p.spawn_many(2).await?)
        .map_err(|_| "two managers asked for".to_owned())?;
    let name = p.key("election");
    let options = ElectionOptions::new().ttl(LONG_TTL);
    let mut stallable = Stallable::start()?;
    let campaign = {
        let name = name.clone();
        stallable
            .run(async move { first.elect(name, options) })
            .await?
            .map_err(|err| format!("elect: {err}"))?
    };
    let token = elected(&campaign, PATIENCE, "the first campaign").await?;
    let term = campaign
        .current_term()
        .ok_or("the leader has no current term")?;
    stallable.stall().await?;
    let resumed = second
        .resume_election(&term, options)
        .map_err(|err| format!("resume_election: {err}"))?;
    let again = elected(&resumed, SOON, "the resumed campaign").await?;
    let verdict = if again == token {
        Ok(format!(
            "resumed with the saved token {token}, no new token"
        ))
    } else {
        Err(format!(
            "the resumed term has token {again}; expected the saved {token}"
        ))
    };
    let _ = resumed.step_down().await;
    stallable.resume();
    drop(campaign);
    verdict
}
