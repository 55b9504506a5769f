//! The store seam: where a lock lives, in the lock's own words.
//!
//! A [`LockManager`](crate::LockManager) keeps its locks in a [`Store`]. Memory and every Redis
//! deployment are stores; a store of your own (a database table, a consensus service, a file)
//! is one more implementation of the same trait, given to
//! [`LockManagerBuilder::store`](crate::LockManagerBuilder::store). The engine (acquisition
//! and its retries, the watchdog that renews leases, the guard's release, waiting for a busy
//! lock, the deadlock detector, election, several keys at once) speaks to the store only
//! through this trait.
//!
//! What a store must keep is small:
//!
//! - **A lock per [`Key`]**, held by one owner token for a lease (a [`Duration`]) judged by the
//!   store's own clock, never the client's. Acquire, renew and release are each one atomic step
//!   that checks the owner token ([`Store::acquire`], [`Store::renew`], [`Store::release`]).
//! - **A fencing token** per successful acquire ([`Acquire::Acquired`]): strictly greater than
//!   every token handed out for the same key before, also after the lock expired or was
//!   released.
//! - **An answer when busy** ([`Acquire::Busy`]): how long the holder's lease has left, and,
//!   where the store knows it, an opaque [`HolderId`] and what the holder recorded about itself
//!   ([`Blocker`]).
//!
//! Everything else is a capability the store declares, each with a safe default: which shapes it
//! holds besides the plain lock ([`Store::supports`]: semaphores, read-write locks), whether it
//! tells waiters of releases ([`Store::notifies`], delivered through [`Changes`]), whether it
//! keeps a fair line of waiters ([`Store::fair`]), whether it can hand a lock straight to a
//! waiter ([`Store::hands_off`]), and whether it keeps the published waits the deadlock
//! detector reads ([`Store::waits`]). Failures are [`StoreError`]s, transient (sending the
//! request again may help) or permanent.
//!
//! Its inspection side ([`Store::inspect`], an [`Inspect`]) lists, shows and force-releases
//! locks in the same words, for operators' tools.
//!
//! The conformance kit (`lock_runtime::conformance`, feature `conformance`) checks a store
//! against this contract; `docs/STORES.md` walks through writing one.
//!
//! ```
//! use std::time::Duration;
//! use lock_runtime::store::{Acquire, Key, Shape};
//!
//! // The key the engine hands a store for `lock("order:42")` under the default prefix.
//! let key = Key::new("lock:", "order:42", Shape::Lock).unwrap();
//! assert_eq!(key.key(), "order:42");
//! assert_eq!(key.shape(), Shape::Lock);
//! // A unique name per key and shape, for the store to keep the lock under.
//! assert_ne!(key.name(), Key::new("lock:", "order:42", Shape::Read).unwrap().name());
//!
//! // What a store answers when another owner holds the lock for 700 ms more.
//! let busy = Acquire::busy(Some(Duration::from_millis(700)), false);
//! assert!(matches!(busy, Acquire::Busy { .. }));
//! ```

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Weak};
use std::time::Duration;

pub use crate::blocker::Blocker;
pub use crate::key::Key;
pub use crate::lease::Lease;
pub use crate::protocol::waits::WaitsUpdate;
pub use crate::shape::Shape;

use crate::waiters::Waiters;

pub(crate) mod delay;
pub(crate) mod error;
pub(crate) mod forward;
mod inspect;
mod notice;
pub(crate) mod scheme;

pub use error::StoreError;
pub use inspect::{
    HolderInfo, Holds, InLine, Inspect, Kind, LockInfo, LockState, Recorded, Unlocked, WaitRecord,
};
pub(crate) use notice::Hears;
pub use notice::{MAX_TEXT, Notice, NoticeKind};
pub use scheme::register_scheme;

/// A boxed future, as the trait's methods return them (the trait is used as `dyn Store`).
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What an acquire asks besides the lock itself.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Ask {
    /// The caller has waited for this lock (others of its process may still wait): its
    /// release is then announced even if nobody else is told the lock is busy.
    pub waited: bool,
    /// Whether a busy lock puts the caller in the line of fair waiters.
    pub line: Line,
    /// The caller waits if the lock is busy (even where it takes no place in a line): a busy
    /// lock must then announce its release.
    pub waits: bool,
    /// When this attempt began (wall clock, ms since the Unix epoch): what a store that records
    /// its holders keeps as the time the lock was asked for.
    pub since_ms: u64,
    /// The lock's label ([`LockOptions::label`](crate::LockOptions::label): the attribute's
    /// key template, or the label given), if it has one: the bounded name a layer that
    /// measures or traces store calls files them under. Never the rendered key.
    pub label: Option<&'static str>,
    /// The lock's lock-delay ([`LockOptions::lock_delay`](crate::LockOptions::lock_delay)):
    /// how long past its lease a lock lost without a release is granted to nobody. A layer of
    /// the engine, around every store, adds it to the ttl before the store sees the acquire,
    /// so a store keeps the lock for both and need do nothing more. It is the part of the ttl
    /// that is not the holder's lease: a store that times its requests or a grant's validity
    /// by the lease (Redlock) counts `ttl - lock_delay`.
    pub lock_delay: Duration,
}

