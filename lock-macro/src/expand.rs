//! Code generation, modelled on tracing-attributes' `#[instrument]`: the signature is re-emitted
//! untouched and only the body changes.
//!
//! ```ignore
//! async fn withdraw(&self, amount: u64) -> Result<u64, AppError> {
//!     use ::lock_runtime as __lock_runtime;
//!     // checked at the return type and at `AppError`
//!     let __lock_wrap = <Result<u64, AppError> as __lock_runtime::__private::LockedReturn>::from_error;
//!     let __lock_into = <AppError as __lock_runtime::__private::FromLockError>::from_lock_error;
//!     let __lock_key: String = {
//!         let __lock_key_value0: &dyn KeyPart = &self.id;   // checked at `self`
//!         /* "account:{}" into one String */
//!     };
//!     let __lock_manager: &LockManager = &(self.locks);
//!     __lock_runtime::__private::run_locked(
//!         __lock_manager, __lock_key, const { .. }, __lock_wrap, __lock_into,
//!         async move {
//!             if false { return loop {} as Result<u64, AppError>; }  // fake return
//!             { /* the original body */ }
//!         },
//!     )
//!     .await
//! }
//! ```
//!
//! - The key is rendered before the body's `async move` block takes the parameters, so a
//!   placeholder can read a parameter that the body then moves or borrows mutably.
//! - The body stays in its own async block, so `return` and `?` leave the body, not the locked
//!   section; the unreachable "fake return" of the declared type makes the block's type known
//!   before the body is checked, so type errors point at the user's code and return type.
//! - Every runtime path goes through one `use` of the runtime crate: a wrong `crate = ".."` is
//!   one error, not one per generated path.
//! - Local names have mixed-site hygiene: the user's body cannot see or shadow them. Where an
//!   error may point at one, it is located at the user's token that the error is about.

use proc_macro2::{Literal, Span, TokenStream};
use quote::{ToTokens, quote, quote_spanned};
use syn::Ident;
use syn::spanned::Spanned;

use crate::attr::{Args, OnLeaseLost};
use crate::fallback;
use crate::item::{self, FnBody, LockedFn};
use crate::params::KeyPlan;
use crate::validate::{
    self, ErrorCheck, Form, LockKeys, ManagerPlan, OptionsPlan, OutputPlan, Plan,
};

/// The attribute, from tokens to tokens: parse, validate, then expand or fall back.
pub(crate) fn distributed_lock(args: TokenStream, item: TokenStream) -> TokenStream {
    let (args, errors) = Args::parse(args);
    let locked = match item::parse(item.clone()) {
        Ok(locked) => locked,
        Err(err) => return fallback::fallback(item, errors.into_iter().chain(err)),
    };
    match validate::validate(args, &locked, errors) {
        Ok(plan) => expand(&locked, &plan),
        Err(errors) => fallback::fallback(item, errors),
    }
}

/// A generated local name, hygienic, reported at `span` when an error is about it.
fn local_at(name: &str, span: Span) -> Ident {
    Ident::new(name, Span::mixed_site().located_at(span))
}

fn local(name: &str) -> Ident {
    local_at(name, Span::call_site())
}

/// The generated code's name for the runtime crate (a `use` alias), reported at `span`.
///
/// Items are not hygienic, so this resolves from any context.
fn runtime(span: Span) -> Ident {
    Ident::new("__lock_runtime", span)
}

