//! Reading lock URLs without ever repeating their passwords.

use crate::error::LockError;

/// The scheme of `url` (`redis`, `rediss`, `memory`, ...), lower-cased input required.
pub(crate) fn scheme(url: &str) -> Result<&str, LockError> {
    match split_scheme(url) {
        Some((scheme, _)) => Ok(scheme),
        None => Err(LockError::Config(format!(
            "`{}` is not a lock URL: expected something like redis://127.0.0.1:6379 or memory://",
            redact(url)
        ))),
    }
}

/// `url` split at its first `://`, if what comes before is a scheme: a letter, then letters,
/// digits, `+`, `-` or `.`. Anything else before a `://` may be part of a password
/// (`redis:/user:pa://ss@host`), so it is never taken for a scheme that messages would show.
pub(crate) fn split_scheme(url: &str) -> Option<(&str, &str)> {
    let (scheme, rest) = url.split_once("://")?;
    is_scheme(scheme).then_some((scheme, rest))
}

/// Whether `scheme` reads as a URL scheme: a letter, then letters, digits, `+`, `-` or `.`.
pub(crate) fn is_scheme(scheme: &str) -> bool {
    let mut chars = scheme.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
}

/// Whether `url` names the PostgreSQL store (`postgres://`, `postgresql://`), whether or not
/// the `postgres` feature is built in.
pub(crate) fn is_postgres(url: &str) -> bool {
    split_scheme(url).is_some_and(|(scheme, _)| {
        scheme.eq_ignore_ascii_case("postgres") || scheme.eq_ignore_ascii_case("postgresql")
    })
}

/// `url` with its scheme in lower case (`REDIS://` works like `redis://`), or why it cannot be
/// used: a password in the query (`?password=`) is refused rather than ignored, since the
/// connection would then go out without it.
pub(crate) fn normalized(url: &str) -> Result<String, LockError> {
    let Some((scheme, rest)) = split_scheme(url) else {
        return Err(LockError::Config(format!(
            "`{}` is not a lock URL: expected something like redis://127.0.0.1:6379 or memory://",
            redact(url)
        )));
    };
    let scheme = scheme.to_ascii_lowercase();
    let unix = matches!(scheme.as_str(), "redis+unix" | "unix");
    if !unix && scheme != "memory" {
        let query = rest.split_once('?').map_or("", |(_, query)| query);
        let query = query.split('#').next().unwrap_or_default();
        for param in query.split('&') {
            let name = param.split_once('=').map_or(param, |(name, _)| name);
            if matches!(
                name.to_ascii_lowercase().as_str(),
                "password" | "pass" | "user" | "username"
            ) {
                return Err(LockError::Config(format!(
                    "`{}` gives credentials as the query parameter `{name}`, which this URL form \
                     does not read: write them before the host, as \
                     {scheme}://USER:PASSWORD@host:port (percent-encode special characters)",
                    redact(url)
                )));
            }
        }
    }
    Ok(format!("{scheme}://{rest}"))
}

/// A lock URL that names several servers, `scheme://[userinfo@]h1[:p1],h2[:p2],...[tail]`:
/// Redis Cluster seeds, Sentinels, Redlock masters. One reading for all of them:
/// - everything up to the last `@` is credentials, whatever it holds (a password may contain
///   `/`, `?` or `#`), as for [`redact`];
/// - the hosts end at the first `/`, `?` or `#` after that, and `tail` is the rest;
/// - hosts are trimmed; an empty one is an error; one without a port gets `default_port`
///   (`[::1]` is an address without a port, `[::1]:7000` one with).
pub(crate) struct HostList<'a> {
    pub(crate) userinfo: Option<&'a str>,
    pub(crate) hosts: Vec<String>,
    pub(crate) tail: &'a str,
}