impl Ask {
    /// Whether a busy answer puts the caller in a line of fair waiters that exists.
    pub fn joins(&self) -> bool {
        self.line != Line::No
    }
}

/// Whether an acquire of a busy lock takes a place in the line of fair waiters. Nobody jumps a
/// line that exists, whichever they choose. A store that keeps no line ([`Store::fair`] says
/// no) treats every value as [`Line::No`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Line {
    /// The caller does not wait.
    #[default]
    No,
    /// The caller waits, and takes a place in line if fair waiters are in line already.
    IfAny,
    /// The caller waits in line (`fair = true`).
    Fair,
}

/// Who holds a busy lock, as an opaque number: equal for the same owner token wherever it is
/// read, different (but for a negligible chance) for different ones. Redlock compares the ids
/// its masters answer to see whether one owner holds a majority. Never an owner token.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct HolderId(u64);

impl HolderId {
    /// The id of the owner token `token`: the first 48 bits of its SHA-1 digest, as every
    /// store of this crate computes it (and as its Lua scripts do, to fit a Lua number).
    pub fn of_token(token: &str) -> HolderId {
        HolderId(crate::protocol::holder_id(token))
    }

    /// An id a store computed itself; 0 means no holder and is refused.
    pub fn from_raw(id: u64) -> Option<HolderId> {
        (id != 0).then_some(HolderId(id))
    }

    /// The number.
    pub fn get(self) -> u64 {
        self.0
    }
}

/// 12 hex digits, as `lockctl show` and [`LeaderInfo::holder_id`](crate::LeaderInfo) name a
/// holder.
///
/// ```
/// use lock_runtime::store::HolderId;
///
/// assert_eq!(HolderId::from_raw(0xab).expect("a holder").to_string(), "0000000000ab");
/// ```
impl std::fmt::Display for HolderId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&crate::protocol::holder_hex(self.0))
    }
}

/// The answer to an acquire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Acquire {
    /// Ours, with this fencing token.
    Acquired {
        /// Greater than every token handed out for this key before.
        fence: u64,
    },
    /// Held by someone else.
    Busy {
        /// About how long the holder's lease has left (`None`: the lock has no expiry). A
        /// waiter that hears of no release waits this long at most before it asks again.
        remaining: Option<Duration>,
        /// Who holds it, where the store knows one holder.
        holder: Option<HolderId>,
        /// The caller has a place in the line of fair waiters, which it must keep by asking
        /// again within its lease, and leave ([`Store::leave`]) if it stops waiting.
        in_line: bool,
        /// What the holder recorded about itself (a plain lock whose holder recorded it).
        blocker: Option<Box<Blocker>>,
    },
}

impl Acquire {
    /// A busy answer that names no holder: one of several holders (a semaphore, a read-write
    /// lock), or a store that records none.
    pub fn busy(remaining: Option<Duration>, in_line: bool) -> Acquire {
        Acquire::Busy {
            remaining,
            holder: None,
            in_line,
            blocker: None,
        }
    }
}

/// The answer to a release.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Release {
    /// The lock was ours and is released (or left to expire after the asked `keep`).
    Released,
    /// Someone else holds the lock now (or the key holds other data): it was left untouched.
    NotOwner,
    /// Nothing at the key: the lease had run out.
    Gone,
}

/// The answer to a hand-off (see [`Store::hand_off`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HandOff {
    /// The waiter holds the lock now, with this fencing token.
    Handed {
        /// Greater than every token handed out for this key before.
        fence: u64,
    },
    /// Someone else was told the lock is busy, so it was released (and announced) instead.
    Released,
    /// As for a release.
    NotOwner,
    /// As for a release.
    Gone,
}

/// The answer to a steal (see [`Store::steal`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stolen {
    /// The stealer holds the lock now, with this fencing token: greater than every token
    /// handed out for this key before, the victim's included.
    pub fence: u64,
    /// Who held it until then (told by a [`NoticeKind::Stolen`] notice), if anyone did and the
    /// store knows who.
    pub victim: Option<HolderId>,
}

