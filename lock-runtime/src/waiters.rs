//! Who is waiting for which lock, and handing each release notification to one of them.
//!
//! A release publishes one message; every process subscribed to the key receives it, and inside a
//! process this registry wakes the longest-waiting task that is not already awake. A task keeps
//! its place in line across retries: it registers once per `lock()` call, not once per sleep.
//!
//! A lease that runs out is announced by nobody, so someone must watch its expiry: only the
//! first waiter in line does; the others wait for a release. When the first leaves the line
//! (it took the lock, or gave up), it hands the watch to the next, with the time to look again,
//! so one expiry costs one attempt per process, not one per waiter.
//!
//! On Redlock one release is announced by every master: the announcement carries an id of the
//! release (a hash of its owner token), and a release already handed to a waiter is not handed
//! out again.
//!
//! A holder in this process that releases a lock others here wait for does not make them hear
//! of it through the server: where the backend can, it hands the lock straight to the first
//! waiter that offered to take it ([`Slot::open_offer`], [`Waiters::take_offer`]), in one
//! script call and without the lock ever being free; otherwise it wakes that waiter itself
//! ([`Waiters::released_here`]), and the announcement of the same release that may follow
//! wakes nobody else.
//!
//! A waiter in the line of fair waiters (`fair = true`) is woken by name: a lock freed for the
//! first in line announces `q:` and that waiter's name (an id of its owner token, as a release
//! id is of the holder's), and only the waiter of that name wakes, in whichever process it is.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::{Notify, OnceCell};
use tokio::time::Instant;

use crate::lease::Lease;
use crate::protocol::FAIR_TURN;
use crate::shape::Shape;

/// Release ids remembered per key, to recognise the same release announced again.
const RECENT_RELEASES: usize = 8;

/// How long after a fair waiter's turn ends (by this clock) the others look again: the server
/// must see it ended.
const TURN_MARGIN: Duration = Duration::from_millis(10);

/// Every waiter of one manager (of every manager, for a shared memory table).
#[derive(Default)]
pub(crate) struct Waiters {
    keys: Mutex<HashMap<String, KeyWaiters>>,
    /// How many announcements of one release mean it is done: Redlock's quorum (the release
    /// has reached a majority of masters, so a retry can take the lock), otherwise one.
    quorum: AtomicUsize,
    /// How long a fair waiter's turn lasts (see queue.lua); `None`: [`FAIR_TURN`].
    turn: Option<Duration>,
    /// The releases told, for election watchers.
    followers: Followers,
}

/// The names of the keys whose releases were told, for election watchers (a release is a
/// change of leader): sent only while one follows.
struct Followers(tokio::sync::broadcast::Sender<Arc<str>>);

impl Default for Followers {
    fn default() -> Self {
        // A watcher that falls this far behind reads the lock anyway.
        Followers(tokio::sync::broadcast::channel(64).0)
    }
}

struct KeyWaiters {
    line: VecDeque<Arc<Slot>>,
    /// Set once the backend delivers notifications for the key.
    watched: Arc<OnceCell<()>>,
    /// A release wakes every waiter of the key, not only the first (decided by the shape of
    /// the key's first waiter; a stored name belongs to one shape's lock).
    wakes_every_waiter: bool,
    /// Ids of the last releases announced, with how many announcements of each arrived.
    recent: VecDeque<(Vec<u8>, usize)>,
    /// Releases made in this process whose waiter was woken here, and releases announced whose
    /// local release was not seen yet: whichever of the two comes second wakes nobody.
    released_here: VecDeque<Vec<u8>>,
    announced: VecDeque<Vec<u8>>,
    /// Fair waiters named (their turn began) while nobody here had that name: one that takes
    /// it later is woken then.
    named: VecDeque<Vec<u8>>,
}

/// One waiting task's place in line.
#[derive(Default)]
pub(crate) struct Slot {
    notify: Notify,
    /// Woken by a release and not yet back in `wait`: the next release goes to someone else.
    woken: AtomicBool,
    /// Woken to try again (a release, or notifications that may have been missed).
    retry: AtomicBool,
    /// Handed the expiry watch: look again at this time.
    watch: Mutex<Option<Instant>>,
    /// The watch this waiter hands on when it leaves the line as its first: look again then.
    hand_on: Mutex<Option<Instant>>,
    /// This waiter's offer to be handed the lock by a holder of this process.
    offer: Mutex<Offer>,
    /// Signalled when a taken offer is settled.
    settled: Notify,
    /// The name this waiter is woken by when it is in the line of fair waiters: the release id
    /// of its owner token (see [`crate::protocol::release_id`]).
    name: std::sync::OnceLock<Vec<u8>>,
}

