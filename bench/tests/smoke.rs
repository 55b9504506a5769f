//! The benchmark itself, run in a tiny form against a redis-server of its own: every scenario
//! reports for every contender (and the library's fair mode, or why it cannot run), the JSON
//! has the documented shape, and no contender let two holders into a contended section.
//! Figures are not checked: speed belongs in the benchmark. The tests share one run.

use std::collections::BTreeSet;
use std::sync::OnceLock;
use std::time::Duration;

use lock_bench::server::Target;
use lock_bench::{HoldManyIn, Options, Plan, Scenario, contender};

/// The tiny plan, with the hold-many scenario's locks on 3 s leases held for 1.5 s (one renewal
/// each) instead of 300 ms leases: a renewal that a loaded machine delays by 200 ms loses a
/// 300 ms lease and fails the run, and this test checks the benchmark, not how late a CPU hog
/// makes a renewal. The benchmark's own quick and full plans hold leases of 3 s and 30 s.
fn plan() -> Plan {
    Plan {
        hold_lease: Duration::from_secs(3),
        hold_window: Duration::from_millis(1500),
        ..Plan::tiny()
    }
}

/// The one tiny run of every scenario, made by whichever test asks first.
fn tiny_run() -> &'static lock_bench::Report {
    static REPORT: OnceLock<lock_bench::Report> = OnceLock::new();
    REPORT.get_or_init(run_every_scenario)
}

fn run_every_scenario() -> lock_bench::Report {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    runtime.block_on(async {
        let target = Target::start().expect("redis-server starts");
        let options = Options {
            plan: plan(),
            scenarios: Scenario::ALL.to_vec(),
            hold_many_in: HoldManyIn::ThisProcess,
            contenders: contender::NAMES.map(str::to_owned).to_vec(),
            verbose: false,
        };
        lock_bench::run(&target, &options)
            .await
            .expect("the tiny run completes")
    })
}

