//! Property tests of the key template parser against a reference model.
//!
//! Templates are built from pieces whose meaning is known (literal text, `<<`, `>>`,
//! placeholders), so the parse each one must give is known too. Faults spliced into such
//! templates (an unclosed `<`, a stray `>`, `<>`, a bad name) must come back as the matching
//! error, whatever surrounds them. And no string at all may make the parser panic: errors are
//! values, since a panic in a proc macro is an unreadable compile error.

use proptest::prelude::*;

use super::*;

/// Cases for the model properties; each case parses a handful of short strings.
const MODEL_CASES: u32 = 1_000;
/// Cases for the "any string" run, the stand-in for a fuzzer.
const FUZZ_CASES: u32 = 10_000;

/// One piece of a generated template, with the meaning the parser must give it.
#[derive(Debug, Clone)]
enum Piece {
    /// Literal text without angle brackets.
    Text(String),
    /// `<<`, a literal `<`.
    Open,
    /// `>>`, a literal `>`.
    Close,
    /// `<root.field.0>`.
    Placeholder { root: String, fields: Vec<String> },
}

impl Piece {
    fn source(&self) -> String {
        match self {
            Piece::Text(text) => text.clone(),
            Piece::Open => "<<".into(),
            Piece::Close => ">>".into(),
            Piece::Placeholder { root, fields } => {
                let mut out = format!("<{root}");
                for field in fields {
                    out.push('.');
                    out.push_str(field);
                }
                out.push('>');
                out
            }
        }
    }
}

fn source(pieces: &[Piece]) -> String {
    pieces.iter().map(Piece::source).collect()
}

/// The segments the parser must return: adjacent literal pieces merge into one text segment.
fn expected(pieces: &[Piece]) -> Vec<Segment> {
    let mut segments = Vec::new();
    let mut text = String::new();
    for piece in pieces {
        match piece {
            Piece::Text(more) => text.push_str(more),
            Piece::Open => text.push('<'),
            Piece::Close => text.push('>'),
            Piece::Placeholder { root, fields } => {
                if !text.is_empty() {
                    segments.push(Segment::Text(std::mem::take(&mut text)));
                }
                segments.push(Segment::Placeholder(Placeholder {
                    root: root.clone(),
                    fields: fields.clone(),
                }));
            }
        }
    }
    if !text.is_empty() {
        segments.push(Segment::Text(text));
    }
    segments
}

/// What the parser must accept between `<` and `>`: an identifier (Unicode letters allowed,
/// `r#` allowed) followed by `.identifier`, `.method()` or `.index` accesses, with no leading zero
/// in an index.
fn valid_path(inner: &str) -> bool {
    fn ident(word: &str) -> bool {
        let word = word.strip_prefix("r#").unwrap_or(word);
        let mut chars = word.chars();
        match chars.next() {
            Some(first) if first == '_' || first.is_alphabetic() => {
                chars.all(|c| c == '_' || c.is_alphanumeric())
            }
            _ => false,
        }
    }
    fn index(word: &str) -> bool {
        word == "0"
            || (word.starts_with(|c: char| ('1'..='9').contains(&c))
                && word.chars().all(|c| c.is_ascii_digit()))
    }
    let mut parts = inner.split('.');
    parts.next().is_some_and(ident)
        && parts
            .all(|part| ident(part) || index(part) || part.strip_suffix("()").is_some_and(ident))
}

fn ident() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => "[a-zA-Z_][a-zA-Z0-9_]{0,6}",
        1 => "r#[a-z_][a-z0-9_]{0,4}",
        1 => Just("self".to_owned()),
        1 => "[\\p{Alphabetic}_][\\p{Alphabetic}\\p{N}_]{0,4}",
    ]
}

fn field() -> impl Strategy<Value = String> {
    prop_oneof![ident(), Just("0".to_owned()), "[1-9][0-9]{0,3}"]
}

/// Any text without angle brackets: whitespace, braces, dots, control and non-ASCII characters.
fn text() -> impl Strategy<Value = String> {
    prop_oneof!["[^<>]{1,8}", "[a-z:{}./ _-]{1,8}",]
}

fn piece() -> impl Strategy<Value = Piece> {
    prop_oneof![
        3 => text().prop_map(Piece::Text),
        1 => Just(Piece::Open),
        1 => Just(Piece::Close),
        3 => (ident(), prop::collection::vec(field(), 0..3))
            .prop_map(|(root, fields)| Piece::Placeholder { root, fields }),
    ]
}

fn pieces() -> impl Strategy<Value = Vec<Piece>> {
    prop::collection::vec(piece(), 0..8)
}

/// At least one piece: every piece has some text, so the template is not empty.
fn some_pieces() -> impl Strategy<Value = Vec<Piece>> {
    prop::collection::vec(piece(), 1..8)
}

/// Placeholder contents the parser must reject as a name: random junk and near misses.
fn invalid_name() -> impl Strategy<Value = String> {
    prop_oneof![
        "[^\\s>]{1,10}",
        "[a-z0-9._:#r-]{1,8}",
        (
            ident(),
            prop::sample::select(vec![
                "..", ".", "-x", "::x", ".01", ".1a", ".r#", "#", ".", ".00",
            ])
        )
            .prop_map(|(id, tail)| format!("{id}{tail}")),
        prop::sample::select(vec!["0", "1abc", "r#", "r#r#a", ".a", "01"]).prop_map(String::from),
    ]
    .prop_filter("must be invalid, whitespace-free, not an escape", |inner| {
        !valid_path(inner) && !inner.chars().any(char::is_whitespace) && !inner.starts_with('<')
    })
}

