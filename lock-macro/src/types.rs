//! How the user's types and tokens read: a fn's own type parameters, a type without the
//! groups and parentheses around it, and token text as a person writes it in a message.

use proc_macro2::TokenStream;
use syn::ext::IdentExt;
use syn::{Generics, Type};

/// Whether `ty` is one of the fn's own type parameters (`E`, not `Vec<E>` or `app::E`).
pub(crate) fn is_type_param(ty: &Type, generics: &Generics) -> bool {
    let Type::Path(path) = strip_groups(ty) else {
        return false;
    };
    let Some(ident) = path.path.get_ident() else {
        return false;
    };
    path.qself.is_none()
        && generics
            .type_params()
            .any(|param| param.ident.unraw() == ident.unraw())
}

/// `ty` without the invisible groups and parentheses around it.
pub(crate) fn strip_groups(ty: &Type) -> &Type {
    match ty {
        Type::Group(group) => strip_groups(&group.elem),
        Type::Paren(paren) => strip_groups(&paren.elem),
        _ => ty,
    }
}

/// Token text as a person would write it, for messages: `Option<u64>`, not `Option < u64 >`.
pub(crate) fn pretty(tokens: TokenStream) -> String {
    let text = tokens.to_string();
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    let mut previous = ' ';
    while let Some(c) = chars.next() {
        if c == ' ' {
            let next = chars.peek().copied().unwrap_or(' ');
            let glue_after = matches!(previous, '<' | '&' | ':' | '(' | '[' | '\'' | '.');
            let glue_before = matches!(
                next,
                '<' | '>' | ',' | ';' | ':' | '(' | ')' | ']' | ' ' | '.'
            );
            if glue_after || glue_before {
                continue;
            }
        }
        out.push(c);
        previous = c;
    }
    out
}

#[cfg(test)]
mod tests {
    use quote::quote;

    use super::*;

    #[test]
    fn pretty_printing_removes_token_spacing() {
        assert_eq!(pretty(quote!(Option<Vec<&'a str>>)), "Option<Vec<&'a str>>");
        assert_eq!(
            pretty(quote!(std::io::Result<(u8, u16)>)),
            "std::io::Result<(u8, u16)>"
        );
        assert_eq!(pretty(quote!(self.limits.max)), "self.limits.max");
        assert_eq!(pretty(quote!([u8; 4])), "[u8; 4]");
    }
}
