//! A short fuzz run of the URL readers, with proptest standing in for a fuzzer: thousands of
//! arbitrary and URL-shaped strings, none of which may make them panic, and URLs with random
//! passwords of any characters, whose password must never come out of anything meant for
//! people to read. The strategies are shared with the Sentinel and Redlock URL parsers' runs.

use proptest::prelude::*;

use super::*;

/// Cases per fuzz property: each is a few string operations, so 10k run in well under a second.
pub(crate) const FUZZ_CASES: u32 = 10_000;

/// Arbitrary strings, and strings made mostly of URL syntax so that the readers' every branch
/// is reached.
pub(crate) fn url_like() -> impl Strategy<Value = String> {
    let fragment = prop_oneof![
        3 => prop::sample::select(vec![
            "redis://", "rediss://", "redis+unix://", "redis+sentinel://", "redlock://",
            "memory://", "://", "@", ":", "/", "//", "?", "#", ",", "[", "]", "password=",
            "&", "=", "%40", "::1", ":6379", "127.0.0.1", "mymaster",
        ])
        .prop_map(String::from),
        2 => "[a-z0-9]{1,4}",
        1 => any::<char>().prop_map(String::from),
    ];
    prop_oneof![
        any::<String>(),
        prop::collection::vec(fragment, 0..12).prop_map(|parts| parts.concat()),
    ]
}

/// A URL with a password in it.
#[derive(Debug, Clone)]
pub(crate) struct Secret {
    pub(crate) url: String,
    pub(crate) password: String,
    /// Everything after the `@` that ends the credentials.
    pub(crate) after: String,
}

impl Secret {
    /// True if `shown` gives the password away. Only a password that is at least 3 characters
    /// long and appears nowhere else in the URL can be told apart from the rest of the text.
    pub(crate) fn leaked_in(&self, shown: &str) -> bool {
        let password = self.password.as_str();
        password.chars().count() >= 3
            && self.url.find(password) == self.url.rfind(password)
            && shown.contains(password)
    }
}

/// The part after the credentials: hosts, ports, a path and a query, without `@`.
fn after_credentials() -> impl Strategy<Value = String> {
    let host = prop_oneof![
        "[a-z][a-z0-9.-]{0,8}(:[0-9]{1,5})?",
        Just("[::1]:6380".to_owned()),
    ];
    let structured = (
        prop::collection::vec(host, 1..4),
        "(/[a-z0-9]{1,8}(/[0-9]{1,2})?)?",
        "(\\?[a-z]{1,8}=[^@&]{0,6}(&[a-z]{1,8}=[^@&]{0,6})?)?",
    )
        .prop_map(|(hosts, path, query)| format!("{}{path}{query}", hosts.join(",")));
    prop_oneof![structured, "[^@]{0,30}"]
}

/// Passwords of any characters but `*`, the mask itself, often with URL syntax inside, and
/// with a `§` somewhere, which no message's own text has: a password made only of syntax
/// (`://`) would otherwise be "found" in the fixed part of a message.
fn password() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        "[^*]{1,6}",
        prop::sample::select(vec![
            "@", ":", "/", "?", "#", ",", "%", "//", "://", "=", "&"
        ])
        .prop_map(String::from),
        "[A-Za-z0-9+]{1,6}",
    ];
    let pieces = prop::collection::vec(piece, 0..3).prop_map(|parts| parts.concat());
    (pieces.clone(), pieces).prop_map(|(before, after)| format!("{before}§{after}"))
}

/// `<prefix>user:password@rest` for one of `prefixes` (`redis://`, or a broken one such as
/// `redis:/`), with a user that may be empty.
pub(crate) fn url_with_password(
    prefixes: &'static [&'static str],
) -> impl Strategy<Value = Secret> {
    (
        prop::sample::select(prefixes),
        "[^:]{0,6}",
        password(),
        after_credentials(),
    )
        .prop_map(|(prefix, user, password, after)| Secret {
            url: format!("{prefix}{user}:{password}@{after}"),
            password,
            after,
        })
}

const SINGLE_SERVER: &[&str] = &[
    "redis://",
    "rediss://",
    "redis+unix://",
    "unix://",
    "memory://",
    "x://",
];

/// Prefixes whose `scheme://` is missing or broken.
const BROKEN: &[&str] = &[
    "",
    "redis:",
    "redis:/",
    "//",
    "://",
    "re dis://",
    "1redis://",
    "redis:///",
    "@://",
];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(FUZZ_CASES))]

    #[test]
    fn reading_any_string_never_panics(url in url_like()) {
        let redacted = redact(&url);
        let _ = server_of(&url);
        match scheme(&url) {
            Ok(scheme) => {
                prop_assert!(!scheme.is_empty());
                let prefix = format!("{scheme}://");
                prop_assert!(url.starts_with(&prefix));
            }
            Err(LockError::Config(message)) => prop_assert!(message.contains(&redacted)),
            Err(other) => prop_assert!(false, "not a config error: {other:?}"),
        }
    }

    #[test]
    fn redacting_is_the_identity_without_credentials(
        prefix in prop::sample::select(SINGLE_SERVER),
        rest in "[a-z0-9.:/,\\[\\]#_-]{0,30}(\\?[a-oq-z]{1,6}=[a-z0-9:/]{0,6})?",
    ) {
        let url = format!("{prefix}{rest}");
        prop_assert_eq!(redact(&url), url);
    }

    #[test]
    fn redacting_never_shows_the_password(secret in url_with_password(SINGLE_SERVER)) {
        let shown = redact(&secret.url);
        prop_assert!(!secret.leaked_in(&shown), "{:?} shown as {:?}", secret.url, shown);
        prop_assert!(shown.contains("***"), "{:?} shown as {:?}", secret.url, shown);
    }

    #[test]
    fn the_server_named_in_errors_never_shows_the_password(
        secret in url_with_password(SINGLE_SERVER),
    ) {
        let server = server_of(&secret.url);
        // The server is read from what follows the credentials, with the default port added.
        let from = format!("{}:6379", secret.after);
        if !from.contains(&secret.password) {
            prop_assert!(!secret.leaked_in(&server), "{:?} named {:?}", secret.url, server);
        }
    }

    #[test]
    fn the_server_is_the_host_and_port_after_the_credentials(
        password in password(),
        host in "[a-z][a-z0-9.-]{0,8}|[0-9]{1,3}(\\.[0-9]{1,3}){3}|\\[::1\\]",
        port in prop::option::of(1u16..),
        path in "(/[0-9]{1,2})?",
    ) {
        let url = match port {
            Some(port) => format!("redis://u:{password}@{host}:{port}{path}"),
            None => format!("redis://u:{password}@{host}{path}"),
        };
        let expected = format!("{host}:{}", port.unwrap_or(6379));
        prop_assert_eq!(server_of(&url), expected);
    }

    #[test]
    fn a_broken_scheme_never_shows_the_password(secret in url_with_password(BROKEN)) {
        // `a:` + `//x` is `a://x`: a URL with a real scheme, whose password is not `//x`.
        if secret.password.starts_with("//") {
            return Ok(());
        }
        let shown = redact(&secret.url);
        prop_assert!(!secret.leaked_in(&shown), "{:?} shown as {:?}", secret.url, shown);
        // The scheme itself is shown in "unsupported scheme" messages.
        let shown = match scheme(&secret.url) {
            Ok(scheme) => scheme.to_owned(),
            Err(err) => format!("{err} {err:?}"),
        };
        prop_assert!(!secret.leaked_in(&shown), "{:?} reported as {}", secret.url, shown);
    }
}
