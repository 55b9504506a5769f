//! Durations written in option strings: `"500ms"`, `"30s"`, `"5m"`, `"1h"`, and compounds such as
//! `"1m30s"` or `"1h30m"`.
//!
//! The grammar is deliberately small: one or more `<integer><unit>` segments, units from the
//! largest to the smallest, each unit at most once, no spaces, no signs, no fractions. Anything
//! else is an error that says how to write the value instead, because a lease length that is
//! silently misread (is `"1.5m"` 1 minute? 90 seconds?) is a correctness bug.

use std::fmt;

/// The units a duration can use, from the largest to the smallest, with their length in ms.
const UNITS: [(&str, u64); 4] = [("h", 3_600_000), ("m", 60_000), ("s", 1_000), ("ms", 1)];

/// What is wrong with a duration string. Rendered into a message by the caller, which knows the
/// option's name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum DurationError {
    /// `""`.
    Empty,
    /// `"1m 30s"`.
    Whitespace,
    /// `"-5s"`.
    Negative,
    /// `"1.5s"`.
    Fraction,
    /// `"30"`: a number without a unit.
    MissingUnit { number: String },
    /// `"s"`, `"1ms5"`: a unit without a number, or text that starts without a digit.
    MissingNumber,
    /// `"30sec"`.
    UnknownUnit { unit: String },
    /// `"30s1m"` or `"1m1m"`.
    UnitOrder,
    /// The value does not fit in `u64` milliseconds.
    Overflow,
}

impl fmt::Display for DurationError {
    /// The part of a message that follows the option name, e.g. "has no unit: ...".
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DurationError::Empty => f.write_str("is empty: write a duration such as \"30s\""),
            DurationError::Whitespace => {
                f.write_str("must not contain spaces: write the parts together, as in \"1m30s\"")
            }
            DurationError::Negative => f.write_str("cannot be negative: remove the `-`"),
            DurationError::Fraction => f.write_str(
                "must be a whole number of units: use a smaller unit instead of a fraction, \
                 e.g. \"1500ms\" rather than \"1.5s\"",
            ),
            DurationError::MissingUnit { number } => write!(
                f,
                "has no unit: write \"{number}s\" for seconds (units: ms, s, m, h)"
            ),
            DurationError::MissingNumber => f.write_str(
                "must be a number followed by a unit, such as \"500ms\", \"30s\", \"5m\" or \"1h\"",
            ),
            DurationError::UnknownUnit { unit } => write!(
                f,
                "has an unknown unit `{unit}`: use ms, s, m or h, as in \"30s\""
            ),
            DurationError::UnitOrder => f.write_str(
                "must list its units from the largest to the smallest, each once, as in \"1h30m\"",
            ),
            DurationError::Overflow => f.write_str(
                "is too large: a duration must fit in 64-bit milliseconds \
                 (about 584 million years); use a smaller value",
            ),
        }
    }
}

/// Parses a duration string into milliseconds.
pub(crate) fn parse_millis(text: &str) -> Result<u64, DurationError> {
    if text.is_empty() {
        return Err(DurationError::Empty);
    }
    if text.chars().any(char::is_whitespace) {
        return Err(DurationError::Whitespace);
    }
    if text.starts_with('-') {
        return Err(DurationError::Negative);
    }
    if text.contains(['.', ',']) {
        return Err(DurationError::Fraction);
    }

    let mut total: u64 = 0;
    // Index into UNITS of the last unit used; the next one must come strictly after it.
    let mut last_unit: Option<usize> = None;
    let mut rest = text;
    while !rest.is_empty() {
        let digits_end = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        if digits_end == 0 {
            return Err(DurationError::MissingNumber);
        }
        let (digits, after) = rest.split_at(digits_end);
        let unit_end = after
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(after.len());
        let (unit, next) = after.split_at(unit_end);
        if unit.is_empty() {
            return Err(DurationError::MissingUnit {
                number: digits.to_owned(),
            });
        }
        let Some(index) = UNITS.iter().position(|(name, _)| *name == unit) else {
            return Err(DurationError::UnknownUnit {
                unit: unit.to_owned(),
            });
        };
        if last_unit.is_some_and(|last| index <= last) {
            return Err(DurationError::UnitOrder);
        }
        last_unit = Some(index);

        let value: u64 = digits.parse().map_err(|_| DurationError::Overflow)?;
        let millis = value
            .checked_mul(UNITS[index].1)
            .ok_or(DurationError::Overflow)?;
        total = total.checked_add(millis).ok_or(DurationError::Overflow)?;
        rest = next;
    }
    Ok(total)
}