#[test]
fn a_tiny_run_reports_every_scenario_as_documented_and_without_violations() {
    let report = tiny_run();

    assert_eq!(report.violations, 0, "mutual exclusion was violated");
    let rows = report.results.rows();
    for row in rows.iter().filter(|row| row.metric == "violations") {
        assert_eq!(row.max, 0.0, "{} let sections overlap", row.contender);
    }

    // The JSON is a list of objects with exactly these fields, numbers where numbers belong.
    let json = serde_json::to_value(&rows).expect("rows serialise");
    let objects = json.as_array().expect("a JSON list");
    assert!(!objects.is_empty());
    let fields: BTreeSet<&str> = [
        "scenario",
        "contender",
        "metric",
        "unit",
        "median",
        "min",
        "max",
    ]
    .into_iter()
    .collect();
    for object in objects {
        let object = object.as_object().expect("a JSON object per row");
        assert_eq!(
            object.keys().map(String::as_str).collect::<BTreeSet<_>>(),
            fields
        );
        for text in ["scenario", "contender", "metric", "unit"] {
            assert!(object[text].is_string(), "{text} in {object:?}");
        }
        for number in ["median", "min", "max"] {
            assert!(object[number].is_f64(), "{number} in {object:?}");
        }
        assert!(object["min"].as_f64() <= object["median"].as_f64());
        assert!(object["median"].as_f64() <= object["max"].as_f64());
    }

    let has = |scenario: &str, contender: &str, metric: &str| {
        rows.iter()
            .any(|r| r.scenario == scenario && r.contender == contender && r.metric == metric)
    };
    for name in contender::NAMES {
        assert!(has("uncontended", name, "pairs_per_s"), "{name}");
        assert!(has("uncontended", name, "pair_p99"), "{name}");
        assert!(has("parallel", name, "pairs_per_s"), "{name}");
        assert!(has("contended", name, "sections_per_s"), "{name}");
        assert!(has("contended", name, "violations"), "{name}");
        for metric in [
            "sections_per_s",
            "handover_p50",
            "handover_p99",
            "won_again",
            "longest_wait",
            "section_period",
            "longest_wait_vs_period",
            "violations",
        ] {
            assert!(has("natural_contention", name, metric), "{name} {metric}");
        }
        assert!(
            has("expiry_takeover", name, "takeover_after_expiry"),
            "{name}"
        );
        // Redis calls and server CPU in every scenario a lock runs in.
        for (scenario, per) in [
            ("uncontended", "pair"),
            ("parallel", "pair"),
            ("contended", "section"),
            ("natural_contention", "section"),
            ("expiry_takeover", "takeover"),
        ] {
            for what in ["calls", "cpu"] {
                let metric = format!("redis_{what}_per_{per}");
                assert!(has(scenario, name, &metric), "{scenario} {name} {metric}");
            }
        }
    }
    // A lock takes at least one call per pair and per section.
    for row in rows
        .iter()
        .filter(|row| row.metric.starts_with("redis_calls_per_"))
    {
        assert!(row.min >= 1.0, "{row:?}");
    }
    for name in [
        contender::Attribute::NAME,
        contender::Manager::NAME,
        contender::Rslock::NAME,
    ] {
        for metric in [
            "renewals_per_s",
            "server_reads_per_s",
            "redis_calls_per_s",
            "redis_cpu",
            "client_cpu",
            "client_memory_per_lock",
        ] {
            assert!(has("hold_many", name, metric), "{name} {metric}");
        }
    }
    assert!(has(
        "uncontended",
        contender::Manager::NAME,
        "pairs_per_s_vs_floor"
    ));
    assert!(has("redis_benchmark", "redis-benchmark", "EVALSHA"));

    // The fair mode: measured like any contender once the runtime has it, else shown as not
    // available, without figures and without failing the run.
    let fair = contender::Manager::FAIR_NAME;
    let natural = "natural_contention";
    match report.results.unavailable(natural, fair) {
        Some(why) => {
            assert!(!why.is_empty());
            assert!(
                !rows.iter().any(|r| r.contender == fair),
                "figures for {fair}"
            );
            assert!(report.results.table(natural).contains("not available"));
        }
        None => {
            for metric in ["sections_per_s", "won_again", "sections_per_s_vs_default"] {
                assert!(has(natural, fair, metric), "{fair} {metric}");
            }
        }
    }
}

#[test]
fn read_heavy_compares_the_read_write_lock_with_the_exclusive_lock_without_violations() {
    use lock_bench::scenario::read_heavy::{EXCLUSIVE, RWLOCK};

    let rows = tiny_run().results.rows();
    let row = |contender: &str, metric: &str| {
        rows.iter()
            .find(|r| r.scenario == "read_heavy" && r.contender == contender && r.metric == metric)
            .unwrap_or_else(|| panic!("read_heavy {contender} {metric}"))
    };
    for name in [RWLOCK, EXCLUSIVE] {
        for metric in [
            "ops_per_s",
            "reads",
            "read_acquire_p50",
            "read_acquire_p99",
            "write_acquire_p50",
            "write_acquire_p99",
            "mean_section",
            "most_inside",
            "redis_calls_per_op",
            "redis_cpu_per_op",
        ] {
            row(name, metric);
        }
        assert_eq!(
            row(name, "violations").max,
            0.0,
            "{name} let a writer share"
        );
        assert!(row(name, "redis_calls_per_op").min >= 2.0, "{name}");
    }
    // The exclusive lock never lets two in; the ratio is on the read-write lock's row.
    assert_eq!(row(EXCLUSIVE, "most_inside").max, 1.0);
    assert!(row(RWLOCK, "ops_per_s_vs_exclusive").median > 0.0);
}

