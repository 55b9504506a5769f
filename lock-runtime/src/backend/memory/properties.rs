//! The memory backend as a state machine, checked against a model.
//!
//! Random sequences of acquires, renewals, releases (with and without `keep`), clock advances
//! and waiters joining, leaving and taking their wake-ups run on paused tokio time, against a
//! model small enough to be obviously right: per key at most one lock, with an owner (or none
//! while `keep` holds it), a fencing token and an expiry instant. After every step the backend's
//! answer must be the model's, its table must hold exactly the model's live locks, and no two
//! clients may have been told they hold the same key at the same instant.

use std::collections::HashMap;
use std::time::Duration;

use futures_util::FutureExt;
use proptest::prelude::*;

use super::*;
use crate::waiters::Slot;

const CASES: u32 = 1_000;

/// Few keys and owners, so that sequences collide often.
const KEYS: [&str; 2] = ["order:1", "{x}:\n"];
const TOKENS: [&str; 3] = ["owner-a", "owner-b", "owner-c"];

#[derive(Debug, Clone)]
enum Op {
    Acquire {
        key: usize,
        token: usize,
        ttl: Duration,
    },
    Renew {
        batch: Vec<(usize, usize, Duration)>,
    },
    Release {
        key: usize,
        token: usize,
        keep: Duration,
    },
    Advance(Duration),
    /// Advance to the instant the key's lock expires, or to just before it.
    AdvanceToExpiry {
        key: usize,
        early: bool,
    },
    /// A task starts waiting for the key.
    Join {
        key: usize,
    },
    /// A waiting task gives up (picked by index among the waiters).
    Leave {
        waiter: prop::sample::Index,
    },
    /// A waiting task looks whether a release was handed to it.
    Consume {
        waiter: prop::sample::Index,
    },
}

fn op() -> impl Strategy<Value = Op> {
    let key = 0..KEYS.len();
    let token = 0..TOKENS.len();
    // Short leases and steps, so that expiry falls between and exactly on steps.
    let ttl = (1u64..=20).prop_map(Duration::from_millis);
    let keep = prop_oneof![
        Just(Duration::ZERO),
        (1u64..=10).prop_map(Duration::from_millis)
    ];
    let step = prop_oneof![
        (0u64..=12).prop_map(Duration::from_millis),
        (1u64..1_000).prop_map(Duration::from_micros),
    ];
    prop_oneof![
        4 => (key.clone(), token.clone(), ttl.clone())
            .prop_map(|(key, token, ttl)| Op::Acquire { key, token, ttl }),
        2 => prop::collection::vec((key.clone(), token.clone(), ttl), 1..4)
            .prop_map(|batch| Op::Renew { batch }),
        3 => (key.clone(), token, keep)
            .prop_map(|(key, token, keep)| Op::Release { key, token, keep }),
        3 => step.prop_map(Op::Advance),
        1 => (key.clone(), any::<bool>()).prop_map(|(key, early)| Op::AdvanceToExpiry { key, early }),
        1 => key.prop_map(|key| Op::Join { key }),
        1 => any::<prop::sample::Index>().prop_map(|waiter| Op::Leave { waiter }),
        2 => any::<prop::sample::Index>().prop_map(|waiter| Op::Consume { waiter }),
    ]
}

struct Lock {
    /// `None` while only `keep` holds it.
    owner: Option<usize>,
    fence: u64,
    expires: Duration,
}

struct Waiter {
    key: usize,
    /// Handed a release it has not looked at yet.
    woken: bool,
    slot: Arc<Slot>,
}

/// The model; times count from the start of the run.
#[derive(Default)]
struct Model {
    now: Duration,
    locks: HashMap<usize, Lock>,
    highest_fence: HashMap<usize, u64>,
    /// In the order they joined.
    waiters: Vec<Waiter>,
}

impl Model {
    fn live(&mut self, key: usize) -> Option<&mut Lock> {
        let now = self.now;
        self.locks.retain(|_, lock| lock.expires > now);
        self.locks.get_mut(&key)
    }

    /// A release wakes the longest-waiting task of the key that is not awake already.
    fn wake_first(&mut self, key: usize) {
        if let Some(waiter) = self.waiters.iter_mut().find(|w| w.key == key && !w.woken) {
            waiter.woken = true;
        }
    }
}

/// What the backend must answer to an acquire.
enum Expected {
    Refreshed { fence: u64 },
    Busy { remaining: Duration },
    Fresh,
}

struct Run {
    backend: MemoryBackend,
    waiters: Arc<Waiters>,
    keys: Vec<Key>,
    start: Instant,
    model: Model,
    /// What the clients were told: (key, owner) holds the lock until this instant.
    told: HashMap<(usize, usize), Duration>,
}

