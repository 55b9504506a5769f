//! The benchmark itself, run in a tiny form against a redis-server of its own: every scenario
//! reports for every contender (and the library's fair mode, or why it cannot run), the JSON
//! has the documented shape, and no contender let two holders into a contended section.
//! Figures are not checked: speed belongs in the benchmark.

use std::collections::BTreeSet;

use lock_bench::server::Target;
use lock_bench::{HoldManyIn, Options, Plan, Scenario, contender};

fn tiny_run() -> lock_bench::Report {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    runtime.block_on(async {
        let target = Target::start().expect("redis-server starts");
        let options = Options {
            plan: Plan::tiny(),
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
