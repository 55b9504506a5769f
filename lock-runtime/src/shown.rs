//! Durations as a person writes them, for every message and log line of the crate: `20s`, not
//! `20.001851986s`; `410µs`, not `409.54µs`.

use std::fmt;
use std::time::Duration;

/// A duration rounded to three significant figures in the largest unit that keeps it at 1 or
/// more (`ns`, `µs`, `ms`, `s`), trailing zeros dropped: `410µs`, `1.5ms`, `20s`. From a minute
/// on, to the second: `1m 30s`, `2h 5s`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Shown(pub(crate) Duration);

/// A duration exactly, in the units a person writes (`1m 400ms`, `1day`): for a setting and
/// its bounds, which rounding could make look alike.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Exact(pub(crate) Duration);

impl fmt::Display for Exact {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_zero() {
            return f.write_str("0s");
        }
        write!(f, "{}", humantime::format_duration(self.0))
    }
}

/// Nanoseconds per unit, smallest first, each a thousand times the one before.
const UNITS: [(u128, &str); 3] = [(1_000, "µs"), (1_000_000, "ms"), (1_000_000_000, "s")];

const MINUTE_NS: u128 = 60_000_000_000;

impl fmt::Display for Shown {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut nanos = self.0.as_nanos();
        if nanos < 1_000 {
            return write!(f, "{nanos}ns");
        }
        for (unit, name) in UNITS {
            if nanos >= unit * 1_000 {
                continue;
            }
            // Three significant figures: as many decimals as the whole part leaves.
            let decimals: u32 = match nanos / unit {
                0..10 => 2,
                10..100 => 1,
                _ => 0,
            };
            let step = unit / 10u128.pow(decimals);
            let steps = (nanos + step / 2) / step;
            let rounded = steps * step;
            if rounded >= unit * 1_000 {
                // `999.7µs` rounds to `1ms`: the next unit says it.
                nanos = rounded;
                continue;
            }
            if unit == 1_000_000_000 && rounded >= MINUTE_NS {
                break;
            }
            return write_decimal(f, steps, decimals, name);
        }
        let seconds = u64::try_from((nanos + 500_000_000) / 1_000_000_000).unwrap_or(u64::MAX);
        write!(
            f,
            "{}",
            humantime::format_duration(Duration::from_secs(seconds))
        )
    }
}

/// `steps` hundredths (`decimals` 2), tenths (1) or units (0) of `unit`, trailing zeros dropped.
fn write_decimal(
    f: &mut fmt::Formatter<'_>,
    steps: u128,
    decimals: u32,
    unit: &str,
) -> fmt::Result {
    let scale = 10u128.pow(decimals);
    let (whole, mut fraction) = (steps / scale, steps % scale);
    let mut width = decimals as usize;
    while width > 0 && fraction % 10 == 0 {
        fraction /= 10;
        width -= 1;
    }
    if width == 0 {
        write!(f, "{whole}{unit}")
    } else {
        write!(f, "{whole}.{fraction:0width$}{unit}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shown(nanos: u64) -> String {
        Shown(Duration::from_nanos(nanos)).to_string()
    }

    #[test]
    fn durations_are_rounded_to_three_significant_figures() {
        assert_eq!(shown(409_540), "410µs");
        assert_eq!(shown(20_001_851_986), "20s");
        assert_eq!(shown(1_500_000), "1.5ms");
        assert_eq!(shown(1_234_567), "1.23ms");
        assert_eq!(shown(12_345_678), "12.3ms");
        assert_eq!(shown(250_000_000), "250ms");
        assert_eq!(shown(1_050_000), "1.05ms");
        assert_eq!(shown(1_005_000), "1.01ms");
    }

    #[test]
    fn small_durations_keep_their_unit() {
        assert_eq!(shown(0), "0ns");
        assert_eq!(shown(999), "999ns");
        assert_eq!(shown(1_000), "1µs");
        assert_eq!(shown(5_000_000_000), "5s");
    }

    #[test]
    fn a_duration_that_rounds_up_to_the_next_unit_is_said_in_it() {
        assert_eq!(shown(999_700), "1ms");
        assert_eq!(shown(999_600_000), "1s");
        assert_eq!(shown(999_996), "1ms");
    }

    #[test]
    fn from_a_minute_on_durations_are_said_to_the_second() {
        assert_eq!(shown(59_960_000_000), "1m");
        assert_eq!(shown(90_400_000_000), "1m 30s");
        assert_eq!(shown(7_205_000_000_000), "2h 5s");
        assert!(!Shown(Duration::MAX).to_string().is_empty());
    }

    #[test]
    fn settings_are_said_exactly() {
        assert_eq!(Exact(Duration::from_millis(60_400)).to_string(), "1m 400ms");
        assert_eq!(Exact(Duration::from_secs(86_400)).to_string(), "1day");
        assert_eq!(Exact(Duration::ZERO).to_string(), "0s");
    }
}
