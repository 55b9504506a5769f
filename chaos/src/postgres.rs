//! The lock store on PostgreSQL: the harness's [`PostgresServer`], reached directly or through
//! the harness's [`PgBouncer`] in transaction mode, with one [`FaultProxy`] per worker and path
//! in between, and the faults only a database and its pooler have.
//!
//! - `postgres`: each worker's URL points at its own proxy to the server; its pool and its
//!   listening connection (LISTEN/NOTIFY) both go through it. The server answers on another
//!   port than the proxy's, which the store takes for a pooler it must not LISTEN through
//!   unless told: the URL says `listen=notify`.
//! - `pgbouncer`: each worker's URL points at its own proxy to the pooler, and its
//!   `listen_url` at a second proxy of its own straight to the server (LISTEN cannot work
//!   through a pooler in transaction mode): a connection fault hits both.
//!
//! Every URL carries `application_name=chaos-worker-<slot>`, so that `terminate` finds a
//! worker's backends in `pg_stat_activity` (directly; behind the pooler a server connection
//! carries the name of whichever client it was last lent to).

use std::net::SocketAddr;
use std::time::Instant;

use lock_tests::{FaultProxy, POSTGRES_PASSWORD, POSTGRES_ROLE, PgBouncer, PostgresServer};

use crate::analyze::Hit;
use crate::deployment::{StoreFault, harness};
use crate::now_ns;

/// The lock store on PostgreSQL (see the module's documentation).
pub(crate) struct PgStore {
    server: PostgresServer,
    bouncer: Option<PgBouncer>,
    /// `proxies[worker]`: to the server; or to the pooler, then to the server for LISTEN.
    proxies: Vec<Vec<FaultProxy>>,
}

/// `postgres://lock:<password>@<addr>/lock?application_name=chaos-worker-<slot>`.
fn url_to(addr: SocketAddr, slot: usize) -> String {
    format!(
        "postgres://{POSTGRES_ROLE}:{POSTGRES_PASSWORD}@{addr}/{POSTGRES_ROLE}?application_name=chaos-worker-{slot}"
    )
}

/// `text` percent-encoded whole but for unreserved characters, for a URL's query value.
fn percent_encode(text: &str) -> String {
    text.bytes()
        .map(|byte| match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                char::from(byte).to_string()
            }
            other => format!("%{other:02X}"),
        })
        .collect()
}

/// The name of the worker's backends in `pg_stat_activity`.
fn application_name(slot: usize) -> String {
    format!("chaos-worker-{slot}")
}

impl PgStore {
    /// Starts the server, and with `pooled` a PgBouncer in transaction mode in front of it,
    /// and the proxies of `workers` workers.
    pub(crate) fn start(workers: usize, pooled: bool) -> Result<PgStore, String> {
        let server = harness("start PostgreSQL", PostgresServer::start)?;
        let server_addr = SocketAddr::from(([127, 0, 0, 1], server.port()));
        let bouncer = if pooled {
            Some(harness("start PgBouncer", || PgBouncer::start(&server))?)
        } else {
            None
        };
        let proxies = (0..workers)
            .map(|_| match &bouncer {
                Some(bouncer) => vec![
                    FaultProxy::start(SocketAddr::from(([127, 0, 0, 1], bouncer.port()))),
                    FaultProxy::start(server_addr),
                ],
                None => vec![FaultProxy::start(server_addr)],
            })
            .collect();
        Ok(PgStore {
            server,
            bouncer,
            proxies,
        })
    }

    pub(crate) fn describe(&self) -> String {
        match &self.bouncer {
            Some(_) => "PostgreSQL through PgBouncer (transaction mode), LISTEN on a direct \
                        connection, two proxies per worker"
                .into(),
            None => "PostgreSQL, one proxy per worker".into(),
        }
    }

    /// The URL worker `slot` takes the lock through.
    pub(crate) fn worker_url(&self, slot: usize) -> String {
        let proxies = &self.proxies[slot];
        let url = url_to(proxies[0].addr(), slot);
        match proxies.get(1) {
            Some(direct) => format!(
                "{url}&listen_url={}",
                percent_encode(&url_to(direct.addr(), slot))
            ),
            None => format!("{url}&listen=notify"),
        }
    }

    pub(crate) fn proxies(&self, slot: usize) -> &[FaultProxy] {
        &self.proxies[slot]
    }

