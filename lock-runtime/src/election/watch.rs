//! Reading an election from outside a campaign: who leads ([`LockManager::leader`]), who
//! campaigns ([`LockManager::candidates`], [`LockManager::elections`]), and the changes of
//! leadership as they happen ([`LockManager::observe`], a [`LeaderWatch`]).
//!
//! Who leads is who holds the election's lock, read through the store's inspection side; what
//! the lock does not keep (the term's fencing token on Redis, everything but the holder id in
//! memory, a restarted leader's new pid) comes from the leader's own record (`record.rs`).

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::sync::broadcast;

use super::record::{self, Record, at_ms};
use crate::error::LockError;
use crate::manager::LockManager;
use crate::store::{Kind, LockInfo, LockState, Notice, NoticeKind};

/// How often a [`LeaderWatch`] reads the lock where the store carries no leader
/// announcements (and at its holder's lease end in any case).
pub(crate) const POLL: Duration = Duration::from_millis(500);

/// How often it reads the lock where announcements are carried: only in case one was missed
/// (delivery is at most once).
const POLL_ANNOUNCED: Duration = Duration::from_secs(5);

/// How long a watch woken by a release reads again for a successor before it says nobody
/// leads.
const SETTLE: Duration = Duration::from_millis(100);

/// How long a read waits for the record of a leader whose lock it saw before it settles for
/// what the lock says: the leader writes its record right after it wins.
const RECORD_GRACE: Duration = Duration::from_secs(1);

/// Who leads an election now: the holder of its lock, and what its leader recorded about
/// itself. What a store does not keep is `None`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LeaderInfo {
    /// 12 hex digits of the SHA-1 of the term's owner token: tells terms apart (a resumed term
    /// keeps its id), as `lockctl` shows holders; cannot be turned back into the token.
    pub holder_id: String,
    /// The leader's host name.
    pub host: Option<String>,
    /// The leader's process id (a resumed term shows the process that resumed it).
    pub pid: Option<u32>,
    /// The leader's [`app_name`](crate::LockManagerBuilder::app_name).
    pub app: Option<String>,
    /// The term's fencing token.
    pub fencing_token: Option<u64>,
    /// When the term began (the leader's wall clock).
    pub since: Option<SystemTime>,
}

/// One process campaigning for an election, as its campaign records itself.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Candidate {
    /// The election.
    pub election: String,
    /// The campaign's id: 16 hex digits, random per [`Leadership`](crate::Leadership).
    pub id: String,
    /// Its host name.
    pub host: Option<String>,
    /// Its process id.
    pub pid: Option<u32>,
    /// Its [`app_name`](crate::LockManagerBuilder::app_name).
    pub app: Option<String>,
    /// Its [`priority`](crate::ElectionOptions::priority).
    pub priority: u32,
    /// When it began campaigning.
    pub since: SystemTime,
    /// It leads now, by its own record (the lock is what decides: see
    /// [`LockManager::leader`]).
    pub leading: bool,
    /// It resigned and gives the others a chance before it campaigns again.
    pub resigned: bool,
}

impl Candidate {
    fn of(record: &Record) -> Candidate {
        Candidate {
            election: record.election.clone(),
            id: record.id.clone(),
            host: record.host.clone(),
            pid: record.pid,
            app: record.app.clone(),
            priority: record.priority,
            since: at_ms(record.since_ms),
            leading: record.term.is_some(),
            resigned: record.resigned,
        }
    }
}

/// One election as [`LockManager::elections`] lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ElectionInfo {
    /// Its name.
    pub name: String,
    /// Who leads it now, if anyone.
    pub leader: Option<LeaderInfo>,
    /// Its candidates, highest priority first, then longest campaigning.
    pub candidates: Vec<Candidate>,
}

