//! What a `postgres://` URL says besides the connection itself (`listen_url`, `listen`,
//! `create_tables`, `poll_ms`, `max_connections`), and the same settings for a pool the
//! application made ([`PostgresOptions`]).

use std::time::Duration;

use crate::store::StoreError;
use crate::url::redact;

/// How often a manager that cannot LISTEN looks whether the locks it waits for were freed, by
/// default.
pub const DEFAULT_POLL_INTERVAL: Duration = Duration::from_millis(200);

/// The most connections of a manager's pool, by default (the listening connection is one more).
pub const DEFAULT_MAX_CONNECTIONS: u32 = 8;

/// The query parameters of a lock URL that the store reads itself; the others go to sqlx.
const OWN_PARAMS: [&str; 5] = [
    "listen_url",
    "listen",
    "create_tables",
    "poll_ms",
    "max_connections",
];

/// Whether the store LISTENs for releases on its own connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Listen {
    /// Where the server says it is reached directly: the port it answers on is the one
    /// connected to (a pooler in between listens on a port of its own).
    Auto,
    /// Always (`?listen=notify`): the user says nothing is in between.
    Always,
    /// Never (`?listen=poll`).
    Never,
}

/// Settings of the PostgreSQL store besides its connection: where it listens for releases,
/// whether it creates its tables, how often it polls where it cannot listen.
///
/// In a URL they are query parameters: `?listen_url=<percent-encoded URL>`, `?listen=poll`,
/// `?create_tables=false`, `?poll_ms=200`, `?max_connections=8`.
///
/// ```
/// use std::time::Duration;
/// use lock_runtime::postgres::PostgresOptions;
///
/// // Through PgBouncer in transaction mode, with LISTEN on a direct connection; the tables
/// // are made by the application's migrations.
/// let options = PostgresOptions::new()
///     .listen_url("postgres://app@db-1:5432/shop")
///     .create_tables(false);
/// # let _ = options;
/// ```
#[derive(Clone)]
pub struct PostgresOptions {
    pub(crate) listen_url: Option<String>,
    pub(crate) listen: Listen,
    pub(crate) create_tables: bool,
    pub(crate) poll_interval: Duration,
    pub(crate) max_connections: u32,
}

impl std::fmt::Debug for PostgresOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresOptions")
            .field("listen_url", &self.listen_url.as_deref().map(redact))
            .field("listen", &self.listen)
            .field("create_tables", &self.create_tables)
            .field("poll_interval", &self.poll_interval)
            .field("max_connections", &self.max_connections)
            .finish()
    }
}

impl Default for PostgresOptions {
    fn default() -> Self {
        PostgresOptions {
            listen_url: None,
            listen: Listen::Auto,
            create_tables: true,
            poll_interval: DEFAULT_POLL_INTERVAL,
            max_connections: DEFAULT_MAX_CONNECTIONS,
        }
    }
}

impl PostgresOptions {
    /// The defaults: LISTEN on the store's own connection where the server is reached directly
    /// (polling where a pooler seems to be in between, or a check notification is not heard),
    /// tables created at connect, polls every [`DEFAULT_POLL_INTERVAL`].
    pub fn new() -> Self {
        Self::default()
    }

    /// LISTEN for releases on a connection to `url` instead of the store's own: a direct URL
    /// to the server, where the store's connections go through a pooler in transaction mode
    /// (PgBouncer), which cannot carry LISTEN. Same as `?listen_url=` (percent-encoded).
    pub fn listen_url(mut self, url: impl Into<String>) -> Self {
        self.listen_url = Some(url.into());
        self
    }

    /// Never LISTEN: a waiter learns of releases by polling every
    /// [`poll_interval`](Self::poll_interval). Same as `?listen=poll`.
    pub fn poll_only(mut self) -> Self {
        self.listen = Listen::Never;
        self
    }

    /// LISTEN on the store's own connection even where the server answers on another port
    /// than the one connected to (a port mapping, a TCP proxy that is not a pooler in
    /// transaction mode). Same as `?listen=notify`. Never through a pooler in transaction
    /// mode: the LISTEN would stay on one of its server connections, and every client later
    /// given that connection would receive notifications it did not ask for.
    pub fn always_listen(mut self) -> Self {
        self.listen = Listen::Always;
        self
    }

    /// Whether connect creates the tables when missing (the default), or leaves them to the
    /// application's migrations and only checks that they exist (`false`, same as
    /// `?create_tables=false`). The SQL is in `docs/POSTGRES.md` and [`SCHEMA_SQL`](crate::postgres::SCHEMA_SQL).
    pub fn create_tables(mut self, create: bool) -> Self {
        self.create_tables = create;
        self
    }

    /// How often a manager that cannot LISTEN looks whether the locks it waits for were freed
    /// (only while something waits). Same as `?poll_ms=`.
    pub fn poll_interval(mut self, every: Duration) -> Self {
        self.poll_interval = every;
        self
    }