    /// The live leases left in the store's table, as descriptions; empty when none.
    pub(crate) fn locks_left(&self) -> Result<Vec<String>, String> {
        let rows = self.server.try_psql(
            "SELECT name || ' (fence ' || fence || ')' FROM lock_runtime_locks \
             WHERE token <> '' AND expires_at > clock_timestamp()",
        )?;
        Ok(rows
            .lines()
            .filter(|line| !line.is_empty())
            .map(|line| format!("postgres 127.0.0.1:{} ({line})", self.server.port()))
            .collect())
    }

    /// SIGKILL the postmaster and every backend (a crash: no checkpoint, no goodbye to the
    /// clients), then start the server again on its data: crash recovery replays the WAL.
    pub(crate) fn crash(&self) -> Result<StoreFault, String> {
        let start = now_ns();
        let began = Instant::now();
        harness("kill PostgreSQL", || self.server.kill())?;
        let killed = began.elapsed();
        harness("restart PostgreSQL", || self.server.restart())?;
        let end = now_ns();
        Ok(StoreFault {
            hit: Hit::Store,
            start,
            end,
            serving: end,
            detail: format!(
                "SIGKILL postmaster and backends ({} ms), up again through crash recovery after {} ms",
                killed.as_millis(),
                began.elapsed().as_millis()
            ),
            slots: Vec::new(),
        })
    }

    /// SIGSTOP every process of the server for `pause`, then SIGCONT.
    pub(crate) fn pause(&self, pause: std::time::Duration) -> Result<StoreFault, String> {
        let start = now_ns();
        harness("pause PostgreSQL", || self.server.pause())?;
        std::thread::sleep(pause);
        harness("resume PostgreSQL", || self.server.resume())?;
        let end = now_ns();
        Ok(StoreFault {
            hit: Hit::Store,
            start,
            end,
            serving: end,
            detail: format!("server SIGSTOP for {} ms", pause.as_millis()),
            slots: Vec::new(),
        })
    }

    /// SIGKILL PgBouncer and start it again on its port.
    pub(crate) fn restart_pooler(&self) -> Result<StoreFault, String> {
        let Some(bouncer) = &self.bouncer else {
            return Err("pooler-restart needs PgBouncer: use --topology pgbouncer".into());
        };
        let start = now_ns();
        let began = Instant::now();
        harness("restart PgBouncer", || bouncer.restart())?;
        let end = now_ns();
        Ok(StoreFault {
            hit: Hit::Store,
            start,
            end,
            serving: end,
            detail: format!(
                "PgBouncer SIGKILL, answering again after {} ms",
                began.elapsed().as_millis()
            ),
            slots: Vec::new(),
        })
    }

    /// `pg_terminate_backend` on worker `slot`'s backends (directly), or on every backend of
    /// the lock role (behind PgBouncer).
    pub(crate) fn terminate(&self, slot: usize) -> Result<StoreFault, String> {
        let (filter, hit) = match self.bouncer {
            None => (
                format!("application_name = '{}'", application_name(slot)),
                Hit::Worker(slot),
            ),
            Some(_) => (format!("usename = '{POSTGRES_ROLE}'"), Hit::Store),
        };
        let start = now_ns();
        let ended = harness("terminate backends", || {
            self.server.admin_psql(&format!(
                "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity \
                 WHERE {filter} AND pid <> pg_backend_pid()"
            ))
        })?;
        let end = now_ns();
        let whose = match hit {
            Hit::Worker(_) => "the worker's backends",
            _ => "every backend of the lock role",
        };
        Ok(StoreFault {
            hit,
            start,
            end,
            serving: if hit == Hit::Store { end } else { start },
            detail: format!("pg_terminate_backend on {whose}: {ended} ended"),
            slots: Vec::new(),
        })
    }

    /// The server's log and the pooler's, for `topology.log`.
    pub(crate) fn log(&self) -> String {
        let mut log = format!("== postgres ==\n{}", self.server.log());
        if let Some(bouncer) = &self.bouncer {
            log.push_str(&format!("\n== pgbouncer ==\n{}", bouncer.log()));
        }
        log
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listen_url_inside_a_query_value_is_percent_encoded_whole() {
        let url = "postgres://lock:pw@127.0.0.1:5/lock?application_name=a-1";
        let encoded = percent_encode(url);
        assert!(!encoded.contains([':', '/', '@', '?', '=']), "{encoded}");
        assert!(encoded.starts_with("postgres%3A%2F%2Flock%3Apw%40127.0.0.1%3A5"));
    }
}