/// A waiter's offer to be handed the lock (see the module docs), as it goes from the waiter to
/// a releasing holder and back.
#[derive(Default)]
pub(crate) enum Offer {
    #[default]
    None,
    /// The waiter sleeps and may be handed the lock under this lease.
    Open(Arc<Lease>),
    /// A holder took it and is handing the lock over.
    Taken(Arc<Lease>),
    /// The lock was handed over: the lease is held, registered with the watchdog under this id.
    Granted(Arc<Lease>, u64),
    /// Not handed over: the waiter tries the server itself.
    Declined,
    /// The waiter left while the offer was taken: whoever took it gives back what it gets.
    Abandoned,
}

/// What a waiter finds when it takes its offer back.
pub(crate) enum Withdrawn {
    /// Nothing was handed over and nothing is on its way: go on as without an offer.
    Nothing,
    /// A holder is handing the lock over right now: wait for [`Slot::settled`].
    InFlight,
    /// The lock is the waiter's: the lease is held, under this watchdog id.
    Granted(Arc<Lease>, u64),
}

/// Why a waiter was woken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wake {
    /// Try to take the lock again.
    Retry,
    /// The waiter ahead left the line: watch the lease's expiry, looking again at this time.
    WatchUntil(Instant),
}

impl Slot {
    /// Resolves when this waiter is woken, saying why. A release outranks a handed watch.
    pub(crate) async fn woken(&self) -> Wake {
        self.notify.notified().await;
        let watch = self
            .watch
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if self.retry.swap(false, Ordering::AcqRel) {
            self.woken.store(false, Ordering::Release);
            return Wake::Retry;
        }
        match watch {
            Some(at) => Wake::WatchUntil(at),
            None => Wake::Retry,
        }
    }

    fn wake_to_retry(&self) {
        self.retry.store(true, Ordering::Release);
        self.notify.notify_one();
    }

    fn offer(&self) -> std::sync::MutexGuard<'_, Offer> {
        self.offer.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// While it sleeps, this waiter may be handed the lock under `lease` (its next attempt's
    /// owner token and ttl) by a holder of this process.
    pub(crate) fn open_offer(&self, lease: Arc<Lease>) {
        let mut offer = self.offer();
        if matches!(*offer, Offer::None | Offer::Declined) {
            *offer = Offer::Open(lease);
        }
    }

    /// Takes the offer back, before the waiter tries the server itself or leaves.
    pub(crate) fn withdraw_offer(&self) -> Withdrawn {
        let mut offer = self.offer();
        match std::mem::take(&mut *offer) {
            Offer::Taken(lease) => {
                *offer = Offer::Taken(lease);
                Withdrawn::InFlight
            }
            Offer::Granted(lease, watch_id) => Withdrawn::Granted(lease, watch_id),
            Offer::None | Offer::Open(_) | Offer::Declined | Offer::Abandoned => Withdrawn::Nothing,
        }
    }

    /// Resolves once a taken offer is settled (granted or declined).
    pub(crate) async fn settled(&self) {
        loop {
            let settled = self.settled.notified();
            if !matches!(*self.offer(), Offer::Taken(_)) {
                return;
            }
            settled.await;
        }
    }

    /// The waiter leaves for good (it gave up, was cancelled, or took the lock): an offer being
    /// handed over is abandoned, and a lock already handed over is returned, for the caller to
    /// give back.
    pub(crate) fn abandon(&self) -> Option<(Arc<Lease>, u64)> {
        let mut offer = self.offer();
        match std::mem::take(&mut *offer) {
            Offer::Taken(_) => {
                *offer = Offer::Abandoned;
                None
            }
            Offer::Granted(lease, watch_id) => Some((lease, watch_id)),
            _ => None,
        }
    }