    /// The most connections of the pool that a URL makes (not of a pool given as is). Same as
    /// `?max_connections=`.
    pub fn max_connections(mut self, most: u32) -> Self {
        self.max_connections = most;
        self
    }
}

/// A `postgres://` URL read: what goes to sqlx, and the store's own settings.
pub(crate) struct Read {
    /// The URL without the store's own parameters.
    pub(crate) url: String,
    pub(crate) options: PostgresOptions,
}

/// Reads the store's own query parameters out of `url`.
pub(crate) fn read(url: &str) -> Result<Read, StoreError> {
    let bad = |why: String| StoreError::config(format!("`{}` {why}", redact(url)));
    // The query starts at the first `?` after the credentials (a password may hold a `?`).
    let start = url.rfind('@').map_or(0, |at| at + 1);
    let Some(question) = url[start..].find('?').map(|at| at + start) else {
        return Ok(Read {
            url: url.to_owned(),
            options: PostgresOptions::new(),
        });
    };
    let (base, query) = (&url[..question], &url[question + 1..]);
    let mut options = PostgresOptions::new();
    let mut kept = Vec::new();
    for param in query.split('&').filter(|param| !param.is_empty()) {
        let (name, value) = param.split_once('=').unwrap_or((param, ""));
        if !OWN_PARAMS.contains(&name) {
            kept.push(param);
            continue;
        }
        let value = percent_encoding::percent_decode_str(value)
            .decode_utf8()
            .map_err(|_| bad(format!("gives `{name}` a value that is not UTF-8")))?
            .into_owned();
        match name {
            "listen_url" => options.listen_url = Some(value),
            "listen" => match value.as_str() {
                "poll" => options.listen = Listen::Never,
                "notify" => options.listen = Listen::Always,
                _ => {
                    return Err(bad(format!(
                        "has listen=`{value}`: write listen=poll or listen=notify"
                    )));
                }
            },
            "create_tables" => {
                options.create_tables = match value.as_str() {
                    "true" => true,
                    "false" => false,
                    _ => {
                        return Err(bad(format!(
                            "has create_tables=`{value}`: write true or false"
                        )));
                    }
                }
            }
            "poll_ms" => {
                let ms: u64 = value.parse().ok().filter(|ms| *ms > 0).ok_or_else(|| {
                    bad(format!(
                        "has poll_ms=`{value}`: write a number of milliseconds above 0"
                    ))
                })?;
                options.poll_interval = Duration::from_millis(ms);
            }
            _ => {
                options.max_connections =
                    value.parse().ok().filter(|most| *most > 0).ok_or_else(|| {
                        bad(format!(
                            "has max_connections=`{value}`: write a number above 0"
                        ))
                    })?;
            }
        }
    }
    let url = if kept.is_empty() {
        base.to_owned()
    } else {
        format!("{base}?{}", kept.join("&"))
    };
    Ok(Read { url, options })
}

/// `host:port` of `url` and its database, for messages: never credentials.
pub(crate) fn server_of(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let rest = rest.rsplit_once('@').map_or(rest, |(_, after)| after);
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let host = &rest[..end];
    if host.is_empty() {
        "localhost:5432".to_owned()
    } else if host.contains(':') && !host.ends_with(']') {
        host.to_owned()
    } else {
        format!("{host}:5432")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stores_own_parameters_are_read_and_the_rest_kept() {
        let read = read(
            "postgres://u:p?w@h:1/db?sslmode=disable&listen_url=postgres%3A%2F%2Fu%40d%3A2%2Fdb&create_tables=false&poll_ms=50&application_name=x",
        )
        .expect("valid");
        assert_eq!(
            read.url,
            "postgres://u:p?w@h:1/db?sslmode=disable&application_name=x"
        );
        assert_eq!(
            read.options.listen_url.as_deref(),
            Some("postgres://u@d:2/db")
        );
        assert!(!read.options.create_tables);
        assert_eq!(read.options.poll_interval, Duration::from_millis(50));
        let plain = super::read("postgresql://h/db").expect("valid");
        assert_eq!(plain.url, "postgresql://h/db");
        assert!(plain.options.listen == Listen::Auto && plain.options.create_tables);
    }

    #[test]
    fn a_bad_parameter_is_refused_without_the_password() {
        for url in [
            "postgres://u:s3cret@h/db?create_tables=maybe",
            "postgres://u:s3cret@h/db?poll_ms=0",
            "postgres://u:s3cret@h/db?listen=often",
            "postgres://u:s3cret@h/db?max_connections=x",
        ] {
            let err = read(url).err().expect(url).to_string();
            assert!(!err.contains("s3cret"), "{err}");
        }
    }

    #[test]
    fn the_server_is_host_and_port() {
        assert_eq!(server_of("postgres://u:p@db:6432/x?a=b"), "db:6432");
        assert_eq!(server_of("postgresql://db/x"), "db:5432");
        assert_eq!(server_of("postgres:///x"), "localhost:5432");
    }
}
