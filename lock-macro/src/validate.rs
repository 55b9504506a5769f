//! Checks that need more than one option, or the fn signature, and turns the parsed attribute
//! and fn into a [`Plan`] that `expand` can emit without further decisions.

use proc_macro2::{Span, TokenTree};
use quote::ToTokens;
use syn::ext::IdentExt;
use syn::spanned::Spanned;
use syn::visit_mut::VisitMut;
use syn::{
    FnArg, GenericArgument, Generics, Pat, Path, PathArguments, ReturnType, Signature, Type,
};

use crate::attr::{Args, DurationArg, OnLeaseLost};
use crate::duration::format_millis;
use crate::item::{AsyncTraitBody, FutureBlockBody, LockedFn, TokioEntryBody};
use crate::limits::{LONG_TTL_MILLIS, MAX_TTL_MILLIS};
use crate::params::{KeyPlan, Params, is_positional_arg, reads_owned_param, resolve_key};
use crate::permits::{self, PermitsPlan};
use crate::types::{is_type_param, pretty, strip_groups};

/// The runtime's default lease (`LockOptions::DEFAULT_TTL`), for rules that compare with `ttl`
/// when the attribute does not set it.
const DEFAULT_TTL_MILLIS: u64 = 30_000;

/// Everything `expand` needs, already checked.
pub(crate) struct Plan {
    pub(crate) krate: Path,
    pub(crate) key: LockKeys,
    pub(crate) options: OptionsPlan,
    pub(crate) manager: Option<ManagerPlan>,
    pub(crate) output: OutputPlan,
    pub(crate) form: Form,
}

/// The lock a call takes: one key, or several taken together (`keys = [..]`).
pub(crate) enum LockKeys {
    One(KeyPlan),
    All(Vec<KeyPlan>),
}

/// Options the user set; the others keep the runtime's defaults.
#[derive(Default)]
pub(crate) struct OptionsPlan {
    pub(crate) ttl: Option<u64>,
    pub(crate) wait: Option<u64>,
    /// `permits = N`: one of N permits of the semaphore of the key, not the lock.
    pub(crate) permits: Option<PermitsPlan>,
    /// `mode = "read" | "write"`: `Some(true)` for the write hold of the read-write lock of the
    /// key, `Some(false)` for a read share; `None` for the lock.
    pub(crate) write_mode: Option<bool>,
    pub(crate) fair: Option<bool>,
    /// `deadlock = "fail" | "wait"`: `Some(true)` gives up a wait that is part of a deadlock.
    pub(crate) deadlock_fail: Option<bool>,
    pub(crate) watchdog: Option<bool>,
    pub(crate) on_lease_lost: Option<OnLeaseLost>,
    pub(crate) hold_at_least: Option<u64>,
    pub(crate) max_hold: Option<u64>,
    pub(crate) lock_delay: Option<u64>,
    /// The key template as written: the lock's label in metrics (bounded, unlike the keys).
    pub(crate) label: Option<String>,
}

pub(crate) struct ManagerPlan {
    pub(crate) expr: syn::Expr,
    /// Clone the manager before the body takes its parameters: the expression reads a parameter
    /// that the body owns (`self.locks` in a `&mut self` method), which it could not borrow.
    pub(crate) clone: bool,
}

pub(crate) struct OutputPlan {
    /// The declared output type `Result<T, E>`, with `impl Trait` replaced by `_`.
    pub(crate) ty: Type,
    pub(crate) span: Span,
    /// Where a return type that is not a `Result` (a struct, an alias) is reported.
    pub(crate) result_check_span: Span,
    pub(crate) error_check: ErrorCheck,
    /// Where a missing `E: From<LockError>` is reported: at `E`, or at the output type.
    pub(crate) error_check_span: Span,
}

/// How the `E: From<LockError>` requirement is checked so that its message lands in user code.
pub(crate) enum ErrorCheck {
    /// `E` is written in the signature: check it at its span.
    ErrorType(Box<Type>),
    /// `E` is a type parameter of the fn: check `E: From<LockError>` itself, so that rustc's
    /// help proposes that bound rather than the runtime's support trait.
    TypeParam(Box<Type>),
    /// `E` is hidden behind an alias (`io::Result<T>`): check through the output type.
    ThroughOutput,
    /// `E` is `impl Trait`: nothing can name it; the runtime's own bound still applies.
    None,
}

pub(crate) enum Form {
    /// `async fn`: the body is wrapped.
    Native,
    /// Already rewritten by `#[async_trait]`: the `Box::pin(async move { .. })` block is wrapped.
    AsyncTrait(Box<AsyncTraitBody>),
    /// `fn f(..) -> impl Future<Output = R> { ..; async move { .. } }`: the block is wrapped.
    FutureBlock(Box<FutureBlockBody>),
    /// Already rewritten by `#[tokio::main]` / `#[tokio::test]`: `let body = async { .. };`
    /// is wrapped.
    TokioEntry(Box<TokioEntryBody>),
}

/// Runs every check, collecting all independent errors.
pub(crate) fn validate(
    args: Args,
    item: &LockedFn,
    mut errors: Vec<syn::Error>,
) -> Result<Plan, Vec<syn::Error>> {
    check_options(&args, &mut errors);
    if args.key.missing() && args.keys.missing() {
        errors.push(missing_key(&item.sig));
    }
    let shape = check_shape(item).map_err(|err| errors.push(err)).ok();
    let mut params = Params::of(&item.sig);
    if let Some((Form::AsyncTrait(info), _)) = &shape {
        params.add_moved_patterns(info);
    }
    let mut resolve = |key| {
        resolve_key(key, &params, &item.sig)
            .map_err(|errs| errors.extend(errs))
            .ok()
    };
    let key = match (args.key.get(), args.keys.get()) {
        // Both given is already reported: resolve both, for their own mistakes.
        (Some(key), Some(keys)) => {
            resolve(key);
            keys.keys.iter().for_each(|key| drop(resolve(key)));
            None
        }
        (Some(key), None) => resolve(key).map(LockKeys::One),
        (None, Some(keys)) => {
            let resolved: Vec<Option<KeyPlan>> = keys.keys.iter().map(resolve).collect();
            resolved
                .into_iter()
                .collect::<Option<Vec<_>>>()
                .map(LockKeys::All)
        }
        (None, None) => None,
    };

    let permits = args.permits.get().and_then(|permits| {
        permits::plan(&permits.value, &params, &item.sig.generics)
            .map_err(|err| errors.push(err))
            .ok()
    });
    let clone_manager = args
        .manager
        .get()
        .is_some_and(|expr| reads_owned_param(expr, &params));
    let (Some((form, output)), Some(key), true) = (shape, key, errors.is_empty()) else {
        return Err(errors);
    };
    let label = label(&args);
    let manager = args.manager.value.map(|expr| ManagerPlan {
        expr,
        clone: clone_manager,
    });
    let millis = |slot: &crate::attr::Slot<DurationArg>| slot.get().map(|d| d.millis);
    Ok(Plan {
        krate: args
            .krate
            .value
            .unwrap_or_else(|| syn::parse_quote!(::lock_runtime)),
        key,
        options: OptionsPlan {
            ttl: millis(&args.ttl),
            wait: millis(&args.wait),
            write_mode: args.mode.get().map(|mode| mode.write),
            permits,
            fair: args.fair.get().map(|b| b.value),
            deadlock_fail: args.deadlock.get().map(|deadlock| deadlock.fail),
            watchdog: args.watchdog.get().map(|b| b.value),
            on_lease_lost: args.on_lease_lost.get().copied(),
            hold_at_least: millis(&args.hold_at_least),
            max_hold: millis(&args.max_hold),
            lock_delay: millis(&args.lock_delay),
            label,
        },
        manager,
        output,
        form,
    })
}

