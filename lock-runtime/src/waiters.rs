//! Who is waiting for which lock, and handing each release notification to one of them.
//!
//! A release publishes one message; every process subscribed to the key receives it, and inside a
//! process this registry wakes the longest-waiting task that is not already awake. A task keeps
//! its place in line across retries: it registers once per `lock()` call, not once per sleep.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::{Notify, OnceCell};

/// Every waiter of one manager.
#[derive(Default)]
pub(crate) struct Waiters {
    keys: Mutex<HashMap<String, KeyWaiters>>,
}

struct KeyWaiters {
    line: VecDeque<Arc<Slot>>,
    /// Set once the backend delivers notifications for the key.
    watched: Arc<OnceCell<()>>,
}

/// One waiting task's place in line.
#[derive(Default)]
pub(crate) struct Slot {
    notify: Notify,
    /// Woken and not yet back in `wait`: the next release goes to someone else.
    woken: AtomicBool,
}

impl Slot {
    /// Resolves when a release of the key is handed to this waiter.
    pub(crate) async fn released(&self) {
        self.notify.notified().await;
        self.woken.store(false, Ordering::Release);
    }
}

impl Waiters {
    /// Puts a waiter at the end of the line for `key`. Returns its slot, and the cell that says
    /// whether notifications flow for the key (the first waiter of a key fills it).
    pub(crate) fn join(&self, key: &str) -> (Arc<Slot>, Arc<OnceCell<()>>) {
        let slot = Arc::new(Slot::default());
        let mut keys = self.keys.lock().unwrap_or_else(PoisonError::into_inner);
        let entry = keys.entry(key.to_owned()).or_insert_with(|| KeyWaiters {
            line: VecDeque::new(),
            watched: Arc::new(OnceCell::new()),
        });
        entry.line.push_back(slot.clone());
        (slot, entry.watched.clone())
    }

    /// Takes a waiter out of line. If it was the last one for `key`, runs `last` (which stops
    /// the notifications) before anyone can join again, so a stop can never overtake the next
    /// start. A wake-up the waiter received but did not use goes to the next in line.
    pub(crate) fn leave(&self, key: &str, slot: &Arc<Slot>, last: impl FnOnce()) {
        let mut keys = self.keys.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(entry) = keys.get_mut(key) else {
            return;
        };
        entry.line.retain(|s| !Arc::ptr_eq(s, slot));
        if entry.line.is_empty() {
            keys.remove(key);
            last();
            return;
        }
        if slot.woken.load(Ordering::Acquire) {
            wake_first(entry);
        }
    }

    /// A release of `key` was announced: wake the first waiter that is not awake already.
    pub(crate) fn wake_one(&self, key: &str) {
        let keys = self.keys.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(entry) = keys.get(key) {
            wake_first(entry);
        }
    }

    /// Notifications may have been missed (the subscription connection dropped): wake everyone,
    /// each retries once and waits again.
    pub(crate) fn wake_all(&self) {
        let keys = self.keys.lock().unwrap_or_else(PoisonError::into_inner);
        for slot in keys.values().flat_map(|entry| entry.line.iter()) {
            slot.woken.store(true, Ordering::Release);
            slot.notify.notify_one();
        }
    }
}

/// Wakes the first waiter of a line that is not awake already.
fn wake_first(entry: &KeyWaiters) {
    let next = entry
        .line
        .iter()
        .find(|slot| !slot.woken.swap(true, Ordering::AcqRel));
    if let Some(slot) = next {
        slot.notify.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    async fn is_woken(slot: &Slot) -> bool {
        tokio::time::timeout(Duration::from_millis(20), slot.released())
            .await
            .is_ok()
    }

    #[tokio::test]
    async fn one_release_wakes_exactly_the_first_waiter() {
        let waiters = Waiters::default();
        let (first, _) = waiters.join("k");
        let (second, _) = waiters.join("k");
        waiters.wake_one("k");
        assert!(is_woken(&first).await);
        assert!(!is_woken(&second).await);
    }

    #[tokio::test]
    async fn a_woken_waiter_keeps_its_place_and_the_next_release_goes_to_the_next() {
        let waiters = Waiters::default();
        let (first, _) = waiters.join("k");
        let (second, _) = waiters.join("k");
        waiters.wake_one("k");
        // `first` has not consumed its wake-up yet: the next release must go to `second`.
        waiters.wake_one("k");
        assert!(is_woken(&first).await);
        assert!(is_woken(&second).await);
        // Back in line, `first` is again the first to be woken.
        waiters.wake_one("k");
        assert!(is_woken(&first).await);
    }

    #[tokio::test]
    async fn the_last_waiter_to_leave_says_so() {
        let waiters = Waiters::default();
        let (a, _) = waiters.join("k");
        let (b, _) = waiters.join("k");
        let mut stopped = false;
        waiters.leave("k", &a, || stopped = true);
        assert!(!stopped);
        waiters.leave("k", &b, || stopped = true);
        assert!(stopped);
        assert!(waiters.keys.lock().expect("not poisoned").is_empty());
    }

    #[tokio::test]
    async fn a_wake_up_left_unused_goes_to_the_next_waiter() {
        let waiters = Waiters::default();
        let (first, _) = waiters.join("k");
        let (second, _) = waiters.join("k");
        waiters.wake_one("k");
        // `first` gives up (cancelled, or out of time) before it used the wake-up.
        waiters.leave("k", &first, || {});
        assert!(is_woken(&second).await);
    }

    #[tokio::test]
    async fn releases_of_other_keys_wake_nobody() {
        let waiters = Waiters::default();
        let (a, _) = waiters.join("k");
        waiters.wake_one("other");
        assert!(!is_woken(&a).await);
    }
}
