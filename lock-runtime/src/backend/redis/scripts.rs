//! The Lua scripts of the lock protocol, each with the functions it starts with, loaded once
//! per process and cached on each server by its SHA-1.

use std::sync::LazyLock;

use crate::protocol::scripts::Lua;

// The scripts that touch the line of fair waiters start with its functions.
pub(super) static ACQUIRE: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(concat!(
        include_str!("../../../scripts/rights.lua"),
        include_str!("../../../scripts/queue.lua"),
        include_str!("../../../scripts/acquire.lua")
    ))
});
pub(super) static RENEW: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(concat!(
        include_str!("../../../scripts/rights.lua"),
        include_str!("../../../scripts/renew.lua")
    ))
});
pub(super) static RELEASE: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(concat!(
        include_str!("../../../scripts/rights.lua"),
        include_str!("../../../scripts/queue.lua"),
        include_str!("../../../scripts/release.lua")
    ))
});
pub(super) static HANDOFF: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(concat!(
        include_str!("../../../scripts/rights.lua"),
        include_str!("../../../scripts/queue.lua"),
        include_str!("../../../scripts/handoff.lua")
    ))
});
pub(super) static SEMAPHORE: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(concat!(
        include_str!("../../../scripts/rights.lua"),
        include_str!("../../../scripts/queue.lua"),
        include_str!("../../../scripts/semaphore.lua")
    ))
});
pub(super) static PERMIT_RELEASE: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(concat!(
        include_str!("../../../scripts/rights.lua"),
        include_str!("../../../scripts/queue.lua"),
        include_str!("../../../scripts/permit_release.lua")
    ))
});
pub(super) static RW_ACQUIRE: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(concat!(
        include_str!("../../../scripts/rights.lua"),
        include_str!("../../../scripts/queue.lua"),
        include_str!("../../../scripts/rw_acquire.lua")
    ))
});
pub(super) static RW_RELEASE: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(concat!(
        include_str!("../../../scripts/rights.lua"),
        include_str!("../../../scripts/queue.lua"),
        include_str!("../../../scripts/rw_release.lua")
    ))
});
pub(super) static RW_LEAVE: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(concat!(
        include_str!("../../../scripts/rights.lua"),
        include_str!("../../../scripts/queue.lua"),
        include_str!("../../../scripts/rw_leave.lua")
    ))
});
pub(super) static LEAVE: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(concat!(
        include_str!("../../../scripts/rights.lua"),
        include_str!("../../../scripts/queue.lua"),
        include_str!("../../../scripts/leave.lua")
    ))
});