    /// The holder that took this offer settles it: `Some(watch_id)` if the lock was handed
    /// over, `None` if not, and wakes the waiter (which counts as woken: the announcement of a
    /// release goes to the next). Returns `true` if the waiter left meanwhile: then nobody takes
    /// what was handed over, and the holder gives it back.
    pub(crate) fn settle(&self, granted: Option<u64>) -> bool {
        let mut offer = self.offer();
        let abandoned = match std::mem::take(&mut *offer) {
            Offer::Taken(lease) => {
                *offer = match granted {
                    Some(watch_id) => Offer::Granted(lease, watch_id),
                    None => Offer::Declined,
                };
                false
            }
            Offer::Abandoned => true,
            other => {
                *offer = other;
                false
            }
        };
        drop(offer);
        self.settled.notify_waiters();
        if !abandoned {
            self.woken.store(true, Ordering::Release);
            self.wake_to_retry();
        }
        abandoned
    }
}

impl Waiters {
    /// Waiters of a deployment whose fair waiters' turns last `turn`.
    pub(crate) fn with_fair_turn(turn: Duration) -> Self {
        Waiters {
            turn: Some(turn),
            ..Waiters::default()
        }
    }

    /// The names of the keys whose releases are told from now on: those this manager's
    /// waiters wait for (the store tells no others).
    pub(crate) fn releases(&self) -> tokio::sync::broadcast::Receiver<Arc<str>> {
        self.followers.0.subscribe()
    }

    /// Each release is announced `quorum` times before it is done (Redlock: once by each
    /// master, and done on a majority): wake a waiter at the `quorum`-th announcement, since
    /// one woken at the first would find the lock still held on the other masters.
    pub(crate) fn set_quorum(&self, quorum: usize) {
        self.quorum.store(quorum, Ordering::Release);
    }

    fn keys(&self) -> std::sync::MutexGuard<'_, HashMap<String, KeyWaiters>> {
        self.keys.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Puts a waiter for `shape` at the end of the line for `key`. Returns its slot, and the
    /// cell that says whether notifications flow for the key (the first waiter of a key fills
    /// it).
    pub(crate) fn join(&self, key: &str, shape: Shape) -> (Arc<Slot>, Arc<OnceCell<()>>) {
        let slot = Arc::new(Slot::default());
        let mut keys = self.keys();
        let entry = keys.entry(key.to_owned()).or_insert_with(|| KeyWaiters {
            line: VecDeque::new(),
            watched: Arc::new(OnceCell::new()),
            wakes_every_waiter: shape.release_wakes_every_waiter(),
            recent: VecDeque::new(),
            released_here: VecDeque::new(),
            announced: VecDeque::new(),
            named: VecDeque::new(),
        });
        entry.line.push_back(slot.clone());
        (slot, entry.watched.clone())
    }

    /// Whether `slot` is first in line for `key`: the waiter that watches the lease's expiry.
    pub(crate) fn is_first(&self, key: &str, slot: &Arc<Slot>) -> bool {
        self.keys()
            .get(key)
            .and_then(|entry| entry.line.front())
            .is_some_and(|first| Arc::ptr_eq(first, slot))
    }

    /// `slot` is about to leave the line: if it watches the expiry when it leaves, the waiter
    /// behind it watches from then on, looking again at `until` (when the lease it knows of
    /// ends). Handed over in [`Waiters::leave`], under the same lock as the leaving, so that it
    /// always reaches the waiter that is first once this one is gone.
    pub(crate) fn hand_over(&self, slot: &Arc<Slot>, until: Instant) {
        *slot.hand_on.lock().unwrap_or_else(PoisonError::into_inner) = Some(until);
    }

    /// Takes a waiter out of line. If it was the last one for `key`, runs `last` (which stops
    /// the notifications) before anyone can join again, so a stop can never overtake the next
    /// start. A wake-up the waiter received but did not use goes to the next in line; if it was
    /// first, the new first watches the expiry: from the time it was handed
    /// ([`Waiters::hand_over`]), or after looking at once.
    pub(crate) fn leave(&self, key: &str, slot: &Arc<Slot>, last: impl FnOnce()) {
        let mut keys = self.keys();
        let Some(entry) = keys.get_mut(key) else {
            return;
        };
        let was_first = entry
            .line
            .front()
            .is_some_and(|first| Arc::ptr_eq(first, slot));
        entry.line.retain(|s| !Arc::ptr_eq(s, slot));
        if entry.line.is_empty() {
            keys.remove(key);
            last();
            return;
        }
        if slot.woken.load(Ordering::Acquire) {
            // The release it did not use goes on; the waiter it wakes looks at once, and if it
            // is first, watches from there.
            wake_first(entry);
            return;
        }
        if !was_first {
            return;
        }
        let handed = slot
            .hand_on
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        match (handed, entry.line.front()) {
            (Some(until), Some(next)) => {
                *next.watch.lock().unwrap_or_else(PoisonError::into_inner) = Some(until);
                next.notify.notify_one();
            }
            _ => wake_first(entry),
        }
    }

