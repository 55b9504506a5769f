//! The targets, checked against the medians of a run: met or missed, and by how much;
//! or not available, when the run could not measure what a target needs (the fair mode before
//! lock-runtime has one).

use crate::report::{Results, number};
use crate::{FLOOR, RSLOCK, Scenario, contender};

/// One target for one contender.
#[derive(Debug, Clone)]
pub struct Check {
    pub target: String,
    pub contender: String,
    /// The figure, or why there is none.
    pub measured: String,
    pub status: Status,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Met,
    Missed,
    NotAvailable,
}

impl Status {
    fn of(met: bool) -> Status {
        if met { Status::Met } else { Status::Missed }
    }

    fn label(self) -> &'static str {
        match self {
            Status::Met => "met",
            Status::Missed => "**missed**",
            Status::NotAvailable => "not available",
        }
    }
}

const OURS: [&str; 2] = [contender::Attribute::NAME, contender::Manager::NAME];

/// The fair-mode targets: the releaser wins again at most this share of sections (%), ...
const FAIR_WON_AGAIN: f64 = 20.0;
/// ... the longest wait is at most this many section periods, ...
const FAIR_LONGEST_WAIT: f64 = 10.0;
/// ... and the fair mode gets at least this share of the default mode's sections per second.
const FAIR_THROUGHPUT: f64 = 0.7;

/// The Redis CPU an uncontended pair may cost, as a share of the floor's: 1.3x where the
/// release compares and deletes by script, 1.1x where the server deletes natively (Valkey 9).
pub fn cpu_share_for(server: &crate::server::ServerInfo) -> f64 {
    let major = server
        .version
        .split('.')
        .next()
        .and_then(|major| major.parse::<u32>().ok())
        .unwrap_or(0);
    if server.name == "valkey" && major >= 9 {
        1.1
    } else {
        1.3
    }
}

/// Every target that the run measured, in the order; `cpu_share` is the Redis CPU an
/// uncontended pair may cost against the floor's on this server (see [`cpu_share_for`]).
pub fn check(results: &Results, cpu_share: f64) -> Vec<Check> {
    let mut checks = Vec::new();
    for contender in OURS {
        let mut add = |target: &str, measured: String, met: bool| {
            checks.push(Check {
                target: target.to_owned(),
                contender: contender.to_owned(),
                measured,
                status: Status::of(met),
            });
        };
        let median =
            |scenario: Scenario, metric: &str| results.median(scenario.name(), contender, metric);
        // The performance issue's targets: uncontended 0.95x the floor, 64 keys in parallel 0.8x.
        for (scenario, what, floor_share) in [
            (Scenario::Uncontended, "uncontended", 0.95),
            (Scenario::Parallel, "parallel", 0.8),
        ] {
            if let (Some(ratio), Some(rate), Some(floor)) = (
                median(scenario, "pairs_per_s_vs_floor"),
                median(scenario, "pairs_per_s"),
                results.median(scenario.name(), FLOOR, "pairs_per_s"),
            ) {
                add(
                    &format!("{what} pairs/s >= {floor_share}x the floor"),
                    format!(
                        "{ratio:.3}x ({} vs {} pairs/s)",
                        number(rate),
                        number(floor)
                    ),
                    ratio >= floor_share,
                );
            }
        }
        // One pair at a time, and 64 in parallel, where a multiplexed connection batches the
        // commands of many pairs into each write (the "batched load").
        for (scenario, what) in [
            (Scenario::Uncontended, "uncontended"),
            (Scenario::Parallel, "parallel (batched)"),
        ] {
            let (Some(cpu), Some(floor)) = (
                median(scenario, "redis_cpu_per_pair"),
                results.median(scenario.name(), FLOOR, "redis_cpu_per_pair"),
            ) else {
                continue;
            };
            add(
                &format!("{what}: Redis CPU per acquire + release <= {cpu_share}x the floor's"),
                format!(
                    "{:.2}x ({} vs {} µs)",
                    cpu / floor,
                    number_2(cpu),
                    number_2(floor)
                ),
                cpu <= cpu_share * floor,
            );
        }
        if let Some(calls) = median(Scenario::Natural, "redis_calls_per_section") {
            add(
                "natural contention: <= 5 Redis calls per critical section",
                format!("{} calls", number_2(calls)),
                calls <= 5.0,
            );
        }
        if let Some(p99) = median(Scenario::Natural, "handover_p99") {
            add(
                "natural contention: handover p99 < 1 ms",
                format!("{} µs", number(p99)),
                p99 < 1000.0,
            );
        }
        if let Some(p50) = median(Scenario::Contended, "handover_p50") {
            add(
                "contended handover p50 < 1 ms",
                format!("{} µs", number(p50)),
                p50 < 1000.0,
            );
        }
        if let (Some(times), Some(rslock)) = (
            median(Scenario::Contended, "handover_p50_times_faster_than_rslock"),
            results.median(Scenario::Contended.name(), RSLOCK, "handover_p50"),
        ) {
            add(
                "contended handover p50 >= 10x better than rslock",
                format!("{}x (rslock p50 {} µs)", number(times), number(rslock)),
                times >= 10.0,
            );
        }
        if let Some(values) = results.values(
            Scenario::ExpiryTakeover.name(),
            contender,
            "takeover_after_expiry",
        ) {
            let worst = values.iter().copied().fold(f64::MIN, f64::max);
            add(
                "expiry takeover: waiter enters < 10 ms after expiry (worst repetition)",
                format!("{} ms", number_2(worst)),
                worst < 10.0,
            );
        }
        if let Some(median) = median(Scenario::ExpiryTakeover, "takeover_after_expiry") {
            add(
                "expiry takeover median <= 2 ms",
                format!("{} ms", number_2(median)),
                median <= 2.0,
            );
        }
        if let Some(ratio) = median(Scenario::HoldMany, "renewals_vs_expected") {
            add(
                "hold many: renewals within 20% of locks / (ttl/3)",
                format!("{}x expected", number_2(ratio)),
                (0.8..=1.2).contains(&ratio),
            );
        }
        if let (Some(reads), Some(renewals)) = (
            median(Scenario::HoldMany, "server_reads_per_s"),
            median(Scenario::HoldMany, "renewals_per_s"),
        ) {
            add(
                "hold many: pipelined (server reads/s far below renewals/s)",
                format!(
                    "{} reads/s for {} renewals/s",
                    number(reads),
                    number(renewals)
                ),
                reads <= renewals / 20.0,
            );
        }
        if let Some(cpu) = median(Scenario::HoldMany, "client_cpu") {
            add(
                "hold many: client CPU < 5% of one core",
                format!("{}%", number_2(cpu)),
                cpu < 5.0,
            );
        }
        if let Some(bytes) = median(Scenario::HoldMany, "client_memory_per_lock") {
            add(
                "hold many: <= 1.5 KiB per held lock",
                format!("{} B", number(bytes)),
                bytes <= 1536.0,
            );
        }
    }
    checks.extend(fair_mode(results));
    checks
}