/// The holder of `name`'s lock, from what the store shows of it: the holder id held in a
/// majority of the places that may hold it, with the first such place's view, and its lease
/// left.
fn holder(shown: &[LockInfo]) -> Option<(&LockInfo, Option<Duration>)> {
    let locks: Vec<&LockInfo> = shown
        .iter()
        .filter(|info| info.kind == Kind::Lock)
        .collect();
    let held: Vec<&LockInfo> = locks
        .iter()
        .copied()
        .filter(|info| info.state == LockState::Held && info.holder_id.is_some())
        .collect();
    let first = held.iter().copied().max_by_key(|info| {
        held.iter()
            .filter(|other| other.holder_id == info.holder_id)
            .count()
    })?;
    let count = held
        .iter()
        .filter(|other| other.holder_id == first.holder_id)
        .count();
    (count * 2 > locks.len()).then(|| {
        let lease = first
            .lease_ms
            .and_then(|ms| u64::try_from(ms).ok())
            .map(Duration::from_millis);
        (first, lease)
    })
}

/// The record of the campaign of election `name` whose term holds the lock `info`. A resumed
/// term has two until the dead process's record ends: the one written last, by the live
/// campaign.
fn term_record<'a>(records: &'a [Record], name: &str, info: &LockInfo) -> Option<&'a Record> {
    records
        .iter()
        .filter(|record| {
            record.election == name
                && record
                    .term
                    .as_ref()
                    .is_some_and(|term| Some(&term.holder) == info.holder_id.as_ref())
        })
        .max_by_key(|record| record.until_ms)
}

/// What the lock `info` and the leader's record (if found) say of the leader.
fn leader_info(info: &LockInfo, record: Option<&Record>) -> LeaderInfo {
    let term = record.and_then(|record| record.term.as_ref());
    LeaderInfo {
        holder_id: info.holder_id.clone().unwrap_or_default(),
        host: record
            .and_then(|record| record.host.clone())
            .or_else(|| info.host.clone()),
        pid: record
            .and_then(|record| record.pid)
            .or_else(|| info.pid.and_then(|pid| u32::try_from(pid).ok())),
        app: record
            .and_then(|record| record.app.clone())
            .or_else(|| info.app.clone()),
        fencing_token: term.map(|term| term.fence).or(info.fence),
        since: term
            .map(|term| at_ms(term.elected_ms))
            .or_else(|| info.since_ms.map(at_ms)),
    }
}

/// Why the candidates' records were not read.
pub(crate) enum Absent {
    /// The store keeps none.
    NotKept,
    Failed(LockError),
}

/// A leader as read: who, and how long its lease has left.
pub(crate) struct Read {
    pub(crate) leader: Option<LeaderInfo>,
    pub(crate) lease: Option<Duration>,
    /// The leader's record was found (or the store keeps none, so none will be).
    pub(crate) complete: bool,
}

impl LockManager {
    /// The error for a part of an election that needs the store's inspection side.
    fn not_inspectable(&self, name: &str) -> LockError {
        LockError::Config(format!(
            "{} cannot be inspected, so who leads `{}` cannot be read: use a store with an \
             inspection side (memory, any Redis deployment, PostgreSQL)",
            self.backend(),
            name.escape_debug()
        ))
    }

    fn read_error(&self, name: &str, failure: crate::store::StoreError) -> LockError {
        let server = self.client().backend.server().to_owned();
        LockError::from_failure("leader", Some(name), &server, failure)
    }

    /// What the store shows of the election's lock.
    async fn show(&self, name: &str) -> Result<Vec<LockInfo>, LockError> {
        let inner = self.client();
        crate::key::Key::lock(&inner.prefix, name)?;
        let inspect = self.inspect().ok_or_else(|| self.not_inspectable(name))?;
        let limit = inner.request_timeout;
        crate::store::StoreError::within(limit, inspect.show(&inner.prefix, name))
            .await
            .map_err(|failure| self.read_error(name, failure))
    }

