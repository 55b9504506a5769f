//! The attribute's arguments: `key = "..", ttl = "30s", manager = self.locks, ...`.
//!
//! Each option has its own setter with its own "set more than once" error, and each value is
//! checked on its own here (a duration parses, a key template is well formed). Rules that
//! involve several options, or the fn signature, live in `validate`.

use proc_macro2::TokenStream;
use syn::ext::IdentExt;
use syn::parse::{ParseStream, Parser};
use syn::{Expr, ExprLit, Ident, Lit, LitBool, LitStr, Path, Token, UnOp};

use crate::duration::{self, DurationError};
use crate::limits::MIN_TTL_MILLIS;
use crate::suggest;
use crate::template::Template;

/// The options, in the order the docs list them, with an example of each for messages.
const OPTIONS: [(&str, &str); 16] = [
    ("key", "key = \"order:<order_id>\""),
    ("keys", "keys = [\"account:<from>\", \"account:<to>\"]"),
    ("ttl", "ttl = \"30s\""),
    ("wait", "wait = \"5s\""),
    ("permits", "permits = 3"),
    ("mode", "mode = \"read\""),
    ("fair", "fair = true"),
    ("deadlock", "deadlock = \"fail\""),
    ("watchdog", "watchdog = false"),
    ("on_lease_lost", "on_lease_lost = \"continue\""),
    ("hold_at_least", "hold_at_least = \"1m\""),
    ("max_hold", "max_hold = \"10m\""),
    ("lock_delay", "lock_delay = \"15s\""),
    ("allow_long_ttl", "allow_long_ttl = true"),
    ("manager", "manager = self.locks"),
    ("crate", "crate = \"my_locks\""),
];

/// Names people bring from other lock libraries (Redisson, Spring Integration, ShedLock, lock4j),
/// mapped to ours. Matched after converting camelCase to snake_case, so `leaseTime` is
/// `lease_time` here.
const ALIASES: [(&str, &str); 31] = [
    ("name", "key"),
    ("key_list", "keys"),
    ("keys_list", "keys"),
    ("lock_keys", "keys"),
    ("lease", "ttl"),
    ("lease_time", "ttl"),
    ("expire", "ttl"),
    ("expire_time", "ttl"),
    ("expiry", "ttl"),
    ("expire_after", "ttl"),
    ("timeout", "wait"),
    ("wait_time", "wait"),
    ("acquire_timeout", "wait"),
    ("try_lock_timeout", "wait"),
    ("lock_at_least_for", "hold_at_least"),
    ("lock_at_most_for", "max_hold"),
    ("crate_path", "crate"),
    ("fair_lock", "fair"),
    ("fifo", "fair"),
    ("max_permits", "permits"),
    ("permit_count", "permits"),
    ("semaphore", "permits"),
    ("read_write", "mode"),
    ("lock_mode", "mode"),
    ("deadlocks", "deadlock"),
    ("on_deadlock", "deadlock"),
    ("deadlock_detection", "deadlock"),
    ("detect_deadlock", "deadlock"),
    ("detect_deadlocks", "deadlock"),
    ("deadlock_policy", "deadlock"),
    ("deadlock_action", "deadlock"),
];

/// Flags that mean a value of an option: `read = true` is `mode = "read"`.
const VALUE_ALIASES: [(&str, &str, &str); 6] = [
    ("read", "mode", "\"read\""),
    ("read_lock", "mode", "\"read\""),
    ("write", "mode", "\"write\""),
    ("write_lock", "mode", "\"write\""),
    ("fail_on_deadlock", "deadlock", "\"fail\""),
    ("abort_on_deadlock", "deadlock", "\"fail\""),
];

/// A duration option: its value and the literal it came from (for error spans and messages).
pub(crate) struct DurationArg {
    pub(crate) millis: u64,
    pub(crate) lit: LitStr,
}

/// `permits = N`: a literal, checked here, or a const expression, checked when the constant is
/// evaluated (see `expand`).
pub(crate) struct PermitsArg {
    pub(crate) value: Expr,
}

pub(crate) struct BoolArg {
    pub(crate) value: bool,
    pub(crate) span: proc_macro2::Span,
}

/// `mode = "read" | "write"`: a read share or the write hold of the read-write lock of the key.
pub(crate) struct ModeArg {
    pub(crate) write: bool,
    pub(crate) lit: LitStr,
}

/// `deadlock = "fail" | "wait"`: what the call does when its wait is part of a deadlock.
pub(crate) struct DeadlockArg {
    pub(crate) fail: bool,
    pub(crate) lit: LitStr,
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum OnLeaseLost {
    Abort,
    Continue,
}

pub(crate) struct KeyArg {
    pub(crate) template: Template,
    pub(crate) lit: LitStr,
    /// One of `keys = [..]`, not `key = ".."`: messages name the option it came from.
    pub(crate) in_keys: bool,
}

/// A message about a key template, written for `key`, as it reads for a template of `keys`.
pub(crate) fn about_keys(message: String) -> String {
    message
        .replace("`key` is empty", "a template in `keys` is empty")
        .replace(" in `key`", " in `keys`")
}

/// `keys = ["..", ".."]`: one template per lock, at least one, none twice.
pub(crate) struct KeysArg {
    pub(crate) keys: Vec<KeyArg>,
}

/// One option's value, plus whether the option appeared at all: an option that was given with a
/// bad value is not "missing", and a second occurrence is still a duplicate. An unknown option
/// that was probably meant as this one (`wiat = "5s"`) counts as given with a bad value: its
/// error is the one to fix, and rules that depend on this option wait for that fix.
pub(crate) struct Slot<T> {
    name: &'static str,
    seen: bool,
    guessed: bool,
    pub(crate) value: Option<T>,
}

impl<T> Slot<T> {
    const fn new(name: &'static str) -> Self {
        Slot {
            name,
            seen: false,
            guessed: false,
            value: None,
        }
    }

    fn set(&mut self, name: &Ident, parse: impl FnOnce() -> syn::Result<T>) -> syn::Result<()> {
        if self.seen {
            return Err(syn::Error::new(
                name.span(),
                format!("`{}` is set more than once: keep only one", self.name),
            ));
        }
        self.seen = true;
        self.value = Some(parse()?);
        Ok(())
    }