/// Reads the part of `url` after `scheme://` as a [`HostList`]; `example` is the form shown in
/// errors (`redis+cluster://host:port,host:port`).
pub(crate) fn host_list<'a>(
    url: &'a str,
    default_port: u16,
    example: &str,
) -> Result<HostList<'a>, LockError> {
    let invalid =
        |why: &str| LockError::Config(format!("`{}` {why}: write {example}", redact(url)));
    let (_, rest) = split_scheme(url).ok_or_else(|| invalid("is not a URL"))?;
    let (userinfo, rest) = match rest.rsplit_once('@') {
        Some((userinfo, rest)) => (Some(userinfo), rest),
        None => (None, rest),
    };
    let hosts_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (hosts, tail) = rest.split_at(hosts_end);
    if hosts.trim().is_empty() {
        return Err(invalid("names no servers"));
    }
    let mut listed = Vec::new();
    for host in hosts.split(',') {
        let host = host.trim();
        if host.is_empty() {
            return Err(invalid("lists an empty server"));
        }
        let has_port = match host.rsplit_once(':') {
            Some((before, _)) => !host.starts_with('[') || before.ends_with(']'),
            None => false,
        };
        listed.push(if has_port {
            host.to_owned()
        } else {
            format!("{host}:{default_port}")
        });
    }
    Ok(HostList {
        userinfo,
        hosts: listed,
        tail,
    })
}

/// The longest URL shown in a message; the rest is counted, not shown.
const URL_SHOWN: usize = 256;

/// `url` as it may be shown: without passwords, and at most [`URL_SHOWN`] characters.
///
/// Everything up to the last `@` counts as credentials, whatever characters the password holds
/// (`/`, `?`, `#` included): showing a little less of a URL beats showing a password.
pub(crate) fn redact(url: &str) -> String {
    let shown = redact_whole(url);
    match shown.char_indices().nth(URL_SHOWN) {
        None => shown,
        Some((end, _)) => format!("{}... ({} bytes)", &shown[..end], url.len()),
    }
}

fn redact_whole(url: &str) -> String {
    let Some((scheme, rest)) = split_scheme(url) else {
        // Not a URL (`localhost:6379`, `host:6379/0`): shown as typed, so the user sees what
        // is missing; everything up to the last `@` is hidden whole, since without a scheme
        // nothing says which part of it is a user name.
        return match url.rsplit_once('@') {
            Some((_, after)) => format!("***@{}", redact_query(after)),
            None => redact_query(url),
        };
    };
    match rest.rsplit_once('@') {
        Some((userinfo, after)) => {
            let user = userinfo.split_once(':').map_or(userinfo, |(user, _)| user);
            let shown_user = if user.is_empty() || user.contains(['/', '?', '#']) {
                String::new()
            } else {
                format!("{user}:")
            };
            format!("{scheme}://{shown_user}***@{}", redact_query(after))
        }
        None => format!("{scheme}://{}", redact_query(rest)),
    }
}

/// Query parameters named like secrets (`password=`, `pass=`) are hidden too.
fn redact_query(path: &str) -> String {
    let Some((before, query)) = path.split_once('?') else {
        return path.into();
    };
    let params: Vec<String> = query
        .split('&')
        .map(|param| match param.split_once('=') {
            Some((name, _)) if name.to_ascii_lowercase().contains("pass") => {
                format!("{name}=***")
            }
            _ => param.into(),
        })
        .collect();
    format!("{before}?{}", params.join("&"))
}

/// `host:port` of a single-server URL, for naming the server in errors.
pub(crate) fn server_of(url: &str) -> String {
    host_port(url, 6379).unwrap_or_else(|rest| {
        // redis+unix:///path: the socket path is the server.
        rest.split('?').next().unwrap_or_default().to_owned()
    })
}

/// `host:port` of a URL with one host (`default_port` where it names none), never its
/// credentials; or, where it names no host, what follows its `scheme://[userinfo@]`.
pub(crate) fn host_port(url: &str, default_port: u16) -> Result<String, &str> {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let rest = rest.rsplit_once('@').map_or(rest, |(_, after)| after);
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let host = &rest[..end];
    if host.is_empty() {
        Err(rest)
    } else if host.contains(':') && !host.ends_with(']') {
        Ok(host.to_owned())
    } else {
        Ok(format!("{host}:{default_port}"))
    }
}

