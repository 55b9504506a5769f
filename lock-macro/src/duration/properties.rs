//! Property tests of the duration parser against a reference model.
//!
//! A duration is a run of `<digits><unit>` segments. The model reads such a run segment by
//! segment, with u128 arithmetic so that overflow is a plain comparison rather than the
//! parser's checked operations, and gives the answer the parser must give, errors included.
//! Strings that are not such a run at all are fed to the parser by the thousand: it must
//! answer with a value or an error, never panic, and agree with the model on every one.

use proptest::prelude::*;

use super::*;

/// Cases for the model properties.
const MODEL_CASES: u32 = 1_000;
/// Cases for the "any string" run, the stand-in for a fuzzer.
const FUZZ_CASES: u32 = 10_000;

const UNIT_MILLIS: [(&str, u128); 4] = [("h", 3_600_000), ("m", 60_000), ("s", 1_000), ("ms", 1)];

/// The answer for `segments`, each a run of ASCII digits and the text up to the next digit.
fn model(segments: &[(String, String)]) -> Result<u64, DurationError> {
    let mut total: u128 = 0;
    let mut last_unit: Option<usize> = None;
    for (digits, unit) in segments {
        if unit.is_empty() {
            return Err(DurationError::MissingUnit {
                number: digits.clone(),
            });
        }
        let Some(index) = UNIT_MILLIS.iter().position(|(name, _)| name == unit) else {
            return Err(DurationError::UnknownUnit { unit: unit.clone() });
        };
        if last_unit.is_some_and(|last| index <= last) {
            return Err(DurationError::UnitOrder);
        }
        last_unit = Some(index);
        let value: u128 = digits.parse().map_err(|_| DurationError::Overflow)?;
        if value > u128::from(u64::MAX) {
            return Err(DurationError::Overflow);
        }
        total += value * UNIT_MILLIS[index].1;
        if total > u128::from(u64::MAX) {
            return Err(DurationError::Overflow);
        }
    }
    u64::try_from(total).map_err(|_| DurationError::Overflow)
}

/// The answer for any string: the checks on the whole string first, then the model on its
/// digit and non-digit runs.
fn reference(text: &str) -> Result<u64, DurationError> {
    if text.is_empty() {
        return Err(DurationError::Empty);
    }
    if text.chars().any(char::is_whitespace) {
        return Err(DurationError::Whitespace);
    }
    if text.starts_with('-') {
        return Err(DurationError::Negative);
    }
    if text.contains('.') || text.contains(',') {
        return Err(DurationError::Fraction);
    }
    let mut runs: Vec<(bool, String)> = Vec::new();
    for c in text.chars() {
        let digit = c.is_ascii_digit();
        match runs.last_mut() {
            Some((run_digit, run)) if *run_digit == digit => run.push(c),
            _ => runs.push((digit, c.to_string())),
        }
    }
    if !runs[0].0 {
        return Err(DurationError::MissingNumber);
    }
    let segments: Vec<(String, String)> = runs
        .chunks(2)
        .map(|pair| {
            let unit = pair
                .get(1)
                .map(|(_, unit)| unit.clone())
                .unwrap_or_default();
            (pair[0].1.clone(), unit)
        })
        .collect();
    model(&segments)
}

/// Numbers: small, with leading zeros, near and beyond `u64::MAX`.
fn digits() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => (0u64..100_000).prop_map(|n| n.to_string()),
        1 => "0{1,25}[0-9]{0,3}",
        1 => any::<u64>().prop_map(|n| n.to_string()),
        1 => "1[0-9]{19,24}",
    ]
}

/// Units: the four known ones mostly, and text that is no unit (no ASCII digit, no
/// whitespace, no `.` or `,`, which the whole-string checks catch first).
fn unit() -> impl Strategy<Value = String> {
    prop_oneof![
        8 => prop::sample::select(vec!["h", "m", "s", "ms"]).prop_map(String::from),
        1 => prop::sample::select(vec!["sec", "d", "us", "M", "H", "S", "min", "mss", "µs"])
            .prop_map(String::from),
        1 => "[^0-9.,]{1,3}".prop_filter("no whitespace", |u| !u.chars().any(char::is_whitespace)),
    ]
}

/// A known unit with a value at most a few units away from the largest that fits, so that
/// two such segments overflow in their sum and not before.
fn near_the_limit() -> impl Strategy<Value = (String, String)> {
    (prop::sample::select(UNIT_MILLIS.to_vec()), 0u128..4).prop_map(|((name, size), below)| {
        let largest = u128::from(u64::MAX) / size;
        ((largest - below).to_string(), name.to_owned())
    })
}