/// The metrics label: the key template as written, or every template of `keys` joined, so that
/// the number of series stays one per attribute however many keys its calls render.
fn label(args: &Args) -> Option<String> {
    if let Some(key) = args.key.get() {
        return Some(key.lit.value());
    }
    let keys = args.keys.get()?;
    let templates: Vec<String> = keys.keys.iter().map(|key| key.lit.value()).collect();
    Some(templates.join(", "))
}

/// Rules between options. Each message says which option to change and how, and a set of
/// options gets at most one error per option, so that two messages never ask for opposite fixes.
fn check_options(args: &Args, errors: &mut Vec<syn::Error>) {
    let allow_long_ttl =
        args.allow_long_ttl.failed() || args.allow_long_ttl.get().is_some_and(|allow| allow.value);
    let max = format_millis(MAX_TTL_MILLIS);
    if let Some(ttl) = args.ttl.get() {
        if ttl.millis > MAX_TTL_MILLIS {
            errors.push(syn::Error::new(
                ttl.lit.span(),
                format!(
                    "`ttl` of {} is longer than the longest lease the runtime accepts, {max} \
                     (`lock_runtime::MAX_TTL`), even with `allow_long_ttl = true`: every call \
                     would fail; write a `ttl` of at most {max}",
                    format_millis(ttl.millis)
                ),
            ));
        } else if ttl.millis > LONG_TTL_MILLIS && !allow_long_ttl {
            errors.push(syn::Error::new(
                ttl.lit.span(),
                format!(
                    "`ttl` of {} is longer than one day: a holder that crashes keeps the lock \
                     that long, and the watchdog already renews a short lease while the body \
                     runs; use a shorter `ttl`, or add `allow_long_ttl = true` if the lock must \
                     outlive a crash by that much",
                    format_millis(ttl.millis)
                ),
            ));
        }
    }
    if let Some(hold_at_least) = args.hold_at_least.get()
        && hold_at_least.millis > MAX_TTL_MILLIS
    {
        errors.push(syn::Error::new(
            hold_at_least.lit.span(),
            format!(
                "`hold_at_least` of {} is longer than the runtime accepts, {max} \
                 (`lock_runtime::MAX_TTL`): every call would fail; write a `hold_at_least` of \
                 at most {max}",
                format_millis(hold_at_least.millis)
            ),
        ));
    }
    check_lock_delay(args, errors);
    check_max_hold(args, errors);
    check_fair(args, errors);
    check_permits(args, errors);
    check_mode(args, errors);
    check_deadlock(args, errors);
}

/// `mode` takes the read-write lock of one key: not a semaphore's permit, not several locks,
/// and not in order (its waiting writer goes first already).
fn check_mode(args: &Args, errors: &mut Vec<syn::Error>) {
    let Some(mode) = args.mode.get() else {
        return;
    };
    let shown = mode.lit.value();
    if args.permits.get().is_some() {
        errors.push(syn::Error::new(
            mode.lit.span(),
            format!(
                "`mode = \"{shown}\"` takes the read-write lock of the key, but `permits` takes \
                 a semaphore's permit: keep `mode` for the read-write lock, or keep `permits` \
                 for the semaphore"
            ),
        ));
    }
    if args.keys.get().is_some() {
        errors.push(syn::Error::new(
            mode.lit.span(),
            format!(
                "`mode = \"{shown}\"` takes the read-write lock of one key, but `keys` takes \
                 several locks: keep `keys` and remove `mode` to take the locks, or write one \
                 `key = \"..\"` instead of `keys` to take that read-write lock"
            ),
        ));
    }
    if args.fair.get().is_some_and(|fair| fair.value) {
        errors.push(syn::Error::new(
            mode.lit.span(),
            format!(
                "`fair = true` orders the waiters of a lock, but `mode = \"{shown}\"` takes a \
                 read-write lock, whose waiting writer already goes before new readers: remove \
                 `fair`, or remove `mode`{}",
                to_take_the_lock_in_order(args)
            ),
        ));
    }
}

/// The end of "remove `permits`" or "remove `mode`" when `fair = true` conflicts with it: what
/// else the lock taken in order needs, so that this fix is complete.
fn to_take_the_lock_in_order(args: &Args) -> String {
    to_take_the_lock(args, "to take the lock in order")
}

/// The end of "remove `permits`" or "remove `mode`" when an option that needs the lock and a
/// wait (`fair = true`, `deadlock = "fail"`) conflicts with it: adds the `wait` when there is
/// none, with `purpose` saying what it is for.
fn to_take_the_lock(args: &Args, purpose: &str) -> String {
    match args.wait.get() {
        _ if args.wait.failed() => " to take the lock".to_owned(),
        None => format!(" and add how long it may wait, e.g. `wait = \"5s\"`, {purpose}"),
        Some(wait) if wait.millis == 0 => {
            format!(" and make `wait` longer than 0, e.g. `wait = \"5s\"`, {purpose}")
        }
        Some(_) => " to take the lock".to_owned(),
    }
}

