//! `permits = N`: a number known when the fn is compiled, checked as early as it can be.
//!
//! A literal is checked in `attr`. A constant is checked by a `const` item, which `cargo check`
//! (and so rust-analyzer and clippy) evaluates, unless it may depend on the fn's types: an item
//! cannot name a generic parameter or `Self`, so such a value is checked in the options'
//! `const` block, which only a build evaluates. The macro sees the fn, not its `impl`, so it
//! cannot know the impl's parameters: a value is taken for generic when its tokens could name
//! one (`Self`, `T::SLOTS`, `Config::SLOTS`, a one-letter `N`).

use proc_macro2::{TokenStream, TokenTree};
use quote::ToTokens;
use syn::ext::IdentExt;
use syn::{Expr, GenericParam, Generics, Ident};

use crate::params::{Params, param_read_by};
use crate::types::pretty;

/// A checked `permits` value, and where `expand` evaluates it.
pub(crate) struct PermitsPlan {
    pub(crate) value: Expr,
    /// Free of generic parameters as far as its tokens tell: evaluated in a `const` item.
    pub(crate) in_const_item: bool,
}

/// Checks what `attr` could not see alone: that the value is not read from a parameter, which
/// no `const` can, and whether it may depend on generic parameters.
pub(crate) fn plan(
    value: &Expr,
    params: &Params<'_>,
    generics: &Generics,
) -> syn::Result<PermitsPlan> {
    if let Some(param) = param_read_by(value, params) {
        let shown = pretty(value.to_token_stream());
        return Err(syn::Error::new_spanned(
            value,
            format!(
                "`permits` takes an integer literal or a `const` (e.g. `permits = 3`, \
                 `permits = MAX_EXPORTS`), known when the fn is compiled, but `{shown}` reads \
                 `{param}`, known only at run time: for a number of permits known at run time, \
                 remove this attribute and take the permit in the fn with \
                 `LockManager::semaphore(key, {shown}, options)`"
            ),
        ));
    }
    Ok(PermitsPlan {
        value: value.clone(),
        in_const_item: !may_be_generic(value.to_token_stream(), generics),
    })
}

fn may_be_generic(tokens: TokenStream, generics: &Generics) -> bool {
    let mut tokens = tokens.into_iter().peekable();
    while let Some(token) = tokens.next() {
        let generic = match &token {
            TokenTree::Group(group) => may_be_generic(group.stream(), generics),
            TokenTree::Ident(ident) => {
                let through =
                    matches!(tokens.peek(), Some(TokenTree::Punct(p)) if p.as_char() == ':');
                may_name_a_generic(ident, through, generics)
            }
            TokenTree::Punct(punct) => punct.as_char() == '<',
            TokenTree::Literal(_) => false,
        };
        if generic {
            return true;
        }
    }
    false
}

/// `Self`, a parameter of the fn, or a name that could be one of the impl's: a type (capitalised,
/// or followed by `::`) or a one-letter constant. `SLOTS` and `limits::SLOTS` cannot.
fn may_name_a_generic(ident: &Ident, followed_by_path: bool, generics: &Generics) -> bool {
    let name = ident.unraw().to_string();
    let of_the_fn = generics.params.iter().any(|param| match param {
        GenericParam::Type(param) => param.ident == name,
        GenericParam::Const(param) => param.ident == name,
        GenericParam::Lifetime(_) => false,
    });
    if name == "Self" || of_the_fn {
        return true;
    }
    if !name.starts_with(|c: char| c.is_ascii_uppercase()) {
        return false;
    }
    let letters = name.chars().filter(char::is_ascii_alphabetic).count();
    let screaming = name
        .chars()
        .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_');
    followed_by_path || !screaming || letters < 2
}

#[cfg(test)]
mod tests {
    use super::*;
    use quote::quote;

    fn in_const_item(value: TokenStream, generics: TokenStream) -> bool {
        let value: Expr = syn::parse2(value).expect("an expression");
        let generics: Generics = syn::parse2(generics).expect("generics");
        !may_be_generic(value.to_token_stream(), &generics)
    }

    #[test]
    fn constants_are_evaluated_in_a_const_item() {
        for value in [
            quote!(SLOTS),
            quote!(limits::EXPORTS),
            quote!(crate::limits::EXPORTS),
            quote!(self::SLOTS),
            quote!(SLOTS * 2 + 1),
            quote!(u32::MAX),
            quote!(MAX_2),
        ] {
            assert!(in_const_item(value.clone(), quote!(<T>)), "{value}");
        }
    }

    #[test]
    fn values_that_may_name_a_generic_parameter_are_evaluated_with_the_options() {
        for value in [
            quote!(Self::SLOTS),
            quote!(T::SLOTS),
            quote!(Config::SLOTS),
            quote!(<C as Slots>::N),
            quote!(N),
            quote!(M + 1),
            quote!(slots::<C>()),
            quote!(CAP),
        ] {
            assert!(
                !in_const_item(value.clone(), quote!(<const CAP: u32>)),
                "{value}"
            );
        }
    }
}