#[test]
fn semaphore_never_admits_more_holders_than_permits() {
    use lock_bench::scenario::semaphore::{NAME, PERMITS};

    let rows = tiny_run().results.rows();
    let row = |metric: &str| {
        rows.iter()
            .find(|r| r.scenario == "semaphore" && r.contender == NAME && r.metric == metric)
            .unwrap_or_else(|| panic!("semaphore {metric}"))
    };
    for metric in [
        "acquires_per_s",
        "ideal_per_s",
        "acquires_per_s_vs_ideal",
        "acquire_p50",
        "acquire_p99",
        "mean_hold",
        "permits_busy",
        "redis_calls_per_permit",
        "redis_cpu_per_permit",
    ] {
        row(metric);
    }
    let most = row("most_holders").max;
    assert!((1.0..=f64::from(PERMITS)).contains(&most), "{most} holders");
    assert_eq!(row("violations").max, 0.0);
    assert!(row("redis_calls_per_permit").min >= 2.0);
}

/// The PostgreSQL rows in a tiny form, on a server of their own: every contender in every
/// scenario it can run (expiry only for the leases), the ratios against the lease floor, the
/// server's CPU, the targets checked, and no two holders in a section. A few seconds.
#[test]
fn a_tiny_postgres_run_reports_every_contender_against_the_lease_floor_without_violations() {
    use lock_bench::postgres::server::PgTarget;
    use lock_bench::postgres::{LEASE_FLOOR, PgOptions, PgScenario};

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let report = runtime.block_on(async {
        let target = PgTarget::start().await.expect("PostgreSQL starts");
        let options = PgOptions {
            // Slices long enough for a pair of every contender on a loaded machine; few tasks,
            // as every task of the handover connects a contender (and pool) of its own.
            plan: Plan {
                parallel: Duration::from_millis(500),
                parallel_tasks: 4,
                contended: Duration::from_millis(200),
                contended_tasks: 2,
                ..Plan::tiny()
            },
            scenarios: PgScenario::ALL.to_vec(),
            contenders: contender::POSTGRES_NAMES.map(str::to_owned).to_vec(),
            verbose: false,
        };
        lock_bench::postgres::run(&target, &options)
            .await
            .expect("the tiny PostgreSQL run completes")
    });

    assert_eq!(report.violations, 0, "mutual exclusion was violated");
    let rows = report.results.rows();
    let has = |scenario: PgScenario, contender: &str, metric: &str| {
        rows.iter().any(|r| {
            r.scenario == scenario.name() && r.contender == contender && r.metric == metric
        })
    };
    let leased = [
        contender::Attribute::NAME,
        contender::Manager::NAME,
        contender::LeaseFloor::NAME,
        contender::LeaseFloor::NOTIFY_NAME,
    ];
    for name in contender::POSTGRES_NAMES {
        for scenario in [PgScenario::Uncontended, PgScenario::Parallel] {
            assert!(has(scenario, name, "pairs_per_s"), "{scenario:?} {name}");
            assert!(
                has(scenario, name, "server_cpu_per_pair"),
                "{scenario:?} {name}"
            );
            // A ratio needs pairs of the floor: on a loaded machine a 200 ms slice of 4 tasks
            // may end before any of its pairs (the rate is then 0 and no ratio is taken).
            let floor_paired = rows.iter().any(|r| {
                r.scenario == scenario.name()
                    && r.contender == LEASE_FLOOR
                    && r.metric == "pairs_per_s"
                    && r.min > 0.0
            });
            if name != LEASE_FLOOR && floor_paired {
                let ratio = "pairs_per_s_vs_lease_floor";
                assert!(has(scenario, name, ratio), "{scenario:?} {name}");
            }
        }
        // The percentiles only once a handover happened, which a loaded machine may not
        // allow in 200 ms; the count always.
        for metric in ["handovers", "violations", "server_cpu_per_section"] {
            assert!(has(PgScenario::Handover, name, metric), "{name} {metric}");
        }
        let expiry = has(PgScenario::ExpiryTakeover, name, "takeover_after_expiry");
        assert_eq!(
            expiry,
            leased.contains(&name),
            "{name}: expiry only for leases"
        );
    }
    for row in rows.iter().filter(|row| row.metric == "violations") {
        assert_eq!(row.max, 0.0, "{} let sections overlap", row.contender);
    }
    // Both ways into the library, four targets each.
    assert_eq!(
        lock_bench::targets::check_postgres(&report.results).len(),
        8
    );
}
