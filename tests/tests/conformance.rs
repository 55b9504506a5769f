//! The conformance kit (`lock_runtime::conformance`) over every store the library ships:
//! memory://, one redis-server, a master behind Sentinel, a three-master Redis Cluster and
//! Redlock over three masters (which refuses semaphores, read-write locks and steals).

use lock_runtime::conformance::{self, Outcome};
use lock_tests::prelude::*;

lock_tests::on_backends!(
    [memory, redis, sentinel, cluster, redlock][the_store_passes_the_conformance_kit]
);

async fn the_store_passes_the_conformance_kit(f: Deployment) {
    let store = f.locks.backend().to_owned();
    let report = conformance::run(&store, || LockManager::connect(f.url())).await;
    // The table shows with --nocapture, and in the failure message.
    println!("{report}");
    if !report.passed() {
        panic!("{report}\n{}", f.log());
    }
    // The ten checks of a plain lock apply to every store: none is skipped.
    assert!(report.count(Outcome::Passed) >= 10, "{report}");
    // Every store here carries notices: control's checks of them run and pass. Every one but
    // Redlock steals; Redlock refuses, clearly.
    let steals = !store.starts_with("redlock");
    for (name, runs) in CONTROL {
        let expected = if runs || steals {
            Outcome::Passed
        } else {
            Outcome::Skipped
        };
        assert_eq!(outcome(&report, name), expected, "{name}\n{report}");
    }
    assert_eq!(
        outcome(&report, "announce_refusal_is_clear"),
        Outcome::Skipped,
        "{report}"
    );
    let refusal = if steals {
        Outcome::Skipped
    } else {
        Outcome::Passed
    };
    assert_eq!(
        outcome(&report, "steal_refusal_is_clear"),
        refusal,
        "{report}"
    );
}

/// The checks of control over a holder, each with whether it runs on a store that announces
/// but cannot steal.
const CONTROL: [(&str, bool); 4] = [
    ("release_request_reaches_the_holder", true),
    ("notices_reach_every_manager", true),
    ("steal_takes_the_lock_with_a_greater_fence", false),
    ("steal_of_a_free_lock_takes_it", false),
];

fn outcome(report: &conformance::Report, name: &str) -> Outcome {
    report
        .checks()
        .iter()
        .find(|check| check.name == name)
        .unwrap_or_else(|| panic!("no check `{name}` in\n{report}"))
        .outcome
}

/// The kit fails a store whose managers do not share it: `LockManager::memory()` gives each
/// manager a table of its own, so each "process" sees a free lock where another holds it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn managers_that_share_no_store_fail_the_kit() {
    let report = conformance::run("a table per manager", || async {
        Ok(LockManager::memory())
    })
    .await;
    let failed: Vec<&str> = report
        .checks()
        .iter()
        .filter(|check| check.outcome == Outcome::Failed)
        .map(|check| check.name)
        .collect();
    for name in [
        "mutual_exclusion_across_managers",
        "crashed_holder_expires_after_its_lease",
        "stalled_holder_keeps_its_lock_delay",
        "stale_holder_cannot_renew_or_release",
        "release_wakes_a_waiter_on_another_manager",
        "semaphore_admits_its_permits_and_no_more",
        "writer_excludes_readers_and_writers",
        "release_request_reaches_the_holder",
        "notices_reach_every_manager",
        "steal_takes_the_lock_with_a_greater_fence",
    ] {
        assert!(failed.contains(&name), "{name} did not fail:\n{report}");
    }
    let shown = std::panic::catch_unwind(|| report.assert_passed())
        .expect_err("a failed check fails the assertion");
    let shown = shown.downcast_ref::<String>().expect("a formatted message");
    assert!(shown.contains(&report.to_string()), "{shown}");
}