/// `deadlock = "fail"` gives up a wait that is part of a deadlock, and the runtime follows only
/// the waits of plain locks (`keys` are plain locks, each waited for with these options): not a
/// semaphore's, not a read-write lock's, and not a call that never waits. `deadlock = "wait"`
/// is what those do anyway, so it is accepted everywhere, as `fair = false` is.
fn check_deadlock(args: &Args, errors: &mut Vec<syn::Error>) {
    let Some(deadlock) = args.deadlock.get().filter(|deadlock| deadlock.fail) else {
        return;
    };
    let head = "`deadlock = \"fail\"` gives up a wait that is part of a deadlock";
    let mode = args.mode.get().map(|mode| mode.lit.value());
    let not_followed = match (args.permits.get(), &mode) {
        (Some(_), None) => Some((
            "`permits` makes this fn take a semaphore's permit".to_owned(),
            "`permits`",
        )),
        (None, Some(mode)) => Some((
            format!("`mode = \"{mode}\"` takes a read-write lock"),
            "`mode`",
        )),
        (Some(_), Some(mode)) => Some((
            format!(
                "`permits` takes a semaphore's permit and `mode = \"{mode}\"` a read-write lock"
            ),
            "`permits` and `mode`",
        )),
        (None, None) => None,
    };
    if let Some((takes, remove)) = not_followed {
        errors.push(syn::Error::new(
            deadlock.lit.span(),
            format!(
                "{head} between locks, but {takes}, whose waits are not followed for deadlocks: \
                 remove `deadlock`, or remove {remove}{}",
                to_take_the_lock(args, "to take the lock and give up in a deadlock")
            ),
        ));
        return;
    }
    // A rejected or misspelled `wait`, `permits` or `mode` is reported already; its fix decides.
    if args.wait.failed() || !args.permits.missing() || !args.mode.missing() {
        return;
    }
    // `fair = true` asks for the same `wait`, at the same place: one message is enough.
    if args.fair.get().is_some_and(|fair| fair.value) {
        return;
    }
    match args.wait.get() {
        None => errors.push(syn::Error::new(
            deadlock.lit.span(),
            format!(
                "{head}, but without `wait` this fn tries once and never waits, so it is never \
                 part of one: add how long it may wait, e.g. `wait = \"5s\"`"
            ),
        )),
        Some(wait) if wait.millis == 0 => errors.push(syn::Error::new(
            wait.lit.span(),
            format!(
                "{head}, but a `wait` of 0 tries once and never waits, so it is never part of \
                 one: write how long it may wait, e.g. `wait = \"5s\"`"
            ),
        )),
        Some(_) => {}
    }
}

/// A semaphore's waiters are not served in order: `fair = true` with `permits` would be refused
/// at every call.
fn check_permits(args: &Args, errors: &mut Vec<syn::Error>) {
    if let (Some(permits), Some(_)) = (args.permits.get(), args.keys.get()) {
        errors.push(syn::Error::new_spanned(
            &permits.value,
            "`permits` makes this fn take one semaphore's permit, but `keys` takes several locks: \
             remove `permits` to take the locks, or write one `key = \"..\"` instead of `keys` \
             to take a permit of that semaphore",
        ));
    }
    let (Some(_), Some(fair)) = (args.permits.get(), args.fair.get()) else {
        return;
    };
    if fair.value {
        errors.push(syn::Error::new(
            fair.span,
            format!(
                "`fair = true` orders the waiters of a lock, but `permits` makes this fn take a \
                 semaphore's permit, whose waiters are not served in order: remove `fair`, or \
                 remove `permits`{}",
                to_take_the_lock_in_order(args)
            ),
        ));
    }
}

/// `fair = true` orders the callers that wait: without `wait`, the call tries once and never
/// waits in line, which is surely not what was meant. With `permits` or `mode`, `fair` is wrong
/// whatever the `wait`: that error (whose fix adds the `wait` if it is needed) is the only one.
fn check_fair(args: &Args, errors: &mut Vec<syn::Error>) {
    let Some(fair) = args.fair.get().filter(|fair| fair.value) else {
        return;
    };
    if args.wait.failed() || !args.permits.missing() || !args.mode.missing() {
        return;
    }
    match args.wait.get() {
        None => errors.push(syn::Error::new(
            fair.span,
            "`fair = true` serves waiting callers in the order they came, but without `wait` \
             this fn tries once and never waits: add how long it may wait, e.g. \
             `wait = \"5s\"`",
        )),
        Some(wait) if wait.millis == 0 => errors.push(syn::Error::new(
            wait.lit.span(),
            "`fair = true` serves waiting callers in the order they came, but a `wait` of 0 \
             tries once and never waits: write how long it may wait, e.g. `wait = \"5s\"`",
        )),
        Some(_) => {}
    }
}

/// `lock_delay` against the longest lease: the store keeps a lock lost without a release for
/// `ttl + lock_delay`, which the runtime caps as it caps a `ttl`.
fn check_lock_delay(args: &Args, errors: &mut Vec<syn::Error>) {
    let Some(delay) = args.lock_delay.get() else {
        return;
    };
    if args.ttl.failed() {
        return;
    }
    let ttl = args.ttl.get().map_or(DEFAULT_TTL_MILLIS, |ttl| ttl.millis);
    if ttl.saturating_add(delay.millis) > MAX_TTL_MILLIS {
        errors.push(syn::Error::new(
            delay.lit.span(),
            format!(
                "`lock_delay` of {} with a `ttl` of {} is longer than the runtime accepts, {} \
                 (`lock_runtime::MAX_TTL`): every call would fail; write a `lock_delay` of at \
                 most {}",
                format_millis(delay.millis),
                format_millis(ttl),
                format_millis(MAX_TTL_MILLIS),
                format_millis(MAX_TTL_MILLIS.saturating_sub(ttl))
            ),
        ));
    }
}

