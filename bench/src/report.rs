//! Results: every repetition's value per (scenario, contender, metric), summarised as the rows
//! of the JSON output and as one markdown table per scenario.

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use crate::scenario::Metric;
use crate::server::ServerInfo;
use crate::stats::Summary;

/// The JSON output: which Redis the run measured (none when it measured PostgreSQL only), the
/// report's header lines (naming the PostgreSQL too), and the rows.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Document {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<ServerInfo>,
    pub header: Vec<String>,
    pub rows: Vec<Row>,
}

impl Document {
    /// The rows of a JSON output: a [`Document`], or the plain list of rows earlier versions
    /// wrote.
    pub fn rows_of(json: &str) -> Result<Vec<Row>, serde_json::Error> {
        let value: serde_json::Value = serde_json::from_str(json)?;
        if value.is_array() {
            serde_json::from_value(value)
        } else {
            Ok(serde_json::from_value::<Document>(value)?.rows)
        }
    }
}

/// One line of the JSON output: a metric of one contender in one scenario, over repetitions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Row {
    pub scenario: String,
    pub contender: String,
    pub metric: String,
    pub unit: String,
    pub median: f64,
    pub min: f64,
    pub max: f64,
}

struct Series {
    scenario: String,
    contender: String,
    metric: String,
    unit: String,
    /// One value per repetition, in repetition order.
    values: Vec<f64>,
}

/// Everything measured in one run, in the order it was first recorded.
#[derive(Default)]
pub struct Results {
    series: Vec<Series>,
    /// (scenario, contender, why): contenders a scenario could not measure in this build.
    unavailable: Vec<(String, String, String)>,
}

impl Results {
    /// Adds one repetition's value. Values that could not be measured (no samples) are left out.
    pub fn record(&mut self, scenario: &str, contender: &str, metric: &Metric) {
        if !metric.value.is_finite() {
            return;
        }
        self.push(scenario, contender, metric.name, metric.unit, metric.value);
    }

    fn push(&mut self, scenario: &str, contender: &str, metric: &str, unit: &str, value: f64) {
        match self.series.iter_mut().find(|series| {
            series.scenario == scenario && series.contender == contender && series.metric == metric
        }) {
            Some(series) => series.values.push(value),
            None => self.series.push(Series {
                scenario: scenario.to_owned(),
                contender: contender.to_owned(),
                metric: metric.to_owned(),
                unit: unit.to_owned(),
                values: vec![value],
            }),
        }
    }

    /// Adds everything `other` measured after what this one holds: the results of another
    /// store's run.
    pub fn append(&mut self, other: Results) {
        self.series.extend(other.series);
        self.unavailable.extend(other.unavailable);
    }

    /// Notes that `contender` could not be measured in `scenario`, and why: its table shows the
    /// reason where the figures would be.
    pub fn record_unavailable(&mut self, scenario: &str, contender: &str, why: &str) {
        if self.unavailable(scenario, contender).is_none() {
            self.unavailable
                .push((scenario.to_owned(), contender.to_owned(), why.to_owned()));
        }
    }

    /// Why `contender` was not measured in `scenario`, if it was noted as unavailable.
    pub fn unavailable(&self, scenario: &str, contender: &str) -> Option<&str> {
        self.unavailable
            .iter()
            .find(|(s, c, _)| s == scenario && c == contender)
            .map(|(_, _, why)| why.as_str())
    }

    /// Every repetition's value of one metric.
    pub fn values(&self, scenario: &str, contender: &str, metric: &str) -> Option<&[f64]> {
        self.series
            .iter()
            .find(|series| {
                series.scenario == scenario
                    && series.contender == contender
                    && series.metric == metric
            })
            .map(|series| series.values.as_slice())
    }

    /// The median over repetitions of one metric.
    pub fn median(&self, scenario: &str, contender: &str, metric: &str) -> Option<f64> {
        Summary::of(self.values(scenario, contender, metric)?).map(|summary| summary.median)
    }

    /// Adds `derived` = f(this contender's value, `reference`'s value) per repetition, for every
    /// contender other than `reference` that has `metric`: ratios of figures taken side by side.
    pub fn add_ratio(
        &mut self,
        scenario: &str,
        metric: &str,
        reference: &str,
        derived: &str,
        ratio: impl Fn(f64, f64) -> f64,
    ) {
        let others: Vec<String> = self
            .series
            .iter()
            .filter(|s| s.scenario == scenario && s.metric == metric && s.contender != reference)
            .map(|s| s.contender.clone())
            .collect();
        for contender in others {
            self.add_ratio_of(scenario, metric, &contender, reference, derived, &ratio);
        }
    }

    /// Adds `derived` = f(`contender`'s value, `reference`'s value) per repetition.
    pub fn add_ratio_of(
        &mut self,
        scenario: &str,
        metric: &str,
        contender: &str,
        reference: &str,
        derived: &str,
        ratio: impl Fn(f64, f64) -> f64,
    ) {
        let (Some(values), Some(base)) = (
            self.values(scenario, contender, metric)
                .map(<[f64]>::to_vec),
            self.values(scenario, reference, metric)
                .map(<[f64]>::to_vec),
        ) else {
            return;
        };
        for (&value, &base) in values.iter().zip(&base) {
            let value = ratio(value, base);
            if value.is_finite() {
                self.push(scenario, contender, derived, "x", value);
            }
        }
    }

