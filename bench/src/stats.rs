//! Summaries: percentiles within one run, and median, min and max across repeated runs.

use std::time::Duration;

/// The `q`-quantile (0.0..=1.0) of `sorted` by the nearest-rank method; `None` when empty.
pub fn percentile(sorted: &[f64], q: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

/// Latencies in microseconds, sorted, ready for [`percentile`].
pub fn sorted_micros(latencies: &[Duration]) -> Vec<f64> {
    let mut micros: Vec<f64> = latencies
        .iter()
        .map(|latency| latency.as_secs_f64() * 1e6)
        .collect();
    micros.sort_by(f64::total_cmp);
    micros
}

/// Median, minimum and maximum of the repetitions of one measurement.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Summary {
    pub median: f64,
    pub min: f64,
    pub max: f64,
}

impl Summary {
    /// `None` when there is nothing to summarise. The median of an even count is the mean of the
    /// middle two.
    pub fn of(values: &[f64]) -> Option<Summary> {
        let mut sorted = values.to_vec();
        sorted.sort_by(f64::total_cmp);
        let (&min, &max) = (sorted.first()?, sorted.last()?);
        let mid = sorted.len() / 2;
        let median = if sorted.len() % 2 == 1 {
            sorted[mid]
        } else {
            (sorted[mid - 1] + sorted[mid]) / 2.0
        };
        Some(Summary { median, min, max })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let values: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&values, 0.5), Some(50.0));
        assert_eq!(percentile(&values, 0.99), Some(99.0));
        assert_eq!(percentile(&values, 1.0), Some(100.0));
        assert_eq!(percentile(&values, 0.0), Some(1.0));
        assert_eq!(percentile(&[], 0.5), None);
    }

    #[test]
    fn summary_of_odd_and_even_counts() {
        let odd = Summary::of(&[3.0, 1.0, 2.0]).expect("values");
        assert_eq!((odd.median, odd.min, odd.max), (2.0, 1.0, 3.0));
        let even = Summary::of(&[4.0, 1.0, 2.0, 3.0]).expect("values");
        assert_eq!((even.median, even.min, even.max), (2.5, 1.0, 4.0));
        assert_eq!(Summary::of(&[]), None);
    }
}
