//! A conformance kit: the behaviour every lock store must have, checked against one store.
//!
//! A store (memory, one Redis, Sentinel, Cluster, Redlock, or a store of your own) passes or
//! fails it as a whole. The kit is given a way to make managers on the store: **each call
//! stands for another process**, a manager with its own connections, watchdog and waiters,
//! sharing nothing with the others but the store. The kit takes locks through several of
//! them at once, as processes would, and checks what each one sees.
//!
//! What a store author gives: the store's name (for the report) and a factory, a closure that
//! returns a future of a new [`LockManager`] on the *same* store each time
//! it is called (`LockManager::connect(url)`, or a builder with the store's settings). Each
//! check uses keys of its own under `conformance:<run>:` (a random run id), and shuts its
//! managers down when it ends, so the store need not be empty and runs do not meet. The kit
//! needs a tokio runtime with the time driver, on the real clock (not a paused one: stores
//! expire leases by their own clocks); it starts one thread of its own per check that stalls
//! a holder.
//!
//! # The checks
//!
//! | check | what it decides |
//! |---|---|
//! | `mutual_exclusion_across_managers` | 4 managers × 3 tasks × 4 holds of one key: never two holders inside at once |
//! | `crashed_holder_expires_after_its_lease` | a holder whose process stalls (its watchdog stops) loses the lock to a waiter on another manager within its 1 s lease and 5 s, not before the lease could have run out |
//! | `stalled_holder_keeps_its_lock_delay` | a holder with a 2 s lock-delay whose process stalls keeps the lock from a waiter on another manager for its 1 s lease and the delay, and loses it within 5 s more |
//! | `released_lock_skips_its_lock_delay` | a waiter on another manager gets a released lock with a 30 s lock-delay within 5 s |
//! | `stale_holder_cannot_renew_or_release` | a holder stalled past its lease and taken over learns, when it goes on, that it lost the lease; its release says [`LeaseLost`](LockError::LeaseLost); the new holder keeps its lock |
//! | `fencing_tokens_increase_across_holders` | successive holders' fencing tokens, across 4 managers, strictly increase |
//! | `release_wakes_a_waiter_on_another_manager` | a waiter on another manager gets the lock within 5 s of the release, where the holder's 30 s lease was still running |
//! | `dropped_acquire_leaves_nothing_held` | an acquire dropped at several moments (and one dropped while it waits) leaves the lock free for another manager |
//! | `dropped_section_leaves_nothing_held` | a locked section whose task is aborted leaves the lock free |
//! | `panicking_section_releases` | a locked section whose body panics leaves the lock free |
//! | `semaphore_admits_its_permits_and_no_more` | 3 permits admit 3 holders on 3 managers, refuse a 4th, give a released permit to it; contending tasks never exceed the permits |
//! | `readers_share_a_read_write_lock` | two readers on two managers hold it at once |
//! | `writer_excludes_readers_and_writers` | a writer waits for the reader; while it holds, a reader and another writer are busy |
//! | `semaphore_refusal_names_the_shape`, `read_write_refusal_names_the_shape` | a store that refuses the shape says so with an error naming it |
//! | `release_request_reaches_the_holder` | a holder asked to let go from another manager ([`LockManager::request_release`]) hears it within 5 s, with the reason, and keeps the lock |
//! | `notices_reach_every_manager` | holders on 3 managers, all asked by the first, each hear it within 5 s: the announcer hears its own notices |
//! | `announce_refusal_is_clear` | a store that carries no notices refuses `request_release` with a [`LockError::Config`] saying so |
//! | `steal_takes_the_lock_with_a_greater_fence` | a steal ([`LockManager::steal`]) from a holder on another manager: a greater fencing token; the victim's lease lost with [`LostReason::Stolen`](crate::LostReason::Stolen) within 5 s (on a store that steals but carries no notices: lost at its next renewal, within 5 s of a 3 s lease, as `Stolen` or `NotOwner`); a busy try on a third manager names the thief (where the store names a holder); the victim's release is `LeaseLost` and leaves the thief's lock |
//! | `steal_of_a_free_lock_takes_it` | a steal of a free lock takes it, from nobody |
//! | `steal_refusal_is_clear` | a store that cannot steal refuses `steal` with a [`LockError::Config`] saying so |
//! | `election_leader_is_read_and_resigns` | another manager reads the winner as leader (or the store refuses to be read with a configuration error); a resignation elects the other campaign within 5 s with a greater token |
//! | `election_candidates_are_listed` | two campaigns are listed as candidates, highest priority first, where the store keeps records ([`Store::waits`](crate::store::Store::waits)); elsewhere a priority is refused with a configuration error |
//! | `election_saved_term_resumes` | a leader stalls; another manager resumes its saved term at once with the same fencing token (one renewal under the saved owner token) |
//!
//! Whether a store holds semaphores and read-write locks is asked by trying one on a free
//! key: a [`LockError::Config`] is a refusal, and the shape's
//! checks are skipped (Redlock refuses both); a store that holds the shape has no refusal to
//! check, and that check is skipped. Control over a holder is asked the same way: a
//! `request_release` and a `steal` of a free key; a store that refuses one has that part's
//! checks skipped ("the store does not support ...") and its refusal checked. Short leases (1 s) are used only where a check waits for
//! an expiry; the whole kit takes a few seconds. Bounds are seconds, so that it passes on a
//! loaded machine.
//!
//! # Example
//!
//! In a test of your store (here `memory://<name>`, a table that every manager of the
//! process connecting to that name shares):
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! use lock_runtime::LockManager;
//!
//! let report = lock_runtime::conformance::run("memory", || {
//!     LockManager::connect("memory://conformance-example")
//! })
//! .await;
//! println!("{report}");
//! report.assert_passed();
//! # }
//! ```

