//! TEMPORARY stand-ins with the final signatures; replaced by the real runtime.
#![allow(missing_docs, unreachable_pub, clippy::unused_async)]
use std::future::Future;
use std::sync::OnceLock;
use std::time::Duration;

use crate::{LockError, LockOptions};

#[derive(Clone, Debug)]
pub struct LockManager(());
static GLOBAL: OnceLock<LockManager> = OnceLock::new();
pub fn set_global_default(m: LockManager) -> Result<(), LockError> {
    GLOBAL.set(m).map_err(|_| LockError::Config("already set".into()))
}
pub fn global_default() -> Option<LockManager> {
    GLOBAL.get().cloned()
}
pub struct LockGuard;
impl LockGuard {
    pub fn fencing_token(&self) -> u64 { 0 }
    pub fn key(&self) -> &str { "" }
    pub fn is_held(&self) -> bool { true }
    pub async fn lost(&self) -> crate::LostReason { std::future::pending().await }
    pub async fn release(self) -> Result<(), LockError> { Ok(()) }
}
#[derive(Clone, Debug)]
pub struct CurrentLock;
impl CurrentLock {
    pub fn key(&self) -> &str { "" }
    pub fn fencing_token(&self) -> u64 { 0 }
    pub fn is_held(&self) -> bool { true }
    pub fn remaining(&self) -> Duration { Duration::ZERO }
    pub async fn lost(&self) -> crate::LostReason { std::future::pending().await }
}
pub fn current() -> Option<CurrentLock> { None }
impl LockManager {
    pub async fn connect(_url: &str) -> Result<LockManager, LockError> { Ok(LockManager(())) }
    pub fn memory() -> LockManager { LockManager(()) }
    pub async fn lock(&self, _key: &str, _o: LockOptions) -> Result<LockGuard, LockError> { Ok(LockGuard) }
    pub fn run_locked<'m, F, T, E>(&'m self, _key: String, _o: LockOptions, body: F)
        -> impl Future<Output = Result<T, E>> + 'm
    where F: Future<Output = Result<T, E>> + 'm, E: From<LockError> + 'm, T: 'm {
        body
    }
}
