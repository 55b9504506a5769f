//! The annotated item: a fn whose signature is kept as is and whose body is kept as tokens.
//!
//! The body is not parsed into statements, so a body that does not parse yet (someone is typing
//! in an IDE) is still wrapped, and rustc reports the syntax error where it is. Statements are
//! parsed only to recognise a body that `#[async_trait]` already rewrote.

use proc_macro2::TokenStream;
use syn::parse::{Parse, ParseStream, Parser};
use syn::punctuated::Punctuated;
use syn::{
    Attribute, Block, Expr, ExprAsync, ExprCall, GenericArgument, Item, PathArguments, ReturnType,
    Signature, Stmt, Token, Type, TypeParamBound, Visibility, braced, token,
};

/// A fn, or a trait fn declaration without a body.
pub(crate) struct LockedFn {
    pub(crate) attrs: Vec<Attribute>,
    pub(crate) vis: Visibility,
    pub(crate) sig: Signature,
    pub(crate) body: Option<FnBody>,
}

pub(crate) struct FnBody {
    pub(crate) brace: token::Brace,
    /// `#![...]` at the top of the body; they stay at the top of the generated body.
    pub(crate) inner_attrs: Vec<Attribute>,
    pub(crate) stmts: TokenStream,
}

impl Parse for LockedFn {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        let attrs = input.call(Attribute::parse_outer)?;
        let vis: Visibility = input.parse()?;
        let sig: Signature = input.parse()?;
        if input.peek(Token![;]) {
            input.parse::<Token![;]>()?;
            return Ok(LockedFn {
                attrs,
                vis,
                sig,
                body: None,
            });
        }
        let content;
        let brace = braced!(content in input);
        let inner_attrs = content.call(Attribute::parse_inner)?;
        let stmts: TokenStream = content.parse()?;
        Ok(LockedFn {
            attrs,
            vis,
            sig,
            body: Some(FnBody {
                brace,
                inner_attrs,
                stmts,
            }),
        })
    }
}

/// Parses the annotated item, with a message that says what the attribute goes on when the item
/// is something else. `Err(None)` when the item does not parse at all (a half-typed signature):
/// rustc reports that syntax error itself, and a second message would only repeat it.
pub(crate) fn parse(item: TokenStream) -> Result<LockedFn, Option<syn::Error>> {
    match syn::parse2::<LockedFn>(item.clone()) {
        Ok(locked) => Ok(locked),
        Err(_) => match syn::parse2::<Item>(item) {
            Ok(other) => Err(Some(not_a_fn(&other))),
            Err(_) => Err(None),
        },
    }
}

fn not_a_fn(item: &Item) -> syn::Error {
    let (span, what): (proc_macro2::Span, &str) = match item {
        Item::Impl(imp) => {
            return syn::Error::new(
                imp.impl_token.span,
                "#[distributed_lock] goes on each `async fn` that needs the lock, not on an impl \
                 block: move it onto the methods (inside an #[async_trait] impl too)",
            );
        }
        Item::Trait(tr) => {
            return syn::Error::new(
                tr.trait_token.span,
                "#[distributed_lock] goes on an `async fn` with a body, not on a trait: put it \
                 on the default method or on the fn in each impl",
            );
        }
        Item::Struct(item) => (item.struct_token.span, "a struct"),
        Item::Enum(item) => (item.enum_token.span, "an enum"),
        Item::Union(item) => (item.union_token.span, "a union"),
        Item::Mod(item) => (item.mod_token.span, "a module"),
        Item::Const(item) => (item.const_token.span, "a const"),
        Item::Static(item) => (item.static_token.span, "a static"),
        Item::Type(item) => (item.type_token.span, "a type alias"),
        Item::Use(item) => (item.use_token.span, "a `use`"),
        _ => (proc_macro2::Span::call_site(), "this item"),
    };
    syn::Error::new(
        span,
        format!(
            "#[distributed_lock] goes on an `async fn` that returns `Result<T, E>`, not on {what}"
        ),
    )
}