/// One lease to renew. It shares the lease rather than copying its key and token: a batch may
/// hold ten thousand of these at once.
#[derive(Clone)]
pub struct Renewal {
    pub(crate) lease: Arc<Lease>,
    pub(crate) ttl: Duration,
}

impl Renewal {
    /// The name of the key to renew ([`Key::name`]).
    pub fn key(&self) -> &str {
        &self.lease.stored.lock
    }

    /// The key to renew.
    pub fn lock_key(&self) -> &Key {
        &self.lease.stored
    }

    /// The owner token that must hold it.
    pub fn token(&self) -> &str {
        &self.lease.token
    }

    /// The lease length to renew it for, from now by the store's clock: the lease and its
    /// lock-delay, where the lock has one ([`Lease::ttl`] is the lease's own).
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// The lease itself.
    pub fn lease(&self) -> &Lease {
        &self.lease
    }
}

/// Where a renewal batch's answers go as they arrive: `(indices into the batch, the answer
/// for each of them, or why that part of the batch got none)`. See [`Store::renew`].
pub type Booking<'a> = &'a (dyn Fn(&[usize], Result<Vec<Option<bool>>, StoreError>) + Send + Sync);

/// Every index of `batch`: for a store that answers the whole batch at once.
pub fn whole(batch: &[Renewal]) -> Vec<usize> {
    (0..batch.len()).collect()
}

/// How a store tells the managers over it that a key changed, so that their waiters try again
/// at once rather than at the end of the holder's lease. A store that [`notifies`] calls
/// [`Changes::released`] after every release and expiry it sees (an expiry may also go unsaid:
/// waiters then wait out the lease the busy answer gave).
///
/// Given to the store by [`Store::attach`], once per manager built over it.
///
/// [`notifies`]: Store::notifies
///
/// It does not keep its manager alive: once the manager and its clones are dropped,
/// [`is_gone`](Changes::is_gone) says so, and a store that keeps a list of them may drop it.
#[derive(Clone)]
pub struct Changes {
    waiters: Weak<Waiters>,
    notices: Weak<dyn notice::Hears>,
}

impl Changes {
    pub(crate) fn new(waiters: &Arc<Waiters>, notices: Weak<dyn notice::Hears>) -> Changes {
        Changes {
            waiters: Arc::downgrade(waiters),
            notices,
        }
    }

    /// A [`Notice`] was heard (see [`Store::announce`]): the manager acts on it if it concerns
    /// one of its leases or elections, and ignores it otherwise. Every manager attached hears
    /// every notice, its own included.
    pub fn heard(&self, notice: &Notice) {
        if let Some(notices) = self.notices.upgrade() {
            notices.heard(notice);
        }
    }

    /// The lock named `key` ([`Key::name`]) was released or expired: a waiter for it tries
    /// again.
    pub fn released(&self, key: &str) {
        if let Some(waiters) = self.waiters.upgrade() {
            waiters.wake_one(key, None);
        }
    }

    /// Releases may have gone unsaid (the store's notification channel broke): every waiter
    /// tries again once.
    pub fn missed(&self) {
        if let Some(waiters) = self.waiters.upgrade() {
            waiters.wake_all();
        }
    }

    /// Whether anyone of this manager waits for `key` now (a store may skip work for keys
    /// nobody waits for).
    pub fn awaited(&self, key: &str) -> bool {
        self.waiters
            .upgrade()
            .is_some_and(|waiters| waiters.has_line(key))
    }

    /// Whether the manager it tells is gone (dropped with all its clones): nothing told here
    /// reaches anyone any more. (Its waiters may live on, shared with other managers of a
    /// `memory://<name>` table, which have a `Changes` of their own.)
    pub fn is_gone(&self) -> bool {
        self.notices.strong_count() == 0 || self.waiters.strong_count() == 0
    }
}

impl std::fmt::Debug for Changes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Changes")
    }
}