mod bounds;
mod contention;
mod control;
mod elections;
mod endings;
mod leases;
mod locks;
mod process;
mod report;
mod shapes;

use std::future::Future;
use std::time::{Duration, Instant};

use crate::error::LockError;
use crate::manager::LockManager;

pub use report::{CheckResult, Outcome, Report};

use bounds::{CHECK_LIMIT, Verdict};
use process::{Factory, Processes};
use shapes::{Kind, Support};

/// One run under way: the report so far, the factory, the run's id.
struct Runner<'a> {
    report: Report,
    factory: &'a Factory<'a>,
    run: String,
}

impl<'a> Runner<'a> {
    /// The processes of check `name`.
    fn processes(&self, name: &str) -> Processes<'a> {
        Processes::new(self.factory, &self.run, name)
    }

    fn record(&mut self, name: &'static str, outcome: Outcome, message: String, took: Duration) {
        self.report.push(CheckResult {
            name,
            outcome,
            message,
            took,
        });
    }

    fn verdict(&mut self, name: &'static str, verdict: Verdict, took: Duration) {
        match verdict {
            Ok(note) => self.record(name, Outcome::Passed, note, took),
            Err(message) => self.record(name, Outcome::Failed, message, took),
        }
    }
}

/// Runs the check fn `$check` as the check `$name` of `$runner`, with managers of its own
/// that are shut down when it ends, within [`CHECK_LIMIT`].
macro_rules! check {
    ($runner:ident, $name:literal, $check:path) => {{
        let mut processes = $runner.processes($name);
        let started = Instant::now();
        let verdict = tokio::time::timeout(CHECK_LIMIT, $check(&mut processes))
            .await
            .unwrap_or_else(|_| Err(format!("did not finish within {CHECK_LIMIT:?}")));
        processes.close().await;
        $runner.verdict($name, verdict, started.elapsed());
    }};
}

/// Asks whether the store holds `kind`, by trying it.
async fn support(runner: &Runner<'_>, kind: Kind) -> (Support, Duration) {
    let mut processes = runner.processes(kind.probe());
    let started = Instant::now();
    let support = tokio::time::timeout(CHECK_LIMIT, shapes::probe(&mut processes, kind))
        .await
        .unwrap_or_else(|_| {
            Support::Broken(format!(
                "trying a {} did not finish within {CHECK_LIMIT:?}",
                kind.noun()
            ))
        });
    processes.close().await;
    (support, started.elapsed())
}

/// What a shape's checks say when they are not run: skipped for a refused shape, failed where
/// trying it went wrong.
fn not_run(support: &Support, kind: Kind) -> (Outcome, String) {
    match support {
        Support::Holds => (Outcome::Passed, String::new()),
        Support::Refuses(refusal) => (
            Outcome::Skipped,
            format!("the store refuses the {}: {refusal}", kind.noun()),
        ),
        Support::Broken(what) => (Outcome::Failed, format!("not run: {what}")),
    }
}

