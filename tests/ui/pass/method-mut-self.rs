use lock_runtime::{LockError, LockManager, distributed_lock};

struct Account {
    locks: LockManager,
    id: u64,
    balance: u64,
}

#[derive(Debug)]
enum AccountError {
    Insufficient,
    Lock(LockError),
}

impl From<LockError> for AccountError {
    fn from(err: LockError) -> Self {
        AccountError::Lock(err)
    }
}

impl Account {
    // The key reads `self` before the body borrows it mutably; the manager, read from `self`
    // too, is cloned first so the body can take `&mut self`.
    #[distributed_lock(key = "account:<self.id>", manager = self.locks)]
    async fn withdraw(&mut self, amount: u64) -> Result<u64, AccountError> {
        if amount > self.balance {
            return Err(AccountError::Insufficient);
        }
        self.charge(amount);
        tokio::task::yield_now().await;
        Ok(self.balance)
    }

    fn charge(&mut self, amount: u64) {
        self.balance -= amount;
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let mut account = Account {
        locks: LockManager::memory(),
        id: 1,
        balance: 10,
    };
    assert_eq!(account.withdraw(3).await.expect("enough money"), 7);
    assert!(matches!(
        account.withdraw(100).await,
        Err(AccountError::Insufficient)
    ));
    assert_eq!(account.balance, 7);
    if let Err(AccountError::Lock(err)) = account.withdraw(1).await {
        panic!("the memory backend should not fail: {err}");
    }
}