/// The query parameters that name TLS files.
const TLS_PARAMS: [&str; 3] = ["tls_ca", "tls_cert", "tls_key"];

/// The TLS files named in the query of `url` (`?tls_ca=PATH&tls_cert=PATH&tls_key=PATH`, paths
/// percent-decoded, names in any case), as a [`TlsConfig`]; `None` if it names none. A client
/// certificate without its key (or the reverse), or another `tls_` parameter, is refused.
pub(crate) fn tls_files(url: &str) -> Result<Option<crate::tls::TlsConfig>, LockError> {
    let rest = split_scheme(url).map_or(url, |(_, rest)| rest);
    let after_credentials = rest.rsplit_once('@').map_or(rest, |(_, after)| after);
    let Some((_, query)) = after_credentials.split_once('?') else {
        return Ok(None);
    };
    let query = query.split('#').next().unwrap_or_default();
    let mut files: [Option<std::path::PathBuf>; 3] = Default::default();
    for param in query.split('&') {
        let (name, value) = param.split_once('=').unwrap_or((param, ""));
        let name = name.to_ascii_lowercase();
        if !name.starts_with("tls_") {
            continue;
        }
        let Some(slot) = TLS_PARAMS.iter().position(|known| *known == name) else {
            return Err(LockError::Config(format!(
                "`{}` has the unknown query parameter `{name}`: the TLS files are named by \
                 tls_ca, tls_cert and tls_key",
                redact(url)
            )));
        };
        let path = percent_encoding::percent_decode_str(value).decode_utf8_lossy();
        if path.is_empty() {
            return Err(LockError::Config(format!(
                "`{}` gives `{name}` no file path",
                redact(url)
            )));
        }
        files[slot] = Some(std::path::PathBuf::from(path.into_owned()));
    }
    let [ca, cert, key] = files;
    let mut tls = crate::tls::TlsConfig::new();
    let mut named = false;
    if let Some(ca) = ca {
        tls = tls.root_ca_file(ca);
        named = true;
    }
    match (cert, key) {
        (Some(cert), Some(key)) => {
            tls = tls.client_cert_files(cert, key);
            named = true;
        }
        (None, None) => {}
        _ => {
            return Err(LockError::Config(format!(
                "`{}` names a client certificate without its key, or a key without its \
                 certificate: give both tls_cert and tls_key",
                redact(url)
            )));
        }
    }
    Ok(named.then_some(tls))
}

/// Makes TLS (`rediss://`) available to the connections of `url`: installs the crypto
/// provider once, or, without the `tls` feature, says which feature to enable.
#[cfg(feature = "tls")]
pub(crate) fn enable_tls(_url: &str) -> Result<(), LockError> {
    // The first provider installed in the process wins; one installed by the application stays.
    let _ = rustls::crypto::ring::default_provider().install_default();
    Ok(())
}