/// The semaphore's checks, or its refusal's.
async fn semaphores(runner: &mut Runner<'_>) {
    let refusal = "semaphore_refusal_names_the_shape";
    let (support, took) = support(runner, Kind::Semaphore).await;
    if let Support::Holds = support {
        check!(
            runner,
            "semaphore_admits_its_permits_and_no_more",
            shapes::semaphore_admits_its_permits
        );
    } else {
        let (outcome, message) = not_run(&support, Kind::Semaphore);
        runner.record(
            "semaphore_admits_its_permits_and_no_more",
            outcome,
            message,
            Duration::ZERO,
        );
    }
    refused(runner, refusal, &support, Kind::Semaphore, took);
}

/// The read-write lock's checks, or its refusal's.
async fn read_write_locks(runner: &mut Runner<'_>) {
    let refusal = "read_write_refusal_names_the_shape";
    let (support, took) = support(runner, Kind::ReadWrite).await;
    if let Support::Holds = support {
        check!(
            runner,
            "readers_share_a_read_write_lock",
            shapes::readers_share
        );
        check!(
            runner,
            "writer_excludes_readers_and_writers",
            shapes::writer_excludes
        );
    } else {
        let (outcome, message) = not_run(&support, Kind::ReadWrite);
        runner.record(
            "readers_share_a_read_write_lock",
            outcome,
            message.clone(),
            Duration::ZERO,
        );
        runner.record(
            "writer_excludes_readers_and_writers",
            outcome,
            message,
            Duration::ZERO,
        );
    }
    refused(runner, refusal, &support, Kind::ReadWrite, took);
}

/// The check of a refused shape's error: skipped where the store holds the shape.
fn refused(
    runner: &mut Runner<'_>,
    name: &'static str,
    support: &Support,
    kind: Kind,
    took: Duration,
) {
    match support {
        Support::Holds => runner.record(
            name,
            Outcome::Skipped,
            format!("the store holds the {}: nothing refused", kind.noun()),
            took,
        ),
        Support::Refuses(refusal) => {
            runner.verdict(name, shapes::refusal_is_clear(kind, refusal), took)
        }
        Support::Broken(what) => runner.record(name, Outcome::Failed, what.clone(), took),
    }
}

