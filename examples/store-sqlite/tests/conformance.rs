//! The conformance kit (`lock_runtime::conformance`) over the SQLite store, as processes would
//! use it: a store per manager over one file (each manager another process), and one store
//! shared by the managers of one process.

mod common;

use std::sync::Arc;

use common::TempDb;
use lock_runtime::LockManager;
use lock_runtime::conformance::{self, Outcome, Report};
use lock_store_sqlite::SqliteStore;

/// Passed, with read-write locks refused: their refusal checked, their two checks skipped; and
/// with notices and steals refused (the store carries neither): their refusals checked, their
/// four checks skipped.
fn assert_passed(report: &Report) {
    println!("{report}");
    report.assert_passed();
    assert_eq!(report.count(Outcome::Skipped), 7, "{report}");
    for name in ["announce_refusal_is_clear", "steal_refusal_is_clear"] {
        let check = report.checks().iter().find(|check| check.name == name);
        assert_eq!(
            check.map(|check| check.outcome),
            Some(Outcome::Passed),
            "{report}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn managers_with_a_store_each_over_one_file_pass_the_conformance_kit() {
    let db = TempDb::new("conformance-apart");
    let path = db.path().to_owned();
    let report = conformance::run("sqlite, a store per manager", || {
        let path = path.clone();
        async move {
            let store = SqliteStore::open(&path).await.expect("open the database");
            LockManager::builder().store(Arc::new(store)).build().await
        }
    })
    .await;
    assert_passed(&report);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn managers_sharing_one_store_pass_the_conformance_kit() {
    let db = TempDb::new("conformance-shared");
    let store = db.store().await;
    let report = conformance::run("sqlite, one store shared", || {
        let store = store.clone();
        async move { LockManager::builder().store(store).build().await }
    })
    .await;
    assert_passed(&report);
}