    /// Whether a leader holds the election's lock now: a holder whose term record names it
    /// (a winner giving way to a candidate of higher priority writes none, and holds the lock
    /// only for the round trip of its release), or any holder on a store that keeps no records.
    pub(crate) async fn has_leader(&self, name: &str) -> Result<bool, LockError> {
        let shown = self.show(name).await?;
        let Some((info, _)) = holder(&shown) else {
            return Ok(false);
        };
        match self.records(name).await {
            Ok(records) => Ok(term_record(&records, name, info).is_some()),
            Err(Absent::NotKept) => Ok(true),
            Err(Absent::Failed(err)) => Err(err),
        }
    }

    /// Who leads the election `name` now, and how long its lease has left.
    pub(crate) async fn read_leader(&self, name: &str) -> Result<Read, LockError> {
        let keeps_records = self.client().backend.keeps_waits();
        let waited = tokio::time::Instant::now();
        loop {
            let shown = self.show(name).await?;
            let Some((info, lease)) = holder(&shown) else {
                return Ok(Read {
                    leader: None,
                    lease: None,
                    complete: true,
                });
            };
            let records = match self.records(name).await {
                Ok(records) => records,
                Err(Absent::NotKept) => Vec::new(),
                Err(Absent::Failed(err)) => return Err(err),
            };
            let found = term_record(&records, name, info);
            let complete = found.is_some() || !keeps_records;
            // A leader writes its record right after its win: a read between the two waits a
            // moment for it.
            if complete || waited.elapsed() >= RECORD_GRACE {
                return Ok(Read {
                    leader: Some(leader_info(info, found)),
                    lease,
                    complete,
                });
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Who leads the election `name`, by its lock and the `records` read already.
    async fn leader_among(
        &self,
        name: &str,
        records: &[Record],
    ) -> Result<Option<LeaderInfo>, LockError> {
        let shown = self.show(name).await?;
        Ok(holder(&shown).map(|(info, _)| leader_info(info, term_record(records, name, info))))
    }

    /// Who leads the election `name` now (`None`: nobody), whether or not this process
    /// campaigns: the holder of the election's lock, with what the leader recorded (host, pid,
    /// app, the term's fencing token, since when). One read of the lock, and one of the
    /// records where the store keeps them.
    ///
    /// Where the store keeps election records (memory, every Redis deployment, PostgreSQL)
    /// every field is the leader's own; on a store that keeps none they come from what its
    /// inspection side shows of the lock (on the lock's holder, where it records one).
    ///
    /// Errors: [`LockError::Config`] for an empty name or a store that cannot be inspected;
    /// [`LockError::Backend`] if the store failed.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), lock_runtime::LockError> {
    /// use lock_runtime::{ElectionOptions, LockManager};
    ///
    /// let locks = LockManager::memory();
    /// assert_eq!(locks.leader("scheduler").await?, None);
    /// let leadership = locks.elect("scheduler", ElectionOptions::new())?;
    /// let token = leadership.elected().await?;
    /// let leader = locks.leader("scheduler").await?.expect("one leads");
    /// assert_eq!(leader.fencing_token, Some(token));
    /// assert_eq!(leader.pid, Some(std::process::id()));
    /// # leadership.step_down().await
    /// # }
    /// ```
    pub async fn leader(&self, name: &str) -> Result<Option<LeaderInfo>, LockError> {
        Ok(self.read_leader(name).await?.leader)
    }

    /// Every process campaigning for the election `name` now, highest
    /// [`priority`](crate::ElectionOptions::priority) first, then longest campaigning: each
    /// campaign's record, written when it starts and every `ttl / 3`, removed when it stops.
    /// A campaign whose process died stays listed until its record's deadline, `ttl` after its
    /// last write.
    ///
    /// Errors: [`LockError::Config`] on a store that keeps no election records (a store of
    /// your own without [`Store::waits`](crate::store::Store::waits));
    /// [`LockError::Backend`] if the store failed.
    pub async fn candidates(&self, name: &str) -> Result<Vec<Candidate>, LockError> {
        crate::key::Key::lock(&self.client().prefix, name)?;
        let records = self.records(name).await.map_err(|err| match err {
            Absent::NotKept => {
                let what = format!("the candidates of `{}`", name.escape_debug());
                record::not_kept(&*self.client().backend, &what)
            }
            Absent::Failed(err) => err,
        })?;
        let mut candidates: Vec<Candidate> = records
            .iter()
            .filter(|record| record.election == name)
            .map(Candidate::of)
            .collect();
        sort(&mut candidates);
        Ok(candidates)
    }

    /// Every election that has a candidate now, by name, with its leader and candidates: what
    /// `lockctl elections` shows. One read of the records, and one of each election's lock.
    ///
    /// Errors as [`candidates`](Self::candidates) and [`leader`](Self::leader).
    pub async fn elections(&self) -> Result<Vec<ElectionInfo>, LockError> {
        let records = self.records("*").await.map_err(|err| match err {
            Absent::NotKept => record::not_kept(&*self.client().backend, "the elections"),
            Absent::Failed(err) => err,
        })?;
        let mut names: Vec<&str> = records
            .iter()
            .map(|record| record.election.as_str())
            .collect();
        names.sort_unstable();
        names.dedup();
        let mut elections = Vec::with_capacity(names.len());
        for name in names {
            let mut candidates: Vec<Candidate> = records
                .iter()
                .filter(|record| record.election == name)
                .map(Candidate::of)
                .collect();
            sort(&mut candidates);
            elections.push(ElectionInfo {
                name: name.to_owned(),
                leader: self.leader_among(name, &records).await?,
                candidates,
            });
        }
        Ok(elections)
    }

    /// The records standing now, or why they cannot be read (`name` for the message of a
    /// failure).
    pub(crate) async fn records(&self, name: &str) -> Result<Vec<Record>, Absent> {
        let inner = self.client();
        if !inner.backend.keeps_waits() {
            return Err(Absent::NotKept);
        }
        let limit = inner.request_timeout;
        crate::store::StoreError::within(limit, record::read(&*inner.backend, &inner.prefix))
            .await
            .map_err(|failure| Absent::Failed(self.read_error(name, failure)))
    }

    /// Follows the leadership of `name` from now on: the returned [`LeaderWatch`] wakes at
    /// every change of leader (a new term, a resignation, a term that ended with nobody after
    /// it). Anyone can watch; it takes no part in the election.
    ///
    /// Where the store carries leader announcements ([`Store::announces`]: memory, every Redis
    /// deployment but a Cluster of Redis 5, PostgreSQL but through a pooler without a
    /// `listen_url`), a watch wakes within one round trip of a new leader's win or a leader's
    /// resignation; it reads the lock at the leader's lease end too (an expiry is not
    /// announced), and every 5 s in case an announcement was missed. Elsewhere it reads the lock every 500 ms (see
    /// [`LeaderWatch::set_poll_interval`]), at the leader's lease end, and at a release of the
    /// lock that the store tells this manager (those of the locks its waiters wait for: a
    /// process that campaigns too sees its leader's release at once): a change is seen within
    /// 500 ms and one read.
    ///
    /// Errors at once as [`leader`](Self::leader).
    ///
    /// [`Store::announces`]: crate::store::Store::announces
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), lock_runtime::LockError> {
    /// use lock_runtime::{ElectionOptions, LockManager};
    ///
    /// let locks = LockManager::memory();
    /// let mut watch = locks.observe("scheduler").await?;
    /// assert_eq!(watch.leader(), None);
    /// let leadership = locks.elect("scheduler", ElectionOptions::new())?;
    /// let token = leadership.elected().await?;
    /// let leader = watch.changed().await.expect("a leader");
    /// assert_eq!(leader.fencing_token, Some(token));
    /// leadership.step_down().await?;
    /// assert_eq!(watch.changed().await, None); // nobody leads
    /// # Ok(())
    /// # }
    /// ```
    pub async fn observe(&self, name: &str) -> Result<LeaderWatch, LockError> {
        let inner = self.client();
        let stored = crate::key::Key::lock(&inner.prefix, name)?
            .name()
            .to_owned();
        let announcements = inner.notices.leaders();
        let releases = (!inner.backend.announces()).then(|| inner.waiters.releases());
        let read = self.read_leader(name).await?;
        let poll = if inner.backend.announces() {
            POLL_ANNOUNCED
        } else {
            POLL
        };
        Ok(LeaderWatch {
            locks: self.clone(),
            name: name.to_owned(),
            stored,
            announcements,
            releases,
            poll,
            leader: read.leader,
            lease: read.lease,
            complete: read.complete,
            read_at: tokio::time::Instant::now(),
        })
    }
}

/// The next release told to `releases`; never, without one.
async fn released(
    releases: Option<&mut broadcast::Receiver<Arc<str>>>,
) -> Result<Arc<str>, broadcast::error::RecvError> {
    match releases {
        Some(releases) => releases.recv().await,
        None => std::future::pending().await,
    }
}

/// Highest priority first, then longest campaigning.
fn sort(candidates: &mut [Candidate]) {
    candidates.sort_by(|a, b| {
        (std::cmp::Reverse(a.priority), a.since, &a.id).cmp(&(
            std::cmp::Reverse(b.priority),
            b.since,
            &b.id,
        ))
    });
}

/// The leadership changes of one election, from [`LockManager::observe`].
pub struct LeaderWatch {
    locks: LockManager,
    name: String,
    /// The election lock's stored name, as announcements name it.
    stored: String,
    announcements: broadcast::Receiver<Arc<Notice>>,
    /// Releases the store told this manager of (where its waiters wait for the lock), where
    /// the store carries no announcements (which say the same, and more).
    releases: Option<broadcast::Receiver<Arc<str>>>,
    poll: Duration,
    leader: Option<LeaderInfo>,
    /// The leader's lease left when it was read.
    lease: Option<Duration>,
    /// Whether `leader` came with its record: a leader read before it wrote one is told
    /// again, in full, once its record is read.
    complete: bool,
    /// When the lock was last read: the next read is due a poll interval (or the lease left)
    /// after it, however long the caller took to ask again.
    read_at: tokio::time::Instant,
}

impl std::fmt::Debug for LeaderWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaderWatch")
            .field("name", &self.name)
            .field("leader", &self.leader)
            .finish()
    }
}

impl LeaderWatch {
    /// The election watched.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Sets how often the watch reads the lock besides announcements and lease ends (default
    /// 500 ms where the store carries no announcements, 5 s where it does; at least 10 ms):
    /// shorter sees a change sooner where announcements are not carried, at one read (of the
    /// lock, and of the records where kept) per interval.
    pub fn set_poll_interval(&mut self, every: Duration) {
        self.poll = every.max(Duration::from_millis(10));
    }