/// The checks of one part of control over a holder, or its refusal's.
async fn control_part(
    runner: &mut Runner<'_>,
    part: control::Part,
    checks: &[(&'static str, control::Check)],
    refusal: &'static str,
) -> bool {
    let mut processes = runner.processes(part.probe());
    let started = Instant::now();
    let support = tokio::time::timeout(CHECK_LIMIT, control::probe(&mut processes, part))
        .await
        .unwrap_or_else(|_| {
            control::Support::Broken(format!(
                "trying {} did not finish within {CHECK_LIMIT:?}",
                part.noun()
            ))
        });
    processes.close().await;
    let took = started.elapsed();
    let (outcome, message) = match &support {
        control::Support::Does => {
            for &(name, check) in checks {
                let mut processes = runner.processes(name);
                let started = Instant::now();
                let verdict = tokio::time::timeout(CHECK_LIMIT, check(&mut processes))
                    .await
                    .unwrap_or_else(|_| Err(format!("did not finish within {CHECK_LIMIT:?}")));
                processes.close().await;
                runner.verdict(name, verdict, started.elapsed());
            }
            let note = format!("the store does {}: nothing refused", part.noun());
            runner.record(refusal, Outcome::Skipped, note, took);
            return true;
        }
        control::Support::Refuses(refused) => {
            let verdict = control::refusal_is_clear(part, refused);
            runner.verdict(refusal, verdict, took);
            (
                Outcome::Skipped,
                format!("the store does not support {}: {refused}", part.noun()),
            )
        }
        control::Support::Broken(what) => {
            runner.record(refusal, Outcome::Failed, what.clone(), took);
            (Outcome::Failed, format!("not run: {what}"))
        }
    };
    for &(name, _) in checks {
        runner.record(name, outcome, message.clone(), Duration::ZERO);
    }
    false
}

/// The election's checks: where store support matters (who leads, the candidates' records, a
/// saved term resumed).
async fn election_checks(runner: &mut Runner<'_>) {
    check!(
        runner,
        "election_leader_is_read_and_resigns",
        elections::leader_is_read_and_resigns
    );
    check!(
        runner,
        "election_candidates_are_listed",
        elections::candidates_are_listed
    );
    check!(
        runner,
        "election_saved_term_resumes",
        elections::saved_term_resumes
    );
}

/// The checks of control over a holder: notices, then steals.
async fn control_checks(runner: &mut Runner<'_>) {
    let announces = control_part(
        runner,
        control::Part::Announce,
        &[
            ("release_request_reaches_the_holder", |p| {
                Box::pin(control::request_reaches_the_holder(p))
            }),
            ("notices_reach_every_manager", |p| {
                Box::pin(control::notices_reach_every_manager(p))
            }),
        ],
        "announce_refusal_is_clear",
    )
    .await;
    // A store that steals but carries no notices tells its victim at the victim's next
    // renewal instead.
    let steal_takes_the_lock: control::Check = if announces {
        |p| Box::pin(control::steal_takes_the_lock(p, control::Told::AtOnce))
    } else {
        |p| Box::pin(control::steal_takes_the_lock(p, control::Told::AtRenewal))
    };
    let _ = control_part(
        runner,
        control::Part::Steal,
        &[
            (
                "steal_takes_the_lock_with_a_greater_fence",
                steal_takes_the_lock,
            ),
            ("steal_of_a_free_lock_takes_it", |p| {
                Box::pin(control::steal_of_a_free_lock_takes_it(p))
            }),
        ],
        "steal_refusal_is_clear",
    )
    .await;
}

/// Runs every check against `store`, each manager built over it with
/// [`LockManagerBuilder::store`](crate::LockManagerBuilder::store): [`run`] with the managers
/// of one shared store value, named by its [`describe`](crate::store::Store::describe).
///
/// ```no_run
/// # async fn check(my_store: std::sync::Arc<dyn lock_runtime::store::Store>) {
/// let report = lock_runtime::conformance::run_store(my_store).await;
/// report.assert_passed();
/// # }
/// ```
pub async fn run_store(store: std::sync::Arc<dyn crate::store::Store>) -> Report {
    let name = store.describe().to_owned();
    run(&name, move || {
        LockManager::builder().store(store.clone()).build()
    })
    .await
}

/// Runs every check against the store that `managers` makes managers on, and reports.
///
/// `store` names the store in the report. Each call of `managers` must return a new manager
/// on the same store: it stands for another process. A store given as a value rather than a
/// URL fits the same shape: a closure that builds a manager over a clone of it. A check that
/// fails does not stop the others; a check that cannot make its managers fails with the
/// factory's error.
pub async fn run<F, Fut>(store: &str, managers: F) -> Report
where
    F: Fn() -> Fut,
    Fut: Future<Output = Result<LockManager, LockError>>,
{
    let factory =
        move || -> std::pin::Pin<Box<dyn Future<Output = Result<LockManager, LockError>> + '_>> {
            Box::pin(managers())
        };
    let mut runner = Runner {
        report: Report::new(store),
        factory: &factory,
        run: uuid::Uuid::new_v4().simple().to_string()[..12].to_owned(),
    };
    check!(
        runner,
        "mutual_exclusion_across_managers",
        locks::mutual_exclusion
    );
    check!(
        runner,
        "crashed_holder_expires_after_its_lease",
        leases::crashed_holder_expires
    );
    check!(
        runner,
        "stalled_holder_keeps_its_lock_delay",
        leases::stalled_holder_keeps_its_lock_delay
    );
    check!(
        runner,
        "released_lock_skips_its_lock_delay",
        leases::released_lock_skips_its_lock_delay
    );
    check!(
        runner,
        "stale_holder_cannot_renew_or_release",
        leases::stale_holder_cannot_renew_or_release
    );
    check!(
        runner,
        "fencing_tokens_increase_across_holders",
        locks::fencing_order
    );
    check!(
        runner,
        "release_wakes_a_waiter_on_another_manager",
        locks::wake_on_release
    );
    check!(
        runner,
        "dropped_acquire_leaves_nothing_held",
        endings::dropped_acquire
    );
    check!(
        runner,
        "dropped_section_leaves_nothing_held",
        endings::dropped_section
    );
    check!(
        runner,
        "panicking_section_releases",
        endings::panicking_section
    );
    semaphores(&mut runner).await;
    read_write_locks(&mut runner).await;
    control_checks(&mut runner).await;
    election_checks(&mut runner).await;
    runner.report
}