    /// A release of `key` was announced (`release`: its id, if the announcement carries one):
    /// wake the first waiter that is not awake already, unless this release was handed out.
    pub(crate) fn wake_one(&self, key: &str, release: Option<&[u8]>) {
        if self.followers.0.receiver_count() > 0 {
            // An error only says that nobody follows any more.
            let _ = self.followers.0.send(key.into());
        }
        let mut keys = self.keys();
        let Some(entry) = keys.get_mut(key) else {
            return;
        };
        if let Some(name) = release.and_then(|message| message.strip_prefix(b"q:")) {
            wake_named(entry, name, self.turn.unwrap_or(FAIR_TURN));
            return;
        }
        let quorum = self.quorum.load(Ordering::Acquire).max(1);
        // Only a deployment that announces one release several times (Redlock, once per
        // master, and never twice under one owner token) counts announcements. Elsewhere an
        // owner token can announce twice (a grant given back for want of replica
        // acknowledgements, then the release of the same token's retry), and both must wake.
        if let Some(id) = release.filter(|id| !id.is_empty() && quorum == 1) {
            // Woken here already by the process that released it?
            if take(&mut entry.released_here, id) {
                return;
            }
            remember(&mut entry.announced, id);
        }
        if let Some(id) = release.filter(|id| !id.is_empty() && quorum > 1) {
            let heard = match entry.recent.iter_mut().find(|(seen, _)| seen == id) {
                Some((_, heard)) => {
                    *heard += 1;
                    *heard
                }
                None => {
                    if entry.recent.len() == RECENT_RELEASES {
                        entry.recent.pop_front();
                    }
                    entry.recent.push_back((id.to_vec(), 1));
                    1
                }
            };
            if heard != quorum {
                return;
            }
        }
        if entry.wakes_every_waiter {
            // After a writer, every reader may go at once; after a reader, the writer waiting
            // may be anywhere in line, behind readers that queue behind it: all look again.
            for slot in &entry.line {
                slot.woken.store(true, Ordering::Release);
                slot.wake_to_retry();
            }
            return;
        }
        wake_first(entry);
    }

    /// A holder of this process released `key` (`release`: the id its announcement carries):
    /// with `wake`, wake the first waiter here at once (without, one was woken already),
    /// unless the announcement came first and did; the announcement that may follow wakes
    /// nobody.
    pub(crate) fn released_here(&self, key: &str, release: &[u8], wake: bool) {
        let mut keys = self.keys();
        let Some(entry) = keys.get_mut(key) else {
            return;
        };
        if take(&mut entry.announced, release) {
            return;
        }
        remember(&mut entry.released_here, release);
        if wake {
            wake_first(entry);
        }
    }

    /// The first waiter of `key` with an open offer, whose offer is now taken: the holder
    /// releasing `key` hands the lock to it, and settles the offer with [`Slot::settle`].
    pub(crate) fn take_offer(&self, key: &str) -> Option<(Arc<Slot>, Arc<Lease>)> {
        let keys = self.keys();
        let entry = keys.get(key)?;
        entry.line.iter().find_map(|slot| {
            let mut offer = slot.offer();
            let Offer::Open(lease) = &*offer else {
                return None;
            };
            let lease = lease.clone();
            *offer = Offer::Taken(lease.clone());
            Some((slot.clone(), lease))
        })
    }

    /// The lock `key` was freed for the fair waiter called `name`: wake it, if it waits here.
    pub(crate) fn wake_named(&self, key: &str, name: &[u8]) {
        if let Some(entry) = self.keys().get_mut(key) {
            wake_named(entry, name, self.turn.unwrap_or(FAIR_TURN));
        }
    }

