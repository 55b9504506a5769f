//! Key templates: `"order:<user_id>"`, `"tenant:<self.tenant>:doc:<doc.id>"`, `"a<<b>>c"`.
//!
//! Text is literal; `<path>` is a placeholder whose value is rendered with `Display`; `<<` and `>>`
//! stand for a literal `<` and `>`. A placeholder path is a parameter name (or `self`) followed
//! by `.field`, `.0` or `.method()` accesses (calls without arguments only). This module only checks the syntax; whether the root names a
//! parameter is checked against the fn signature in `validate`.

use std::fmt;

/// A parsed key template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Template {
    pub(crate) segments: Vec<Segment>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Segment {
    /// Literal text, escapes already resolved (`<<` is stored as `<`).
    Text(String),
    Placeholder(Placeholder),
}

/// `<root.field.0>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Placeholder {
    /// The parameter name (or `self`), as written (a raw identifier keeps its `r#`).
    pub(crate) root: String,
    /// Field names, tuple indices and method calls (`name()`), as written.
    pub(crate) fields: Vec<String>,
}

impl fmt::Display for Placeholder {
    /// The placeholder as the user wrote it, for messages: `<user.id>`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "<{}", self.root)?;
        for field in &self.fields {
            write!(f, ".{field}")?;
        }
        f.write_str(">")
    }
}

/// What is wrong with a key template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum TemplateError {
    /// `key = ""`.
    EmptyKey,
    /// `<>`.
    EmptyPlaceholder,
    /// A `<` with no `>` after it; `text` runs from the `<` to the end.
    Unclosed { text: String },
    /// A `>` that closes nothing.
    StrayClose,
    /// `< id >`.
    Whitespace { placeholder: String },
    /// `<user-id>`, `<a..b>`, `<0>`, `<a<b>`.
    InvalidName { placeholder: String },
}

impl fmt::Display for TemplateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TemplateError::EmptyKey => f.write_str(
                "`key` is empty: name the resource the lock protects, \
                 e.g. `key = \"order:<order_id>\"`",
            ),
            TemplateError::EmptyPlaceholder => f.write_str(
                "empty placeholder `<>` in `key`: write a parameter name inside, as in \
                 `<order_id>`, or `<<>>` for a literal `<>`",
            ),
            TemplateError::Unclosed { text } => write!(
                f,
                "unclosed placeholder `{text}` in `key`: close it with `>`, \
                 or write `<<` for a literal `<`"
            ),
            TemplateError::StrayClose => f.write_str(
                "unmatched `>` in `key`: write `>>` for a literal `>`, \
                 or open a placeholder with `<`",
            ),
            TemplateError::Whitespace { placeholder } => write!(
                f,
                "placeholder `{placeholder}` in `key` contains whitespace: write `<{}>`",
                placeholder
                    .trim_start_matches('<')
                    .trim_end_matches('>')
                    .split_whitespace()
                    .collect::<String>()
            ),
            TemplateError::InvalidName { placeholder } if placeholder.contains('(') => write!(
                f,
                "`{placeholder}` in `key` is not a valid placeholder: a placeholder can call \
                 methods only without arguments, as in `<user.name()>`; for anything else, \
                 compute the value into a parameter and name it"
            ),
            TemplateError::InvalidName { placeholder } => write!(
                f,
                "`{placeholder}` in `key` is not a valid placeholder: a placeholder is a \
                 parameter name, optionally followed by fields or method calls without \
                 arguments, as in `<order_id>`, `<self.tenant.id>` or `<user.name()>`; write \
                 `<<` and `>>` for literal angle brackets"
            ),
        }
    }
}

impl Template {
    /// Parses a template. Never accepts a template that the expansion could render wrongly.
    pub(crate) fn parse(text: &str) -> Result<Template, TemplateError> {
        if text.is_empty() {
            return Err(TemplateError::EmptyKey);
        }
        let mut segments = Vec::new();
        let mut literal = String::new();
        let mut rest = text;
        while let Some(c) = rest.chars().next() {
            match c {
                '<' if rest.starts_with("<<") => {
                    literal.push('<');
                    rest = &rest[2..];
                }
                '>' if rest.starts_with(">>") => {
                    literal.push('>');
                    rest = &rest[2..];
                }
                '>' => return Err(TemplateError::StrayClose),
                '<' => {
                    let Some(close) = rest.find('>') else {
                        return Err(TemplateError::Unclosed {
                            text: rest.to_owned(),
                        });
                    };
                    let placeholder = parse_placeholder(&rest[..=close])?;
                    if !literal.is_empty() {
                        segments.push(Segment::Text(std::mem::take(&mut literal)));
                    }
                    segments.push(Segment::Placeholder(placeholder));
                    rest = &rest[close + 1..];
                }
                _ => {
                    literal.push(c);
                    rest = &rest[c.len_utf8()..];
                }
            }
        }
        if !literal.is_empty() {
            segments.push(Segment::Text(literal));
        }
        Ok(Template { segments })
    }