/// The source text of a parsed template: parsing it again must give the same template.
fn unparse(template: &Template) -> String {
    let mut out = String::new();
    for segment in &template.segments {
        match segment {
            Segment::Text(text) => out.push_str(&text.replace('<', "<<").replace('>', ">>")),
            Segment::Placeholder(placeholder) => out.push_str(&placeholder.to_string()),
        }
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(MODEL_CASES))]

    #[test]
    fn templates_built_from_known_pieces_parse_to_their_meaning(pieces in pieces()) {
        let text = source(&pieces);
        let parsed = Template::parse(&text);
        if text.is_empty() {
            prop_assert_eq!(parsed, Err(TemplateError::EmptyKey));
        } else {
            let template = parsed.map_err(|err| TestCaseError::fail(format!("{text:?}: {err}")))?;
            prop_assert_eq!(&template.segments, &expected(&pieces));
        }
    }

    #[test]
    fn format_string_and_literal_parts_follow_the_segments(pieces in some_pieces()) {
        let text = source(&pieces);
        let template = Template::parse(&text)
            .map_err(|err| TestCaseError::fail(format!("{text:?}: {err}")))?;
        let mut format = String::new();
        let mut literal = String::new();
        let mut shown = Vec::new();
        for segment in expected(&pieces) {
            match segment {
                Segment::Text(text) => {
                    format.push_str(&text.replace('{', "{{").replace('}', "}}"));
                    literal.push_str(&text);
                }
                Segment::Placeholder(placeholder) => {
                    format.push_str("{}");
                    shown.push(placeholder.to_string());
                }
            }
        }
        prop_assert_eq!(template.format_string(), format);
        prop_assert_eq!(template.literal_len(), literal.len());
        prop_assert_eq!(template.as_literal(), shown.is_empty().then_some(literal));
        let placeholders: Vec<String> = template.placeholders().map(ToString::to_string).collect();
        let written: Vec<String> = pieces
            .iter()
            .filter(|piece| matches!(piece, Piece::Placeholder { .. }))
            .map(Piece::source)
            .collect();
        prop_assert_eq!(&placeholders, &written);
        prop_assert_eq!(placeholders, shown);
    }

    #[test]
    fn an_unclosed_placeholder_is_reported_with_the_rest_of_the_key(
        before in pieces(),
        tail in "[^<>]{0,8}",
    ) {
        let rest = format!("<{tail}");
        let text = format!("{}{rest}", source(&before));
        prop_assert_eq!(Template::parse(&text), Err(TemplateError::Unclosed { text: rest }));
    }

    #[test]
    fn a_stray_close_is_rejected_whatever_follows(
        before in pieces(),
        after in any::<String>().prop_filter("not an escape", |s| !s.starts_with('>')),
    ) {
        let text = format!("{}>{after}", source(&before));
        prop_assert_eq!(Template::parse(&text), Err(TemplateError::StrayClose));
    }

    #[test]
    fn an_empty_placeholder_is_rejected_whatever_follows(before in pieces(), after in any::<String>()) {
        let text = format!("{}<>{after}", source(&before));
        prop_assert_eq!(Template::parse(&text), Err(TemplateError::EmptyPlaceholder));
    }

    #[test]
    fn whitespace_in_a_placeholder_is_rejected_with_the_placeholder(
        before in pieces(),
        left in "[^<>]{0,4}",
        space in "\\s",
        right in "[^<>]{0,4}",
        after in any::<String>(),
    ) {
        let placeholder = format!("<{left}{space}{right}>");
        let text = format!("{}{placeholder}{after}", source(&before));
        prop_assert_eq!(Template::parse(&text), Err(TemplateError::Whitespace { placeholder }));
    }

    #[test]
    fn a_malformed_name_is_rejected_with_the_placeholder(
        before in pieces(),
        inner in invalid_name(),
        after in any::<String>(),
    ) {
        let placeholder = format!("<{inner}>");
        let text = format!("{}{placeholder}{after}", source(&before));
        prop_assert_eq!(Template::parse(&text), Err(TemplateError::InvalidName { placeholder }));
    }
}

/// Strings that are mostly template syntax, so that a fuzz run reaches deep into the parser.
fn template_like() -> impl Strategy<Value = String> {
    let fragment = prop_oneof![
        Just("<".to_owned()),
        Just(">".to_owned()),
        Just("<<".to_owned()),
        Just(">>".to_owned()),
        Just(".".to_owned()),
        Just("r#".to_owned()),
        Just("0".to_owned()),
        "[a-z_]{1,3}",
        any::<char>().prop_map(String::from),
    ];
    prop::collection::vec(fragment, 0..12).prop_map(|parts| parts.concat())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(FUZZ_CASES))]

    /// Never panics; whatever it accepts reads back to itself.
    #[test]
    fn any_string_parses_or_fails_with_an_error_value(
        text in prop_oneof![any::<String>(), template_like()],
    ) {
        match Template::parse(&text) {
            Ok(template) => {
                prop_assert!(!text.is_empty());
                prop_assert_eq!(Template::parse(&unparse(&template)), Ok(template.clone()));
                if !text.contains(['<', '>']) {
                    prop_assert_eq!(template.segments, vec![Segment::Text(text)]);
                }
            }
            Err(err) => {
                // Every error can be shown to the user.
                prop_assert!(!err.to_string().is_empty());
            }
        }
    }
}