    pub(crate) fn get(&self) -> Option<&T> {
        self.value.as_ref()
    }

    /// Given, but with a value that was rejected, or under a misspelled name (and already
    /// reported).
    pub(crate) fn failed(&self) -> bool {
        self.seen && self.value.is_none() || self.guessed && !self.seen
    }

    /// Not given at all, not even misspelled.
    pub(crate) fn missing(&self) -> bool {
        !self.seen && !self.guessed
    }
}

/// The parsed options. Values that failed to parse are absent; their errors are in `errors`.
pub(crate) struct Args {
    pub(crate) key: Slot<KeyArg>,
    pub(crate) keys: Slot<KeysArg>,
    pub(crate) ttl: Slot<DurationArg>,
    pub(crate) wait: Slot<DurationArg>,
    pub(crate) permits: Slot<PermitsArg>,
    pub(crate) mode: Slot<ModeArg>,
    pub(crate) fair: Slot<BoolArg>,
    pub(crate) deadlock: Slot<DeadlockArg>,
    pub(crate) watchdog: Slot<BoolArg>,
    pub(crate) on_lease_lost: Slot<OnLeaseLost>,
    pub(crate) hold_at_least: Slot<DurationArg>,
    pub(crate) max_hold: Slot<DurationArg>,
    pub(crate) lock_delay: Slot<DurationArg>,
    pub(crate) allow_long_ttl: Slot<BoolArg>,
    pub(crate) manager: Slot<Expr>,
    pub(crate) krate: Slot<Path>,
}

impl Args {
    fn new() -> Self {
        Args {
            key: Slot::new("key"),
            keys: Slot::new("keys"),
            ttl: Slot::new("ttl"),
            wait: Slot::new("wait"),
            permits: Slot::new("permits"),
            mode: Slot::new("mode"),
            fair: Slot::new("fair"),
            deadlock: Slot::new("deadlock"),
            watchdog: Slot::new("watchdog"),
            on_lease_lost: Slot::new("on_lease_lost"),
            hold_at_least: Slot::new("hold_at_least"),
            max_hold: Slot::new("max_hold"),
            lock_delay: Slot::new("lock_delay"),
            allow_long_ttl: Slot::new("allow_long_ttl"),
            manager: Slot::new("manager"),
            krate: Slot::new("crate"),
        }
    }

    /// Parses the attribute's arguments. Every option is checked even after an error, so that
    /// several independent mistakes are reported together; a syntax error stops the parse. A
    /// missing `key` is reported by `validate`, which can suggest one from the signature.
    pub(crate) fn parse(tokens: TokenStream) -> (Args, Vec<syn::Error>) {
        let mut args = Args::new();
        let mut errors = Vec::new();
        // Unknown options, with where their error goes: what they meant depends on the
        // options that come after them (`kyes = [..]` is `keys` only if there is no `key`).
        let mut unknown: Vec<(usize, Ident, Expr)> = Vec::new();
        let parser = |input: ParseStream<'_>| {
            while !input.is_empty() {
                let (name, value) = parse_option(input)?;
                match args.set(&name, value) {
                    Ok(Ok(())) => {}
                    Ok(Err(value)) => unknown.push((errors.len(), name.clone(), value)),
                    Err(err) => errors.push(err),
                }
                if args.key.seen
                    && args.keys.seen
                    && matches!(name.unraw().to_string().as_str(), "key" | "keys")
                {
                    errors.push(key_and_keys(&name, &args));
                }
                if input.is_empty() {
                    break;
                }
                input.parse::<Token![,]>()?;
            }
            Ok(())
        };
        if let Err(err) = parser.parse2(tokens) {
            // The options after a syntax error were not read: none of them is missing.
            args.key.seen = true;
            errors.push(err);
        }
        // From the last, so that the positions of the earlier ones still hold.
        for (at, name, value) in unknown.into_iter().rev() {
            let meant = args.meant(&name, &value);
            if let Some(meant) = &meant {
                args.guess(meant.option);
            }
            errors.insert(at, unknown_option(&name, meant.as_ref()));
        }
        (args, errors)
    }

    /// Sets a known option; gives the value of an unknown one back, for `meant`.
    fn set(&mut self, name: &Ident, value: Expr) -> syn::Result<Result<(), Expr>> {
        let value = ungroup(value);
        let set = match name.unraw().to_string().as_str() {
            "key" => self.key.set(name, || key(value)),
            "keys" => self.keys.set(name, || keys(value)),
            "ttl" => self.ttl.set(name, || ttl(value)),
            "wait" => self.wait.set(name, || duration("wait", value)),
            "permits" => self.permits.set(name, || permits(value)),
            "mode" => self.mode.set(name, || mode(value)),
            "fair" => self.fair.set(name, || boolean("fair", value)),
            "deadlock" => self.deadlock.set(name, || deadlock(value)),
            "watchdog" => self.watchdog.set(name, || boolean("watchdog", value)),
            "on_lease_lost" => self.on_lease_lost.set(name, || on_lease_lost(value)),
            "hold_at_least" => self
                .hold_at_least
                .set(name, || duration("hold_at_least", value)),
            "max_hold" => self.max_hold.set(name, || duration("max_hold", value)),
            "lock_delay" => self.lock_delay.set(name, || duration("lock_delay", value)),
            "allow_long_ttl" => self
                .allow_long_ttl
                .set(name, || boolean("allow_long_ttl", value)),
            "manager" => self.manager.set(name, || manager(value)),
            "crate" => self.krate.set(name, || crate_path(value)),
            _ => return Ok(Err(value)),
        };
        set.map(Ok)
    }

