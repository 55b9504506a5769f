//! Distributed locks on Redis that are safe by construction.
//!
//! # The attribute
//!
//! `#[distributed_lock]` makes every call of an `async fn` run its body while holding a lock
//! named after the call's arguments, in every process that shares the lock server:
//!
//! ```
//! use lock_runtime::{LockError, LockManager, distributed_lock};
//!
//! /// One order per user at a time.
//! #[distributed_lock(key = "order:<user_id>", ttl = "30s", wait = "5s")]
//! async fn place_order(user_id: u64) -> Result<u64, LockError> {
//!     // Runs while this process holds the lock `order:<user_id>`.
//!     Ok(lock_runtime::current().map_or(0, |lock| lock.fencing_token()))
//! }
//!
//! #[tokio::main]
//! async fn main() -> Result<(), LockError> {
//!     // redis://127.0.0.1:6379 in production; memory:// runs anywhere.
//!     let locks = LockManager::connect("memory://").await?;
//!     // What the attribute uses; without it a locked call fails with LockError::Config.
//!     lock_runtime::set_global_default(locks.clone())?;
//!     let token = place_order(7).await?;
//!     assert!(token > 0);
//!     locks.shutdown().await // on SIGTERM too: releases what is still held
//! }
//! ```
//!
//! The key is a template: `<name>` is the `Display` of the parameter `name`, `<self.field>` and
//! `<param.field>` follow fields; it is checked against the parameters at compile time. The
//! function must be `async` and return `Result<T, E>` with `E: From<LockError>`. Options, with
//! their defaults:
//!
//! * `key = "..."` (required), or `keys = [..]`: several locks at once, all or nothing;
//! * `ttl = "30s"`: the lease;
//! * `wait = "0s"`: try once, then [`LockError::Busy`];
//! * `watchdog = true`: renew every `ttl / 3`;
//! * `on_lease_lost = "abort"` (or `"continue"`);
//! * `hold_at_least` and `max_hold`: durations, none by default;
//! * `fair = false`: `true` serves waiters in the order they came;
//! * `permits = N`: a semaphore of N permits instead of a lock;
//! * `mode = "read" | "write"`: a read-write lock instead of a lock;
//! * `deadlock = "fail" | "wait"`: whether a wait that is part of a deadlock gives up (see
//!   [below](#deadlocks-between-nested-sections)); unset, [`LockManagerBuilder::deadlock`]
//!   decides, itself `"wait"` unless set;
//! * `allow_long_ttl = false`: `true` accepts a `ttl` over one day;
//! * `manager = expr`: default, the one given to [`set_global_default`];
//! * `crate = "path"`: default `"::lock_runtime"`.
//!
//! [`distributed_lock`] has the details.
//!
//! # Dependencies
//!
//! The locks run on [tokio](https://docs.rs/tokio) (1.47 or later): lock-runtime needs a tokio
//! runtime to be running wherever a lock is taken, and uses its `rt`, `sync`, `time` and
//! `macros` features. A binary also needs tokio's `macros` and `rt-multi-thread` features for
//! `#[tokio::main]`:
//!
//! ```toml
//! [dependencies]
//! lock-runtime = { path = "../lock-runtime/lock-runtime" } # not on crates.io yet: path or git
//! tokio = { version = "1.47", features = ["macros", "rt-multi-thread"] }
//! ```
//!
//! Rust 1.88 or later. Cargo features, all off by default:
//!
//! * `tls`: `rediss://`, `rediss+cluster://`, `rediss+sentinel://` and `redlocks://`, with
//!   rustls: the system's trust store, or a private CA and a client certificate given with
//!   [`TlsConfig`] (or named in the URL, `?tls_ca=PATH&tls_cert=PATH&tls_key=PATH`).
//! * `metrics`: acquire, wait, hold, renewal, lease-loss and release metrics through the
//!   [`metrics`](https://docs.rs/metrics) facade, labelled by key template; the application
//!   installs the exporter.
//! * `testing`: the `testing` module, for your tests (enable it in `[dev-dependencies]`).
//! * `conformance`: the `conformance` module, a kit that checks a lock store's behaviour
//!   (mutual exclusion, expiry, fencing, wake-up, cancellation, shapes) across managers.
//!
//! # Reading these docs
//!
//! On docs.rs every feature is documented, and an item that needs one says which. `cargo doc`
//! in your own crate documents lock-runtime with the features of your `[dependencies]` only,
//! so the `testing` module, enabled in `[dev-dependencies]`, is missing there; from your
//! crate's directory, this documents it too:
//!
//! ```text
//! cargo doc --open --features lock-runtime/testing
//! ```
//!
//! (`cargo doc -p lock-runtime --features testing` is refused outside lock-runtime's own
//! workspace; inside it, `cargo doc -p lock-runtime --all-features --open` shows every
//! feature.)
//!
//! # Testing your code
//!
//! The paths a service never meets in development (a lease lost mid-order, a lock busy past
//! `wait`, Redis failing) are scripted with the `testing` feature's `testing::TestLocks`: a
//! deployment of its own per test, in memory or on a real server, with faults per key or key
//! template (busy answers, transient or permanent errors, lost leases, slow or failing
//! releases, phantom holders), a record of what was taken in which order with which fencing
//! tokens, and one-line assertions. Under `#[tokio::test(start_paused = true)]` leases, waits
//! and renewals take no wall time. `TestLocks::scope` makes its manager the default of
//! `#[distributed_lock]` for one test without `set_global_default`:
//!
//! ```toml
//! [dev-dependencies]
//! lock-runtime = { path = "../lock-runtime/lock-runtime", features = ["testing"] }
//! ```
//!
//! ```ignore
//! #[tokio::test(start_paused = true)]
//! async fn an_order_gives_up_when_the_lock_stays_busy() {
//!     let kit = lock_runtime::testing::TestLocks::new();
//!     kit.on("order:<user_id>").busy(u32::MAX, Duration::from_secs(30));
//!     let err = kit.scope(place_order(7)).await.expect_err("busy");
//!     assert!(err.is_busy());
//!     kit.assert_never_acquired("order:7");
//! }
//! ```
//!
//! # Without the attribute
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), lock_runtime::LockError> {
//! use std::time::Duration;
//! use lock_runtime::{LockManager, LockOptions};
//!
//! // redis://127.0.0.1:6379 in production; memory:// runs anywhere.
//! let locks = LockManager::connect("memory://").await?;
//! let options = LockOptions::new()
//!     .ttl(Duration::from_secs(30))
//!     .wait(Duration::from_secs(5));
//!
//! let guard = locks.lock("order:42", options).await?;
//! let token = guard.fencing_token(); // pass to the storage you protect
//! # let _ = token;
//! guard.release().await?;
//! # Ok(())
//! # }
//! ```
//!
//! # What a lock gives you
//!
//! * **Mutual exclusion while the lease is held.** Acquire, renew and release are each one
//!   atomic step on the server (a transaction, a compare-and-delete or a script), checked
//!   against an unguessable owner token (UUID v4): a lock is never released or renewed by anyone
//!   but its owner.
//! * **A lease, kept alive by a watchdog.** A held lock is renewed every `ttl / 3`; if its holder
//!   dies, it expires after `ttl`. When renewal proves the lock gone, or no renewal succeeded
//!   before the lease would end, the holder is told *before* the server-side expiry
//!   ([`LockGuard::lost`], [`CurrentLock::is_held`]) and a locked section is aborted by default.
//! * **Fencing tokens.** Each acquisition returns a number strictly greater than every token
//!   handed out before it for the same key on the same server, whatever the server's clock does:
//!   the next value of a counter kept per cluster slot
//!   ([`inspect::fence_counter_key`]), which never expires and also serves the semaphores and
//!   read-write locks of the slot, so a released lock, semaphore or read-write lock leaves no key.
//!   A counter that is lost (flushed, evicted, a restart without persistence) starts again from
//!   the server's time in µs, above every earlier token unless that clock stepped back. After a
//!   failover to a replica that had not yet received the last acquisitions, a token those
//!   acquisitions got can be handed out again (`wait_for_replicas` narrows this).
//! * **Release that cannot be skipped.** Released when the section ends (value, error or panic);
//!   a dropped guard (cancellation) stops renewal at once and releases in the background.
//!
//! # What a lock does not give you
//!
//! A lease lock is not a consensus lock. A holder paused longer than its lease (a GC pause, a
//! stopped VM, a network partition) can still believe it holds the lock after it expired and
//! someone else took it; the lost-lease signal narrows this window but cannot close it, since a
//! paused process cannot react. Redis replication is asynchronous, so a failover can lose a lock
//! that was just taken. Where correctness matters, make the protected resource check the
//! [fencing token](LockGuard::fencing_token) and refuse smaller ones.
//!
//! # Leader election
//!
//! [`LockManager::elect`] campaigns for a name among processes and keeps campaigning: the
//! [`Leadership`] it returns says whether this process leads, resolves when it is elected and
//! when its term ends, and gives each term's fencing token. A term is a holding of the lock of
//! that name, with everything above, and nothing more.
//!
//! The election can be watched and steered: [`LockManager::leader`] says who leads
//! ([`LeaderInfo`]: holder, host, pid, app, the term's token, since when),
//! [`LockManager::observe`] wakes at each change of leader ([`LeaderWatch`]),
//! [`LockManager::candidates`] lists who campaigns, [`Leadership::resign`] hands the leadership
//! on and keeps campaigning, [`ElectionOptions::priority`] is honoured whenever the leadership
//! changes hands (never by preempting a leader), and a restarted leader resumes its unexpired
//! term with the same token ([`Leadership::current_term`], [`LockManager::resume_election`]).
//! Candidates and priority need a store that keeps records (memory, every Redis deployment);
//! `docs/ELECTION.md` gives each part's guarantee and limit.
//!
//! # Several keys at once
//!
//! [`LockManager::lock_all`] (or `#[distributed_lock(keys = [..])]`) takes several locks, all or
//! nothing, in one canonical order so that callers with overlapping keys never deadlock; the
//! [`MultiGuard`] it returns holds each key as an ordinary lock, with its own fencing token and
//! lost-lease signal. The keys are not taken at one instant, and no token fences the set.
//!
//! # Deadlocks between nested sections
//!
//! A task that holds a lock while it waits for another can be part of a deadlock: two tasks
//! that take `account:<from>` and then `account:<to>` in nested sections, in opposite orders,
//! wait for each other until `wait` runs out. A manager finds such a cycle, among its own
//! waiters from what it holds and across processes from the waits that waiting calls publish
//! on the server, and logs it once at `WARN` (`deadlock among lock waiters`, with each
//! member's keys, host, pid and app); `lockctl deadlocks` lists the cycles that stand.
//!
//! What a call then does is its [`Deadlock`] choice: [`LockOptions::deadlock`],
//! `deadlock = "fail"` / `"wait"` in the attribute, or for calls that set none
//! [`LockManagerBuilder::deadlock`]. With [`Deadlock::Wait`] (the default) it keeps waiting
//! until `wait` runs out, as without detection, and its [`LockError::Busy`] then names the
//! cycle ([`LockError::deadlock_cycle`]). With [`Deadlock::Fail`], the cycle's youngest
//! wait among the members that chose `Fail` gives up within about a second with
//! [`LockError::Deadlock`], which names the [`DeadlockCycle`]; the others go on once its task
//! lets its locks go.
//!
//! ```
//! # async fn credit(locks: &lock_runtime::LockManager) -> Result<(), lock_runtime::LockError> {
//! use std::time::Duration;
//! use lock_runtime::{Deadlock, LockError, LockOptions};
//!
//! let options = LockOptions::new().wait(Duration::from_secs(10)).deadlock(Deadlock::Fail);
//! match locks.lock("account:3", options).await {
//!     Ok(guard) => guard.release().await?,
//!     Err(LockError::Deadlock { cycle, .. }) => {
//!         // Let go of what this task holds (return the error), and retry later.
//!         let _ = cycle.members.len();
//!     }
//!     Err(other) => return Err(other),
//! }
//! # Ok(())
//! # }
//! ```
//!
//! An uncontended acquire costs no server call for this, and neither does the wait of a task
//! that holds nothing else until it has waited 250 ms. Followed: the waits of plain locks
//! (`keys = [..]` too) of one manager and key prefix. Not followed: semaphores and read-write
//! locks, locks the task holds through another manager or prefix, calls that never wait, and
//! cycles longer than 32 calls. If no member chose `Fail`, a cycle is only reported.
//!
//! # Semaphore
//!
//! [`LockManager::semaphore`] (or `permits = N` in the attribute) takes one of N permits of a
//! name instead of its lock: at most N holders at any moment, each permit a lease held through
//! a [`LockGuard`] with the lock's guarantees above (owner token, watchdog, lost-lease signal,
//! fencing, release on drop). Not on Redlock, whose independent masters could admit more.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), lock_runtime::LockError> {
//! use lock_runtime::{LockManager, LockOptions};
//!
//! let locks = LockManager::memory();
//! let permit = locks.semaphore("exports", 3, LockOptions::new()).await?;
//! assert_eq!(permit.permits(), Some(3));
//! permit.release().await?;
//! # Ok(())
//! # }
//! ```
//!
//! # Read-write lock
//!
//! [`LockManager::read_lock`] and [`LockManager::write_lock`] (or `mode = "read"` /
//! `mode = "write"` in the attribute) take the read-write lock of a name: many readers or one
//! writer, each share or hold a lease through a [`LockGuard`] with the lock's guarantees above.
//! A waiting writer goes before readers that come after it, and its fencing token is above
//! every token handed out before it. Upgrading from read to write in one task fails at once.
//! Not on Redlock.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), lock_runtime::LockError> {
//! use lock_runtime::{LockManager, LockOptions, Mode};
//!
//! let locks = LockManager::memory();
//! let share = locks.read_lock("catalog", LockOptions::new()).await?;
//! assert_eq!(share.mode(), Mode::Read);
//! share.release().await?;
//! # Ok(())
//! # }
//! ```
//!
//! # Seen from outside
//!
//! [`LockManager::inspect`] lists, shows and force-releases the locks of a manager's store
//! whatever the store, as the `lockctl` command line does (see [`store::Inspect`]). On Redis a
//! lock is one string key that `GET` shows (holder host, pid, app, since when); the [`inspect`]
//! module names that layout for tools that read the keys themselves.
#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(missing_docs)]

mod acquire;
mod backend;
mod background;
mod backoff;
mod blocker;
mod builder;
mod client;
#[cfg(feature = "conformance")]
#[cfg_attr(docsrs, doc(cfg(feature = "conformance")))]
pub mod conformance;
mod control;
mod current;
mod cycle;
mod deadlock;
mod deployment;
mod election;
mod error;
pub mod fence;
mod guard;
pub mod inspect;
mod key;
mod lease;
mod manager;
mod metrics;
mod multi;
mod notices;
mod options;
mod pending;
#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
pub mod postgres;
mod protocol;
mod release_request;
mod section;
mod shape;
mod shown;
pub mod store;
#[cfg(feature = "testing")]
#[cfg_attr(docsrs, doc(cfg(feature = "testing")))]
pub mod testing;
mod tls;
mod url;
mod waiters;
mod watchdog;

#[doc(hidden)]
#[path = "private.rs"]
pub mod __private;

pub use backend::redis::replicas::ReplicaShortage;
// rustc names a trait in an error by its shortest public path, and by its bare name when that
// is unique among the crate roots it can see: re-exported here, an unmet check reads
// "the trait `KeyPart` is not implemented", never `lock_runtime::__private::KeyPart`.
#[doc(hidden)]
pub use __private::{FromLockError, KeyPart, LockedReturn};

pub use acquire::SLOW_ACQUIRE;
pub use blocker::Blocker;
pub use builder::LockManagerBuilder;
pub use current::{CurrentLock, current, current_all};
pub use cycle::{CycleMember, DeadlockCycle};
pub use election::{
    Candidate, ElectionInfo, ElectionOptions, LeaderInfo, LeaderWatch, Leadership, Term,
};
pub use error::{BoxError, LockError, LostReason};
pub use guard::LockGuard;
pub use lock_macro::distributed_lock;
pub use manager::{LockManager, global_default, set_global_default};
pub use multi::{MultiGuard, MultiReleaseError};
pub use options::{Deadlock, LockOptions, MAX_TTL, MIN_TTL, OnLeaseLost};
pub use release_request::ReleaseRequest;
pub use shape::Mode;
pub use tls::TlsConfig;