/// `max_hold` against `watchdog`, `ttl` and `hold_at_least`: one error at `max_hold` whose fix
/// satisfies every rule at once.
fn check_max_hold(args: &Args, errors: &mut Vec<syn::Error>) {
    let Some(max_hold) = args.max_hold.get() else {
        return;
    };
    // An option whose value was rejected is already reported: rules that depend on it are
    // skipped rather than checked against a default the user did not ask for.
    if args.watchdog.failed() || args.ttl.failed() || args.hold_at_least.failed() {
        return;
    }
    if args.watchdog.get().is_some_and(|watchdog| !watchdog.value) {
        // Removing `watchdog = false` instead could run into the rules below: removing
        // `max_hold` is the fix that always works.
        errors.push(syn::Error::new(
            max_hold.lit.span(),
            "`max_hold` has no effect with `watchdog = false`: without renewal the lease \
             already ends `ttl` after acquisition; remove `max_hold`",
        ));
        return;
    }
    let ttl = match args.ttl.get() {
        Some(ttl) => (
            ttl.millis,
            format!("the `ttl` of {}", format_millis(ttl.millis)),
        ),
        None => (
            DEFAULT_TTL_MILLIS,
            format!(
                "the `ttl` of {} (the default)",
                format_millis(DEFAULT_TTL_MILLIS)
            ),
        ),
    };
    let hold = args.hold_at_least.get().map(|hold| {
        (
            hold.millis,
            format!("`hold_at_least` of {}", format_millis(hold.millis)),
        )
    });
    let mut shorter_than: Vec<&str> = Vec::new();
    let mut needed = max_hold.millis;
    if max_hold.millis < ttl.0 {
        shorter_than.push(&ttl.1);
        needed = needed.max(ttl.0);
    }
    if let Some((millis, shown)) = &hold
        && max_hold.millis < *millis
    {
        shorter_than.push(shown);
        needed = needed.max(*millis);
    }
    if shorter_than.is_empty() {
        return;
    }
    let why = match (max_hold.millis < ttl.0, needed > ttl.0) {
        (true, false) => "the first lease already outlasts it",
        (false, _) => "renewal would stop before the lock was held that long",
        (true, true) => {
            "the first lease already outlasts it, and renewal would stop before the lock was \
             held at least `hold_at_least`"
        }
    };
    errors.push(syn::Error::new(
        max_hold.lit.span(),
        format!(
            "`max_hold` of {} is shorter than {}: {why}; make `max_hold` at least {}",
            format_millis(max_hold.millis),
            shorter_than.join(" and "),
            format_millis(needed),
        ),
    ));
}

/// "missing `key`", with a key made from the fn's name and first parameter as an example.
fn missing_key(sig: &Signature) -> syn::Error {
    let first = sig.inputs.iter().find_map(|input| match input {
        FnArg::Typed(typed) => match &*typed.pat {
            Pat::Ident(ident) if !is_positional_arg(&ident.ident.to_string()) => {
                Some(ident.ident.unraw().to_string())
            }
            _ => None,
        },
        FnArg::Receiver(_) => None,
    });
    let name = sig.ident.unraw();
    let example = match first {
        Some(param) => format!("{name}:<{param}>"),
        None => name.to_string(),
    };
    syn::Error::new(
        Span::call_site(),
        format!(
            "missing `key`: name the resource the lock protects, e.g. \
             #[distributed_lock(key = \"{example}\")]"
        ),
    )
}

/// Checks that the item is a fn the attribute can wrap, and finds its output type.
fn check_shape(item: &LockedFn) -> syn::Result<(Form, OutputPlan)> {
    let sig = &item.sig;
    if let Some(constness) = &sig.constness {
        return Err(syn::Error::new(
            constness.span,
            "a #[distributed_lock] fn cannot be `const`: the lock is taken at run time; \
             remove `const` and make it an `async fn`",
        ));
    }
    if let Some(abi) = &sig.abi {
        return Err(syn::Error::new(
            abi.extern_token.span,
            "a #[distributed_lock] fn cannot be `extern`: remove the ABI, or call the extern \
             fn from a locked `async fn`",
        ));
    }
    if let Some(variadic) = &sig.variadic {
        return Err(syn::Error::new(
            variadic.dots.spans[0],
            "a #[distributed_lock] fn cannot be variadic",
        ));
    }
    let Some(body) = &item.body else {
        return Err(syn::Error::new(
            sig.ident.span(),
            "#[distributed_lock] needs a fn body: put it on the fn in each impl (or on a \
             default method), not on the trait's declaration",
        ));
    };
    let (form, output) = if sig.asyncness.is_some() {
        match &sig.output {
            ReturnType::Type(_, ty) => (Form::Native, (**ty).clone()),
            ReturnType::Default => {
                return Err(syn::Error::new(
                    sig.ident.span(),
                    format!(
                        "a #[distributed_lock] fn must return `Result<T, E>` with \
                         `E: From<lock_runtime::LockError>`, but `{}` returns nothing: \
                         acquiring the lock can fail (busy, lost, Redis unreachable) and the \
                         failure is returned as `E`; add e.g. \
                         `-> Result<(), lock_runtime::LockError>`",
                        sig.ident
                    ),
                ));
            }
        }
    } else if let Some(info) = AsyncTraitBody::detect(sig, body) {
        let output = info.output.clone();
        (Form::AsyncTrait(Box::new(info)), output)
    } else if let Some(info) = FutureBlockBody::detect(sig, body) {
        let output = info.output.clone();
        (Form::FutureBlock(Box::new(info)), output)
    } else if let Some(info) = TokioEntryBody::detect(sig, body) {
        let output = info.output.clone();
        (Form::TokioEntry(Box::new(info)), output)
    } else if matches!(&sig.output, ReturnType::Type(_, ty) if contains_impl_trait(ty)) {
        return Err(syn::Error::new(
            sig.fn_token.span,
            "#[distributed_lock] on a fn that returns `impl Future` needs the body to end in \
             the future it returns, written as an `async move { .. }` block; or make it an \
             `async fn`",
        ));
    } else {
        return Err(syn::Error::new(
            sig.fn_token.span,
            "#[distributed_lock] needs an `async fn`: add `async` before `fn` \
             (the lock is acquired and released with `.await`)",
        ));
    };
    Ok((form, output_plan(&output, &sig.generics)?))
}

/// Types that are certainly not a `Result`, for an early message instead of a type error.
const NOT_RESULT: &[&str] = &[
    "Option", "String", "Vec", "Box", "Arc", "Rc", "Cow", "HashMap", "HashSet", "BTreeMap",
    "BTreeSet", "Self", "Pin", "bool", "char", "str", "u8", "u16", "u32", "u64", "u128", "usize",
    "i8", "i16", "i32", "i64", "i128", "isize", "f32", "f64",
];

fn output_plan(ty: &Type, generics: &Generics) -> syn::Result<OutputPlan> {
    let error_check = match strip_groups(ty) {
        Type::Path(path) => {
            let last = path.path.segments.last().ok_or_else(|| not_result(ty))?;
            let name = last.ident.to_string();
            if NOT_RESULT.contains(&name.as_str()) {
                return Err(not_result(ty));
            }
            let types: Vec<&Type> = match &last.arguments {
                PathArguments::AngleBracketed(args) => args
                    .args
                    .iter()
                    .filter_map(|arg| match arg {
                        GenericArgument::Type(ty) => Some(ty),
                        _ => None,
                    })
                    .collect(),
                _ => Vec::new(),
            };
            match types.as_slice() {
                [_, error] if name == "Result" && contains_impl_trait(error) => ErrorCheck::None,
                [_, error] if name == "Result" && is_type_param(error, generics) => {
                    ErrorCheck::TypeParam(Box::new((*error).clone()))
                }
                [_, error] if name == "Result" => ErrorCheck::ErrorType(Box::new((*error).clone())),
                _ => ErrorCheck::ThroughOutput,
            }
        }
        _ => return Err(not_result(ty)),
    };
    let error_check_span = match &error_check {
        ErrorCheck::ErrorType(error) | ErrorCheck::TypeParam(error) => type_span(error),
        ErrorCheck::ThroughOutput => type_span(ty),
        ErrorCheck::None => Span::call_site(),
    };
    Ok(OutputPlan {
        ty: erase_impl_trait(ty),
        span: ty.span(),
        result_check_span: type_span(ty),
        error_check,
        error_check_span,
    })
}