/// A body that `#[async_trait]` produced from an `async fn`:
/// `fn f(..) -> Pin<Box<dyn Future<Output = R> + Send + 'async_trait>> { Box::pin(async move { .. }) }`.
pub(crate) struct AsyncTraitBody {
    /// Statements before the `Box::pin(..)` (none in what async-trait generates today).
    pub(crate) leading: Vec<Stmt>,
    /// The `Box::pin` path as written.
    pub(crate) pin: ExprCall,
    /// The async block inside it.
    pub(crate) block: ExprAsync,
    /// `R`, the future's output type.
    pub(crate) output: Type,
}

impl AsyncTraitBody {
    /// Recognises the shape (in the manner of tracing-attributes' `AsyncInfo`). `None` when the
    /// fn is not a rewritten `async fn`.
    pub(crate) fn detect(sig: &Signature, body: &FnBody) -> Option<AsyncTraitBody> {
        if sig.asyncness.is_some() {
            return None;
        }
        let output = future_output(&sig.output)?;
        let mut stmts = Block::parse_within.parse2(body.stmts.clone()).ok()?;
        let Some(Stmt::Expr(Expr::Call(pin), None)) = stmts.pop() else {
            return None;
        };
        let Expr::Path(func) = &*pin.func else {
            return None;
        };
        let segments: Vec<String> = func
            .path
            .segments
            .iter()
            .map(|segment| segment.ident.to_string())
            .collect();
        if !segments.ends_with(&["Box".to_owned(), "pin".to_owned()]) || pin.args.len() != 1 {
            return None;
        }
        let Some(Expr::Async(block)) = pin.args.first().cloned() else {
            return None;
        };
        block.capture?;
        Some(AsyncTraitBody {
            leading: stmts,
            pin,
            block,
            output,
        })
    }
}

/// A fn that returns its future explicitly, as `#[instrument]` also supports:
/// `fn f(..) -> impl Future<Output = R> { ..; async move { .. } }`.
pub(crate) struct FutureBlockBody {
    /// Statements before the async block.
    pub(crate) leading: Vec<Stmt>,
    /// The async block the fn returns.
    pub(crate) block: ExprAsync,
    /// `R`, the future's output type.
    pub(crate) output: Type,
}

impl FutureBlockBody {
    pub(crate) fn detect(sig: &Signature, body: &FnBody) -> Option<FutureBlockBody> {
        if sig.asyncness.is_some() {
            return None;
        }
        let ReturnType::Type(_, ty) = &sig.output else {
            return None;
        };
        let Type::ImplTrait(imp) = strip_type_groups(ty) else {
            return None;
        };
        let output = bounds_output(&imp.bounds)?;
        let mut stmts = Block::parse_within.parse2(body.stmts.clone()).ok()?;
        let Some(Stmt::Expr(Expr::Async(block), None)) = stmts.pop() else {
            return None;
        };
        Some(FutureBlockBody {
            leading: stmts,
            block,
            output,
        })
    }
}

/// The body of an `async fn` that `#[tokio::main]` or `#[tokio::test]`, written above
/// `#[distributed_lock]`, already rewrote: `fn main() -> R { let body = async { .. }; .. }`.
pub(crate) struct TokioEntryBody {
    /// `let body = async { .. };`, whose block is locked.
    pub(crate) local: syn::Local,
    pub(crate) block: ExprAsync,
    /// The statements after it (building the runtime, `block_on(body)`).
    pub(crate) rest: Vec<Stmt>,
    /// The fn's declared output, which is also the block's.
    pub(crate) output: Type,
}

impl TokioEntryBody {
    pub(crate) fn detect(sig: &Signature, body: &FnBody) -> Option<TokioEntryBody> {
        if sig.asyncness.is_some() {
            return None;
        }
        let mut stmts = Block::parse_within.parse2(body.stmts.clone()).ok()?;
        if stmts.is_empty() {
            return None;
        }
        let Stmt::Local(local) = stmts.remove(0) else {
            return None;
        };
        let syn::Pat::Ident(name) = &local.pat else {
            return None;
        };
        if name.ident != "body" || !stmts.iter().any(mentions_block_on) {
            return None;
        }
        let Expr::Async(block) = &*local.init.as_ref()?.expr else {
            return None;
        };
        let output = match &sig.output {
            ReturnType::Type(_, ty) => (**ty).clone(),
            ReturnType::Default => syn::parse_quote!(()),
        };
        Some(TokioEntryBody {
            block: block.clone(),
            local,
            rest: stmts,
            output,
        })
    }
}

