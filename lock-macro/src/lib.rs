//! Procedural macro behind `lock_runtime::distributed_lock`. Depend on `lock-runtime`, not on
//! this crate: the runtime re-exports the attribute, and the generated code calls into it.
//!
//! The attribute is a pipeline: [`attr`] parses the options, [`item`] the fn, [`validate`]
//! checks them together, [`expand`] generates the locked fn, and [`fallback`] keeps the fn as
//! written next to the errors when something is wrong.

mod attr;
mod duration;
mod expand;
mod fallback;
mod item;
mod suggest;
mod template;
mod validate;

use proc_macro::TokenStream;

/// Runs an async fn while holding a distributed lock. See `lock_runtime::distributed_lock`.
#[proc_macro_attribute]
pub fn distributed_lock(args: TokenStream, item: TokenStream) -> TokenStream {
    expand::distributed_lock(args.into(), item.into()).into()
}