/// The PostgreSQL targets: throughput against the lease floor uncontended and with 64 tasks in
/// parallel, ...
const PG_FLOOR_SHARE: f64 = 0.9;
/// ... handover p99 (µs), ...
const PG_HANDOVER_P99_US: f64 = 2000.0;
/// ... and the median expiry takeover (ms).
const PG_TAKEOVER_MS: f64 = 20.0;

/// The PostgreSQL targets of the library (both ways in) that the run measured.
pub fn check_postgres(results: &Results) -> Vec<Check> {
    use crate::postgres::{LEASE_FLOOR, PgScenario};
    let mut checks = Vec::new();
    for contender in OURS {
        let mut add = |target: String, measured: String, met: bool| {
            checks.push(Check {
                target,
                contender: contender.to_owned(),
                measured,
                status: Status::of(met),
            });
        };
        let median =
            |scenario: PgScenario, metric: &str| results.median(scenario.name(), contender, metric);
        for (scenario, what) in [
            (PgScenario::Uncontended, "uncontended"),
            (PgScenario::Parallel, "64 in parallel"),
        ] {
            if let (Some(ratio), Some(rate), Some(floor)) = (
                median(scenario, "pairs_per_s_vs_lease_floor"),
                median(scenario, "pairs_per_s"),
                results.median(scenario.name(), LEASE_FLOOR, "pairs_per_s"),
            ) {
                add(
                    format!("postgres {what}: pairs/s >= {PG_FLOOR_SHARE}x the lease floor"),
                    format!(
                        "{ratio:.3}x ({} vs {} pairs/s)",
                        number(rate),
                        number(floor)
                    ),
                    ratio >= PG_FLOOR_SHARE,
                );
            }
        }
        if let Some(p99) = median(PgScenario::Handover, "handover_p99") {
            add(
                format!(
                    "postgres handover p99 <= {} ms",
                    PG_HANDOVER_P99_US / 1000.0
                ),
                format!("{} µs", number(p99)),
                p99 <= PG_HANDOVER_P99_US,
            );
        }
        if let Some(late) = median(PgScenario::ExpiryTakeover, "takeover_after_expiry") {
            add(
                format!("postgres expiry takeover median <= {PG_TAKEOVER_MS} ms"),
                format!("{} ms", number_2(late)),
                late <= PG_TAKEOVER_MS,
            );
        }
    }
    checks
}