impl Run {
    fn new() -> Self {
        let waiters = Arc::new(Waiters::default());
        Run {
            backend: MemoryBackend::new(waiters.clone()),
            waiters,
            keys: KEYS
                .iter()
                .map(|key| Key::lock("lock:", key).expect("keys are not empty"))
                .collect(),
            start: Instant::now(),
            model: Model::default(),
            told: HashMap::new(),
        }
    }

    async fn step(&mut self, op: Op) -> Result<(), TestCaseError> {
        match op {
            Op::Acquire { key, token, ttl } => self.acquire(key, token, ttl).await,
            Op::Renew { batch } => self.renew(&batch).await,
            Op::Release { key, token, keep } => self.release(key, token, keep).await,
            Op::Advance(step) => {
                self.advance(step).await;
                Ok(())
            }
            Op::AdvanceToExpiry { key, early } => {
                let now = self.model.now;
                let Some(expires) = self.model.live(key).map(|lock| lock.expires) else {
                    return Ok(());
                };
                let early_by = if early {
                    Duration::from_nanos(1)
                } else {
                    Duration::ZERO
                };
                self.advance(expires - now - early_by).await;
                Ok(())
            }
            Op::Join { key } => {
                let stored = &self.keys[key].lock;
                let (slot, _) = self.waiters.join(stored, self.keys[key].shape());
                self.backend
                    .watch(stored)
                    .await
                    .map_err(|err| TestCaseError::fail(err.to_string()))?;
                self.model.waiters.push(Waiter {
                    key,
                    woken: false,
                    slot,
                });
                Ok(())
            }
            Op::Leave { waiter } => {
                if self.model.waiters.is_empty() {
                    return Ok(());
                }
                let index = waiter.index(self.model.waiters.len());
                let key = self.model.waiters[index].key;
                // The first waiter of a key watches its expiry; leaving without handing the watch
                // on, it wakes the next one to look.
                let was_first = self.model.waiters.iter().position(|w| w.key == key) == Some(index);
                let gone = self.model.waiters.remove(index);
                let last_expected = !self.model.waiters.iter().any(|w| w.key == gone.key);
                let mut last = false;
                self.waiters
                    .leave(&self.keys[gone.key].lock, &gone.slot, || last = true);
                prop_assert_eq!(last, last_expected, "told whether it was the last waiter");
                if gone.woken || was_first {
                    // A wake-up it never used goes to the next in line.
                    self.model.wake_first(gone.key);
                }
                Ok(())
            }
            Op::Consume { waiter } => {
                if self.model.waiters.is_empty() {
                    return Ok(());
                }
                let index = waiter.index(self.model.waiters.len());
                let waiter = &mut self.model.waiters[index];
                let woken = waiter.slot.woken().now_or_never().is_some();
                prop_assert_eq!(
                    woken,
                    waiter.woken,
                    "waiter {} of key {}",
                    index,
                    waiter.key
                );
                waiter.woken = false;
                Ok(())
            }
        }
    }

    async fn advance(&mut self, step: Duration) {
        tokio::time::advance(step).await;
        self.model.now += step;
    }

    async fn acquire(
        &mut self,
        key: usize,
        token: usize,
        ttl: Duration,
    ) -> Result<(), TestCaseError> {
        let answer = self
            .backend
            .acquire(&self.keys[key], TOKENS[token], ttl, Default::default())
            .await
            .map_err(|err| TestCaseError::fail(err.to_string()))?;
        let now = self.model.now;
        let expected = match self.model.live(key) {
            Some(lock) if lock.owner == Some(token) => {
                lock.expires = now + ttl;
                Expected::Refreshed { fence: lock.fence }
            }
            Some(lock) => Expected::Busy {
                remaining: lock.expires - now,
            },
            None => Expected::Fresh,
        };
        let acquired = matches!(answer, Acquire::Acquired { .. });
        match (expected, answer) {
            (Expected::Refreshed { fence }, Acquire::Acquired { fence: got }) => {
                prop_assert_eq!(got, fence, "a refreshed lock keeps its fencing token");
            }
            (Expected::Busy { remaining }, Acquire::Busy { remaining: got, .. }) => {
                prop_assert_eq!(
                    got,
                    Some(remaining),
                    "busy with the holder's remaining lease"
                );
            }
            (Expected::Fresh, Acquire::Acquired { fence }) => {
                let highest = self.model.highest_fence.entry(key).or_default();
                prop_assert!(
                    fence > *highest,
                    "fencing token {} is not above {} handed out before",
                    fence,
                    highest
                );
                *highest = fence;
                self.model.locks.insert(
                    key,
                    Lock {
                        owner: Some(token),
                        fence,
                        expires: now + ttl,
                    },
                );
            }
            (Expected::Refreshed { .. } | Expected::Fresh, answer) => {
                return Err(TestCaseError::fail(format!(
                    "expected acquired, got {answer:?}"
                )));
            }
            (Expected::Busy { remaining }, answer) => {
                return Err(TestCaseError::fail(format!(
                    "expected busy for {remaining:?}, got {answer:?}"
                )));
            }
        }
        if acquired {
            for other in (0..TOKENS.len()).filter(|other| *other != token) {
                let until = self.told.get(&(key, other)).copied();
                prop_assert!(
                    until.is_none_or(|until| until <= now),
                    "{} acquired key {} at {:?} while {} was told it holds it until {:?}",
                    TOKENS[token],
                    KEYS[key],
                    now,
                    TOKENS[other],
                    until
                );
            }
            self.told.insert((key, token), now + ttl);
        }
        Ok(())
    }

