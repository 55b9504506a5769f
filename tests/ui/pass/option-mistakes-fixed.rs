use std::sync::LazyLock;

use lock_runtime::{LockError, LockManager, LockOptions, distributed_lock};

// Each fn here is a mistake of ui/fail/ with the fix its message names applied, so that a
// message that suggests a fix which does not compile, or does not do what was meant, fails here.

static LOCKS: LazyLock<LockManager> = LazyLock::new(LockManager::memory);

fn held() -> Vec<String> {
    lock_runtime::current_all()
        .iter()
        .map(|lock| lock.key().to_owned())
        .collect()
}

// keys-misspelled.rs, keys-as-key-list.rs: `keys`.
#[distributed_lock(keys = ["account:<from>", "account:<to>"], manager = LOCKS)]
async fn transfer(from: u64, to: u64) -> Result<Vec<String>, LockError> {
    Ok(held())
}

// key-as-name.rs: `key`.
#[distributed_lock(key = "order:<user_id>", manager = LOCKS)]
async fn place_order(user_id: u64) -> Result<Vec<String>, LockError> {
    Ok(held())
}

// key-and-keys-same-template.rs: remove `key`, which `keys` already lists.
#[distributed_lock(keys = ["account:<from>", "account:<to>"], manager = LOCKS)]
async fn transfer_once(from: u64, to: u64) -> Result<Vec<String>, LockError> {
    Ok(held())
}

// keys-comma-separated-string.rs: one string per key.
#[distributed_lock(keys = ["account:<from>", "account:<to>"], manager = LOCKS)]
async fn transfer_split(from: u64, to: u64) -> Result<Vec<String>, LockError> {
    Ok(held())
}

// fair-with-misspelled-wait.rs: `wait`.
#[distributed_lock(key = "ticket:<event_id>", fair = true, wait = "5s", manager = LOCKS)]
async fn next_ticket(event_id: u64) -> Result<u64, LockError> {
    Ok(event_id)
}

// fair-with-permits-without-wait.rs: remove `fair` ...
#[distributed_lock(key = "export:<id>", permits = 3, manager = LOCKS)]
async fn export(id: u64) -> Result<u64, LockError> {
    Ok(id)
}

// ... or remove `permits` and add a `wait`.
#[distributed_lock(key = "export:<id>", fair = true, wait = "5s", manager = LOCKS)]
async fn export_in_order(id: u64) -> Result<u64, LockError> {
    Ok(id)
}

// fair-with-mode-without-wait.rs: remove `fair` ...
#[distributed_lock(key = "doc:<id>", mode = "write", manager = LOCKS)]
async fn write_doc(id: u64) -> Result<u64, LockError> {
    Ok(id)
}

// ... or remove `mode` and add a `wait`.
#[distributed_lock(key = "doc:<id>", fair = true, wait = "5s", manager = LOCKS)]
async fn write_doc_in_order(id: u64) -> Result<u64, LockError> {
    Ok(id)
}

// permits-zero-constant.rs: a constant of at least 1.
const SLOTS: u32 = 2;

#[distributed_lock(key = "report:<id>", permits = SLOTS, manager = LOCKS)]
async fn report(id: u64) -> Result<u64, LockError> {
    Ok(id)
}

// permits-from-self.rs: a number known at run time, through `LockManager::semaphore`.
struct Exporter {
    max_exports: u32,
}

impl Exporter {
    async fn export(&self, id: u64) -> Result<u64, LockError> {
        let permit = LOCKS
            .semaphore(format!("export:{id}"), self.max_exports, LockOptions::new())
            .await?;
        let permits = permit.permits();
        permit.release().await?;
        Ok(u64::from(permits.expect("a permit of a semaphore")))
    }
}

// mode-as-read-option.rs, mode-as-write-option.rs: `mode`.
#[distributed_lock(key = "doc:<id>", mode = "read", manager = LOCKS)]
async fn read_doc(id: u64) -> Result<u64, LockError> {
    Ok(id)
}

#[distributed_lock(key = "doc:<id>", mode = "write", manager = LOCKS)]
async fn write_doc_again(id: u64) -> Result<u64, LockError> {
    Ok(id)
}

// fair-yes.rs: without quotes.
#[distributed_lock(key = "ticket:<event_id>", wait = "5s", fair = true, manager = LOCKS)]
async fn next_ticket_in_order(event_id: u64) -> Result<u64, LockError> {
    Ok(event_id)
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let both = ["account:1", "account:2"];
    assert_eq!(transfer(2, 1).await.expect("free"), both);
    assert_eq!(transfer_once(1, 2).await.expect("free"), both);
    assert_eq!(transfer_split(1, 2).await.expect("free"), both);
    assert_eq!(place_order(7).await.expect("free"), ["order:7"]);
    assert_eq!(next_ticket(1).await.expect("free"), 1);
    assert_eq!(export(1).await.expect("free"), 1);
    assert_eq!(export_in_order(1).await.expect("free"), 1);
    assert_eq!(write_doc(1).await.expect("free"), 1);
    assert_eq!(write_doc_in_order(1).await.expect("free"), 1);
    assert_eq!(report(1).await.expect("free"), 1);
    let exporter = Exporter { max_exports: 4 };
    assert_eq!(exporter.export(1).await.expect("free"), 4);
    assert_eq!(read_doc(1).await.expect("free"), 1);
    assert_eq!(write_doc_again(1).await.expect("free"), 1);
    assert_eq!(next_ticket_in_order(1).await.expect("free"), 1);
}