/// The fair mode's targets in the natural scenario, for `LockManager::lock` in its fair mode.
fn fair_mode(results: &Results) -> Vec<Check> {
    let scenario = Scenario::Natural.name();
    let fair = contender::Manager::FAIR_NAME;
    let targets = [
        format!("fair mode: the releaser wins again <= {FAIR_WON_AGAIN} % of sections"),
        format!(
            "fair mode: longest wait <= {FAIR_LONGEST_WAIT}x the mean section (run length / \
             sections)"
        ),
        format!("fair mode: sections/s >= {FAIR_THROUGHPUT}x the default mode"),
    ];
    let check = |target: &String, measured: String, status: Status| Check {
        target: target.clone(),
        contender: fair.to_owned(),
        measured,
        status,
    };
    if let Some(why) = results.unavailable(scenario, fair) {
        return targets
            .iter()
            .map(|target| check(target, why.to_owned(), Status::NotAvailable))
            .collect();
    }
    let median = |metric: &str| results.median(scenario, fair, metric);
    let mut checks = Vec::new();
    if let Some(share) = median("won_again") {
        checks.push(check(
            &targets[0],
            format!("{} %", number(share)),
            Status::of(share <= FAIR_WON_AGAIN),
        ));
    }
    if let (Some(times), Some(wait)) = (median("longest_wait_vs_period"), median("longest_wait")) {
        checks.push(check(
            &targets[1],
            format!("{}x ({} ms)", number(times), number_2(wait)),
            Status::of(times <= FAIR_LONGEST_WAIT),
        ));
    }
    if let (Some(ratio), Some(rate)) = (
        median("sections_per_s_vs_default"),
        median("sections_per_s"),
    ) {
        checks.push(check(
            &targets[2],
            format!("{ratio:.3}x ({} sections/s)", number(rate)),
            Status::of(ratio >= FAIR_THROUGHPUT),
        ));
    }
    checks
}

fn number_2(value: f64) -> String {
    format!("{value:.2}")
}

/// A markdown table of the checks.
pub fn table(checks: &[Check]) -> String {
    let mut out = String::from("| target | contender | measured (median) | |\n|---|---|---|---|\n");
    for check in checks {
        out.push_str(&format!(
            "| {} | {} | {} | {} |\n",
            check.target,
            check.contender,
            check.measured,
            check.status.label()
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::Metric;

    const FAIR: &str = contender::Manager::FAIR_NAME;

    fn fair_checks(results: &Results) -> Vec<Check> {
        check(results, 1.3)
            .into_iter()
            .filter(|check| check.contender == FAIR)
            .collect()
    }

    #[test]
    fn fair_targets_say_not_available_and_why_while_the_mode_cannot_run() {
        let mut results = Results::default();
        results.record_unavailable(Scenario::Natural.name(), FAIR, "no fair mode yet");
        let checks = fair_checks(&results);
        assert_eq!(checks.len(), 3);
        for check in checks {
            assert_eq!(check.status, Status::NotAvailable);
            assert_eq!(check.measured, "no fair mode yet");
        }
    }

    #[test]
    fn fair_targets_are_checked_against_the_fair_rows() {
        let mut results = Results::default();
        let natural = Scenario::Natural.name();
        for (contender, rate, won_again, wait) in [
            (contender::Manager::NAME, 10_000.0, 0.0, 50.0),
            (FAIR, 6_000.0, 12.0, 8.0),
        ] {
            results.record(natural, contender, &Metric::new("sections_per_s", "", rate));
            results.record(
                natural,
                contender,
                &Metric::new("won_again", "%", won_again),
            );
            results.record(natural, contender, &Metric::new("longest_wait", "ms", 1.0));
            let times = Metric::new("longest_wait_vs_period", "x", wait);
            results.record(natural, contender, &times);
        }
        results.add_ratio_of(
            natural,
            "sections_per_s",
            FAIR,
            contender::Manager::NAME,
            "sections_per_s_vs_default",
            |fair, default| fair / default,
        );
        let statuses: Vec<Status> = fair_checks(&results).iter().map(|c| c.status).collect();
        // 12 % re-won and 8 periods are within the targets; 0.6x the default's rate is not.
        assert_eq!(statuses, [Status::Met, Status::Met, Status::Missed]);
    }
}