/// A store that holds locks. Implementations never block the thread and never panic on I/O:
/// every failure is a [`StoreError`].
///
/// Only [`describe`](Store::describe), [`server`](Store::server),
/// [`acquire`](Store::acquire), [`renew`](Store::renew) and [`release`](Store::release) are
/// required; each other method is a capability with a default that a store without it keeps.
pub trait Store: Send + Sync + 'static {
    /// What this is, for the startup log and messages: `redis 127.0.0.1:6379`, `memory`.
    fn describe(&self) -> &str;

    /// The server named in error messages (host and port, never credentials).
    fn server(&self) -> &str;

    /// One atomic step: take the lock `key` for `token` for `ttl` (by the store's clock) with
    /// a new fencing token, or say it is busy (see [`Ask`] for the rest). Asking again with
    /// the token that holds the lock takes it again (a retry after a lost answer) and renews
    /// it; the fencing token it answers may be the same or greater.
    fn acquire<'a>(
        &'a self,
        key: &'a Key,
        token: &'a str,
        ttl: Duration,
        ask: Ask,
    ) -> BoxFuture<'a, Result<Acquire, StoreError>>;

    /// Where an acquire of `key` waits before it is sent, outside its request timeout: `None`
    /// (it is sent at once) but in a layer that holds requests back, such as the `testing`
    /// kit's gate.
    fn gate<'a>(&'a self, key: &'a Key) -> Option<BoxFuture<'a, ()>> {
        let _ = key;
        None
    }

    /// Whether fair waiting (`fair = true`) works here: the store keeps a line of waiters and
    /// grants a freed lock to the first in line ([`Line`]). Without it, `fair = true` is refused.
    fn fair(&self) -> bool {
        false
    }

    /// Whether keys of `shape` can be held here, or why not. Every store holds plain locks; a
    /// semaphore needs one place that counts the holders, a read-write lock one place that
    /// sees the readers and the writer. The default holds the plain lock only.
    fn supports(&self, shape: Shape) -> Result<(), &'static str> {
        match shape {
            Shape::Lock => Ok(()),
            Shape::Semaphore { .. } => Err("this store does not keep semaphores"),
            Shape::Read | Shape::Write => Err("this store does not keep read-write locks"),
        }
    }

    /// One atomic step: `token` leaves the line of fair waiters for `key`; if the lock was
    /// freed for it, it is freed for the next in line. Nothing to do where nobody waits in line.
    fn leave<'a>(&'a self, key: &'a Key, token: &'a str) -> BoxFuture<'a, Result<(), StoreError>> {
        let _ = (key, token);
        Box::pin(std::future::ready(Ok(())))
    }

    /// Renews a batch, one round trip per node or group where the store has several, and hands
    /// each group's answers to `book` as soon as they arrive: per listed index into `batch`,
    /// `Some(true)` if renewed for its [`Renewal::ttl`], `Some(false)` if the token no longer
    /// holds it, `None` if no verdict (the lease is tried again); `Err` when that group got no
    /// answer at all. Every index is booked at most once. The future ends when every group has
    /// been booked; the caller may drop it sooner, and then the groups not yet booked simply
    /// never are. A store that answers the whole batch at once books [`whole`] once.
    fn renew<'a>(&'a self, batch: &'a [Renewal], book: Booking<'a>) -> BoxFuture<'a, ()>;

    /// One atomic step: release the lock if `token` holds it; with `keep > 0` leave it held
    /// that much longer and let it expire then (`hold_at_least`).
    fn release<'a>(
        &'a self,
        key: &'a Key,
        token: &'a str,
        keep: Duration,
    ) -> BoxFuture<'a, Result<Release, StoreError>>;

    /// Releases a held lease as [`release`](Store::release) does; a store that can release a
    /// lock nobody waited for more cheaply, knowing what its acquire wrote, does so here.
    fn release_lease<'a>(
        &'a self,
        lease: &'a Lease,
        keep: Duration,
    ) -> BoxFuture<'a, Result<Release, StoreError>> {
        self.release(&lease.stored, &lease.token, keep)
    }

    /// Whether [`hand_off`](Store::hand_off) works here: one atomic step can move a lock from
    /// one owner to the next (not Redlock, whose majority would need every master to agree;
    /// not where grants wait for replicas).
    fn hands_off(&self) -> bool {
        false
    }

    /// One atomic step: if the lease `from` holds its lock and nobody else was told it is busy,
    /// give it to the lease `to` (same key) for its ttl at once, with a new fencing token;
    /// otherwise release it as [`release`](Store::release) does. Only called where
    /// [`hands_off`](Store::hands_off).
    fn hand_off<'a>(
        &'a self,
        from: &'a Lease,
        to: &'a Lease,
    ) -> BoxFuture<'a, Result<HandOff, StoreError>> {
        let _ = (from, to);
        Box::pin(std::future::ready(Err(StoreError::permanent(format!(
            "{} cannot hand a lock over",
            self.describe()
        )))))
    }

    /// Whether releases are told to the [`Changes`] given to [`attach`](Store::attach): if
    /// not, every waiter waits out the lease its busy answer gave, then asks again.
    fn notifies(&self) -> bool {
        false
    }

    /// A manager is built over this store: `changes` is where it hears of releases. Called
    /// once per manager; a store shared by several managers tells each of them.
    fn attach(&self, changes: &Changes) {
        let _ = changes;
    }

    /// Start telling releases of the key named `key` ([`Key::name`]); resolves once they are
    /// told, so that an acquire sent after it cannot miss a release. Stores that tell every
    /// release anyway keep the default.
    fn watch<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<(), StoreError>> {
        let _ = key;
        Box::pin(std::future::ready(Ok(())))
    }

    /// Stop telling releases of `key` to this process. Never blocks.
    fn unwatch(&self, key: &str) {
        let _ = key;
    }

    /// Whether this store carries [`Notice`]s: [`announce`](Store::announce) tells one to every
    /// manager attached to the store, in every process, through [`Changes::heard`]. Without it,
    /// a holder hears of a request to let go never, and of a steal at its next renewal; and
    /// an election's followers learn of a new leader only by reading the lock.
    fn announces(&self) -> bool {
        false
    }

    /// Tells `notice` to every manager attached to this store, this one included, through
    /// [`Changes::heard`]; resolves once the store has taken it. Delivery is at most once and
    /// as prompt as the store's servers allow: a manager whose connection is down when it is
    /// told misses it. Only called where [`announces`](Store::announces).
    fn announce<'a>(&'a self, notice: &'a Notice) -> BoxFuture<'a, Result<(), StoreError>> {
        let _ = notice;
        Box::pin(std::future::ready(Err(StoreError::permanent(format!(
            "{} carries no notices",
            self.describe()
        )))))
    }

    /// Whether [`steal`](Store::steal) works here.
    fn steals(&self) -> bool {
        false
    }

    /// One atomic step: takes the plain lock `key` for `token` for `ttl` (by the store's
    /// clock) whoever holds it, with a new fencing token greater than every token before, and
    /// tells its previous holder with a [`NoticeKind::Stolen`] notice whose text is `from`,
    /// in the same step where the store can (else right after it), so that the victim's lease
    /// is lost within one round trip rather than at its next renewal. A fair line of waiters,
    /// if any, keeps its places. Only called where [`steals`](Store::steals), and only for
    /// [`Shape::Lock`].
    fn steal<'a>(
        &'a self,
        key: &'a Key,
        token: &'a str,
        ttl: Duration,
        from: &'a str,
    ) -> BoxFuture<'a, Result<Stolen, StoreError>> {
        let _ = (key, token, ttl, from);
        Box::pin(std::future::ready(Err(StoreError::permanent(format!(
            "{} cannot steal a lock",
            self.describe()
        )))))
    }

    /// Whether this store keeps the published waits of [`waits`](Store::waits). Without
    /// them, deadlock detection sees the waits of each process alone.
    fn keeps_waits(&self) -> bool {
        false
    }

    /// One atomic step on the record of published waits named `key`: writes, removes and reads
    /// records as `update` says, and answers the records read, by waiter id. The deadlock
    /// detector publishes what each waiting call waits for and holds here, so that processes
    /// sharing the store see each other's waits; records are opaque text to the store. The
    /// default keeps none ([`keeps_waits`](Store::keeps_waits) says no): detection then sees
    /// only the waits of its own process, and says so once in the log. Only called where
    /// [`keeps_waits`](Store::keeps_waits).
    fn waits<'a>(
        &'a self,
        key: &'a str,
        update: &'a WaitsUpdate,
    ) -> BoxFuture<'a, Result<Vec<(String, String)>, StoreError>> {
        let _ = (key, update);
        Box::pin(std::future::ready(Err(StoreError::permanent(format!(
            "{} keeps no published waits",
            self.describe()
        )))))
    }

    /// Whether the next attempt of an acquire that was busy or failed may send the same owner
    /// token. Where it may, a retry confirms a grant whose answer was lost. A store that gives
    /// back what a failed attempt took, possibly after that attempt returned, says no: a
    /// give-back that lands after the next attempt's grant under the same token would remove
    /// that grant.
    fn retry_with_same_token(&self) -> bool {
        true
    }

    /// The inspection side of this store ([`Inspect`]): what an operator's tool (`lockctl`)
    /// lists, shows and force-releases locks through. `None` (the default) for a store that
    /// cannot be inspected; a layer around a store passes its store's on.
    fn inspect(&self) -> Option<&dyn Inspect> {
        None
    }
}
