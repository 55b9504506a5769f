//! What the attribute emits when it finds a mistake: the item exactly as written, plus one
//! `compile_error!` per mistake.
//!
//! Keeping the item means callers of the fn still resolve, so the user sees the attribute's
//! errors and nothing else ("cannot find function" and friends would bury them).

use proc_macro2::TokenStream;
use quote::quote;

pub(crate) fn fallback(
    item: TokenStream,
    errors: impl IntoIterator<Item = syn::Error>,
) -> TokenStream {
    let errors = errors.into_iter().map(|error| error.to_compile_error());
    quote! {
        #(#errors)*
        #item
    }
}
