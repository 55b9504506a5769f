//! A term a leader saves to resume after a restart ([`Term`]), and how a campaign takes it up
//! again: one owner-checked renewal of the election's lock under the saved owner token.

use std::sync::{Arc, Mutex, PoisonError};

use tokio::time::Instant;

use crate::client::Inner;
use crate::error::LockError;
use crate::guard::LockGuard;
use crate::key::Key;
use crate::lease::{Lease, Token};
use crate::options::LockOptions;
use crate::pending::Pending;
use crate::store::{Renewal, StoreError};

/// The tag and version a saved term's text begins with.
const TAG: &str = "term1";

/// A leader's term as it can be saved, to be resumed by a restarted process with
/// [`LockManager::resume_election`](crate::LockManager::resume_election): the election's name,
/// the term's fencing token, and the owner token that holds the election's lock.
///
/// **Its text is a secret**: whoever has it holds the leadership (it can renew and release the
/// lock as its leader). Keep it where only the leader's restarts read it (a file readable by
/// its user only, a secret store), never in a log. Its `Debug` leaves the owner token out.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), lock_runtime::LockError> {
/// use lock_runtime::{ElectionOptions, LockManager, Term};
///
/// let locks = LockManager::memory();
/// let leadership = locks.elect("compactor", ElectionOptions::new())?;
/// let token = leadership.elected().await?;
/// let saved = leadership.current_term().expect("leading").to_secret_text();
/// std::mem::forget(leadership); // the process "dies" holding the lock
///
/// let term = Term::from_secret_text(&saved)?;
/// let resumed = locks.resume_election(&term, ElectionOptions::new())?;
/// assert_eq!(resumed.elected().await?, token); // the same term, no new token
/// # resumed.step_down().await
/// # }
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct Term {
    name: String,
    fence: u64,
    token: Token,
}

impl std::fmt::Debug for Term {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Term")
            .field("name", &self.name)
            .field("fencing_token", &self.fence)
            .field("owner_token", &self.token)
            .finish()
    }
}

impl Term {
    pub(crate) fn new(name: &str, fence: u64, token: Token) -> Term {
        Term {
            name: name.to_owned(),
            fence,
            token,
        }
    }

    /// The election's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The term's fencing token.
    pub fn fencing_token(&self) -> u64 {
        self.fence
    }

    /// The term as one line of text to save: `term1 <fencing token> <owner token> <name>`.
    /// A secret (see [`Term`]).
    pub fn to_secret_text(&self) -> String {
        format!("{TAG} {} {} {}", self.fence, self.token.as_str(), self.name)
    }

    /// A term as [`to_secret_text`](Self::to_secret_text) wrote it.
    ///
    /// Errors: [`LockError::Config`] for anything else (the message never repeats the text).
    pub fn from_secret_text(text: &str) -> Result<Term, LockError> {
        let broken = || {
            LockError::Config(
                "a saved election term must read `term1 <fencing token> <owner token> <name>`, \
                 as Term::to_secret_text writes it"
                    .into(),
            )
        };
        let mut words = text.trim_end_matches(['\r', '\n']).splitn(4, ' ');
        if words.next() != Some(TAG) {
            return Err(broken());
        }
        let fence = words
            .next()
            .and_then(|fence| fence.parse().ok())
            .ok_or_else(broken)?;
        let token = words
            .next()
            .filter(|token| !token.is_empty())
            .and_then(Token::from_text)
            .ok_or_else(broken)?;
        let name = words
            .next()
            .filter(|name| !name.is_empty())
            .ok_or_else(broken)?;
        Ok(Term::new(name, fence, token))
    }
}

/// Takes up `term` again: one renewal of the election's lock under the term's owner token,
/// checked by the store. `Ok(Some(guard))`, the lock held again with the term's fencing
/// token, if the token still holds it; `Ok(None)` if it does not (the term ended: expired,
/// released or taken) or the store gave no verdict; `Err` only for a key that cannot be named.
pub(crate) async fn adopt(
    inner: &Arc<Inner>,
    term: &Term,
    options: LockOptions,
) -> Result<Option<LockGuard>, LockError> {
    let _under_way = inner.work_under_way();
    let options = options.or_lock_delay(inner.lock_delay);
    let stored = Key::lock(&inner.prefix, &term.name)?;
    let lease = Arc::new(Lease::new(
        stored,
        term.token,
        inner.id,
        options,
        Instant::now(),
    ));
    let watch_id = inner.watchdog.register(&lease);
    let pending = Pending::new(inner.clone(), lease.clone(), watch_id);
    let batch = [Renewal {
        lease: lease.clone(),
        ttl: options.ttl.saturating_add(options.delay()),
    }];
    let verdict: Mutex<Option<Result<Option<bool>, StoreError>>> = Mutex::new(None);
    let book = |indices: &[usize], answer: Result<Vec<Option<bool>>, StoreError>| {
        if indices.contains(&0) {
            let first = answer.map(|answers| answers.first().copied().flatten());
            let mut verdict = verdict.lock().unwrap_or_else(PoisonError::into_inner);
            verdict.get_or_insert(first);
        }
    };
    let limit = inner.request_timeout.min(options.ttl);
    let _ = tokio::time::timeout(limit, inner.backend.renew(&batch, &book)).await;
    let verdict = verdict.into_inner().unwrap_or_else(PoisonError::into_inner);
    match verdict {
        Some(Ok(Some(true))) => {
            lease.mark_held(term.fence);
            inner.watchdog.activate(watch_id);
            if inner.is_closed() {
                // Shutdown drained the watchdog before this lease was in it: the drop of
                // `pending` gives the lock back.
                return Err(LockError::ShutDown {
                    key: term.name.clone(),
                });
            }
            Ok(Some(LockGuard::granted(pending)))
        }
        Some(Ok(Some(false))) => {
            // Not the term's any more: nothing to give back.
            pending.disarm();
            Ok(None)
        }
        other => {
            if let Some(Err(err)) = other {
                tracing::warn!(name = %term.name, error = %err, "resuming the saved term got no answer; campaigning anew");
            }
            // No verdict: whatever the renewal may have kept is given back by the drop of
            // `pending` (checked against the owner token), and the campaign starts anew.
            Ok(None)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_term_reads_back_and_its_debug_hides_the_owner_token() {
        let token = Token::new_v4();
        let term = Term::new("jobs scheduler", 17, token);
        let text = term.to_secret_text();
        assert_eq!(Term::from_secret_text(&text).ok(), Some(term.clone()));
        assert_eq!(
            Term::from_secret_text(&format!("{text}\n")).ok(),
            Some(term.clone())
        );
        let debug = format!("{term:?}");
        assert!(!debug.contains(token.as_str()), "{debug}");
        for broken in [
            "",
            "term1",
            "term1 x abc name",
            "term2 1 abc name",
            "term1 1 abc",
        ] {
            let err = Term::from_secret_text(broken).expect_err(broken);
            assert!(matches!(err, LockError::Config(_)));
        }
        let long = format!("term1 1 {} name", "x".repeat(37));
        assert!(Term::from_secret_text(&long).is_err());
    }
}