    async fn renew(&mut self, batch: &[(usize, usize, Duration)]) -> Result<(), TestCaseError> {
        let renewals: Vec<Renewal> = batch
            .iter()
            .map(|&(key, token, ttl)| Renewal {
                lease: std::sync::Arc::new(crate::lease::Lease::new(
                    self.keys[key].clone(),
                    crate::lease::Token::from_text(TOKENS[token]).expect("a short token"),
                    0,
                    crate::options::LockOptions::new(),
                    tokio::time::Instant::now(),
                )),
                ttl,
            })
            .collect();
        let booked = std::sync::Mutex::new(vec![None; batch.len()]);
        let book = |indices: &[usize], answer: Result<Vec<Option<bool>>, StoreError>| {
            let mut booked = booked
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            for (k, &i) in indices.iter().enumerate() {
                booked[i] = Some(match &answer {
                    Ok(renewed) => Ok(renewed.get(k).copied().flatten()),
                    Err(err) => Err(err.to_string()),
                });
            }
        };
        self.backend.renew(&renewals, &book).await;
        let booked = booked
            .into_inner()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut answers = Vec::new();
        for answer in booked {
            match answer {
                Some(Ok(renewed)) => answers.push(renewed),
                Some(Err(err)) => return Err(TestCaseError::fail(err)),
                None => return Err(TestCaseError::fail("a renewal was never booked")),
            }
        }
        let now = self.model.now;
        for (&(key, token, ttl), renewed) in batch.iter().zip(answers) {
            let expected = match self.model.live(key) {
                Some(lock) if lock.owner == Some(token) => {
                    lock.expires = now + ttl;
                    true
                }
                _ => false,
            };
            prop_assert_eq!(
                renewed,
                Some(expected),
                "renewal of {} by {}",
                KEYS[key],
                TOKENS[token]
            );
            if renewed == Some(true) {
                self.told.insert((key, token), now + ttl);
            } else {
                self.told.remove(&(key, token));
            }
        }
        Ok(())
    }

    async fn release(
        &mut self,
        key: usize,
        token: usize,
        keep: Duration,
    ) -> Result<(), TestCaseError> {
        let answer = self
            .backend
            .release(&self.keys[key], TOKENS[token], keep)
            .await
            .map_err(|err| TestCaseError::fail(err.to_string()))?;
        let now = self.model.now;
        let expected = match self.model.live(key) {
            None => Release::Gone,
            Some(lock) if lock.owner != Some(token) => Release::NotOwner,
            Some(lock) if !keep.is_zero() => {
                lock.owner = None;
                lock.expires = now + keep;
                Release::Released
            }
            Some(_) => {
                self.model.locks.remove(&key);
                Release::Released
            }
        };
        prop_assert_eq!(
            answer,
            expected,
            "release of {} by {}",
            KEYS[key],
            TOKENS[token]
        );
        if answer == Release::Released {
            self.model.wake_first(key);
        }
        self.told.remove(&(key, token));
        Ok(())
    }

    /// The backend's table holds exactly the model's live locks, and its clock is the model's.
    fn check_state(&mut self) -> Result<(), TestCaseError> {
        prop_assert_eq!(Instant::now() - self.start, self.model.now);
        let now = self.start + self.model.now;
        let state = self.backend.state();
        for (index, stored) in self.keys.iter().enumerate() {
            let real = state
                .locks
                .get(&stored.lock)
                .filter(|entry| entry.expires > now)
                .map(|entry| (entry.token.clone(), entry.fence, entry.expires - self.start));
            let expected = self
                .model
                .locks
                .get(&index)
                .filter(|lock| lock.expires > self.model.now)
                .map(|lock| {
                    let owner = lock.owner.map_or("", |token| TOKENS[token]);
                    (owner.to_owned(), lock.fence, lock.expires)
                });
            prop_assert_eq!(real, expected, "the lock table at {}", KEYS[index]);
        }
        Ok(())
    }
}

fn run(ops: Vec<Op>) -> Result<(), TestCaseError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a current-thread runtime with paused time");
    runtime.block_on(async move {
        let mut run = Run::new();
        for op in ops {
            run.step(op).await?;
            run.check_state()?;
        }
        Ok(())
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(CASES))]

    #[test]
    fn the_memory_backend_behaves_like_its_model(ops in prop::collection::vec(op(), 1..60)) {
        run(ops)?;
    }
}