/// Formats milliseconds the way a user would write them, for messages: `90000` is `"1m30s"`.
pub(crate) fn format_millis(millis: u64) -> String {
    if millis == 0 {
        return "0s".to_owned();
    }
    let mut out = String::new();
    let mut rest = millis;
    for (name, size) in UNITS {
        let count = rest / size;
        if count > 0 {
            out.push_str(&count.to_string());
            out.push_str(name);
            rest %= size;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn single_units_convert_to_milliseconds() {
        assert_eq!(parse_millis("500ms"), Ok(500));
        assert_eq!(parse_millis("30s"), Ok(30_000));
        assert_eq!(parse_millis("5m"), Ok(300_000));
        assert_eq!(parse_millis("1h"), Ok(3_600_000));
    }

    #[test]
    fn zero_is_a_valid_duration() {
        assert_eq!(parse_millis("0s"), Ok(0));
        assert_eq!(parse_millis("0ms"), Ok(0));
    }

    #[test]
    fn leading_zeros_are_accepted() {
        assert_eq!(parse_millis("007s"), Ok(7_000));
    }

    #[test]
    fn compound_durations_add_up() {
        assert_eq!(parse_millis("1m30s"), Ok(90_000));
        assert_eq!(parse_millis("1h30m"), Ok(5_400_000));
        assert_eq!(parse_millis("1h2m3s4ms"), Ok(3_723_004));
        assert_eq!(parse_millis("2s500ms"), Ok(2_500));
    }

    #[test]
    fn compound_units_must_decrease() {
        assert_eq!(parse_millis("30s1m"), Err(DurationError::UnitOrder));
        assert_eq!(parse_millis("1m1m"), Err(DurationError::UnitOrder));
        assert_eq!(parse_millis("1ms1s"), Err(DurationError::UnitOrder));
    }

    #[test]
    fn a_number_without_unit_is_rejected_with_the_number() {
        assert_eq!(
            parse_millis("30"),
            Err(DurationError::MissingUnit {
                number: "30".into()
            })
        );
        assert_eq!(
            parse_millis("1m30"),
            Err(DurationError::MissingUnit {
                number: "30".into()
            })
        );
    }

    #[test]
    fn a_unit_without_number_is_rejected() {
        assert_eq!(parse_millis("s"), Err(DurationError::MissingNumber));
        assert_eq!(parse_millis("ms"), Err(DurationError::MissingNumber));
        assert_eq!(parse_millis("+5s"), Err(DurationError::MissingNumber));
    }

    #[test]
    fn unknown_units_are_named() {
        assert_eq!(
            parse_millis("30sec"),
            Err(DurationError::UnknownUnit { unit: "sec".into() })
        );
        assert_eq!(
            parse_millis("1d"),
            Err(DurationError::UnknownUnit { unit: "d".into() })
        );
        assert_eq!(
            parse_millis("10us"),
            Err(DurationError::UnknownUnit { unit: "us".into() })
        );
        // Units are case-sensitive: "M" could be read as months.
        assert_eq!(
            parse_millis("5M"),
            Err(DurationError::UnknownUnit { unit: "M".into() })
        );
    }

    #[test]
    fn malformed_strings_get_specific_errors() {
        assert_eq!(parse_millis(""), Err(DurationError::Empty));
        assert_eq!(parse_millis("1m 30s"), Err(DurationError::Whitespace));
        assert_eq!(parse_millis(" 30s"), Err(DurationError::Whitespace));
        assert_eq!(parse_millis("-5s"), Err(DurationError::Negative));
        assert_eq!(parse_millis("1.5s"), Err(DurationError::Fraction));
        assert_eq!(parse_millis("1,5s"), Err(DurationError::Fraction));
    }

    #[test]
    fn values_beyond_u64_milliseconds_overflow() {
        assert_eq!(
            parse_millis("99999999999999999999ms"),
            Err(DurationError::Overflow)
        );
        assert_eq!(
            parse_millis("18446744073709551615ms"),
            Ok(u64::MAX),
            "the largest value still fits"
        );
        assert_eq!(
            parse_millis("18446744073709552s"),
            Err(DurationError::Overflow)
        );
        assert_eq!(
            parse_millis("5124095576031h"),
            Err(DurationError::Overflow),
            "the number times the unit overflows"
        );
        assert_eq!(
            parse_millis("5124095576030h1552s"),
            Err(DurationError::Overflow),
            "each part fits but their sum overflows"
        );
    }

    #[test]
    fn formatting_round_trips_through_the_parser() {
        for millis in [0, 1, 999, 1_000, 90_000, 3_723_004, 86_400_000, u64::MAX] {
            let text = format_millis(millis);
            assert_eq!(parse_millis(&text), Ok(millis), "{text}");
        }
        assert_eq!(format_millis(90_000), "1m30s");
        assert_eq!(format_millis(86_400_000), "24h");
    }
}

#[cfg(test)]
mod properties;