    /// `slot` waits in the line of fair waiters under `name` from now on; if its turn was
    /// announced already, it is woken at once.
    pub(crate) fn name(&self, key: &str, slot: &Slot, name: Vec<u8>) {
        let mut keys = self.keys();
        let named = keys
            .get_mut(key)
            .is_some_and(|entry| take(&mut entry.named, &name));
        let _ = slot.name.set(name);
        if named {
            slot.wake_to_retry();
        }
    }

    /// The subscription to `key`'s announcements, if this process has one already: a waiter
    /// that joins later and finds the same one knows no announcement was missed in between.
    pub(crate) fn subscription(&self, key: &str) -> Option<Arc<OnceCell<()>>> {
        self.keys()
            .get(key)
            .map(|entry| entry.watched.clone())
            .filter(|watched| watched.initialized())
    }

    /// Whether anyone in this process waits for `key`.
    pub(crate) fn has_line(&self, key: &str) -> bool {
        self.keys().contains_key(key)
    }

    /// How many tasks of this process wait for `key` (the `testing` kit's observation).
    #[cfg(feature = "testing")]
    pub(crate) fn count(&self, key: &str) -> usize {
        self.keys().get(key).map_or(0, |entry| entry.line.len())
    }

    /// Notifications may have been missed (the subscription connection dropped): wake everyone,
    /// each retries once and waits again.
    pub(crate) fn wake_all(&self) {
        let keys = self.keys();
        for slot in keys.values().flat_map(|entry| entry.line.iter()) {
            slot.woken.store(true, Ordering::Release);
            slot.wake_to_retry();
        }
    }
}

/// Takes `id` out of `ids` if it is there.
fn take(ids: &mut VecDeque<Vec<u8>>, id: &[u8]) -> bool {
    match ids.iter().position(|seen| seen == id) {
        Some(at) => {
            ids.remove(at);
            true
        }
        None => false,
    }
}

/// Adds `id` to `ids`, forgetting the oldest beyond [`RECENT_RELEASES`].
fn remember(ids: &mut VecDeque<Vec<u8>>, id: &[u8]) {
    if ids.len() == RECENT_RELEASES {
        ids.pop_front();
    }
    ids.push_back(id.to_vec());
}

/// Wakes the waiter called `name`. Its turn is its own: if it leaves without taking the lock, it
/// tells the server, which names the next in line (so it is not marked woken, which would pass
/// the turn on here). If it does not wait here (or not yet under that name), the first waiter
/// here looks again when that turn ends, in case its holder never comes (see queue.lua):
/// nobody would announce it.
fn wake_named(entry: &mut KeyWaiters, name: &[u8], turn: Duration) {
    if let Some(slot) = entry
        .line
        .iter()
        .find(|slot| slot.name.get().is_some_and(|own| own == name))
    {
        slot.wake_to_retry();
        return;
    }
    // Maybe a waiter here that has not taken its name yet (see `Waiters::name`).
    remember(&mut entry.named, name);
    if let Some(first) = entry.line.front() {
        let turn_ends = Instant::now() + turn + TURN_MARGIN;
        *first.watch.lock().unwrap_or_else(PoisonError::into_inner) = Some(turn_ends);
        first.notify.notify_one();
    }
}