    pub(crate) fn placeholders(&self) -> impl Iterator<Item = &Placeholder> {
        self.segments.iter().filter_map(|segment| match segment {
            Segment::Placeholder(placeholder) => Some(placeholder),
            Segment::Text(_) => None,
        })
    }

    /// The `format_args!` string: literal text with `{` and `}` doubled, `{}` per placeholder.
    pub(crate) fn format_string(&self) -> String {
        let mut out = String::new();
        for segment in &self.segments {
            match segment {
                Segment::Text(text) => out.push_str(&text.replace('{', "{{").replace('}', "}}")),
                Segment::Placeholder(_) => out.push_str("{}"),
            }
        }
        out
    }

    /// The bytes of literal text, for the rendered key's capacity estimate.
    pub(crate) fn literal_len(&self) -> usize {
        self.segments
            .iter()
            .map(|segment| match segment {
                Segment::Text(text) => text.len(),
                Segment::Placeholder(_) => 0,
            })
            .sum()
    }

    /// The whole key when it has no placeholders.
    pub(crate) fn as_literal(&self) -> Option<String> {
        let mut out = String::new();
        for segment in &self.segments {
            match segment {
                Segment::Text(text) => out.push_str(text),
                Segment::Placeholder(_) => return None,
            }
        }
        Some(out)
    }
}