/// Segments whose concatenation splits back into them: only the last may lack its unit.
fn segments() -> impl Strategy<Value = Vec<(String, String)>> {
    let segment = prop_oneof![4 => (digits(), unit()), 1 => near_the_limit()];
    (
        prop::collection::vec(segment, 1..5),
        prop::option::weighted(0.1, digits()),
    )
        .prop_map(|(mut segments, trailing)| {
            if let Some(number) = trailing {
                segments.push((number, String::new()));
            }
            segments
        })
}

fn concat(segments: &[(String, String)]) -> String {
    segments.iter().map(|(d, u)| format!("{d}{u}")).collect()
}

/// Well-formed durations: known units, largest first, each once, values that fit.
fn well_formed() -> impl Strategy<Value = (String, u64)> {
    prop::collection::vec((any::<bool>(), 0u64..10_000), 4).prop_map(|picks| {
        let mut text = String::new();
        let mut millis = 0;
        for ((name, size), (used, value)) in UNIT_MILLIS.iter().zip(&picks) {
            if *used {
                text.push_str(&format!("{value}{name}"));
                millis += value * u64::try_from(*size).expect("unit sizes fit u64");
            }
        }
        if text.is_empty() {
            ("0s".to_owned(), 0)
        } else {
            (text, millis)
        }
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(MODEL_CASES))]

    #[test]
    fn well_formed_durations_give_their_milliseconds((text, millis) in well_formed()) {
        prop_assert_eq!(parse_millis(&text), Ok(millis));
        prop_assert_eq!(parse_millis(&format_millis(millis)), Ok(millis));
    }

    #[test]
    fn any_run_of_segments_gets_the_model_answer(segments in segments()) {
        let text = concat(&segments);
        prop_assert_eq!(parse_millis(&text), model(&segments), "{:?}", text);
    }

    #[test]
    fn formatting_any_value_reads_back_to_it(millis in any::<u64>()) {
        prop_assert_eq!(parse_millis(&format_millis(millis)), Ok(millis));
    }

    #[test]
    fn whitespace_anywhere_is_rejected(
        segments in segments(),
        at in any::<prop::sample::Index>(),
        space in "\\s",
    ) {
        let mut text = concat(&segments);
        let cut = char_boundary(&text, at);
        text.insert_str(cut, &space);
        prop_assert_eq!(parse_millis(&text), Err(DurationError::Whitespace), "{:?}", text);
    }

    #[test]
    fn a_leading_minus_is_rejected(segments in segments()) {
        let text = format!("-{}", concat(&segments));
        prop_assert_eq!(parse_millis(&text), Err(DurationError::Negative));
    }

    #[test]
    fn a_decimal_point_anywhere_is_rejected(
        segments in segments(),
        at in any::<prop::sample::Index>(),
        point in prop::sample::select(vec![".", ","]),
    ) {
        let mut text = concat(&segments);
        let cut = char_boundary(&text, at);
        text.insert_str(cut, point);
        prop_assert_eq!(parse_millis(&text), Err(DurationError::Fraction), "{:?}", text);
    }

    #[test]
    fn a_duration_must_start_with_a_number(unit in unit(), segments in segments()) {
        let text = format!("{unit}{}", concat(&segments));
        if text.starts_with('-') {
            // A negative duration, reported as such.
            return Ok(());
        }
        prop_assert_eq!(parse_millis(&text), Err(DurationError::MissingNumber), "{:?}", text);
    }
}

/// A char boundary of `text` picked by `at`, the end included.
fn char_boundary(text: &str, at: prop::sample::Index) -> usize {
    let boundaries: Vec<usize> = text
        .char_indices()
        .map(|(i, _)| i)
        .chain([text.len()])
        .collect();
    boundaries[at.index(boundaries.len())]
}

/// Strings that are mostly duration syntax, so that a fuzz run reaches every error.
fn duration_like() -> impl Strategy<Value = String> {
    let fragment = prop_oneof![
        "[0-9]{1,3}",
        Just("18446744073709551615".to_owned()),
        prop::sample::select(vec!["h", "m", "s", "ms", "-", ".", ",", " ", "µ", "٣"])
            .prop_map(String::from),
        any::<char>().prop_map(String::from),
    ];
    prop::collection::vec(fragment, 0..8).prop_map(|parts| parts.concat())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(FUZZ_CASES))]

    /// Never panics, and agrees with the reference on every string.
    #[test]
    fn any_string_gets_the_reference_answer(text in prop_oneof![any::<String>(), duration_like()]) {
        let parsed = parse_millis(&text);
        if let Err(err) = &parsed {
            prop_assert!(!err.to_string().is_empty());
        }
        prop_assert_eq!(parsed, reference(&text), "{:?}", text);
    }
}