fn mentions_block_on(stmt: &Stmt) -> bool {
    fn walk(tokens: TokenStream) -> bool {
        tokens.into_iter().any(|token| match token {
            proc_macro2::TokenTree::Ident(ident) => ident == "block_on",
            proc_macro2::TokenTree::Group(group) => walk(group.stream()),
            _ => false,
        })
    }
    walk(quote::ToTokens::to_token_stream(stmt))
}

fn strip_type_groups(ty: &Type) -> &Type {
    match ty {
        Type::Group(group) => strip_type_groups(&group.elem),
        Type::Paren(paren) => strip_type_groups(&paren.elem),
        _ => ty,
    }
}

impl AsyncTraitBody {
    /// The patterns `#[async_trait]` moved from the signature into the block, with the
    /// positional parameter that now carries each: `(a, b): (u8, u8)` became `__arg1: (u8, u8)`
    /// and `let (a, b) = { let __arg1 = __arg1; __arg1 };`.
    pub(crate) fn moved_patterns(&self) -> Vec<(&syn::Pat, &syn::Ident)> {
        self.block
            .block
            .stmts
            .iter()
            .filter_map(|stmt| {
                let Stmt::Local(local) = stmt else {
                    return None;
                };
                let Expr::Block(init) = &*local.init.as_ref()?.expr else {
                    return None;
                };
                let Some(Stmt::Expr(Expr::Path(carrier), None)) = init.block.stmts.last() else {
                    return None;
                };
                let carrier = carrier.path.get_ident()?;
                carrier
                    .to_string()
                    .starts_with("__arg")
                    .then_some((&local.pat, carrier))
            })
            .collect()
    }
}

/// `R` in a return type `Pin<Box<dyn Future<Output = R> + ..>>` (any path to `Future`).
fn future_output(output: &ReturnType) -> Option<Type> {
    let ReturnType::Type(_, ty) = output else {
        return None;
    };
    find_future_output(ty)
}

fn find_future_output(ty: &Type) -> Option<Type> {
    match ty {
        Type::Path(path) => path
            .path
            .segments
            .iter()
            .filter_map(|segment| match &segment.arguments {
                PathArguments::AngleBracketed(args) => Some(&args.args),
                _ => None,
            })
            .flatten()
            .find_map(|arg| match arg {
                GenericArgument::Type(inner) => find_future_output(inner),
                _ => None,
            }),
        Type::TraitObject(object) => bounds_output(&object.bounds),
        Type::ImplTrait(imp) => bounds_output(&imp.bounds),
        Type::Paren(inner) => find_future_output(&inner.elem),
        Type::Group(inner) => find_future_output(&inner.elem),
        _ => None,
    }
}