/// The span to report a type at. Stable rustc cannot join spans, so a path is shown by its last
/// segment (`Result` in `std::io::Result<T>`, `Error` in `app::Error`), not its first.
fn type_span(ty: &Type) -> Span {
    match strip_groups(ty) {
        Type::Path(path) => path
            .path
            .segments
            .last()
            .map_or_else(|| ty.span(), |segment| segment.ident.span()),
        _ => ty.span(),
    }
}

fn not_result(ty: &Type) -> syn::Error {
    let shown = pretty(ty.to_token_stream());
    syn::Error::new_spanned(
        ty,
        format!(
            "a #[distributed_lock] fn must return `Result<T, E>` with \
             `E: From<lock_runtime::LockError>`, found `{shown}`: acquiring the lock can fail \
             (busy, lost, Redis unreachable) and the failure is returned as `E`; write e.g. \
             `-> Result<{shown}, lock_runtime::LockError>`"
        ),
    )
}

fn contains_impl_trait(ty: &Type) -> bool {
    ty.to_token_stream()
        .into_iter()
        .any(|token| matches!(&token, TokenTree::Ident(ident) if ident == "impl"))
        || matches!(ty, Type::ImplTrait(_))
}

/// `impl Trait` cannot be written in a `let` type; `_` lets the body's value decide it.
fn erase_impl_trait(ty: &Type) -> Type {
    struct Eraser;
    impl VisitMut for Eraser {
        fn visit_type_mut(&mut self, ty: &mut Type) {
            if let Type::ImplTrait(imp) = ty {
                *ty = Type::Infer(syn::TypeInfer {
                    underscore_token: syn::Token![_](imp.span()),
                });
            } else {
                syn::visit_mut::visit_type_mut(self, ty);
            }
        }
    }
    let mut ty = ty.clone();
    Eraser.visit_type_mut(&mut ty);
    ty
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::suggest::snake_case;
    use proc_macro2::TokenStream;
    use quote::quote;

    fn plan(args: TokenStream, item: TokenStream) -> Result<Plan, Vec<String>> {
        let (args, errors) = Args::parse(args);
        let item = crate::item::parse(item)
            .map_err(|err| vec![err.map_or_else(|| "syntax".to_owned(), |err| err.to_string())])?;
        validate(args, &item, errors)
            .map_err(|errors| errors.iter().map(ToString::to_string).collect())
    }

    fn errors(args: TokenStream, item: TokenStream) -> Vec<String> {
        match plan(args, item) {
            Ok(_) => Vec::new(),
            Err(errors) => errors,
        }
    }

    impl LockKeys {
        fn one(&self) -> &KeyPlan {
            match self {
                LockKeys::One(key) => key,
                LockKeys::All(_) => panic!("one key expected"),
            }
        }
    }

    #[test]
    fn keys_resolve_every_template_and_label_by_all_of_them() {
        let plan = plan(
            quote!(keys = ["account:<from>", "account:<to>"]),
            quote! { async fn transfer(from: u64, to: u64) -> Result<(), E> { Ok(()) } },
        )
        .unwrap_or_else(|errs| panic!("{errs:?}"));
        let LockKeys::All(keys) = &plan.key else {
            panic!("several keys expected");
        };
        assert_eq!(keys.len(), 2);
        assert_eq!(keys[1].format.value(), "account:{}");
        assert_eq!(
            plan.options.label.as_deref(),
            Some("account:<from>, account:<to>")
        );
    }

    #[test]
    fn keys_mistakes_are_reported_with_their_fix() {
        let transfer =
            || quote! { async fn transfer(from: u64, to: u64) -> Result<(), E> { Ok(()) } };
        let errs = errors(quote!(key = "a:<from>", keys = ["b:<to>"]), transfer());
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert!(
            errs[0].contains("write `keys = [\"a:<from>\", \"b:<to>\"]`"),
            "{errs:?}"
        );
        let errs = errors(quote!(keys = []), transfer());
        assert!(errs[0].starts_with("`keys` is empty"), "{errs:?}");
        let errs = errors(quote!(keys = "a:<from>"), transfer());
        assert!(
            errs[0].contains("write `keys = [\"a:<from>\"]`"),
            "{errs:?}"
        );
        let errs = errors(quote!(keys = ["a:<from>", "a:<from>"]), transfer());
        assert!(errs[0].contains("twice"), "{errs:?}");
        let errs = errors(quote!(keys = ["a:<form>", "b:<too>"]), transfer());
        assert_eq!(errs.len(), 2, "{errs:?}");
        let errs = errors(quote!(keys = ["a", KEY]), transfer());
        assert!(
            errs[0].starts_with("each of `keys` must be a string literal"),
            "{errs:?}"
        );
    }

    fn item() -> TokenStream {
        quote! { async fn place_order(user_id: u64, voucher_id: u64) -> Result<(), E> { Ok(()) } }
    }

    #[test]
    fn a_valid_fn_gives_a_plan_with_one_part_per_placeholder() {
        let plan = plan(quote!(key = "order:<user_id>:<voucher_id>"), item()).expect("valid");
        assert_eq!(plan.key.one().parts.len(), 2);
        assert_eq!(plan.key.one().format.value(), "order:{}:{}");
        assert!(plan.key.one().literal.is_none());
        assert_eq!(plan.key.one().capacity, "order::".len() + 40);
    }

    #[test]
    fn mode_goes_to_the_plan_and_refuses_permits_keys_and_fair() {
        let plan = plan(quote!(key = "k", mode = "read"), item()).expect("valid");
        assert_eq!(plan.options.write_mode, Some(false));
        let errs = errors(quote!(key = "k", mode = "write", permits = 2), item());
        assert!(
            errs[0].contains("keep `mode` for the read-write lock"),
            "{errs:?}"
        );
        let errs = errors(
            quote!(key = "k", mode = "write", wait = "1s", fair = true),
            item(),
        );
        assert!(errs.iter().any(|e| e.contains("remove `fair`")), "{errs:?}");
    }

    #[test]
    fn permits_go_to_the_plan_and_refuse_fair() {
        let plan = plan(quote!(key = "k", permits = 3, wait = "1s"), item()).expect("valid");
        assert!(plan.options.permits.is_some());
        let errs = errors(
            quote!(key = "k", permits = 3, wait = "1s", fair = true),
            item(),
        );
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert!(errs[0].starts_with("`fair = true` orders the waiters of a lock"));
        assert!(errors(quote!(key = "k", permits = 3, fair = false), item()).is_empty());
    }

    #[test]
    fn a_misspelled_key_option_is_not_also_a_missing_key() {
        let transfer =
            || quote! { async fn transfer(from: u64, to: u64) -> Result<(), E> { Ok(()) } };
        for args in [
            quote!(kyes = ["a:<from>", "b:<to>"]),
            quote!(key_list = ["a:<from>", "b:<to>"]),
            quote!(name = "a:<from>"),
        ] {
            let errs = errors(args.clone(), transfer());
            assert_eq!(errs.len(), 1, "{args}: {errs:?}");
            assert!(errs[0].starts_with("unknown option"), "{args}: {errs:?}");
        }
        // Two mistakes, two errors.
        assert_eq!(errors(quote!(tll = "1s"), transfer()).len(), 2);
    }

    #[test]
    fn rules_wait_for_a_misspelled_option_they_depend_on() {
        for args in [
            quote!(key = "k", fair = true, wiat = "5s"),
            quote!(key = "k", tll = "5s", max_hold = "10s"),
        ] {
            let errs = errors(args.clone(), item());
            assert_eq!(errs.len(), 1, "{args}: {errs:?}");
            assert!(errs[0].starts_with("unknown option"), "{args}: {errs:?}");
        }
    }

    #[test]
    fn fair_with_permits_or_mode_is_one_error_whose_fix_adds_the_wait() {
        for (args, at) in [
            (quote!(key = "k", permits = 3, fair = true), "`permits`"),
            (quote!(key = "k", mode = "read", fair = true), "`mode`"),
        ] {
            let errs = errors(args.clone(), item());
            assert_eq!(errs.len(), 1, "{args}: {errs:?}");
            assert!(
                errs[0].ends_with(&format!(
                    "remove {at} and add how long it may wait, e.g. `wait = \"5s\"`, to take \
                     the lock in order"
                )),
                "{args}: {errs:?}"
            );
        }
        let errs = errors(
            quote!(key = "k", permits = 3, fair = true, wait = "0s"),
            item(),
        );
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert!(errs[0].contains("make `wait` longer than 0"), "{errs:?}");
        let errs = errors(
            quote!(key = "k", permits = 3, fair = true, wait = "1s"),
            item(),
        );
        assert!(
            errs[0].ends_with("remove `permits` to take the lock"),
            "{errs:?}"
        );
    }

    #[test]
    fn deadlock_fail_needs_a_wait_for_a_plain_lock() {
        let ok = |args: TokenStream| {
            let plan = plan(args.clone(), item()).unwrap_or_else(|errs| panic!("{args}: {errs:?}"));
            plan.options.deadlock_fail
        };
        assert_eq!(
            ok(quote!(key = "k", wait = "5s", deadlock = "fail")),
            Some(true)
        );
        assert_eq!(
            ok(quote!(key = "k", wait = "5s", deadlock = "wait")),
            Some(false)
        );
        assert_eq!(ok(quote!(key = "k")), None);
        // Each key of `keys` is a plain lock waited for with these options.
        assert_eq!(
            ok(quote!(
                keys = ["a:<user_id>", "b:<voucher_id>"],
                wait = "5s",
                deadlock = "fail"
            )),
            Some(true)
        );
        // "wait" is what a call that is not followed does anyway.
        assert_eq!(ok(quote!(key = "k", deadlock = "wait")), Some(false));
        assert_eq!(
            ok(quote!(key = "k", permits = 2, deadlock = "wait")),
            Some(false)
        );
        assert_eq!(
            ok(quote!(key = "k", mode = "read", deadlock = "wait")),
            Some(false)
        );

        let errs = errors(quote!(key = "k", deadlock = "fail"), item());
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert!(
            errs[0].ends_with("add how long it may wait, e.g. `wait = \"5s\"`"),
            "{errs:?}"
        );
        let errs = errors(quote!(key = "k", wait = "0s", deadlock = "fail"), item());
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert!(errs[0].contains("a `wait` of 0"), "{errs:?}");
    }

    #[test]
    fn deadlock_fail_with_a_semaphore_or_read_write_lock_is_one_error_whose_fix_adds_the_wait() {
        for (args, remove, ends) in [
            (
                quote!(key = "k", permits = 3, deadlock = "fail"),
                "remove `permits`",
                " and add how long it may wait, e.g. `wait = \"5s\"`, to take the lock and \
                 give up in a deadlock",
            ),
            (
                quote!(key = "k", mode = "read", wait = "5s", deadlock = "fail"),
                "remove `mode`",
                " to take the lock",
            ),
            (
                quote!(key = "k", mode = "write", wait = "0s", deadlock = "fail"),
                "remove `mode`",
                " and make `wait` longer than 0, e.g. `wait = \"5s\"`, to take the lock and \
                 give up in a deadlock",
            ),
        ] {
            let errs = errors(args.clone(), item());
            assert_eq!(errs.len(), 1, "{args}: {errs:?}");
            assert!(
                errs[0].ends_with(&format!("remove `deadlock`, or {remove}{ends}")),
                "{args}: {errs:?}"
            );
        }
        // With `permits` and `mode` both, its fix removes both (their own error says which to
        // keep, which is one of the fixes of this one).
        let errs = errors(
            quote!(
                key = "k",
                permits = 3,
                mode = "read",
                wait = "5s",
                deadlock = "fail"
            ),
            item(),
        );
        assert_eq!(errs.len(), 2, "{errs:?}");
        assert!(errs[1].contains("remove `permits` and `mode`"), "{errs:?}");
    }

    #[test]
    fn deadlock_and_fair_without_a_wait_ask_for_it_once() {
        let errs = errors(quote!(key = "k", fair = true, deadlock = "fail"), item());
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert!(errs[0].starts_with("`fair = true`"), "{errs:?}");
        let errs = errors(
            quote!(key = "k", fair = true, wait = "0s", deadlock = "fail"),
            item(),
        );
        assert_eq!(errs.len(), 1, "{errs:?}");
        for args in [
            quote!(key = "k", wiat = "5s", deadlock = "fail"),
            quote!(key = "k", wait = "5", deadlock = "fail"),
            quote!(key = "k", permits = "x", deadlock = "fail"),
            quote!(key = "k", read = true, wait = "5s", deadlock = "fail"),
        ] {
            assert_eq!(errors(args.clone(), item()).len(), 1, "{args}");
        }
    }

    #[test]
    fn permits_read_from_a_parameter_point_to_the_runtime_semaphore() {
        let item = quote! { async fn f(&self, max: u32) -> Result<(), E> { Ok(()) } };
        for (permits, reads) in [
            (quote!(self.max_exports), "`self`"),
            (quote!(max + 1), "`max`"),
            (quote!(self.limits().max), "`self`"),
        ] {
            let errs = errors(quote!(key = "k", permits = #permits), item.clone());
            assert_eq!(errs.len(), 1, "{errs:?}");
            assert!(errs[0].contains(&format!("reads {reads}")), "{errs:?}");
            assert!(
                errs[0].contains("`LockManager::semaphore(key, "),
                "{errs:?}"
            );
        }
        for permits in [quote!(self::SLOTS), quote!(limits::max), quote!(MAX)] {
            assert!(errors(quote!(key = "k", permits = #permits), item.clone()).is_empty());
        }
    }

    #[test]
    fn unknown_placeholders_suggest_the_closest_parameter() {
        let errs = errors(quote!(key = "order:<usr_id>"), item());
        assert_eq!(
            errs,
            [
                "unknown placeholder `<usr_id>` in `key`: `place_order` has no parameter named \
              `usr_id`; did you mean `<user_id>`?"
            ]
        );
    }

    #[test]
    fn unknown_placeholders_list_the_parameters_when_nothing_is_close() {
        let errs = errors(quote!(key = "order:<tenant>"), item());
        assert!(
            errs[0].ends_with("its parameters are `user_id`, `voucher_id`"),
            "{errs:?}"
        );
    }

    #[test]
    fn pattern_bindings_cannot_be_placeholders() {
        let errs = errors(
            quote!(key = "<a>"),
            quote! { async fn f((a, b): (u64, u64)) -> Result<(), E> { Ok(()) } },
        );
        assert!(
            errs[0].ends_with("name the parameter, e.g. `pair: (u64, u64)`, and write `<pair.0>`"),
            "{errs:?}"
        );
    }

    #[test]
    fn struct_pattern_bindings_suggest_the_field_path() {
        let errs = errors(
            quote!(key = "<y>"),
            quote! { async fn f(Point { x, y: (y, _) }: Point) -> Result<(), E> { Ok(()) } },
        );
        assert!(
            errs[0].ends_with("name the parameter, e.g. `point: Point`, and write `<point.y.0>`"),
            "{errs:?}"
        );
    }

    #[test]
    fn type_names_become_snake_case_parameter_names() {
        assert_eq!(snake_case("OrderLine"), "order_line");
        assert_eq!(snake_case("Point"), "point");
        assert_eq!(snake_case("u64"), "u64");
    }

    #[test]
    fn self_needs_a_receiver() {
        let errs = errors(quote!(key = "<self.id>"), item());
        assert!(errs[0].contains("has no `self` parameter"), "{errs:?}");
    }

    #[test]
    fn raw_identifiers_match_their_parameter() {
        let result = plan(
            quote!(key = "<r#type>:<type>"),
            quote! { async fn f(r#type: u8) -> Result<(), E> { Ok(()) } },
        );
        assert!(result.is_ok(), "{:?}", result.err());
    }

    #[test]
    fn keyword_fields_are_rejected_with_the_raw_spelling() {
        let errs = errors(quote!(key = "<user_id.type>"), item());
        assert!(
            errs[0].ends_with("it is a keyword, write `r#type`"),
            "{errs:?}"
        );
    }

    #[test]
    fn the_manager_is_cloned_only_when_the_body_owns_what_it_reads() {
        let clone = |receiver: TokenStream, manager: TokenStream| {
            let item =
                quote! { async fn f(#receiver, shared: &S, owned: S) -> Result<(), E> { Ok(()) } };
            plan(quote!(key = "k", manager = #manager), item)
                .expect("valid")
                .manager
                .expect("manager set")
                .clone
        };
        assert!(!clone(quote!(&self), quote!(self.locks)));
        assert!(!clone(quote!(self: &Self), quote!(self.locks)));
        assert!(clone(quote!(&mut self), quote!(self.locks)));
        assert!(clone(quote!(self), quote!(self.locks)));
        assert!(clone(quote!(self: Arc<Self>), quote!(self.locks)));
        assert!(!clone(quote!(&mut self), quote!(shared.locks)));
        assert!(clone(quote!(&self), quote!(owned.locks)));
        assert!(!clone(quote!(&mut self), quote!(LOCKS.clone())));
        assert!(clone(quote!(&mut self), quote!(&*self.locks)));
    }

    #[test]
    fn placeholders_in_other_syntaxes_are_errors_when_they_name_a_parameter() {
        for key in [
            "order:{user_id}",
            "order:${user_id}",
            "order:#{user_id}",
            "order:#user_id",
            "order:{user_id.x}",
        ] {
            let errs = errors(quote!(key = #key), item());
            assert_eq!(errs.len(), 1, "{key}: {errs:?}");
            assert!(errs[0].contains("write `<user_id"), "{key}: {errs:?}");
        }
        let errs = errors(quote!(key = "{user_id}:{voucher_id}"), item());
        assert_eq!(errs.len(), 2, "{errs:?}");
    }

    #[test]
    fn literal_braces_stay_literal() {
        for (key, rendered) in [
            ("{tenant}:<user_id>", "{{tenant}}:{}"),
            ("{<user_id>}", "{{{}}}"),
            ("{{user_id}}:<user_id>", "{{user_id}}:{}"),
            ("##user_id:<user_id>", "#user_id:{}"),
            ("{{tenant}}:<user_id>", "{{{{tenant}}}}:{}"),
            ("a#b:<user_id>", "a#b:{}"),
        ] {
            let plan = plan(quote!(key = #key), item()).expect(key);
            assert_eq!(plan.key.one().format.value(), rendered, "{key}");
        }
    }

    #[test]
    fn every_bad_placeholder_is_reported() {
        let errs = errors(quote!(key = "<usr_id>:<vouchr_id>:<x>"), item());
        assert_eq!(errs.len(), 3, "{errs:?}");
    }

    #[test]
    fn placeholders_cannot_name_a_cfg_parameter() {
        let errs = errors(
            quote!(key = "<id>"),
            quote! { async fn f(#[cfg(feature = "x")] id: u64) -> Result<(), E> { Ok(()) } },
        );
        assert!(
            errs[0].contains("`#[cfg(feature = \"x\")]` removes"),
            "{errs:?}"
        );
    }

    #[test]
    fn max_hold_is_compared_with_the_default_ttl() {
        let errs = errors(quote!(key = "k", max_hold = "10s"), item());
        assert!(
            errs[0].starts_with("`max_hold` of 10s is shorter than the `ttl` of 30s (the default)"),
            "{errs:?}"
        );
        assert!(errors(quote!(key = "k", ttl = "5s", max_hold = "10s"), item()).is_empty());
    }

    #[test]
    fn conflicting_options_give_one_error_with_one_fix() {
        let errs = errors(
            quote!(
                key = "k",
                watchdog = false,
                max_hold = "10s",
                hold_at_least = "1m"
            ),
            item(),
        );
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert!(errs[0].ends_with("remove `max_hold`"), "{errs:?}");
        let errs = errors(
            quote!(key = "k", max_hold = "10s", hold_at_least = "1m"),
            item(),
        );
        assert_eq!(
            errs,
            [
                "`max_hold` of 10s is shorter than the `ttl` of 30s (the default) and \
              `hold_at_least` of 1m: the first lease already outlasts it, and renewal would \
              stop before the lock was held at least `hold_at_least`; make `max_hold` at \
              least 1m"
            ]
        );
        assert!(
            errors(
                quote!(key = "k", max_hold = "1m", hold_at_least = "1m"),
                item()
            )
            .is_empty()
        );
    }

    #[test]
    fn limits_beyond_the_runtime_maximum_are_rejected_even_when_long_ttls_are_allowed() {
        let errs = errors(
            quote!(key = "k", ttl = "8761h", allow_long_ttl = true),
            item(),
        );
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert!(errs[0].contains("`lock_runtime::MAX_TTL`"), "{errs:?}");
        assert!(
            errors(
                quote!(key = "k", ttl = "8760h", allow_long_ttl = true),
                item()
            )
            .is_empty()
        );
        assert_eq!(
            errors(quote!(key = "k", hold_at_least = "8761h"), item()).len(),
            1
        );
    }

    #[test]
    fn a_lock_delay_that_with_the_ttl_passes_the_runtime_maximum_names_the_longest_it_may_be() {
        let errs = errors(quote!(key = "k", ttl = "1h", lock_delay = "8760h"), item());
        assert_eq!(
            errs,
            [
                "`lock_delay` of 8760h with a `ttl` of 1h is longer than the runtime accepts, \
              8760h (`lock_runtime::MAX_TTL`): every call would fail; write a `lock_delay` of \
              at most 8759h"
            ]
        );
        assert!(errors(quote!(key = "k", ttl = "1h", lock_delay = "8759h"), item()).is_empty());
        assert!(errors(quote!(key = "k", lock_delay = "15s"), item()).is_empty());
    }

    #[test]
    fn max_hold_is_compared_with_the_default_ttl_too() {
        let errs = errors(quote!(key = "k", max_hold = "10s"), item());
        assert!(errs[0].contains("(the default)"), "{errs:?}");
        assert!(errors(quote!(key = "k", ttl = "5s", max_hold = "10s"), item()).is_empty());
    }

    #[test]
    fn long_ttls_need_the_explicit_option() {
        assert_eq!(errors(quote!(key = "k", ttl = "25h"), item()).len(), 1);
        assert!(errors(quote!(key = "k", ttl = "24h"), item()).is_empty());
        assert!(
            errors(
                quote!(key = "k", ttl = "25h", allow_long_ttl = true),
                item()
            )
            .is_empty()
        );
    }

    #[test]
    fn a_missing_key_is_suggested_from_the_signature() {
        assert_eq!(
            errors(quote!(ttl = "1s"), item()),
            ["missing `key`: name the resource the lock protects, e.g. \
              #[distributed_lock(key = \"place_order:<user_id>\")]"]
        );
    }

    #[test]
    fn a_rejected_option_does_not_trigger_rules_that_depend_on_it() {
        // Only the bad `ttl` is reported, not `max_hold` against the default ttl.
        assert_eq!(
            errors(quote!(key = "k", ttl = "1x", max_hold = "10s"), item()).len(),
            1
        );
        assert_eq!(
            errors(quote!(key = "k", watchdog = "no", max_hold = "1m"), item()).len(),
            1
        );
        assert_eq!(
            errors(
                quote!(key = "k", ttl = "48h", allow_long_ttl = "yes"),
                item()
            )
            .len(),
            1
        );
    }

    #[test]
    fn wait_is_independent_of_max_hold() {
        assert!(errors(quote!(key = "k", wait = "1h", max_hold = "1m"), item()).is_empty());
    }

    #[test]
    fn error_type_is_taken_from_a_two_argument_result() {
        let check = |output: TokenStream| {
            let item = quote! { async fn f<E>() -> #output { todo!() } };
            match plan(quote!(key = "k"), item)
                .expect("valid")
                .output
                .error_check
            {
                ErrorCheck::ErrorType(_) => "error type",
                ErrorCheck::TypeParam(_) => "type parameter",
                ErrorCheck::ThroughOutput => "through output",
                ErrorCheck::None => "none",
            }
        };
        assert_eq!(check(quote!(Result<u8, MyError>)), "error type");
        assert_eq!(
            check(quote!(std::result::Result<u8, MyError>)),
            "error type"
        );
        assert_eq!(check(quote!(io::Result<u8>)), "through output");
        assert_eq!(check(quote!(AppResult<u8>)), "through output");
        assert_eq!(check(quote!(Result<u8, impl Error>)), "none");
        assert_eq!(check(quote!(Result<u8, E>)), "type parameter");
        assert_eq!(check(quote!(Result<u8, Vec<E>>)), "error type");
    }

    #[test]
    fn obvious_non_results_are_rejected_with_a_suggestion() {
        let errs = errors(
            quote!(key = "k"),
            quote! { async fn f() -> Option<u64> { None } },
        );
        assert!(
            errs[0].ends_with("write e.g. `-> Result<Option<u64>, lock_runtime::LockError>`"),
            "{errs:?}"
        );
    }

    #[test]
    fn placeholders_of_a_type_parameter_are_checked_as_display() {
        let plan = plan(
            quote!(key = "<a>:<b>:<c>:<d>:<e>:<f.0>"),
            quote! {
                async fn f<T, U>(a: T, b: &U, c: impl Sized, d: Order, e: Vec<T>, f: (T,))
                    -> Result<(), E> { Ok(()) }
            },
        )
        .expect("valid");
        let type_param: Vec<bool> = plan
            .key
            .one()
            .parts
            .iter()
            .map(|part| part.type_param)
            .collect();
        assert_eq!(type_param, [true, true, true, false, false, false]);
    }
}