/// Parses `<...>` (brackets included).
fn parse_placeholder(source: &str) -> Result<Placeholder, TemplateError> {
    let inner = &source[1..source.len() - 1];
    if inner.is_empty() {
        return Err(TemplateError::EmptyPlaceholder);
    }
    if inner.chars().any(char::is_whitespace) {
        return Err(TemplateError::Whitespace {
            placeholder: source.to_owned(),
        });
    }
    let invalid = || TemplateError::InvalidName {
        placeholder: source.to_owned(),
    };
    let mut parts = inner.split('.');
    let root = parts
        .next()
        .filter(|root| is_name(root))
        .ok_or_else(invalid)?;
    let fields = parts
        .map(|field| {
            if is_name(field)
                || is_tuple_index(field)
                || field.strip_suffix("()").is_some_and(is_name)
            {
                Ok(field.to_owned())
            } else {
                Err(invalid())
            }
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Placeholder {
        root: root.to_owned(),
        fields,
    })
}

/// An identifier-shaped word (keywords included: they are rejected later with the signature at
/// hand, where the message can be specific), with an optional `r#` prefix.
fn is_name(word: &str) -> bool {
    let word = word.strip_prefix("r#").unwrap_or(word);
    let mut chars = word.chars();
    chars
        .next()
        .is_some_and(|first| first == '_' || first.is_alphabetic())
        && chars.all(|c| c == '_' || c.is_alphanumeric())
}

/// `0`, `1`, `12`: not `01`, which Rust rejects as a tuple index.
fn is_tuple_index(word: &str) -> bool {
    !word.is_empty()
        && word.bytes().all(|b| b.is_ascii_digit())
        && (word == "0" || !word.starts_with('0'))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(s: &str) -> Segment {
        Segment::Text(s.into())
    }

    fn placeholder(root: &str, fields: &[&str]) -> Segment {
        Segment::Placeholder(Placeholder {
            root: root.into(),
            fields: fields.iter().map(|f| (*f).into()).collect(),
        })
    }

    fn segments(s: &str) -> Vec<Segment> {
        match Template::parse(s) {
            Ok(template) => template.segments,
            Err(err) => panic!("{s:?} should parse, got {err:?}"),
        }
    }

    #[test]
    fn plain_text_is_one_literal_segment() {
        assert_eq!(segments("jobs:lottery"), [text("jobs:lottery")]);
    }

    #[test]
    fn placeholders_split_the_text() {
        assert_eq!(
            segments("order:<user_id>:<voucher>"),
            [
                text("order:"),
                placeholder("user_id", &[]),
                text(":"),
                placeholder("voucher", &[])
            ]
        );
    }

    #[test]
    fn a_template_can_be_only_placeholders() {
        assert_eq!(
            segments("<a><b>"),
            [placeholder("a", &[]), placeholder("b", &[])]
        );
    }

    #[test]
    fn field_paths_and_tuple_indices_are_kept_in_order() {
        assert_eq!(
            segments("<self.tenant.id>/<pair.0>/<x.r#type>"),
            [
                placeholder("self", &["tenant", "id"]),
                text("/"),
                placeholder("pair", &["0"]),
                text("/"),
                placeholder("x", &["r#type"]),
            ]
        );
    }

    #[test]
    fn method_calls_without_arguments_are_fields() {
        assert_eq!(
            segments("<user.name()>:<user.id>"),
            [
                placeholder("user", &["name()"]),
                text(":"),
                placeholder("user", &["id"])
            ]
        );
    }

    #[test]
    fn doubled_brackets_are_literal_brackets() {
        assert_eq!(segments("a<<b>>c"), [text("a<b>c")]);
        assert_eq!(segments("<<id>>"), [text("<id>")]);
        assert_eq!(
            segments("<<<id>>>"),
            [text("<"), placeholder("id", &[]), text(">")]
        );
        assert_eq!(segments("<<>>"), [text("<>")]);
    }

    #[test]
    fn unicode_text_and_names_are_accepted() {
        assert_eq!(
            segments("ключ:<имя>:é"),
            [text("ключ:"), placeholder("имя", &[]), text(":é")]
        );
    }

    #[test]
    fn braces_are_escaped_in_the_format_string() {
        let template = Template::parse("{a}:<id>:}").expect("valid");
        assert_eq!(template.format_string(), "{{a}}:{}:}}");
        assert_eq!(template.literal_len(), 6);
    }

    #[test]
    fn literal_keys_render_to_themselves() {
        let template = Template::parse("jobs:<<noon>>").expect("valid");
        assert_eq!(template.as_literal().as_deref(), Some("jobs:<noon>"));
        let template = Template::parse("jobs:<id>").expect("valid");
        assert_eq!(template.as_literal(), None);
    }

    #[test]
    fn placeholders_display_as_written() {
        let template = Template::parse("<self.a.0>").expect("valid");
        let shown: Vec<String> = template.placeholders().map(|p| p.to_string()).collect();
        assert_eq!(shown, ["<self.a.0>"]);
    }

    #[test]
    fn empty_key_is_rejected() {
        assert_eq!(Template::parse(""), Err(TemplateError::EmptyKey));
    }

    #[test]
    fn empty_placeholder_is_rejected() {
        assert_eq!(
            Template::parse("order:<>"),
            Err(TemplateError::EmptyPlaceholder)
        );
    }

    #[test]
    fn unclosed_placeholder_reports_the_rest_of_the_key() {
        assert_eq!(
            Template::parse("order:<user_id"),
            Err(TemplateError::Unclosed {
                text: "<user_id".into()
            })
        );
        assert_eq!(
            Template::parse("a<"),
            Err(TemplateError::Unclosed { text: "<".into() })
        );
    }

    #[test]
    fn stray_close_bracket_is_rejected() {
        assert_eq!(Template::parse("a>b"), Err(TemplateError::StrayClose));
        assert_eq!(Template::parse("<id>>"), Err(TemplateError::StrayClose));
        assert_eq!(Template::parse(">"), Err(TemplateError::StrayClose));
    }

    #[test]
    fn whitespace_inside_a_placeholder_is_rejected() {
        assert_eq!(
            Template::parse("< id >"),
            Err(TemplateError::Whitespace {
                placeholder: "< id >".into()
            })
        );
        assert_eq!(
            Template::parse("<a.\tb>"),
            Err(TemplateError::Whitespace {
                placeholder: "<a.\tb>".into()
            })
        );
    }

    #[test]
    fn malformed_names_are_rejected() {
        for bad in [
            "<user-id>",
            "<a..b>",
            "<a.>",
            "<.a>",
            "<0>",
            "<a.01>",
            "<a<b>",
            "<1abc>",
            "<a.1b>",
            "<r#>",
            "<a::b>",
            "<a()>",
            "<a.b(1)>",
            "<a.()>",
        ] {
            assert_eq!(
                Template::parse(bad),
                Err(TemplateError::InvalidName {
                    placeholder: bad.into()
                }),
                "{bad}"
            );
        }
    }

    #[test]
    fn keywords_and_underscore_pass_the_syntax_check() {
        // Rejected later, against the signature, with a specific message.
        assert_eq!(segments("<_>"), [placeholder("_", &[])]);
        assert_eq!(segments("<self>"), [placeholder("self", &[])]);
        assert_eq!(segments("<fn>"), [placeholder("fn", &[])]);
    }

    #[test]
    fn whitespace_message_suggests_the_trimmed_placeholder() {
        let err = TemplateError::Whitespace {
            placeholder: "< user . id >".into(),
        };
        assert!(err.to_string().ends_with("write `<user.id>`"), "{err}");
    }
}

#[cfg(test)]
mod properties;
