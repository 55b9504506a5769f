use std::sync::LazyLock;

use lock_runtime::{LockError, LockManager, distributed_lock};

// `keys = [..]` takes every lock together, in one order whatever order they are listed in; the
// options apply to each key. Each fn here is the fix of a mistake in ui/fail/*keys*.rs.

static LOCKS: LazyLock<LockManager> = LazyLock::new(LockManager::memory);

// key-and-keys.rs: every template in `keys`.
#[distributed_lock(keys = ["account:<from>", "account:<to>"], manager = LOCKS, wait = "1s")]
async fn transfer(from: u64, to: u64) -> Result<Vec<(String, u64)>, LockError> {
    let held = lock_runtime::current_all();
    Ok(held
        .iter()
        .map(|lock| (lock.key().to_owned(), lock.fencing_token()))
        .collect())
}

// keys-not-a-list.rs: one key is `key`, or a list of one.
#[distributed_lock(keys = ["account:<from>"], manager = LOCKS)]
async fn one_in_a_list(from: u64) -> Result<u64, LockError> {
    Ok(from)
}

// keys-placeholder-not-display.rs: name a field that is `Display`.
struct Account {
    id: u64,
}

#[distributed_lock(keys = ["account:<from.id>", "account:<to.id>"], manager = LOCKS)]
async fn between_accounts(from: Account, to: &Account) -> Result<u64, LockError> {
    Ok(from.id + to.id)
}

// Methods, with the manager from `self`, and the global default.
struct Bank {
    locks: LockManager,
}

impl Bank {
    #[distributed_lock(keys = ["ledger", "account:<id>"], manager = self.locks, ttl = "10s")]
    async fn post(&mut self, id: u64) -> Result<u64, LockError> {
        Ok(id)
    }
}

#[distributed_lock(keys = ["stock:<item>", "cart:<cart>"])]
async fn reserve(item: String, cart: u64) -> Result<String, LockError> {
    Ok(format!("{item} in {cart}"))
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let held = transfer(2, 1).await.expect("both free");
    let keys: Vec<&str> = held.iter().map(|(key, _)| key.as_str()).collect();
    assert_eq!(keys, ["account:1", "account:2"]);
    // The same account on both sides is one lock.
    assert_eq!(transfer(5, 5).await.expect("one lock").len(), 1);
    assert_eq!(one_in_a_list(3).await.expect("free"), 3);
    let to = Account { id: 2 };
    assert_eq!(between_accounts(Account { id: 1 }, &to).await.expect("free"), 3);
    let mut bank = Bank {
        locks: LockManager::memory(),
    };
    assert_eq!(bank.post(4).await.expect("free"), 4);
    assert!(reserve("apple".into(), 1).await.is_err(), "no default manager yet");
    lock_runtime::set_global_default(LockManager::memory()).expect("first");
    assert_eq!(reserve("apple".into(), 1).await.expect("free"), "apple in 1");
}
