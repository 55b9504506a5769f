//! What a run of the kit found: one line per check, shown as a table.

use std::fmt;
use std::time::Duration;

/// How one check ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Outcome {
    /// The store behaved as the check expects.
    Passed,
    /// The store did not: the check's message says what was seen and what was expected.
    Failed,
    /// Not run: the store refuses the shape the check needs (its message says why).
    Skipped,
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(match self {
            Outcome::Passed => "pass",
            Outcome::Failed => "FAIL",
            Outcome::Skipped => "skipped",
        })
    }
}

/// One check of a run: its name (the behaviour it checks), how it ended, what it saw.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct CheckResult {
    /// The behaviour checked, e.g. `mutual_exclusion_across_managers`.
    pub name: &'static str,
    /// Passed, failed or skipped.
    pub outcome: Outcome,
    /// What was seen: on a failure, what was seen and what was expected; on a skip, why.
    pub message: String,
    /// How long the check ran.
    pub took: Duration,
}

/// Every check of one run of [`run`](super::run) over one store, in the order they ran.
///
/// Its `Display` is a table (check, outcome, time, message);
/// [`assert_passed`](Report::assert_passed) fails a test with the whole table if any check
/// failed.
#[derive(Debug, Clone)]
pub struct Report {
    store: String,
    checks: Vec<CheckResult>,
}

impl Report {
    pub(crate) fn new(store: &str) -> Report {
        Report {
            store: store.to_owned(),
            checks: Vec::new(),
        }
    }

    pub(crate) fn push(&mut self, check: CheckResult) {
        self.checks.push(check);
    }

    /// The store's name, as given to [`run`](super::run).
    pub fn store(&self) -> &str {
        &self.store
    }

    /// Every check, in the order they ran.
    pub fn checks(&self) -> &[CheckResult] {
        &self.checks
    }

    /// How many checks ended with `outcome`.
    pub fn count(&self, outcome: Outcome) -> usize {
        self.checks
            .iter()
            .filter(|check| check.outcome == outcome)
            .count()
    }

    /// True if no check failed (skipped ones, for shapes the store refuses, do not count).
    pub fn passed(&self) -> bool {
        self.count(Outcome::Failed) == 0
    }

    /// Panics with the whole report if any check failed: for the end of a test.
    ///
    /// # Panics
    ///
    /// If a check failed; the message is the report's table.
    #[track_caller]
    pub fn assert_passed(&self) {
        assert!(
            self.passed(),
            "the store failed the conformance kit:\n{self}"
        );
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let width = self
            .checks
            .iter()
            .map(|check| check.name.len())
            .max()
            .unwrap_or(5)
            .max("check".len());
        writeln!(
            f,
            "conformance of {}: {} passed, {} failed, {} skipped",
            self.store,
            self.count(Outcome::Passed),
            self.count(Outcome::Failed),
            self.count(Outcome::Skipped)
        )?;
        writeln!(
            f,
            "{:<width$}  {:<7}  {:>7}  message",
            "check", "outcome", "time"
        )?;
        for check in &self.checks {
            let took = format!("{:.2}s", check.took.as_secs_f64());
            writeln!(
                f,
                "{:<width$}  {:<7}  {:>7}  {}",
                check.name, check.outcome, took, check.message
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(name: &'static str, outcome: Outcome) -> CheckResult {
        CheckResult {
            name,
            outcome,
            message: format!("{name} said so"),
            took: Duration::from_millis(1500),
        }
    }

    #[test]
    fn the_table_has_a_line_per_check_and_the_counts() {
        let mut report = Report::new("memory");
        report.push(check("first", Outcome::Passed));
        report.push(check("second_one", Outcome::Skipped));
        let shown = report.to_string();
        assert!(shown.starts_with("conformance of memory: 1 passed, 0 failed, 1 skipped\n"));
        assert!(
            shown.contains("first       pass       1.50s  first said so\n"),
            "{shown}"
        );
        assert!(
            shown.contains("second_one  skipped    1.50s  second_one said so\n"),
            "{shown}"
        );
        assert!(report.passed());
    }

    #[test]
    #[should_panic(expected = "second  FAIL       1.50s  second said so")]
    fn a_failed_check_fails_the_assertion_with_the_table() {
        let mut report = Report::new("memory");
        report.push(check("first", Outcome::Passed));
        report.push(check("second", Outcome::Failed));
        report.assert_passed();
    }
}
