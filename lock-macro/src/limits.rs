//! The lease limits, in one place for both crates: the attribute checks them at compile time,
//! and the runtime reads the same numbers through the hidden `__min_ttl_millis!()` and
//! `__max_ttl_secs!()` macros for `lock_runtime::MIN_TTL` and `lock_runtime::MAX_TTL`. (A
//! proc-macro crate can export nothing but macros, hence macros and not constants.)

/// The shortest lease: renewal runs every `ttl / 3` and needs a few milliseconds.
pub(crate) const MIN_TTL_MILLIS: u64 = 10;

/// The longest lease and `hold_at_least` the runtime accepts: one year.
pub(crate) const MAX_TTL_SECS: u64 = 365 * 24 * 3600;

/// [`MAX_TTL_SECS`] in milliseconds, as the attribute's durations are.
pub(crate) const MAX_TTL_MILLIS: u64 = MAX_TTL_SECS * 1000;

/// Longest lease accepted without `allow_long_ttl = true`: one day.
pub(crate) const LONG_TTL_MILLIS: u64 = 24 * 60 * 60 * 1000;