fn bounds_output(bounds: &Punctuated<TypeParamBound, Token![+]>) -> Option<Type> {
    bounds.iter().find_map(|bound| {
        let TypeParamBound::Trait(bound) = bound else {
            return None;
        };
        let last = bound.path.segments.last()?;
        if last.ident != "Future" {
            return None;
        }
        let PathArguments::AngleBracketed(args) = &last.arguments else {
            return None;
        };
        args.args.iter().find_map(|arg| match arg {
            GenericArgument::AssocType(assoc) if assoc.ident == "Output" => Some(assoc.ty.clone()),
            _ => None,
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use quote::{ToTokens, quote};

    fn locked(tokens: TokenStream) -> LockedFn {
        match parse(tokens) {
            Ok(locked) => locked,
            Err(err) => panic!("should parse: {err:?}"),
        }
    }

    #[test]
    fn a_body_that_does_not_parse_is_kept_as_tokens() {
        let f = locked(quote! { async fn f() -> Result<(), E> { let x = ; } });
        let body = f.body.expect("has a body");
        assert_eq!(body.stmts.to_string(), quote!(let x = ;).to_string());
    }

    #[test]
    fn inner_attributes_are_split_from_the_statements() {
        let f = locked(quote! { async fn f() -> Result<(), E> { #![allow(unused)] Ok(()) } });
        let body = f.body.expect("has a body");
        assert_eq!(body.inner_attrs.len(), 1);
        assert_eq!(body.stmts.to_string(), quote!(Ok(())).to_string());
    }

    #[test]
    fn a_signature_that_does_not_parse_is_left_to_rustc() {
        let err = parse(quote! { async fn f(id: ) -> Result<(), E> { Ok(()) } }).err();
        assert!(matches!(err, Some(None)));
    }

    #[test]
    fn a_trait_declaration_has_no_body() {
        let f = locked(quote! { async fn f(&self) -> Result<(), E>; });
        assert!(f.body.is_none());
    }

    #[test]
    fn an_impl_block_gets_a_message_about_methods() {
        let err = parse(quote! { impl Foo { async fn f(&self) {} } })
            .err()
            .flatten()
            .expect("not a fn");
        assert!(err.to_string().contains("not on an impl block"), "{err}");
    }

    #[test]
    fn async_trait_bodies_are_recognised() {
        let f = locked(quote! {
            fn f<'life0, 'async_trait>(&'life0 self, id: u64) -> ::core::pin::Pin<Box<
                dyn ::core::future::Future<Output = Result<u64, E>> + ::core::marker::Send + 'async_trait
            >> {
                Box::pin(async move { let __self = self; Ok(id) })
            }
        });
        let body = f.body.as_ref().expect("has a body");
        let info = AsyncTraitBody::detect(&f.sig, body).expect("async-trait shape");
        assert_eq!(
            info.output.to_token_stream().to_string(),
            quote!(Result<u64, E>).to_string()
        );
        assert!(info.leading.is_empty());
    }

    #[test]
    fn future_returning_fns_are_recognised() {
        let f = locked(quote! {
            fn f(id: u64) -> impl Future<Output = Result<u64, E>> + Send {
                let x = id;
                async move { Ok(x) }
            }
        });
        let body = f.body.as_ref().expect("has a body");
        let info = FutureBlockBody::detect(&f.sig, body).expect("future block shape");
        assert_eq!(info.leading.len(), 1);
        assert_eq!(
            info.output.to_token_stream().to_string(),
            quote!(Result<u64, E>).to_string()
        );
    }

    #[test]
    fn tokio_entry_points_are_recognised() {
        let f = locked(quote! {
            fn main() -> Result<(), E> {
                let body = async { Ok(()) };
                { return Builder::new().build().expect("rt").block_on(body); }
            }
        });
        let body = f.body.as_ref().expect("has a body");
        assert!(TokioEntryBody::detect(&f.sig, body).is_some());
        let f = locked(quote! { fn main() { let body = async {}; drop(body) } });
        let body = f.body.as_ref().expect("has a body");
        assert!(TokioEntryBody::detect(&f.sig, body).is_none());
    }

    #[test]
    fn plain_fns_are_not_mistaken_for_async_trait_bodies() {
        for tokens in [
            quote! { fn f() -> Result<(), E> { Ok(()) } },
            quote! { fn f() -> Pin<Box<dyn Future<Output = u8>>> { Box::pin(ready(1)) } },
            quote! { async fn f() -> Pin<Box<dyn Future<Output = u8>>> { Box::pin(async move { 1 }) } },
            quote! { fn f() -> Pin<Box<dyn Future<Output = u8>>> { Box::pin(async { 1 }) } },
        ] {
            let f = locked(tokens.clone());
            let body = f.body.as_ref().expect("has a body");
            assert!(AsyncTraitBody::detect(&f.sig, body).is_none(), "{tokens}");
        }
    }
}