#[cfg(not(feature = "tls"))]
pub(crate) fn enable_tls(url: &str) -> Result<(), LockError> {
    Err(LockError::Config(format!(
        "`{}` needs TLS: enable the `tls` feature of lock-runtime",
        redact(url)
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(not(feature = "tls"))]
    #[test]
    fn rediss_without_the_tls_feature_says_which_feature_to_enable() {
        let err = enable_tls("rediss://user:s3cret@host:6380").expect_err("no TLS built in");
        let shown = err.to_string();
        assert!(shown.contains("`tls` feature"), "{shown}");
        assert!(!shown.contains("s3cret"), "{shown}");
    }

    #[test]
    fn passwords_are_hidden() {
        assert_eq!(
            redact("redis://user:s3cret@host:6379/0"),
            "redis://user:***@host:6379/0"
        );
        assert_eq!(redact("redis://:s3cret@host"), "redis://***@host");
        for tricky in [
            "redis://u:pa#ss@h:1",
            "redis://u:pa/ss@h:1/0",
            "redis://u:p?w@h:1",
        ] {
            let shown = redact(tricky);
            assert!(!shown.contains("pa") && !shown.contains("p?w"), "{shown}");
            assert!(shown.contains("h:1"), "{shown}");
        }
        assert_eq!(
            redact("rediss://host:1/?password=s3cret&db=2"),
            "rediss://host:1/?password=***&db=2"
        );
        assert_eq!(redact("redis://host:1"), "redis://host:1");
        assert!(!redact("s3cret@nowhere").contains("s3cret"));
    }

    #[test]
    fn password_with_at_sign_is_hidden() {
        let shown = redact("redis://u:p@ss@host:1");
        assert!(!shown.contains("p@ss"), "{shown}");
    }

    #[test]
    fn a_password_after_a_broken_scheme_is_hidden() {
        // `redis:/` lacks a slash: the first `://` is inside the password.
        let url = "redis:/user:s3cret://x@host:1";
        let shown = redact(url);
        assert!(!shown.contains("s3cret"), "{shown}");
        let err = scheme(url).expect_err("no scheme before the password");
        let shown = format!("{err} {err:?}");
        assert!(!shown.contains("s3cret"), "{shown}");
        assert!(matches!(err, LockError::Config(_)), "{shown}");
    }

    #[test]
    fn schemes_are_letters_digits_plus_minus_and_dot() {
        for url in [
            "redis+sentinel://s:1/m",
            "rediss://h",
            "x-1.y://h",
            "memory://",
        ] {
            assert_eq!(
                scheme(url).ok(),
                url.split_once("://").map(|(s, _)| s),
                "{url}"
            );
        }
        for url in ["://h", "1redis://h", "re dis://h", "redis:/://h", "@://h"] {
            assert!(scheme(url).is_err(), "{url}");
        }
    }

    #[test]
    fn server_is_host_and_port_without_credentials() {
        assert_eq!(server_of("redis://u:pw@10.0.0.1:7000/2"), "10.0.0.1:7000");
        assert_eq!(server_of("redis://example.org"), "example.org:6379");
        assert_eq!(server_of("redis+unix:///tmp/r.sock"), "/tmp/r.sock");
        assert_eq!(server_of("redis://u:pa/ss@h:1/0"), "h:1");
    }

    #[test]
    fn every_multi_server_url_is_read_by_the_same_rules() {
        let listed =
            host_list("x://u:p/w?d#@a, b:2,[::1],[::1]:3/0?q=1", 6379, "x://h:p").expect("valid");
        assert_eq!(listed.userinfo, Some("u:p/w?d#"));
        assert_eq!(listed.hosts, ["a:6379", "b:2", "[::1]:6379", "[::1]:3"]);
        assert_eq!(listed.tail, "/0?q=1");
        let masters =
            crate::deployment::Deployment::parse("redlock://u:p/w?d#@a, b:2/0?q=1").expect("valid");
        assert_eq!(masters.node_urls()[1], "redis://u:p/w?d#@b:2/0?q=1");
        for bad in ["x://u:s3cret@", "x://u:s3cret@a,,b", "x://u:s3cret@ /0"] {
            let err = host_list(bad, 1, "x://h:p").err().expect(bad).to_string();
            assert!(!err.contains("s3cret"), "{err}");
            assert!(err.contains("x://h:p"), "{err}");
        }
    }

    #[test]
    fn upper_case_schemes_read_as_lower_case() {
        assert_eq!(
            normalized("REDIS://Host:1/0").ok().as_deref(),
            Some("redis://Host:1/0")
        );
        assert_eq!(
            normalized("Redis+Cluster://a:1,b:2").ok().as_deref(),
            Some("redis+cluster://a:1,b:2")
        );
    }

    #[test]
    fn a_password_in_the_query_is_refused_not_ignored() {
        for url in [
            "redis://host:1/?password=s3cret",
            "redis://host:1?db=2&PASS=s3cret",
            "redis+cluster://a:1,b:2/?user=app",
        ] {
            let err = normalized(url).expect_err(url);
            let shown = format!("{err} {err:?}");
            assert!(!shown.contains("s3cret"), "{shown}");
            assert!(shown.contains("USER:PASSWORD@host"), "{shown}");
        }
        // A Unix socket URL takes them as query parameters.
        assert!(normalized("redis+unix:///tmp/r.sock?pass=s3cret").is_ok());
    }

    #[test]
    fn a_huge_url_is_shown_shortened() {
        let url = format!("redis://host:1/{}", "x".repeat(1 << 20));
        let shown = redact(&url);
        assert!(shown.len() < 400, "{} bytes shown", shown.len());
        assert!(
            shown.ends_with(&format!("({} bytes)", url.len())),
            "{shown}"
        );
        let err = normalized(&format!("{url}?password=p")).expect_err("query password");
        assert!(err.to_string().len() < 800);
    }

    #[test]
    fn a_url_without_scheme_is_echoed_as_typed_without_its_password() {
        assert_eq!(redact("localhost:6379"), "localhost:6379");
        assert_eq!(redact("10.0.0.5:6379/2"), "10.0.0.5:6379/2");
        assert_eq!(redact("app:s3cret@10.0.0.5:6379"), "***@10.0.0.5:6379");
        assert_eq!(redact(":s3cret@host:1"), "***@host:1");
        assert_eq!(redact("host:1/?password=s3cret"), "host:1/?password=***");
        let err = scheme("app:s3cret@localhost:6379").expect_err("no scheme");
        let shown = format!("{err} {err:?}");
        assert!(
            shown.contains("`***@localhost:6379` is not a lock URL"),
            "{shown}"
        );
        assert!(!shown.contains("s3cret"), "{shown}");
    }

    #[test]
    fn tls_files_are_read_from_the_query_of_every_url_form() {
        for url in [
            "rediss://u:p@h:1/0?tls_ca=/etc/ca.pem",
            "rediss+cluster://a:1,b:2/?TLS_CA=%2Fetc%2Fca.pem",
            "rediss+sentinel://s:1/m?db=2&tls_ca=/etc/ca.pem",
            "redlocks://a,b,c?tls_ca=/etc/ca.pem#x",
        ] {
            let tls = tls_files(url).ok().flatten().map(|tls| format!("{tls:?}"));
            assert!(
                tls.as_deref()
                    .is_some_and(|tls| tls.contains("/etc/ca.pem")),
                "{url}: {tls:?}"
            );
        }
        assert!(matches!(tls_files("rediss://h:1/0?db=1"), Ok(None)));
        assert!(matches!(tls_files("rediss://u:p?tls_ca=x@h:1"), Ok(None)));
        let both = tls_files("rediss://h?tls_cert=/c.pem&tls_key=/k%20key.pem")
            .ok()
            .flatten()
            .map(|tls| format!("{tls:?}"))
            .unwrap_or_default();
        assert!(both.contains("/k key.pem"), "{both}");
        for bad in [
            "rediss://h?tls_cert=/c.pem",
            "rediss://h?tls_key=/k.pem",
            "rediss://h?tls_ca_file=/ca.pem",
            "rediss://h?tls_ca=",
        ] {
            let err = tls_files(bad)
                .err()
                .map(|err| err.to_string())
                .unwrap_or_default();
            assert!(err.contains("tls_"), "{bad}: {err}");
        }
    }

    #[test]
    fn urls_without_scheme_are_config_errors() {
        assert!(matches!(
            scheme("localhost:6379"),
            Err(LockError::Config(_))
        ));
        assert_eq!(scheme("memory://").ok(), Some("memory"));
    }
}

#[cfg(test)]
pub(crate) mod fuzz;