pub(crate) fn expand(locked: &LockedFn, plan: &Plan) -> TokenStream {
    let LockedFn {
        attrs,
        vis,
        sig,
        body,
    } = locked;
    let Some(body) = body else {
        // `validate` rejects a fn without a body; this keeps the item if one ever slips through.
        return quote! { #(#attrs)* #vis #sig; };
    };
    let contents = contents(body, plan);
    let mut out = quote! {
        #(#attrs)*
        #vis #sig
    };
    body.brace
        .surround(&mut out, |tokens| tokens.extend(contents));
    out
}

/// What goes between the braces of the fn: its body, in whichever form it came, run as a
/// locked section.
fn contents(body: &FnBody, plan: &Plan) -> TokenStream {
    let inner_attrs = &body.inner_attrs;
    let fake_return = fake_return(plan);
    match &plan.form {
        Form::Native => {
            let stmts = &body.stmts;
            let section = locked_section(
                plan,
                quote! {
                    async move {
                        #fake_return
                        { #stmts }
                    }
                },
            );
            quote! {
                #(#inner_attrs)*
                #section
            }
        }
        Form::AsyncTrait(info) => {
            // Only the block inside `Box::pin(..)` changes: the key is rendered and the lock
            // taken when the boxed future first runs, as the body would have.
            let leading = &info.leading;
            let pin = &info.pin.func;
            let block_attrs = &info.block.attrs;
            let stmts = &info.block.block.stmts;
            let section = locked_section(
                plan,
                quote! {
                    async move {
                        #fake_return
                        #(#stmts)*
                    }
                },
            );
            quote! {
                #(#inner_attrs)*
                #(#leading)*
                #pin(#(#block_attrs)* async move { #section })
            }
        }
        Form::FutureBlock(info) => {
            // The key is rendered and the lock taken when the returned future first runs.
            let leading = &info.leading;
            let block_attrs = &info.block.attrs;
            let async_token = &info.block.async_token;
            let capture = &info.block.capture;
            let stmts = &info.block.block.stmts;
            let section = locked_section(
                plan,
                quote! {
                    async #capture {
                        #fake_return
                        #(#stmts)*
                    }
                },
            );
            quote! {
                #(#inner_attrs)*
                #(#leading)*
                #(#block_attrs)* #async_token move { #section }
            }
        }
        Form::TokioEntry(info) => {
            // The lock is taken inside the future the runtime blocks on.
            let syn::Local {
                attrs: local_attrs,
                let_token,
                pat,
                ..
            } = &info.local;
            let block_attrs = &info.block.attrs;
            let stmts = &info.block.block.stmts;
            let rest = &info.rest;
            let section = locked_section(
                plan,
                quote! {
                    async move {
                        #fake_return
                        #(#stmts)*
                    }
                },
            );
            quote! {
                #(#inner_attrs)*
                #(#local_attrs)* #let_token #pat = #(#block_attrs)* async move { #section };
                #(#rest)*
            }
        }
    }
}

/// Statements that check the output type, render the key and run `body` under the lock.
fn locked_section(plan: &Plan, body: TokenStream) -> TokenStream {
    let krate = &plan.krate;
    let runtime_here = runtime(Span::call_site());
    let key = local("__lock_key");
    let wrap = local("__lock_wrap");
    let into = local("__lock_into");
    let checks = output_checks(&plan.output, &wrap, &into);
    let string = quote!(#runtime_here::__private::String);
    let (render, key_type, run_global, run_with) = match &plan.key {
        LockKeys::One(key) => (
            render_key(key),
            string,
            quote!(run_locked_global),
            quote!(run_locked),
        ),
        LockKeys::All(keys) => {
            let renders = keys.iter().map(render_key);
            let count = Literal::usize_unsuffixed(keys.len());
            (
                quote!([#(#renders),*]),
                quote!([#string; #count]),
                quote!(run_locked_all_global),
                quote!(run_locked_all),
            )
        }
    };
    let permits = permits_item(&plan.options);
    let options = options(&plan.options);
    let (manager, run) = match &plan.manager {
        None => (
            TokenStream::new(),
            quote! {
                #runtime_here::__private::#run_global(#key, #options, #wrap, #into, #body)
                    .await
            },
        ),
        Some(manager) => {
            let binding = local_at("__lock_manager", syn::spanned::Spanned::span(&manager.expr));
            (
                bind_manager(manager, &binding),
                quote! {
                    #runtime_here::__private::#run_with(
                        #binding, #key, #options, #wrap, #into, #body,
                    )
                    .await
                },
            )
        }
    };
    let krate_span = krate
        .segments
        .first()
        .map_or_else(Span::call_site, |segment| segment.ident.span());
    let alias = runtime(krate_span);
    let import = quote_spanned!(krate_span=> use #krate as #alias;);
    quote! {
        #import
        #permits
        #checks
        let #key: #key_type = #render;
        #manager
        #run
    }
}

/// The two checks on the declared output, each spanned at what it is about, and each giving
/// the runtime half of the conversion `LockError -> Result<T, E>`:
///
/// - `wrap = <Output as LockedReturn>::from_error`, at the return type: it is a `Result`.
/// - `into = <E as FromLockError>::from_lock_error`, at `E`: it can carry a `LockError`. When
///   `E` is a type parameter, `From<LockError>` itself, so that rustc's help proposes that
///   bound; when `E` is not written (`io::Result<T>`), inferred through `wrap`.
///
/// The runtime asks nothing more of the output, so an unmet check is the only error: no
/// cascade, whatever order rustc reports obligations in (incremental or not).
fn output_checks(output: &OutputPlan, wrap: &Ident, into: &Ident) -> TokenStream {
    let ty = &output.ty;
    let result_span = output.result_check_span;
    let runtime_at_result = runtime(result_span);
    let wrap = quote_spanned! {result_span=>
        let #wrap = <#ty as #runtime_at_result::__private::LockedReturn>::from_error as fn(_) -> _;
    };
    let span = output.error_check_span;
    let runtime = runtime(span);
    let into = match &output.error_check {
        ErrorCheck::ErrorType(error) => quote_spanned! {span=>
            let #into = <#error as #runtime::__private::FromLockError>::from_lock_error;
        },
        ErrorCheck::TypeParam(error) => quote_spanned! {span=>
            let #into = <#error as ::core::convert::From<#runtime::__private::LockError>>::from;
        },
        ErrorCheck::ThroughOutput | ErrorCheck::None => quote_spanned! {span=>
            let #into = <_ as #runtime::__private::FromLockError>::from_lock_error;
        },
    };
    quote! { #wrap #into }
}

/// `let __lock_manager: &LockManager = ..;` so that a manager of the wrong type is reported at
/// the expression, and `&LockManager`, `&&LockManager` and `&Arc<LockManager>` all coerce.
fn bind_manager(manager: &ManagerPlan, binding: &Ident) -> TokenStream {
    let ManagerPlan { expr, clone } = manager;
    let span = syn::spanned::Spanned::span(expr);
    let runtime = runtime(span);
    if *clone {
        // The body owns what the expression reads: hold a clone (cheap: managers share their
        // connections) instead of a borrow the body would conflict with.
        // The manager is cloned, not what the expression gives: `self.locks()` and `&self.locks`
        // give a reference, whose clone would still borrow the parameter.
        let owned = local_at("__lock_manager_owned", span);
        quote_spanned! {span=>
            let #owned: #runtime::__private::LockManager = {
                let #binding: &#runtime::__private::LockManager = &(#expr);
                ::core::clone::Clone::clone(#binding)
            };
            let #binding: &#runtime::__private::LockManager = &#owned;
        }
    } else {
        quote_spanned! {span=>
            let #binding: &#runtime::__private::LockManager = &(#expr);
        }
    }
}

/// One owned `String`, written in one `write_fmt` call.
///
/// Each placeholder is borrowed into a local (a missing field is rustc's own error, at the key),
/// then coerced to `&dyn KeyPart` at the parameter's span: that coercion is the one place a
/// missing `Display` is reported (with `KeyPart`'s message), and the format string, given
/// trait objects that are `Display` whatever they hold, adds no obligation of its own. A value
/// whose type is a type parameter is coerced to `&dyn Display` instead, so that rustc's help
/// proposes `T: std::fmt::Display`.
fn render_key(key: &KeyPlan) -> TokenStream {
    let runtime_here = runtime(Span::call_site());
    if let Some(literal) = &key.literal {
        return quote! { #runtime_here::__private::String::from(#literal) };
    }
    let buffer = local("__lock_key_buffer");
    let format = &key.format;
    let capacity = Literal::usize_unsuffixed(key.capacity);
    let mut checks = TokenStream::new();
    let mut values = Vec::new();
    for (i, part) in key.parts.iter().enumerate() {
        let span = part.param_span;
        let root = &part.root;
        let accessors = &part.accessors;
        // Scoped to the rendering block, out of the body's sight: a plain span (not a hygienic
        // one) keeps the coercion's error free of "in this macro expansion" notes.
        let borrowed = Ident::new(&format!("__lock_key_part{i}"), span);
        let value = Ident::new(&format!("__lock_key_value{i}"), span);
        let runtime = runtime(span);
        let checked = if part.type_param {
            quote_spanned!(span=> ::core::fmt::Display)
        } else {
            quote_spanned!(span=> #runtime::__private::KeyPart)
        };
        checks.extend(quote_spanned! {span=>
            let #borrowed = &#root #accessors;
            let #value: &dyn #checked = #borrowed;
        });
        values.push(value);
    }
    quote! {{
        #checks
        let mut #buffer = #runtime_here::__private::String::with_capacity(#capacity);
        if #runtime_here::__private::Write::write_fmt(
            &mut #buffer,
            ::core::format_args!(#format, #(#values),*),
        )
        .is_err()
        {
            ::core::panic!(
                "a Display implementation returned an error while rendering a #[distributed_lock] key"
            );
        }
        #buffer
    }}
}

/// `const { LockOptions::new().ttl(..)... }` with only the options the user set, so that the
/// runtime's defaults stay in one place.
fn options(options: &OptionsPlan) -> TokenStream {
    let runtime = runtime(Span::call_site());
    let duration = |millis: u64| {
        let millis = Literal::u64_unsuffixed(millis);
        quote! { #runtime::__private::Duration::from_millis(#millis) }
    };
    let mut setters = TokenStream::new();
    let mut set = |name: &str, value: TokenStream| {
        let name = Ident::new(name, Span::call_site());
        setters.extend(quote! { .#name(#value) });
    };
    if let Some(ttl) = options.ttl {
        set("ttl", duration(ttl));
    }
    if let Some(wait) = options.wait {
        set("wait", duration(wait));
    }
    if let Some(permits) = &options.permits {
        if permits.in_const_item {
            set("permits", permits_const().into_token_stream());
        } else {
            // Evaluated in the options' `const` block when the fn is compiled for its types.
            set("permits", checked_permits(&permits.value));
        }
    }
    if let Some(write) = options.write_mode {
        let mode = if write { quote!(Write) } else { quote!(Read) };
        set("mode", quote! { #runtime::__private::Mode::#mode });
    }
    if let Some(fair) = options.fair {
        set("fair", fair.into_token_stream());
    }
    if let Some(fail) = options.deadlock_fail {
        let choice = if fail { quote!(Fail) } else { quote!(Wait) };
        set(
            "deadlock",
            quote! { #runtime::__private::Deadlock::#choice },
        );
    }
    if let Some(watchdog) = options.watchdog {
        set("watchdog", watchdog.into_token_stream());
    }
    if let Some(action) = options.on_lease_lost {
        let variant = match action {
            OnLeaseLost::Abort => quote!(Abort),
            OnLeaseLost::Continue => quote!(Continue),
        };
        set(
            "on_lease_lost",
            quote! { #runtime::__private::OnLeaseLost::#variant },
        );
    }
    if let Some(hold_at_least) = options.hold_at_least {
        set("hold_at_least", duration(hold_at_least));
    }
    if let Some(max_hold) = options.max_hold {
        set("max_hold", duration(max_hold));
    }
    if let Some(lock_delay) = options.lock_delay {
        set("lock_delay", duration(lock_delay));
    }
    if let Some(label) = &options.label {
        set("label", quote!(#label));
    }
    quote! { const { #runtime::__private::LockOptions::new() #setters } }
}

/// The name of the `const` item that holds a `permits` value free of generic parameters.
fn permits_const() -> Ident {
    Ident::new("__LOCK_PERMITS", Span::mixed_site())
}

/// `const __LOCK_PERMITS: u32 = ..;` for a `permits` value free of generic parameters: a const
/// item is evaluated by `cargo check`, so a constant of 0 is an error in the editor too.
fn permits_item(options: &OptionsPlan) -> TokenStream {
    let Some(permits) = options
        .permits
        .as_ref()
        .filter(|permits| permits.in_const_item)
    else {
        return TokenStream::new();
    };
    let name = permits_const();
    let value = checked_permits(&permits.value);
    quote! { const #name: u32 = #value; }
}

/// The `permits` value as a `u32` of at least 1, both checked at the value's span.
///
/// A 0 stops evaluation in `Option::expect`, which is `#[track_caller]`: the error points at the
/// value itself, where `assert!` would point into `core`'s panic macro.
fn checked_permits(value: &syn::Expr) -> TokenStream {
    let span = value.span();
    let shown = crate::types::pretty(value.to_token_stream());
    let message =
        format!("`permits = {shown}` is 0: a semaphore nobody could ever hold; make it at least 1");
    quote_spanned! {span=> {
        let permits: u32 = #value;
        ::core::num::NonZeroU32::new(permits).expect(#message).get()
    }}
}

/// An unreachable `return` of the declared output type at the top of the body's async block
/// (tracing-attributes' "fake return edge").
fn fake_return(plan: &Plan) -> TokenStream {
    let output = &plan.output.ty;
    let span = plan.output.span;
    // Declared inside `if false { .. }`, so the body cannot see it: no hygiene needed.
    let value = Ident::new("__lock_fake_return", span);
    quote_spanned! {span=>
        #[allow(
            unknown_lints,
            unreachable_code,
            clippy::diverging_sub_expression,
            clippy::empty_loop,
            clippy::let_unit_value,
            clippy::let_with_type_underscore,
            clippy::needless_return,
            clippy::unreachable
        )]
        if false {
            let #value: #output = loop {};
            return #value;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use syn::ItemFn;

    fn expand_fn(args: TokenStream, item: TokenStream) -> ItemFn {
        let out = distributed_lock(args, item);
        match syn::parse2::<ItemFn>(out.clone()) {
            Ok(item) => item,
            Err(err) => panic!("expansion is not one fn ({err}): {out}"),
        }
    }

    #[test]
    fn the_signature_and_attributes_are_emitted_unchanged() {
        let item = quote! {
            /// Docs.
            #[must_use]
            pub(crate) async fn f<'a, T: Clone>(&'a mut self, x: impl Into<T>) -> Result<&'a T, E>
            where
                T: Send,
            {
                todo!()
            }
        };
        let original: ItemFn = syn::parse2(item.clone()).expect("valid fn");
        let expanded = expand_fn(quote!(key = "k", manager = self.locks), item);
        assert_eq!(
            expanded.sig.to_token_stream().to_string(),
            original.sig.to_token_stream().to_string()
        );
        assert_eq!(expanded.attrs, original.attrs);
        assert_eq!(expanded.vis, original.vis);
    }

    #[test]
    fn the_native_expansion_boxes_nothing() {
        let expanded = expand_fn(
            quote!(key = "order:<id>"),
            quote! { async fn f(id: u64) -> Result<(), E> { Ok(()) } },
        );
        let body = expanded.block.to_token_stream().to_string();
        assert!(!body.contains("Box"), "{body}");
        assert!(body.contains("run_locked_global"), "{body}");
    }

    #[test]
    fn the_key_is_rendered_before_the_body_takes_the_parameters() {
        let expanded = expand_fn(
            quote!(key = "order:<id>"),
            quote! { async fn f(id: String) -> Result<(), E> { drop(id); Ok(()) } },
        );
        let body = expanded.block.to_token_stream().to_string();
        let render = body.find("KeyPart").expect("renders the key");
        let user_body = body.find("drop (id)").expect("keeps the body");
        assert!(render < user_body, "{body}");
    }

    #[test]
    fn keys_render_one_string_each_and_take_them_together() {
        let expanded = expand_fn(
            quote!(keys = ["account:<from>", "account:<to>"], manager = locks),
            quote! { async fn f(locks: &LockManager, from: u64, to: u64) -> Result<(), E> { Ok(()) } },
        );
        let body = expanded.block.to_token_stream().to_string();
        assert!(body.contains("run_locked_all ("), "{body}");
        assert!(
            body.contains("[__lock_runtime :: __private :: String ; 2]"),
            "{body}"
        );
        assert!(
            body.contains(". label (\"account:<from>, account:<to>\")"),
            "{body}"
        );
    }

    #[test]
    fn only_options_that_were_set_are_passed_to_the_runtime() {
        let expanded = expand_fn(
            quote!(key = "k", wait = "1m30s"),
            quote! { async fn f() -> Result<(), E> { Ok(()) } },
        );
        let body = expanded.block.to_token_stream().to_string();
        assert!(
            body.contains(
                ". wait (__lock_runtime :: __private :: Duration :: from_millis (90000))"
            ),
            "{body}"
        );
        assert!(!body.contains(". ttl ("), "{body}");
    }

    #[test]
    fn deadlock_sets_the_runtime_choice() {
        for (value, variant) in [("fail", "Fail"), ("wait", "Wait")] {
            let expanded = expand_fn(
                quote!(key = "k", wait = "5s", deadlock = #value),
                quote! { async fn f() -> Result<(), E> { Ok(()) } },
            );
            let body = expanded.block.to_token_stream().to_string();
            assert!(
                body.contains(&format!(
                    ". deadlock (__lock_runtime :: __private :: Deadlock :: {variant})"
                )),
                "{body}"
            );
        }
    }

    #[test]
    fn a_mistake_keeps_the_item_as_written_next_to_the_error() {
        let item = quote! { async fn f(id: u64) -> Result<(), E> { Ok(()) } };
        let out = distributed_lock(quote!(key = "<id>", ttl = "30"), item.clone()).to_string();
        assert!(out.starts_with(":: core :: compile_error !"), "{out}");
        assert!(out.ends_with(&item.to_string()), "{out}");
        assert_eq!(out.matches("compile_error").count(), 1, "{out}");
    }

    #[test]
    fn async_trait_bodies_are_locked_inside_the_box() {
        let expanded = expand_fn(
            quote!(key = "job:<id>", manager = self.locks),
            quote! {
                fn run<'life0, 'async_trait>(&'life0 self, id: u64)
                    -> ::core::pin::Pin<Box<dyn ::core::future::Future<Output = Result<u64, E>>
                        + ::core::marker::Send + 'async_trait>>
                {
                    Box::pin(async move { let __self = self; Ok(id) })
                }
            },
        );
        assert!(expanded.sig.asyncness.is_none());
        let body = expanded.block.to_token_stream().to_string();
        assert!(body.starts_with("{ Box :: pin (async move {"), "{body}");
        assert!(body.contains("run_locked"), "{body}");
    }
}