    /// The option an unknown one probably is: named after the value it is a flag for
    /// (`read = true`), its own name in another case or from another library, a close
    /// spelling, or, when no key is given, what its value looks like: a string is the `key`, a
    /// list the `keys`.
    fn meant(&self, name: &Ident, value: &Expr) -> Option<Meant> {
        let is_false = matches!(value, Expr::Lit(ExprLit { lit: Lit::Bool(b), .. }) if !b.value);
        let by_name = meant_by_name(name).filter(|meant| !(is_false && meant.value.is_some()));
        let by_value = match value {
            Expr::Lit(ExprLit {
                lit: Lit::Str(lit), ..
            }) if duration::parse_millis(&lit.value()).is_err() => Some("key"),
            Expr::Array(_) => Some("keys"),
            _ => None,
        };
        let no_key = !self.key.seen && !self.keys.seen;
        match (by_name, by_value) {
            (None, Some(option)) if no_key => Some(Meant::option(option)),
            (Some(meant), Some(option)) if no_key && matches!(meant.option, "key" | "keys") => {
                Some(Meant::option(option))
            }
            (by_name, _) => by_name,
        }
    }

    /// Marks the option an unknown one was meant as (see [`Slot`]).
    fn guess(&mut self, option: &str) {
        let guessed = match option {
            "key" => &mut self.key.guessed,
            "keys" => &mut self.keys.guessed,
            "ttl" => &mut self.ttl.guessed,
            "wait" => &mut self.wait.guessed,
            "permits" => &mut self.permits.guessed,
            "mode" => &mut self.mode.guessed,
            "fair" => &mut self.fair.guessed,
            "deadlock" => &mut self.deadlock.guessed,
            "watchdog" => &mut self.watchdog.guessed,
            "on_lease_lost" => &mut self.on_lease_lost.guessed,
            "hold_at_least" => &mut self.hold_at_least.guessed,
            "max_hold" => &mut self.max_hold.guessed,
            "lock_delay" => &mut self.lock_delay.guessed,
            "allow_long_ttl" => &mut self.allow_long_ttl.guessed,
            "manager" => &mut self.manager.guessed,
            "crate" => &mut self.krate.guessed,
            _ => return,
        };
        *guessed = true;
    }
}

/// What an unknown option was probably meant to be: the option, and for a flag that means one
/// of its values (`read = true`), that value (`"read"`).
struct Meant {
    option: &'static str,
    value: Option<&'static str>,
}

impl Meant {
    fn option(option: &'static str) -> Self {
        Meant {
            option,
            value: None,
        }
    }
}

impl std::fmt::Display for Meant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.value {
            Some(value) => write!(f, "`{} = {value}`", self.option),
            None => write!(f, "`{}`", self.option),
        }
    }
}

/// The option an unknown name probably is: a flag for one of its values (`read` for
/// `mode = "read"`), its name in another case or from another library, or a close spelling.
fn meant_by_name(name: &Ident) -> Option<Meant> {
    let written = name.unraw().to_string();
    let snake = suggest::snake_case(&written);
    if let Some((_, option, value)) = VALUE_ALIASES.iter().find(|(flag, ..)| *flag == snake) {
        return Some(Meant {
            option,
            value: Some(value),
        });
    }
    let options = || OPTIONS.iter().map(|(option, _)| *option);
    options()
        .find(|option| *option == snake)
        .or_else(|| {
            ALIASES
                .iter()
                .find(|(alias, _)| *alias == snake)
                .map(|(_, option)| *option)
        })
        .or_else(|| suggest::closest(&snake, options()))
        .or_else(|| suggest::closest(&written, options()))
        .map(Meant::option)
}

/// `name = value`, with messages for the usual slips (a bare string, a missing `=`).
fn parse_option(input: ParseStream<'_>) -> syn::Result<(Ident, Expr)> {
    if input.peek(LitStr) {
        let lit: LitStr = input.parse()?;
        return Err(syn::Error::new(
            lit.span(),
            format!(
                "the key needs its option name: write `key = {}`",
                quote::ToTokens::to_token_stream(&lit)
            ),
        ));
    }
    let name = input.call(Ident::parse_any).map_err(|err| {
        syn::Error::new(
            err.span(),
            format!(
                "expected an option such as `key = \"order:<order_id>\"`; valid options are {}",
                option_list()
            ),
        )
    })?;
    if !input.peek(Token![=]) {
        let shown = name.unraw().to_string();
        let example = OPTIONS
            .iter()
            .find(|(option, _)| *option == shown)
            .map(|(_, example)| (*example).to_owned());
        return Err(syn::Error::new(
            name.span(),
            match example {
                Some(example) => format!("`{shown}` needs a value: write `{example}`"),
                None => unknown_option(&name, meant_by_name(&name).as_ref()).to_string(),
            },
        ));
    }
    input.parse::<Token![=]>()?;
    let value: Expr = input.parse()?;
    Ok((name, value))
}