/// Wakes the first waiter of a line that is not awake already.
fn wake_first(entry: &KeyWaiters) {
    let next = entry
        .line
        .iter()
        .find(|slot| !slot.woken.swap(true, Ordering::AcqRel));
    if let Some(slot) = next {
        slot.wake_to_retry();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    async fn is_woken(slot: &Slot) -> bool {
        tokio::time::timeout(Duration::from_millis(20), slot.woken())
            .await
            .is_ok_and(|wake| wake == Wake::Retry)
    }

    fn a_lease() -> Arc<Lease> {
        let stored = crate::key::Key::lock("lock:", "k").expect("key");
        Arc::new(Lease::new(
            stored,
            crate::lease::Token::from_text("token").expect("a short token"),
            1,
            crate::options::LockOptions::new(),
            Instant::now(),
        ))
    }

    #[tokio::test]
    async fn a_granted_offer_is_the_waiters_and_wakes_it() {
        let waiters = Waiters::default();
        let (slot, _) = waiters.join("k", Shape::Lock);
        slot.open_offer(a_lease());
        let (taken, _) = waiters.take_offer("k").expect("an open offer");
        assert!(Arc::ptr_eq(&taken, &slot));
        assert!(waiters.take_offer("k").is_none(), "taken once");
        assert!(matches!(slot.withdraw_offer(), Withdrawn::InFlight));
        assert!(!slot.settle(Some(7)), "the waiter is still there");
        assert!(is_woken(&slot).await);
        match slot.withdraw_offer() {
            Withdrawn::Granted(_, watch_id) => assert_eq!(watch_id, 7),
            _ => panic!("not granted"),
        }
    }

    #[tokio::test]
    async fn a_declined_offer_leaves_the_waiter_to_try_itself() {
        let waiters = Waiters::default();
        let (slot, _) = waiters.join("k", Shape::Lock);
        slot.open_offer(a_lease());
        waiters.take_offer("k").expect("an open offer");
        assert!(!slot.settle(None));
        slot.settled().await;
        assert!(matches!(slot.withdraw_offer(), Withdrawn::Nothing));
    }

    #[tokio::test]
    async fn a_fair_turn_wakes_the_waiter_of_that_name_only() {
        let waiters = Waiters::default();
        let (first, _) = waiters.join("k", Shape::Lock);
        let (named, _) = waiters.join("k", Shape::Lock);
        waiters.name("k", &first, b"aaaaaaaaaaaa".to_vec());
        waiters.name("k", &named, b"bbbbbbbbbbbb".to_vec());
        waiters.wake_one("k", Some(b"q:bbbbbbbbbbbb"));
        assert!(is_woken(&named).await);
        assert!(!is_woken(&first).await);
    }

    #[tokio::test]
    async fn a_turn_announced_before_the_waiter_took_its_name_is_kept_for_it() {
        let waiters = Waiters::default();
        let (slot, _) = waiters.join("k", Shape::Lock);
        waiters.wake_one("k", Some(b"q:cccccccccccc"));
        // Not its name (yet): the first waiter here watches the end of that turn instead.
        let woken = tokio::time::timeout(Duration::from_millis(20), slot.woken()).await;
        assert!(matches!(woken, Ok(Wake::WatchUntil(_))), "{woken:?}");
        waiters.name("k", &slot, b"cccccccccccc".to_vec());
        assert!(is_woken(&slot).await);
    }

    #[tokio::test]
    async fn a_withdrawn_offer_is_never_taken() {
        let waiters = Waiters::default();
        let (slot, _) = waiters.join("k", Shape::Lock);
        slot.open_offer(a_lease());
        assert!(matches!(slot.withdraw_offer(), Withdrawn::Nothing));
        assert!(waiters.take_offer("k").is_none());
    }

    #[tokio::test]
    async fn a_lock_handed_to_a_waiter_that_left_goes_back_to_the_holder_to_release() {
        let waiters = Waiters::default();
        let (slot, _) = waiters.join("k", Shape::Lock);
        slot.open_offer(a_lease());
        waiters.take_offer("k").expect("an open offer");
        // The waiter is cancelled while the hand-off is on the wire.
        assert!(slot.abandon().is_none(), "nothing was handed over yet");
        assert!(slot.settle(Some(3)), "the holder must give it back");
        // Granted before the waiter left: the waiter gives it back itself.
        let (slot, _) = waiters.join("k", Shape::Lock);
        slot.open_offer(a_lease());
        waiters.take_offer("k").expect("an open offer");
        assert!(!slot.settle(Some(4)));
        assert!(matches!(slot.abandon(), Some((_, 4))));
    }

    #[tokio::test]
    async fn a_release_woken_here_is_not_woken_again_by_its_announcement_nor_the_reverse() {
        let waiters = Waiters::default();
        let (first, _) = waiters.join("k", Shape::Lock);
        let (second, _) = waiters.join("k", Shape::Lock);
        waiters.released_here("k", b"aaaaaaaaaaaa", true);
        assert!(is_woken(&first).await);
        waiters.wake_one("k", Some(b"aaaaaaaaaaaa"));
        assert!(
            !is_woken(&second).await,
            "the same release woke a second waiter"
        );
        // Announced first, then released here: one wake-up again.
        waiters.wake_one("k", Some(b"bbbbbbbbbbbb"));
        waiters.released_here("k", b"bbbbbbbbbbbb", true);
        assert!(is_woken(&first).await || is_woken(&second).await);
        assert!(!is_woken(&first).await && !is_woken(&second).await);
    }

    #[tokio::test]
    async fn one_release_wakes_exactly_the_first_waiter() {
        let waiters = Waiters::default();
        let (first, _) = waiters.join("k", Shape::Lock);
        let (second, _) = waiters.join("k", Shape::Lock);
        waiters.wake_one("k", None);
        assert!(is_woken(&first).await);
        assert!(!is_woken(&second).await);
    }

    #[tokio::test]
    async fn a_release_of_a_read_write_lock_wakes_every_waiter_whatever_its_name() {
        for shape in [Shape::Read, Shape::Write] {
            let waiters = Waiters::default();
            let (first, _) = waiters.join("k", shape);
            let (second, _) = waiters.join("k", Shape::Read);
            waiters.wake_one("k", None);
            assert!(is_woken(&first).await, "{shape:?}: the first");
            assert!(is_woken(&second).await, "{shape:?}: and the one behind it");
        }
    }

    #[tokio::test]
    async fn a_release_of_a_semaphore_wakes_its_first_waiter_only() {
        let waiters = Waiters::default();
        let semaphore = Shape::Semaphore { permits: 2 };
        let (first, _) = waiters.join("lock:{k}:rw", semaphore);
        let (second, _) = waiters.join("lock:{k}:rw", semaphore);
        waiters.wake_one("lock:{k}:rw", None);
        assert!(is_woken(&first).await);
        assert!(!is_woken(&second).await);
    }

    #[tokio::test]
    async fn a_woken_waiter_keeps_its_place_and_the_next_release_goes_to_the_next() {
        let waiters = Waiters::default();
        let (first, _) = waiters.join("k", Shape::Lock);
        let (second, _) = waiters.join("k", Shape::Lock);
        waiters.wake_one("k", None);
        // `first` has not consumed its wake-up yet: the next release must go to `second`.
        waiters.wake_one("k", None);
        assert!(is_woken(&first).await);
        assert!(is_woken(&second).await);
        // Back in line, `first` is again the first to be woken.
        waiters.wake_one("k", None);
        assert!(is_woken(&first).await);
    }

    #[tokio::test]
    async fn the_last_waiter_to_leave_says_so() {
        let waiters = Waiters::default();
        let (a, _) = waiters.join("k", Shape::Lock);
        let (b, _) = waiters.join("k", Shape::Lock);
        let mut stopped = false;
        waiters.leave("k", &a, || stopped = true);
        assert!(!stopped);
        waiters.leave("k", &b, || stopped = true);
        assert!(stopped);
        assert!(waiters.keys.lock().expect("not poisoned").is_empty());
    }

    #[tokio::test]
    async fn a_wake_up_left_unused_goes_to_the_next_waiter() {
        let waiters = Waiters::default();
        let (first, _) = waiters.join("k", Shape::Lock);
        let (second, _) = waiters.join("k", Shape::Lock);
        waiters.wake_one("k", None);
        // `first` gives up (cancelled, or out of time) before it used the wake-up.
        waiters.leave("k", &first, || {});
        assert!(is_woken(&second).await);
    }

    #[tokio::test]
    async fn the_same_release_announced_by_several_masters_wakes_one_waiter() {
        let waiters = Waiters::default();
        waiters.set_quorum(2);
        let (first, _) = waiters.join("k", Shape::Lock);
        let (second, _) = waiters.join("k", Shape::Lock);
        for _master in 0..3 {
            waiters.wake_one("k", Some(b"release-a"));
        }
        assert!(is_woken(&first).await);
        assert!(!is_woken(&second).await, "one release woke two waiters");
        for _master in 0..3 {
            waiters.wake_one("k", Some(b"release-b"));
        }
        assert!(is_woken(&first).await, "a new release wakes again");
    }

    #[tokio::test]
    async fn with_a_quorum_a_release_wakes_once_a_majority_announced_it() {
        let waiters = Waiters::default();
        waiters.set_quorum(2);
        let (first, _) = waiters.join("k", Shape::Lock);
        let (second, _) = waiters.join("k", Shape::Lock);
        waiters.wake_one("k", Some(b"release-a"));
        assert!(!is_woken(&first).await, "woken before a majority released");
        waiters.wake_one("k", Some(b"release-a"));
        assert!(is_woken(&first).await);
        waiters.wake_one("k", Some(b"release-a"));
        assert!(
            !is_woken(&second).await,
            "the third master's announcement woke another"
        );
    }

    #[tokio::test]
    async fn only_the_first_waiter_watches_and_hands_the_watch_on() {
        let waiters = Waiters::default();
        let (first, _) = waiters.join("k", Shape::Lock);
        let (second, _) = waiters.join("k", Shape::Lock);
        let (third, _) = waiters.join("k", Shape::Lock);
        assert!(waiters.is_first("k", &first));
        assert!(!waiters.is_first("k", &second));
        let until = Instant::now() + Duration::from_secs(1);
        waiters.hand_over(&first, until);
        waiters.leave("k", &first, || {});
        let handed = tokio::time::timeout(Duration::from_millis(20), second.woken()).await;
        assert_eq!(handed.ok(), Some(Wake::WatchUntil(until)));
        assert!(waiters.is_first("k", &second));
        assert!(
            !is_woken(&third).await,
            "the others go on waiting for a release"
        );
    }

    #[tokio::test]
    async fn a_first_waiter_that_leaves_without_handing_over_wakes_the_next_to_look() {
        let waiters = Waiters::default();
        let (first, _) = waiters.join("k", Shape::Lock);
        let (second, _) = waiters.join("k", Shape::Lock);
        waiters.leave("k", &first, || {});
        assert!(is_woken(&second).await);
    }

    /// Found by review: the watch was handed to the waiter behind when `hand_over` ran, not
    /// when the first left; one that joined or left in between ended with nobody watching.
    #[tokio::test]
    async fn the_watch_reaches_whoever_is_first_when_the_watcher_leaves() {
        let waiters = Waiters::default();
        // A lone waiter hands over; another joins before it leaves.
        let (alone, _) = waiters.join("k", Shape::Lock);
        let until = Instant::now() + Duration::from_secs(1);
        waiters.hand_over(&alone, until);
        let (joined, _) = waiters.join("k", Shape::Lock);
        waiters.leave("k", &alone, || {});
        let handed = tokio::time::timeout(Duration::from_millis(20), joined.woken()).await;
        assert_eq!(handed.ok(), Some(Wake::WatchUntil(until)));
        // The waiter right behind leaves between the hand-over and the leaving.
        let (behind, _) = waiters.join("k", Shape::Lock);
        let (last, _) = waiters.join("k", Shape::Lock);
        waiters.hand_over(&joined, until);
        waiters.leave("k", &behind, || {});
        waiters.leave("k", &joined, || {});
        let handed = tokio::time::timeout(Duration::from_millis(20), last.woken()).await;
        assert_eq!(handed.ok(), Some(Wake::WatchUntil(until)));
    }

    /// Found by review: a grant given back for want of replica acknowledgements announces its
    /// owner token's release, and the retry under the same token announces it again when it is
    /// released: without a quorum, both wake a waiter.
    #[tokio::test]
    async fn without_a_quorum_every_announcement_wakes() {
        let waiters = Waiters::default();
        let (waiter, _) = waiters.join("k", Shape::Lock);
        waiters.wake_one("k", Some(b"token-a"));
        assert!(is_woken(&waiter).await);
        waiters.wake_one("k", Some(b"token-a"));
        assert!(
            is_woken(&waiter).await,
            "the second release of one token woke nobody"
        );
    }

    #[tokio::test]
    async fn a_release_outranks_a_handed_watch() {
        let waiters = Waiters::default();
        let (first, _) = waiters.join("k", Shape::Lock);
        let (second, _) = waiters.join("k", Shape::Lock);
        waiters.hand_over(&first, Instant::now() + Duration::from_secs(5));
        waiters.leave("k", &first, || {});
        waiters.wake_one("k", None);
        assert!(
            is_woken(&second).await,
            "the release must not be lost to the watch"
        );
    }

    #[tokio::test]
    async fn releases_of_other_keys_wake_nobody() {
        let waiters = Waiters::default();
        let (a, _) = waiters.join("k", Shape::Lock);
        waiters.wake_one("other", None);
        assert!(!is_woken(&a).await);
    }
}
