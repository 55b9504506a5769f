//! Procedural macro behind `lock_runtime::distributed_lock`. Depend on `lock-runtime`, not on
//! this crate: the runtime re-exports the attribute, and the generated code calls into it.
//!
//! The attribute is a pipeline: `attr` parses the options, `item` the fn, `validate` checks
//! them together (with `params` resolving the key template against the signature), `expand`
//! generates the locked fn, and `fallback` keeps the fn as written next to the errors when
//! something is wrong.

mod attr;
mod duration;
mod expand;
mod fallback;
mod item;
mod limits;
mod params;
mod permits;
mod suggest;
mod template;
mod types;
mod validate;

use proc_macro::TokenStream;

/// Runs an `async fn` while holding a distributed lock named after its arguments.
///
/// ```rust,ignore
/// use lock_runtime::{distributed_lock, LockError};
///
/// #[distributed_lock(key = "order:<user_id>", ttl = "30s", wait = "5s")]
/// async fn place_order(user_id: u64, voucher_id: u64) -> Result<OrderId, AppError> {
///     // runs while this process holds the Redis lock `order:<user_id>`
/// }
/// ```
///
/// Every call renders the key (`order:42`), acquires the lock, runs the body, and releases the
/// lock before returning. Two calls with the same key never run their bodies at the same time,
/// in any process or machine that shares the Redis deployment. When the lock cannot be taken
/// (busy past `wait`, Redis unreachable, lease lost with `on_lease_lost = "abort"`), the body
/// does not run or is stopped, and the fn returns the `lock_runtime::LockError` converted into
/// its own error type.
///
/// Supported forms at a glance: `async fn`s and methods with any receiver, `#[async_trait]`
/// methods, fns returning `impl Future` from a final `async move` block, `#[tokio::main]` /
/// `#[tokio::test]` / `#[instrument]` stacked above, options from `macro_rules!` fragments, and
/// `manager = self.locks` / `&self.locks` / `self.locks()` / a `&LockManager` parameter. Key
/// placeholders are `<name>`, never `{name}`: braces around a parameter's name are a compile
/// error, since they would make one lock for every call.
///
/// # Syntax
///
/// ```text
/// #[distributed_lock(key = "<template>", option = value, ...)]
/// ```
///
/// | option           | value                         | default       | meaning |
/// |------------------|-------------------------------|---------------|---------|
/// | `key`            | string template (required)    |               | the lock's name; see [Key templates](#key-templates) |
/// | `keys`           | list of string templates      |               | instead of `key`: several locks taken together, all or nothing; see [Several keys](#several-keys) |
/// | `ttl`            | duration string               | `"30s"`       | the lease: how long the lock outlives a crashed holder |
/// | `wait`           | duration string               | `"0s"`        | how long to wait for a busy lock; `"0s"` tries once |
/// | `permits`        | integer (or const expression) | none          | take one of this many permits of the semaphore named by the key instead of its lock: at most this many calls run at once; at least 1; not with `fair`; not on Redlock |
/// | `mode`           | `"read"` / `"write"`          | none          | take a read share or the write hold of the read-write lock named by the key instead of its lock: many readers at once or one writer; a waiting writer goes before readers that come after it; not with `permits`, `keys` or `fair`; not on Redlock |
/// | `fair`           | `true` / `false`              | `false`       | first come, first served across processes: waiting callers take the lock in the order they came, and a holder that asks again goes to the back (needs `wait`; not on Redlock) |
/// | `deadlock`       | `"fail"` / `"wait"`           | `"wait"` (the manager's default) | when this call's wait is part of a deadlock (its task holds a lock that another waiter needs, which waits, itself or through others, for one this task holds): give up with `LockError::Deadlock` if it is the cycle's youngest wait of those that chose `"fail"`, or keep waiting until `wait` runs out; unset, `LockManagerBuilder::deadlock` decides (itself `"wait"` unless set); `"fail"` needs a `wait` and the plain lock (not with `permits` or `mode`) |
/// | `watchdog`       | `true` / `false`              | `true`        | renew the lease every `ttl / 3` while the body runs; `false` = fixed lease of `ttl` |
/// | `on_lease_lost`  | `"abort"` / `"continue"`      | `"abort"`     | when the lease is proven lost (expired, taken over, or stolen: `LostReason::Stolen`, told within one round trip of the steal): drop the body at its next `.await` and return `LockError::LeaseLost` with the reason, or let it run on (`current().unwrap().lost()` says why) |
/// | `hold_at_least`  | duration string               | none          | keep the lock at least this long after acquiring it, even if the body finishes sooner |
/// | `max_hold`       | duration string               | none          | stop renewing after this long, so a hung body cannot hold the lock forever |
/// | `lock_delay`     | duration string               | the manager's: none unless `LockManagerBuilder::lock_delay` | after a lease lost without a release (the holder crashed, stalled or was cut off), grant the lock to nobody for this long more; a release still hands it over at once; `ttl + lock_delay` at most one year |
/// | `allow_long_ttl` | `true` / `false`              | `false`       | accept a `ttl` longer than one day |
/// | `manager`        | any expression                | global default| the `LockManager` to use, e.g. `self.locks` |
/// | `crate`          | string path                   | `"::lock_runtime"` | where the runtime crate is, for a renamed dependency or a re-export |
///
/// Unknown, repeated or mistyped options are compile errors that name the valid options; names
/// from other libraries get the option they mean (`leaseTime`/`lease_time`/`expire` -> `ttl`,
/// `waitTime`/`wait_time`/`acquireTimeout` -> `wait`, `on_deadlock`/`deadlock_detection` ->
/// `deadlock`), a camelCase spelling its snake_case name, `read = true` and `write = true` the
/// `mode` they mean, `fail_on_deadlock = true` `deadlock = "fail"`, and an unknown option holding
/// a template or a list of them, when no key is given, `key` or `keys`. A misspelled option is
/// one error: rules that depend on it (`fair` needs a `wait`; a missing `key`) wait until it is
/// spelled right. Option values may come from `macro_rules!` fragments (`key = $key`).
///
/// # Key templates
///
/// - Text is literal: `key = "jobs:nightly-report"` is one lock for every call.
/// - `<name>` is replaced by the [`Display`](std::fmt::Display) of the parameter `name`.
/// - `<name.field.sub>` follows field accesses, `<pair.0>` tuple fields, `<self.tenant>` the
///   receiver of a method, and `<user.name()>` calls a method without arguments (methods with
///   arguments are not allowed: compute the value into a parameter instead).
/// - `<<` and `>>` are a literal `<` and `>`.
///
/// **The `{}` trap.** Only `<name>` is a placeholder. `"order:{user_id}"`, `"order:${user_id}"`,
/// `"order:#{user_id}"` and `"order:#user_id"` would be the same text on every call, so one lock
/// shared by all of them: when the name is a parameter, they are compile errors that say to
/// write `<user_id>`. Other braces are text, so a Redis Cluster hash tag around a value is
/// `"{<tenant>}:order:<id>"` and a fixed one is `"{orders}:<id>"`. For the text `{user_id}` or
/// `#user_id` itself, where `user_id` is also a parameter, write `{{user_id}}` or `##user_id`.
///
/// Placeholders must name whole parameters: not a `_` parameter, not a name bound inside a
/// destructuring pattern (bind the parameter to a name and write `<name.field>` instead), and
/// not a parameter that a `#[cfg]` can remove. A placeholder whose value does not implement
/// `Display` is a compile error at the parameter that names its type. All of this is checked at
/// compile time, and every bad placeholder of a key is reported at once; a typo gets a "did you
/// mean" with the closest parameter name.
///
/// The key is rendered once per call into one `String`, before the body runs and before any
/// `.await`, reading the parameters by reference (nothing is cloned). As with `format!`, a
/// `Display` implementation that returns an error makes the call panic.
///
/// # Several keys
///
/// `keys = ["account:<from>", "account:<to>"]` takes every lock of the list, as
/// `LockManager::lock_all` does: one after the other in one canonical order (sorted by stored
/// name, so callers listing the same keys in another order never deadlock), sharing one `wait`
/// budget, all or nothing (a key that cannot be had gives back those already taken, and the
/// call returns the error naming that key). Every other option applies to each key. Calls that
/// render the same key twice (`from == to`) take it once. Inside the body,
/// `lock_runtime::current()` is the first key in that order and `lock_runtime::current_all()`
/// lists each with its fencing token; with `on_lease_lost = "abort"` the loss of any key stops
/// the body. Each template is checked as `key` is. `key` together with `keys`, an empty list,
/// a single string instead of a list (split at its commas in the fix: `keys = "a:<x>, b:<y>"`
/// would be one lock named with a comma), an element that is not a string literal and a
/// template listed twice are compile errors that show the fix.
///
/// # Durations
///
/// An integer and a unit, `ms`, `s`, `m` or `h`, or several from the largest unit to the smallest
/// (`"1m30s"`, `"1h15m"`). No spaces, fractions or signs. They are parsed at compile time, so a
/// duration must be a literal (one passed through a `macro_rules!` fragment, `$ttl:literal` or
/// `$ttl:expr`, is one). Rejected: a missing or unknown unit, a number instead of a string
/// (`ttl = 30`, `ttl = 1.5`), a zero or sub-10ms `ttl`, a `ttl` over one day unless
/// `allow_long_ttl = true`, and a `ttl` or `hold_at_least` over `lock_runtime::MAX_TTL` (one
/// year) even then, since the runtime would refuse it on every call (both read the limit from
/// one definition). With the watchdog on, a short `ttl` is renewed for as long as the body runs,
/// so a long `ttl` only makes a crashed holder block others for longer.
///
/// Checks across options, each with a message that says which one to change:
///
/// - `max_hold` with `watchdog = false` is an error: without renewal there is nothing to stop;
///   remove `max_hold`.
/// - `max_hold` shorter than `ttl` (given or default) or than `hold_at_least` is one error at
///   `max_hold` that names the longest of them: the first lease already outlasts it, or the
///   lock could not be held that long.
/// - `fair = true` without a `wait` (or with `wait = "0s"`) is an error: the call would never
///   wait in line.
/// - `permits` with `fair = true` is an error at `fair`: a semaphore's waiters are not served in
///   order. `permits = 0` is an error at the literal, and a constant of 0 at the constant, in
///   `cargo check` too (so in the editor): the constant is evaluated in a `const` item. One
///   read through `Self` or a type (`Self::SLOTS`, `T::SLOTS`, a one-letter `N`), which may be
///   a generic parameter that an item cannot name, is only evaluated when the fn is compiled
///   for its types (`cargo build`). A value read from a parameter or `self` is an error that
///   points to `LockManager::semaphore`, which takes a number known at run time.
/// - `mode` with `permits`, `keys` or `fair = true` is an error at `mode` that says which to
///   keep: a read-write lock is one key's, apart from its semaphore, and its waiting writer
///   already goes before new readers. An unknown mode lists `"read"` and `"write"`.
/// - `fair = true` with `permits` or `mode` is that one error, also without a `wait`: its fix
///   that keeps `fair` says to add the `wait` too.
/// - `deadlock = "fail"` without a `wait` (or with `wait = "0s"`) is an error: a call that never
///   waits is never part of a deadlock (with `fair = true` too, `fair`'s error asks for the
///   `wait`). With `permits` or `mode` it is one error at `deadlock`, whose fix that keeps it
///   adds the `wait` if needed: only the waits of plain locks are followed. With `keys` it is
///   accepted: the keys of one call never deadlock each other, but each is waited for as a
///   plain lock, which can be part of a deadlock with locks held around the call or taken
///   elsewhere in another order. `deadlock = "wait"` is accepted everywhere, as `fair = false`
///   is. A value other than `"fail"` or `"wait"` (`true`, `fail` without quotes,
///   `Deadlock::Fail`, `"abort"`) is an error that names the string to write.
/// - `wait` and `max_hold` are independent (one bounds the time before acquiring, the other the
///   time after), so any combination is accepted.
///
/// # The lock manager
///
/// Without `manager`, the process-wide manager set with `lock_runtime::set_global_default` is
/// used; if none was set, the body does not run and the call returns `LockError::Config`.
///
/// `manager = expr` accepts any expression that gives a `LockManager`, a reference to one, or a
/// smart pointer to one (`self.locks`, `&self.locks`, `self.locks()` for an accessor returning
/// `&LockManager`, a `locks: &LockManager` or `locks: &mut LockManager` parameter,
/// `LOCKS.clone()`, an `Arc<LockManager>`): it is evaluated once per call, after the key is
/// rendered, and borrowed as `&LockManager` for the call. When the expression reads a parameter
/// that the body takes by value or by `&mut` (`self.locks` or `self.locks()` in a `&mut self`,
/// `self` or `self: Arc<Self>` method, under `#[async_trait]` too), the manager itself is cloned
/// first, which is cheap (clones share their connections), so the body can still use that
/// parameter freely.
///
/// # What the fn must look like
///
/// An `async fn` with a body, returning `Result<T, E>` where `E: From<LockError>` (any alias of
/// `Result` works, e.g. `anyhow::Result<T>`). A plain `fn`, a `const fn`, an `extern` fn, a trait
/// method declaration without a body, or another return type is a compile error that says what to
/// change.
///
/// Supported forms:
///
/// - free fns, inherent and trait methods with any receiver (`&self`, `&mut self`, `self`,
///   `self: Arc<Self>`, ...), generic fns with where clauses, `impl Trait` arguments, explicit
///   and elided lifetimes, `unsafe fn`, native `async fn` in traits (default methods and impls);
/// - methods of an `#[async_trait]` trait or impl (see below);
/// - a fn that returns its future, `fn f(..) -> impl Future<Output = Result<T, E>> { ..;
///   async move { .. } }`: the lock is taken when the returned future first runs, around the
///   final `async` block (as `#[instrument]` supports);
/// - other attributes stacked on the fn: `#[tokio::main]` or `#[tokio::test]` above
///   `#[distributed_lock]` (the lock is held inside the runtime's future), `#[instrument]` above
///   (the span covers waiting for the lock) or below (the span covers the body), and several
///   `#[distributed_lock]`s;
/// - the attribute written by a `macro_rules!` macro, with its options from fragments.
///
/// ```rust,ignore
/// #[async_trait]
/// impl Jobs for Worker {
///     #[distributed_lock(key = "job:<name>", manager = self.locks)]
///     async fn run(&self, name: &str) -> Result<(), AppError> { ... }
/// }
/// ```
///
/// `#[async_trait]` on the impl always expands first and turns each method into a fn returning
/// `Box::pin(async move { .. })`; `#[distributed_lock]` recognises that shape and locks inside
/// the boxed block. Put the attribute on the methods: on the impl block itself it is an error.
///
/// The signature is kept exactly as written (attributes, doc comments, visibility, generics,
/// where clause, receiver), and the fn stays an `async fn`. Several `#[distributed_lock]`
/// attributes on one fn take their locks from the one closest to the fn outwards.
///
/// # Equivalent code
///
/// ```rust,ignore
/// impl Accounts {
///     #[distributed_lock(key = "account:<self.bank>:<id>", ttl = "10s", manager = self.locks)]
///     async fn withdraw(&self, id: u64, amount: u64) -> Result<u64, AppError> {
///         self.debit(id, amount).await
///     }
/// }
/// ```
///
/// behaves like
///
/// ```rust,ignore
/// impl Accounts {
///     async fn withdraw(&self, id: u64, amount: u64) -> Result<u64, AppError> {
///         let key = format!("account:{}:{}", self.bank, id);
///         const OPTIONS: LockOptions = LockOptions::new().ttl(Duration::from_secs(10));
///         self.locks
///             .run_locked(key, OPTIONS, async move {
///                 self.debit(id, amount).await
///             })
///             .await
///     }
/// }
/// ```
///
/// where `run_locked` acquires the lock, runs the body under it (renewing the lease), releases
/// it, and converts a `LockError` into `AppError` with `From`.
///
/// # Guarantees
///
/// - The body never runs without the lock: if acquiring fails for any reason, the fn returns the
///   error and the body is not started.
/// - `return` and `?` in the body leave the body, not the locked section: the lock is released
///   after every outcome, `Ok`, `Err` or panic, before the fn returns. If the caller drops the
///   future mid-body (a timeout, `select!`), the lock is released in the background right away
///   instead of waiting for the lease to run out.
/// - The future is `Send` exactly when the body's is. The generated code adds no allocation of
///   its own, but the runtime's `run_locked` boxes the body (once, so a large body is not
///   copied into every future that passes it on) and the acquire (so its state is not kept
///   while the body runs): two heap allocations per call, besides the key's `String`.
/// - Inside the body, `lock_runtime::current()` describes the held lock (key, fencing token,
///   whether it is still held); a nested call in the same task that renders the same key
///   re-enters without touching Redis.
#[proc_macro_attribute]
pub fn distributed_lock(args: TokenStream, item: TokenStream) -> TokenStream {
    expand::distributed_lock(args.into(), item.into()).into()
}

/// `lock_runtime::MIN_TTL` in milliseconds, from the one definition the attribute also checks.
#[doc(hidden)]
#[proc_macro]
pub fn __min_ttl_millis(_: TokenStream) -> TokenStream {
    proc_macro::TokenTree::Literal(proc_macro::Literal::u64_unsuffixed(limits::MIN_TTL_MILLIS))
        .into()
}

/// `lock_runtime::MAX_TTL` in seconds, from the one definition the attribute also checks.
#[doc(hidden)]
#[proc_macro]
pub fn __max_ttl_secs(_: TokenStream) -> TokenStream {
    proc_macro::TokenTree::Literal(proc_macro::Literal::u64_unsuffixed(limits::MAX_TTL_SECS)).into()
}