fn option_list() -> String {
    OPTIONS
        .iter()
        .map(|(name, _)| format!("`{name}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn unknown_option(name: &Ident, meant: Option<&Meant>) -> syn::Error {
    let hint = meant
        .map(|meant| format!(" (did you mean {meant}?)"))
        .unwrap_or_default();
    syn::Error::new(
        name.span(),
        format!(
            "unknown option `{}`{hint}; valid options are {}",
            name.unraw(),
            option_list()
        ),
    )
}

/// A value that reached the attribute through a `macro_rules!` fragment (`$key:literal`,
/// `$ttl:expr`) sits in an invisible group: look through it.
fn ungroup(value: Expr) -> Expr {
    match value {
        Expr::Group(group) => ungroup(*group.expr),
        value => value,
    }
}

fn string_lit(value: &Expr) -> Option<&LitStr> {
    match value {
        Expr::Lit(ExprLit {
            lit: Lit::Str(lit), ..
        }) => Some(lit),
        _ => None,
    }
}

fn key(value: Expr) -> syn::Result<KeyArg> {
    let Some(lit) = string_lit(&value) else {
        return Err(syn::Error::new_spanned(
            value,
            "`key` must be a string literal, with parameters as placeholders: \
             write e.g. `key = \"order:<order_id>\"` (the template is checked at compile time, \
             so constants and macros like format! are not accepted)",
        ));
    };
    let template = Template::parse(&lit.value()).map_err(|err| syn::Error::new(lit.span(), err))?;
    Ok(KeyArg {
        template,
        lit: lit.clone(),
        in_keys: false,
    })
}

/// `key` and `keys` both given: the fix is one `keys` list holding every template once.
fn key_and_keys(name: &Ident, args: &Args) -> syn::Error {
    let head = "`key` and `keys` cannot be used together: `key` names one lock and `keys` several";
    let message = match (args.key.get(), args.keys.get()) {
        (Some(key), Some(keys)) if keys.keys.iter().any(|k| k.lit.value() == key.lit.value()) => {
            let shown = quote::ToTokens::to_token_stream(&key.lit);
            format!(
                "{head}; `keys` already lists {shown}: remove `key` to take the locks of `keys`, \
                 or remove `keys` to take only the lock of `key`"
            )
        }
        (Some(key), Some(keys)) => {
            let templates: Vec<String> = std::iter::once(key)
                .chain(&keys.keys)
                .map(|key| quote::ToTokens::to_token_stream(&key.lit).to_string())
                .collect();
            format!(
                "{head}; for several, remove `key` and write `keys = [{}]`; for one, keep `key` \
                 and remove `keys`",
                templates.join(", ")
            )
        }
        _ => format!(
            "{head}; for several, remove `key` and write `keys = [..]` with every template; \
             for one, keep `key` and remove `keys`"
        ),
    };
    syn::Error::new(name.span(), message)
}

const KEYS_EXAMPLE: &str = "keys = [\"account:<from>\", \"account:<to>\"]";

fn keys(value: Expr) -> syn::Result<KeysArg> {
    let array = match value {
        Expr::Array(array) => array,
        value => {
            let message = match string_lit(&value) {
                Some(lit) if lit.value().contains(',') => {
                    // Several templates in one string would be one lock named with the commas.
                    let templates: Vec<String> = lit
                        .value()
                        .split(',')
                        .map(str::trim)
                        .filter(|template| !template.is_empty())
                        .map(|template| format!("{template:?}"))
                        .collect();
                    format!(
                        "`keys` takes a list with one string per key template, not one string \
                         with commas: write `keys = [{}]`",
                        templates.join(", ")
                    )
                }
                Some(lit) => {
                    let shown = quote::ToTokens::to_token_stream(lit).to_string();
                    format!(
                        "`keys` takes a list of key templates in brackets: write \
                         `keys = [{shown}]`, or `key = {shown}` for one lock"
                    )
                }
                None => format!(
                    "`keys` takes a list of string literals, one key template per lock: write \
                     e.g. `{KEYS_EXAMPLE}`"
                ),
            };
            return Err(syn::Error::new_spanned(value, message));
        }
    };
    if array.elems.is_empty() {
        return Err(syn::Error::new_spanned(
            array,
            format!(
                "`keys` is empty: list the key template of every lock to take, e.g. \
                 `{KEYS_EXAMPLE}`, or write `key = \"..\"` for one lock"
            ),
        ));
    }
    let mut keys: Vec<KeyArg> = Vec::with_capacity(array.elems.len());
    let mut errors: Option<syn::Error> = None;
    let mut fail = |err: syn::Error| match &mut errors {
        Some(errors) => errors.combine(err),
        None => errors = Some(err),
    };
    for element in array.elems {
        let element = ungroup(element);
        let Some(lit) = string_lit(&element) else {
            fail(syn::Error::new_spanned(
                element,
                format!(
                    "each of `keys` must be a string literal, with parameters as placeholders: \
                     write e.g. `{KEYS_EXAMPLE}` (the templates are checked at compile time, \
                     so constants and macros like format! are not accepted)"
                ),
            ));
            continue;
        };
        let template = match Template::parse(&lit.value()) {
            Ok(template) => template,
            Err(err) => {
                fail(syn::Error::new(lit.span(), about_keys(err.to_string())));
                continue;
            }
        };
        if keys.iter().any(|key| key.lit.value() == lit.value()) {
            fail(syn::Error::new(
                lit.span(),
                format!(
                    "`keys` lists {} twice: both would always render the same lock; remove \
                     one of them",
                    quote::ToTokens::to_token_stream(lit)
                ),
            ));
            continue;
        }
        keys.push(KeyArg {
            template,
            lit: lit.clone(),
            in_keys: true,
        });
    }
    match errors {
        Some(errors) => Err(errors),
        None => Ok(KeysArg { keys }),
    }
}

fn ttl(value: Expr) -> syn::Result<DurationArg> {
    let ttl = duration("ttl", value)?;
    if ttl.millis == 0 {
        return Err(syn::Error::new(
            ttl.lit.span(),
            "`ttl` must be longer than zero: it is how long the lock lives if its holder \
             crashes; write e.g. `ttl = \"30s\"`",
        ));
    }
    if ttl.millis < MIN_TTL_MILLIS {
        return Err(syn::Error::new(
            ttl.lit.span(),
            "`ttl` must be at least 10ms, since the lease is renewed every ttl/3; \
             write e.g. `ttl = \"500ms\"`",
        ));
    }
    Ok(ttl)
}

fn duration(name: &str, value: Expr) -> syn::Result<DurationArg> {
    let lit = match &value {
        Expr::Lit(ExprLit {
            lit: Lit::Str(lit), ..
        }) => lit,
        Expr::Lit(ExprLit {
            lit: Lit::Int(int), ..
        }) => {
            return Err(syn::Error::new(
                int.span(),
                format!(
                    "`{name}` takes a string with a unit: write `{name} = \"{}s\"` \
                     (units: ms, s, m, h)",
                    int.base10_digits()
                ),
            ));
        }
        Expr::Lit(ExprLit {
            lit: Lit::Float(float),
            ..
        }) => {
            return Err(syn::Error::new(
                float.span(),
                format!(
                    "`{name}` takes a string with a unit, not a number: write `{name} = \"{}\"` \
                     (units: ms, s, m, h)",
                    float_as_duration(float.base10_digits())
                ),
            ));
        }
        Expr::Unary(unary) if matches!(unary.op, UnOp::Neg(_)) => {
            return Err(syn::Error::new_spanned(
                value,
                format!("`{name}` {}", DurationError::Negative),
            ));
        }
        _ => {
            return Err(syn::Error::new_spanned(
                value,
                format!(
                    "`{name}` takes a duration string such as \"30s\" (units: ms, s, m, h); \
                     it is checked at compile time, so constants are not accepted"
                ),
            ));
        }
    };
    let millis = duration::parse_millis(&lit.value())
        .map_err(|err| syn::Error::new(lit.span(), format!("`{name}` {err}")))?;
    Ok(DurationArg {
        millis,
        lit: lit.clone(),
    })
}

/// `1.5` (read as seconds, as the integer case is) written as a duration string: `"1500ms"`.
fn float_as_duration(digits: &str) -> String {
    let (whole, fraction) = digits.split_once('.').unwrap_or((digits, ""));
    let fraction = fraction.trim_end_matches('0');
    if fraction.is_empty() {
        return format!("{}s", if whole.is_empty() { "0" } else { whole });
    }
    if fraction.len() <= 3 && !digits.contains(['e', 'E']) {
        let millis = format!("{whole}{fraction:0<3}");
        let millis = millis.trim_start_matches('0');
        return format!("{}ms", if millis.is_empty() { "0" } else { millis });
    }
    "1500ms".to_owned()
}

fn permits(value: Expr) -> syn::Result<PermitsArg> {
    let literal = match &value {
        Expr::Lit(ExprLit {
            lit: Lit::Int(int), ..
        }) => int,
        Expr::Lit(ExprLit {
            lit: Lit::Str(lit), ..
        }) if lit.value().trim().parse::<u32>().is_ok() => {
            return Err(syn::Error::new(
                lit.span(),
                format!(
                    "`permits` takes a number without quotes: write `permits = {}`",
                    lit.value().trim()
                ),
            ));
        }
        Expr::Lit(_) | Expr::Unary(_) => {
            return Err(syn::Error::new_spanned(
                value,
                "`permits` takes how many holders the semaphore admits at once, a whole number \
                 of at least 1: write e.g. `permits = 3`",
            ));
        }
        // A constant, or a const expression: checked when it is evaluated.
        _ => return Ok(PermitsArg { value }),
    };
    match literal.base10_parse::<u32>() {
        Ok(0) => Err(syn::Error::new(
            literal.span(),
            "`permits = 0` makes a semaphore nobody could ever hold: write how many holders \
             it admits at once, at least 1 (`permits = 1` for one at a time)",
        )),
        Ok(_) => Ok(PermitsArg { value }),
        Err(_) => Err(syn::Error::new(
            literal.span(),
            format!(
                "`permits` must be a whole number from 1 to {}, found `{}`",
                u32::MAX,
                literal.base10_digits()
            ),
        )),
    }
}

fn boolean(name: &str, value: Expr) -> syn::Result<BoolArg> {
    let meant = match &value {
        Expr::Lit(ExprLit {
            lit: Lit::Bool(LitBool { value, span }),
            ..
        }) => {
            return Ok(BoolArg {
                value: *value,
                span: *span,
            });
        }
        Expr::Lit(ExprLit {
            lit: Lit::Str(lit), ..
        }) => {
            let fix = match yes_or_no(&lit.value()) {
                Some(meant) => format!("write `{name} = {meant}`"),
                None => format!("write `{name} = true` or `{name} = false`"),
            };
            return Err(syn::Error::new(
                lit.span(),
                format!("`{name}` takes `true` or `false` without quotes: {fix}"),
            ));
        }
        Expr::Lit(ExprLit {
            lit: Lit::Int(int), ..
        }) => yes_or_no(int.base10_digits()),
        Expr::Path(path) => path
            .path
            .get_ident()
            .and_then(|ident| yes_or_no(&ident.to_string())),
        _ => None,
    };
    let fix = match meant {
        Some(meant) => format!("write `{name} = {meant}`"),
        None => format!("write `{name} = true` or `{name} = false`"),
    };
    Err(syn::Error::new_spanned(
        value,
        format!("`{name}` takes `true` or `false`: {fix}"),
    ))
}

/// The boolean a word other than `true` or `false` means, if it is a common one.
fn yes_or_no(word: &str) -> Option<bool> {
    match word.trim().to_ascii_lowercase().as_str() {
        "true" | "yes" | "y" | "on" | "1" | "enabled" | "enable" => Some(true),
        "false" | "no" | "n" | "off" | "0" | "disabled" | "disable" => Some(false),
        _ => None,
    }
}

fn on_lease_lost(value: Expr) -> syn::Result<OnLeaseLost> {
    let Some(lit) = string_lit(&value) else {
        return Err(syn::Error::new_spanned(
            value,
            "`on_lease_lost` takes a string: write `on_lease_lost = \"abort\"` \
             or `on_lease_lost = \"continue\"`",
        ));
    };
    match lit.value().as_str() {
        "abort" => Ok(OnLeaseLost::Abort),
        "continue" => Ok(OnLeaseLost::Continue),
        other => {
            let hint = suggest::closest(other, ["abort", "continue"])
                .map(|meant| format!(" (did you mean \"{meant}\"?)"))
                .unwrap_or_default();
            Err(syn::Error::new(
                lit.span(),
                format!(
                    "`on_lease_lost` must be \"abort\" (stop the body and return \
                     LockError::LeaseLost) or \"continue\" (let it run on), found \
                     \"{}\"{hint}",
                    other.escape_debug()
                ),
            ))
        }
    }
}

fn mode(value: Expr) -> syn::Result<ModeArg> {
    let Some(lit) = string_lit(&value) else {
        return Err(syn::Error::new_spanned(
            value,
            "`mode` takes a string: write `mode = \"read\"` or `mode = \"write\"`",
        ));
    };
    match lit.value().as_str() {
        "read" => Ok(ModeArg {
            write: false,
            lit: lit.clone(),
        }),
        "write" => Ok(ModeArg {
            write: true,
            lit: lit.clone(),
        }),
        other => {
            let hint = suggest::closest(other, ["read", "write"])
                .map(|meant| format!(" (did you mean \"{meant}\"?)"))
                .unwrap_or_default();
            Err(syn::Error::new(
                lit.span(),
                format!(
                    "`mode` must be \"read\" (a shared read lock: many readers at once) or \
                     \"write\" (the exclusive write lock of the same read-write lock), found \
                     \"{}\"{hint}; leave `mode` out for the plain lock",
                    other.escape_debug()
                ),
            ))
        }
    }
}

/// What `deadlock` accepts, and other words for each that people write (`"abort"`, `"error"`).
const DEADLOCK_WORDS: [(&str, &str); 16] = [
    ("fail", "fail"),
    ("wait", "wait"),
    ("abort", "fail"),
    ("error", "fail"),
    ("err", "fail"),
    ("give_up", "fail"),
    ("raise", "fail"),
    ("throw", "fail"),
    ("detect", "fail"),
    ("break", "fail"),
    ("block", "wait"),
    ("keep_waiting", "wait"),
    ("ignore", "wait"),
    ("none", "wait"),
    ("continue", "wait"),
    ("default", "wait"),
];

/// The value of `deadlock` a word other than `"fail"` or `"wait"` means, if any.
fn deadlock_word(word: &str) -> Option<&'static str> {
    let word = suggest::snake_case(word.trim()).replace(['-', ' '], "_");
    DEADLOCK_WORDS
        .iter()
        .find(|(other, _)| *other == word)
        .map(|(_, meant)| *meant)
        .or_else(|| suggest::closest(&word, ["fail", "wait"]))
        .or_else(|| yes_or_no(&word).map(|fail| if fail { "fail" } else { "wait" }))
}

fn deadlock(value: Expr) -> syn::Result<DeadlockArg> {
    let Some(lit) = string_lit(&value) else {
        // `fail`, `Deadlock::Fail`, `true`: the value it means, as a string.
        let meant = match &value {
            Expr::Path(path) => path
                .path
                .segments
                .last()
                .and_then(|segment| deadlock_word(&segment.ident.unraw().to_string())),
            Expr::Lit(ExprLit {
                lit: Lit::Bool(b), ..
            }) => Some(if b.value { "fail" } else { "wait" }),
            Expr::Lit(ExprLit {
                lit: Lit::Int(int), ..
            }) => deadlock_word(int.base10_digits()),
            _ => None,
        };
        let fix = match meant {
            Some("wait") => {
                "write `deadlock = \"wait\"`, or leave `deadlock` out: waiting is the default"
                    .to_owned()
            }
            Some(meant) => format!("write `deadlock = \"{meant}\"`"),
            None => "write `deadlock = \"fail\"` or `deadlock = \"wait\"`".to_owned(),
        };
        let why = match &value {
            Expr::Lit(ExprLit {
                lit: Lit::Bool(_), ..
            }) => {
                ", not a boolean (deadlocks are found and logged either way; the string says \
                 what this call does when it is in one)"
            }
            _ => "",
        };
        return Err(syn::Error::new_spanned(
            value,
            format!("`deadlock` takes a string{why}: {fix}"),
        ));
    };
    match lit.value().as_str() {
        "fail" => Ok(DeadlockArg {
            fail: true,
            lit: lit.clone(),
        }),
        "wait" => Ok(DeadlockArg {
            fail: false,
            lit: lit.clone(),
        }),
        other => {
            let hint = deadlock_word(other)
                .map(|meant| format!(" (did you mean \"{meant}\"?)"))
                .unwrap_or_default();
            Err(syn::Error::new(
                lit.span(),
                format!(
                    "`deadlock` must be \"fail\" (when this call's wait is part of a deadlock, \
                     give up with LockError::Deadlock) or \"wait\" (keep waiting until `wait` \
                     runs out, the default), found \"{}\"{hint}",
                    other.escape_debug()
                ),
            ))
        }
    }
}

fn manager(value: Expr) -> syn::Result<Expr> {
    let Some(lit) = string_lit(&value) else {
        return Ok(value);
    };
    let example = match lit.parse::<Expr>() {
        Ok(_) => lit.value().trim().to_owned(),
        Err(_) => "self.locks".to_owned(),
    };
    Err(syn::Error::new(
        lit.span(),
        format!(
            "`manager` takes an expression, not a string: write `manager = {example}` \
             (without quotes)"
        ),
    ))
}

fn crate_path(value: Expr) -> syn::Result<Path> {
    let Some(lit) = string_lit(&value) else {
        let shown = quote::ToTokens::to_token_stream(&value)
            .to_string()
            .replace(' ', "");
        return Err(syn::Error::new_spanned(
            value,
            format!("`crate` takes a string: write `crate = \"{shown}\"`"),
        ));
    };
    lit.parse::<Path>().map_err(|_| {
        syn::Error::new(
            lit.span(),
            format!(
                "`crate` must be a path to the lock runtime crate, such as \"my_locks\" or \
                 \"::my_locks\", found \"{}\"",
                lit.value().escape_debug()
            ),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use quote::quote;

    fn errors(tokens: TokenStream) -> Vec<String> {
        Args::parse(tokens)
            .1
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    #[test]
    fn every_option_parses() {
        let (args, errs) = Args::parse(quote! {
            key = "order:<id>", ttl = "10s", wait = "1m30s", watchdog = false,
            on_lease_lost = "continue", hold_at_least = "1s", max_hold = "5m",
            allow_long_ttl = true, manager = self.locks, crate = "::my_locks",
        });
        assert!(
            errs.is_empty(),
            "{:?}",
            errs.iter().map(ToString::to_string).collect::<Vec<_>>()
        );
        assert_eq!(args.ttl.get().map(|d| d.millis), Some(10_000));
        assert_eq!(args.wait.get().map(|d| d.millis), Some(90_000));
        assert_eq!(args.watchdog.get().map(|b| b.value), Some(false));
        assert!(args.on_lease_lost.get() == Some(&OnLeaseLost::Continue));
        assert_eq!(args.hold_at_least.get().map(|d| d.millis), Some(1_000));
        assert_eq!(args.max_hold.get().map(|d| d.millis), Some(300_000));
        assert_eq!(args.allow_long_ttl.get().map(|b| b.value), Some(true));
        assert!(args.manager.get().is_some());
        assert!(args.krate.get().is_some());
    }

    #[test]
    fn mode_takes_read_or_write() {
        let (args, errs) = Args::parse(quote!(key = "a", mode = "write"));
        assert!(errs.is_empty() && args.mode.get().is_some_and(|mode| mode.write));
        let errs = errors(quote!(key = "a", mode = "Read"));
        assert!(errs[0].contains("(did you mean \"read\"?)"), "{errs:?}");
        let errs = errors(quote!(key = "a", mode = read));
        assert!(errs[0].starts_with("`mode` takes a string"), "{errs:?}");
    }

    #[test]
    fn deadlock_takes_fail_or_wait() {
        let (args, errs) = Args::parse(quote!(key = "a", deadlock = "fail"));
        assert!(errs.is_empty() && args.deadlock.get().is_some_and(|d| d.fail));
        let (args, errs) = Args::parse(quote!(key = "a", deadlock = "wait"));
        assert!(errs.is_empty() && args.deadlock.get().is_some_and(|d| !d.fail));
        for (bad, says) in [
            (quote!(true), "not a boolean"),
            (quote!(true), "write `deadlock = \"fail\"`"),
            (
                quote!(false),
                "write `deadlock = \"wait\"`, or leave `deadlock` out",
            ),
            (
                quote!(fail),
                "`deadlock` takes a string: write `deadlock = \"fail\"`",
            ),
            (quote!(Deadlock::Fail), "write `deadlock = \"fail\"`"),
            (
                quote!(lock_runtime::Deadlock::Wait),
                "write `deadlock = \"wait\"`",
            ),
            (
                quote!(self.policy),
                "write `deadlock = \"fail\"` or `deadlock = \"wait\"`",
            ),
            (quote!("abort"), "found \"abort\" (did you mean \"fail\"?)"),
            (quote!("Fail"), "found \"Fail\" (did you mean \"fail\"?)"),
            (quote!("block"), "(did you mean \"wait\"?)"),
            (quote!("yes"), "(did you mean \"fail\"?)"),
        ] {
            let errs = errors(quote!(key = "a", deadlock = #bad));
            assert_eq!(errs.len(), 1, "{bad}: {errs:?}");
            assert!(errs[0].contains(says), "{bad}: {errs:?}");
        }
        let errs = errors(quote!(key = "a", deadlock = "sometimes"));
        assert!(errs[0].ends_with("found \"sometimes\""), "{errs:?}");
    }

    #[test]
    fn deadlock_options_of_other_names_are_guessed() {
        for (name, meant) in [
            (quote!(deadlocks), "`deadlock`"),
            (quote!(on_deadlock), "`deadlock`"),
            (quote!(deadlock_detection), "`deadlock`"),
            (quote!(onDeadlock), "`deadlock`"),
            (quote!(dedlock), "`deadlock`"),
            (quote!(fail_on_deadlock), "`deadlock = \"fail\"`"),
        ] {
            let (args, errs) = Args::parse(quote!(key = "a", wait = "5s", #name = true));
            assert_eq!(errs.len(), 1, "{name}: {errs:?}");
            assert!(
                errs[0]
                    .to_string()
                    .contains(&format!("(did you mean {meant}?)")),
                "{name}: {errs:?}"
            );
            assert!(args.deadlock.failed(), "{name}");
        }
    }

    #[test]
    fn permits_take_a_literal_of_at_least_one_or_a_constant() {
        let (args, errs) = Args::parse(quote!(key = "a", permits = 3));
        assert!(errs.is_empty() && args.permits.get().is_some());
        let (args, errs) = Args::parse(quote!(key = "a", permits = limits::EXPORTS));
        assert!(errs.is_empty() && args.permits.get().is_some());
        for (bad, says) in [
            (quote!(permits = 0), "`permits = 0`"),
            (quote!(permits = "3"), "without quotes: write `permits = 3`"),
            (quote!(permits = -1), "at least 1"),
            (quote!(permits = 1.5), "at least 1"),
            (quote!(permits = 4294967296), "from 1 to 4294967295"),
        ] {
            let errs = errors(bad);
            assert_eq!(errs.len(), 1, "{errs:?}");
            assert!(errs[0].contains(says), "{errs:?}");
        }
    }

    #[test]
    fn a_missing_key_is_left_to_validation() {
        let (args, errs) = Args::parse(quote!(ttl = "1s"));
        assert!(errs.is_empty());
        assert!(args.key.missing());
        let (args, _) = Args::parse(quote!(ttl = "1s" wait = "2s"));
        assert!(
            !args.key.missing(),
            "a syntax error hides the rest of the options"
        );
    }

    #[test]
    fn a_bad_key_is_not_also_reported_missing() {
        let errs = errors(quote!(key = 5));
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert!(errs[0].starts_with("`key` must be a string literal"));
    }

    #[test]
    fn duplicates_are_reported_once_per_extra_occurrence() {
        let errs = errors(quote!(key = "a", ttl = "1s", ttl = "2s"));
        assert_eq!(errs, ["`ttl` is set more than once: keep only one"]);
    }

    #[test]
    fn independent_mistakes_are_all_reported() {
        let errs = errors(quote!(key = "a", ttl = "1", wait = "x", watchdog = "yes"));
        assert_eq!(errs.len(), 3, "{errs:?}");
    }

    #[test]
    fn unknown_options_suggest_and_list() {
        let errs = errors(quote!(key = "a", tll = "1s"));
        assert!(
            errs[0].starts_with("unknown option `tll` (did you mean `ttl`?); valid options are")
        );
        assert!(errs[0].contains("`allow_long_ttl`"));
        let errs = errors(quote!(key = "a", lock_at_most_for = "1s"));
        assert!(errs[0].contains("did you mean `max_hold`?"), "{errs:?}");
    }

    #[test]
    fn an_unknown_option_is_taken_for_what_it_probably_means() {
        let hint = |tokens: TokenStream| {
            let (args, errs) = Args::parse(tokens);
            assert_eq!(errs.len(), 1, "{errs:?}");
            let err = errs[0].to_string();
            let hint = err
                .split_once(" (did you mean ")
                .map(|(_, rest)| rest.split_once("?)").expect("closed").0.to_owned());
            (hint, args.key.missing() && args.keys.missing())
        };
        let keys = Some("`keys`".to_owned());
        assert_eq!(hint(quote!(kyes = ["a", "b"])), (keys.clone(), false));
        assert_eq!(hint(quote!(key_list = ["a", "b"])), (keys.clone(), false));
        assert_eq!(hint(quote!(name = ["a", "b"])), (keys, false));
        let key = Some("`key`".to_owned());
        assert_eq!(hint(quote!(name = "order:<id>")), (key.clone(), false));
        assert_eq!(hint(quote!(kyes = "order:<id>")), (key.clone(), false));
        assert_eq!(hint(quote!(resource = "order:<id>")), (key, false));
        // A duration is not a key; with a key given, a template is not one either.
        assert_eq!(hint(quote!(tiemout = "5s")), (None, true));
        assert_eq!(hint(quote!(key = "a", resource = "b")).0, None);
        assert_eq!(
            hint(quote!(key = "a", read = true)).0.as_deref(),
            Some("`mode = \"read\"`")
        );
        assert_eq!(
            hint(quote!(key = "a", write_lock = true)).0.as_deref(),
            Some("`mode = \"write\"`")
        );
        assert_eq!(hint(quote!(key = "a", read = false)).0, None);
    }

    #[test]
    fn a_misspelled_option_counts_as_given_with_a_bad_value() {
        let (args, _) = Args::parse(quote!(key = "a", wiat = "5s", tll = "1s"));
        assert!(args.wait.failed() && !args.wait.missing());
        assert!(args.ttl.failed());
        assert!(args.max_hold.missing() && !args.max_hold.failed());
        // The real option after its misspelling is not a duplicate.
        let (args, errs) = Args::parse(quote!(key = "a", wiat = "5s", wait = "5s"));
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert!(args.wait.get().is_some());
    }

    #[test]
    fn errors_keep_the_order_of_the_options() {
        let errs = errors(quote!(
            key = "a",
            tll = "1s",
            wait = "x",
            wiat = "1s",
            fair = "no"
        ));
        let names: Vec<&str> = errs
            .iter()
            .map(|err| err.split('`').nth(1).expect("names an option"))
            .collect();
        assert_eq!(names, ["tll", "wait", "wiat", "fair"], "{errs:?}");
    }

    #[test]
    fn booleans_in_other_words_get_the_fix() {
        for (value, says) in [
            (quote!("yes"), "without quotes: write `fair = true`"),
            (quote!("off"), "without quotes: write `fair = false`"),
            (
                quote!("maybe"),
                "without quotes: write `fair = true` or `fair = false`",
            ),
            (quote!(1), "write `fair = true`"),
            (quote!(no), "write `fair = false`"),
        ] {
            let errs = errors(quote!(key = "a", fair = #value));
            assert_eq!(errs.len(), 1, "{errs:?}");
            assert!(errs[0].ends_with(says), "{value}: {errs:?}");
        }
    }

    #[test]
    fn keys_in_one_string_are_split_at_the_commas() {
        let errs = errors(quote!(keys = "account:<from>, account:<to>,"));
        assert_eq!(
            errs,
            [
                "`keys` takes a list with one string per key template, not one string with \
              commas: write `keys = [\"account:<from>\", \"account:<to>\"]`"
            ]
        );
    }

    #[test]
    fn key_and_keys_never_suggest_a_template_twice() {
        let errs = errors(quote!(keys = ["a:<x>", "b:<y>"], key = "a:<x>"));
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert!(
            errs[0].contains("`keys` already lists \"a:<x>\": remove `key`"),
            "{errs:?}"
        );
        assert!(!errs[0].contains("keys = ["), "{errs:?}");
    }

    #[test]
    fn crate_is_accepted_as_an_option_name() {
        let (args, errs) = Args::parse(quote!(key = "a", crate = "x::y"));
        assert!(errs.is_empty());
        assert!(args.krate.get().is_some());
    }

    #[test]
    fn a_positional_string_is_taken_for_the_key() {
        let errs = errors(quote!("order:<id>"));
        assert_eq!(
            errs,
            ["the key needs its option name: write `key = \"order:<id>\"`"]
        );
    }

    #[test]
    fn an_option_without_value_shows_an_example() {
        let errs = errors(quote!(key = "a", watchdog));
        assert_eq!(errs, ["`watchdog` needs a value: write `watchdog = false`"]);
    }

    #[test]
    fn integer_durations_suggest_a_unit() {
        let errs = errors(quote!(key = "a", ttl = 30));
        assert!(errs[0].contains("write `ttl = \"30s\"`"), "{errs:?}");
    }

    #[test]
    fn zero_ttl_is_rejected_but_zero_wait_is_not() {
        assert!(
            errors(quote!(key = "a", ttl = "0s"))[0].starts_with("`ttl` must be longer than zero")
        );
        assert!(errors(quote!(key = "a", wait = "0s")).is_empty());
        assert!(
            errors(quote!(key = "a", ttl = "2ms"))[0].starts_with("`ttl` must be at least 10ms")
        );
    }

    #[test]
    fn quoted_booleans_are_rejected_with_a_fix() {
        let errs = errors(quote!(key = "a", watchdog = "false"));
        assert_eq!(
            errs,
            ["`watchdog` takes `true` or `false` without quotes: write `watchdog = false`"]
        );
    }

    #[test]
    fn on_lease_lost_suggests_the_closest_value() {
        let errs = errors(quote!(key = "a", on_lease_lost = "Abort"));
        assert!(
            errs[0].ends_with("found \"Abort\" (did you mean \"abort\"?)"),
            "{errs:?}"
        );
    }

    #[test]
    fn a_quoted_manager_suggests_the_expression() {
        let errs = errors(quote!(key = "a", manager = "self.locks"));
        assert!(errs[0].contains("write `manager = self.locks`"), "{errs:?}");
    }
}