    /// The changes as a [`Stream`](futures_util::Stream): each item is what
    /// [`changed`](Self::changed) resolves with. It never ends by itself.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), lock_runtime::LockError> {
    /// use futures_util::StreamExt;
    /// use lock_runtime::{ElectionOptions, LockManager};
    ///
    /// let locks = LockManager::memory();
    /// let mut changes = Box::pin(locks.observe("scheduler").await?.into_stream());
    /// let leadership = locks.elect("scheduler", ElectionOptions::new())?;
    /// let token = leadership.elected().await?;
    /// let leader = changes.next().await.flatten().expect("a leader");
    /// assert_eq!(leader.fencing_token, Some(token));
    /// # leadership.step_down().await
    /// # }
    /// ```
    pub fn into_stream(self) -> impl futures_util::Stream<Item = Option<LeaderInfo>> + Send {
        futures_util::stream::unfold(self, |mut watch| async move {
            let changed = watch.changed().await;
            Some((changed, watch))
        })
    }

    /// The leader as last read (at [`observe`](LockManager::observe), or by the last
    /// [`changed`](Self::changed)).
    pub fn leader(&self) -> Option<&LeaderInfo> {
        self.leader.as_ref()
    }

    /// Resolves with the leader once it differs from the last one read (another term's
    /// holder, or nobody: `None`). A term that is resumed or renewed is no change; a leader
    /// first read in the moment between its win and its record (so without its fencing token
    /// on some stores) is told again once its record is read. After a
    /// release it reads again for a moment (100 ms) before it says nobody leads, since a
    /// successor usually takes over at once. A failed read is logged and tried again at the
    /// next wake; the watch never ends by itself (drop it to stop).
    pub async fn changed(&mut self) -> Option<LeaderInfo> {
        loop {
            let released = self.wait().await;
            let settle = tokio::time::Instant::now() + SETTLE;
            let read = loop {
                let read = self.locks.read_leader(&self.name).await;
                self.read_at = tokio::time::Instant::now();
                match &read {
                    Ok(found) if released && found.leader.is_none() && self.read_at < settle => {
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                    _ => break read,
                }
            };
            match read {
                Ok(read) => {
                    self.lease = read.lease;
                    let same = read.leader.as_ref().map(|leader| &leader.holder_id)
                        == self.leader.as_ref().map(|leader| &leader.holder_id);
                    if !same || (read.complete && !self.complete) {
                        self.leader = read.leader;
                        self.complete = read.complete;
                        return self.leader.clone();
                    }
                }
                Err(err) => {
                    tracing::warn!(name = %self.name, error = %err, "reading the election's leader failed; trying again");
                    self.lease = None;
                }
            }
        }
    }

    /// Until something may have changed: an announcement for this election, a release of its
    /// lock (then true), the leader's lease end, or the poll interval.
    async fn wait(&mut self) -> bool {
        let pause = match self.lease {
            // Just past the lease end, when the lock has expired on the server.
            Some(lease) => self.poll.min(lease + Duration::from_millis(5)),
            None => self.poll,
        };
        let sleep = tokio::time::sleep_until(self.read_at + pause);
        tokio::pin!(sleep);
        loop {
            tokio::select! {
                () = &mut sleep => return false,
                heard = self.announcements.recv() => match heard {
                    Ok(notice) if notice.kind == NoticeKind::Leader && notice.key == self.stored => return false,
                    Ok(_) => {}
                    // Fell behind: read now.
                    Err(broadcast::error::RecvError::Lagged(_)) => return false,
                    Err(broadcast::error::RecvError::Closed) => {
                        (&mut sleep).await;
                        return false;
                    }
                },
                told = released(self.releases.as_mut()) => match told {
                    Ok(key) if *key == *self.stored => return true,
                    Ok(_) => {}
                    Err(broadcast::error::RecvError::Lagged(_)) => return true,
                    Err(broadcast::error::RecvError::Closed) => {
                        self.releases = None;
                    }
                },
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::election::record::TermRecord;

    fn leading(id: &str, app: &str, until_ms: u64) -> Record {
        Record {
            id: id.into(),
            election: "jobs".into(),
            priority: 0,
            since_ms: 1_000,
            until_ms,
            host: None,
            pid: None,
            app: Some(app.into()),
            resigned: false,
            term: Some(TermRecord {
                holder: "0123456789ab".into(),
                fence: 7,
                elected_ms: 1_000,
            }),
        }
    }

    /// A resumed term is named by two records until the dead process's one ends: the leader
    /// is the live campaign, whose record was written last, whatever the ids' order.
    #[test]
    fn a_resumed_term_is_read_from_the_record_written_last() {
        let mut info = LockInfo::new("jobs", Kind::Lock, "lock:{jobs}", "memory");
        info.holder_id = Some("0123456789ab".into());
        for (dead, live) in [("00", "ff"), ("ff", "00")] {
            let records = [
                leading(dead, "before", 5_000),
                leading(live, "after", 9_000),
            ];
            let found = term_record(&records, "jobs", &info).expect("a record");
            assert_eq!(found.app.as_deref(), Some("after"));
            let mut records = records;
            records.reverse();
            let found = term_record(&records, "jobs", &info).expect("a record");
            assert_eq!(found.app.as_deref(), Some("after"));
        }
    }
}