    pub fn rows(&self) -> Vec<Row> {
        self.series
            .iter()
            .filter_map(|series| {
                let summary = Summary::of(&series.values)?;
                Some(Row {
                    scenario: series.scenario.clone(),
                    contender: series.contender.clone(),
                    metric: series.metric.clone(),
                    unit: series.unit.clone(),
                    median: summary.median,
                    min: summary.min,
                    max: summary.max,
                })
            })
            .collect()
    }

    /// The scenarios measured, in order.
    pub fn scenarios(&self) -> Vec<String> {
        let mut scenarios: Vec<String> = Vec::new();
        for series in &self.series {
            if !scenarios.contains(&series.scenario) {
                scenarios.push(series.scenario.clone());
            }
        }
        scenarios
    }

    /// One markdown table: a line per contender and metric, grouped by contender.
    pub fn table(&self, scenario: &str) -> String {
        let mut rows: Vec<Row> = self
            .rows()
            .into_iter()
            .filter(|row| row.scenario == scenario)
            .collect();
        // Stable: keeps the recording order of metrics within each contender.
        let contenders: Vec<String> = rows.iter().fold(Vec::new(), |mut seen, row| {
            if !seen.contains(&row.contender) {
                seen.push(row.contender.clone());
            }
            seen
        });
        rows.sort_by_key(|row| contenders.iter().position(|c| *c == row.contender));
        let repetitions = self
            .series
            .iter()
            .filter(|s| s.scenario == scenario)
            .map(|s| s.values.len())
            .max()
            .unwrap_or(0);
        let mut out = format!("{scenario} ({repetitions} repetitions)\n\n");
        out.push_str("| contender | metric | median | min | max | unit |\n");
        out.push_str("|---|---|---:|---:|---:|---|\n");
        for row in rows {
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} | {} |",
                row.contender,
                row.metric,
                number(row.median),
                number(row.min),
                number(row.max),
                row.unit
            );
        }
        for (_, contender, why) in self.unavailable.iter().filter(|(s, _, _)| s == scenario) {
            let _ = writeln!(out, "| {contender} | not available: {why} | | | | |");
        }
        out
    }
}

/// Three significant digits or so, without exponent notation.
pub fn number(value: f64) -> String {
    let magnitude = value.abs();
    if magnitude >= 100.0 || value == value.trunc() {
        format!("{value:.0}")
    } else if magnitude >= 10.0 {
        format!("{value:.1}")
    } else if magnitude >= 1.0 {
        format!("{value:.2}")
    } else {
        format!("{value:.3}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ratios_pair_repetitions_side_by_side() {
        let mut results = Results::default();
        for (floor, this) in [(100.0, 95.0), (200.0, 150.0)] {
            results.record("s", "floor", &Metric::new("rate", "1/s", floor));
            results.record("s", "this", &Metric::new("rate", "1/s", this));
        }
        results.add_ratio("s", "rate", "floor", "rate_vs_floor", |v, b| v / b);
        assert_eq!(
            results.values("s", "this", "rate_vs_floor"),
            Some(&[0.95, 0.75][..])
        );
        assert_eq!(results.values("s", "floor", "rate_vs_floor"), None);
    }

    #[test]
    fn a_contender_that_could_not_run_is_shown_with_the_reason_and_no_figures() {
        let mut results = Results::default();
        results.record("s", "this", &Metric::new("rate", "1/s", 1.0));
        results.record_unavailable("s", "this fair", "no fair mode yet");
        results.record_unavailable("s", "this fair", "no fair mode yet");
        assert_eq!(
            results.unavailable("s", "this fair"),
            Some("no fair mode yet")
        );
        assert!(results.rows().iter().all(|row| row.contender == "this"));
        let table = results.table("s");
        assert_eq!(
            table
                .matches("| this fair | not available: no fair mode yet |")
                .count(),
            1
        );
    }

    #[test]
    fn rows_are_read_back_from_a_document_and_from_a_plain_list() {
        let mut results = Results::default();
        results.record("s", "c", &Metric::new("rate", "1/s", 2.0));
        let rows = results.rows();
        let document = Document {
            server: Some(ServerInfo {
                name: "valkey".into(),
                version: "9.0.0".into(),
                redis_version: "7.2.4".into(),
                binary: Some("valkey-server".into()),
            }),
            header: vec!["server: valkey 9.0.0".into()],
            rows: rows.clone(),
        };
        let json = serde_json::to_string(&document).expect("serialises");
        assert_eq!(Document::rows_of(&json).expect("a document"), rows);
        let list = serde_json::to_string(&rows).expect("serialises");
        assert_eq!(Document::rows_of(&list).expect("a list"), rows);
    }

    #[test]
    fn values_that_were_not_measured_are_left_out() {
        let mut results = Results::default();
        results.record("s", "c", &Metric::new("p99", "µs", f64::NAN));
        assert!(results.rows().is_empty());
    }

    #[test]
    fn numbers_keep_about_three_digits() {
        assert_eq!(number(12345.678), "12346");
        assert_eq!(number(12.345), "12.3");
        assert_eq!(number(1.2345), "1.23");
        assert_eq!(number(0.012345), "0.012");
        assert_eq!(number(3.0), "3");
    }
}
