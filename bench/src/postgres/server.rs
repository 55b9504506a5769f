//! The PostgreSQL under test: a server of our own (the test harness's [`PostgresServer`]:
//! `initdb` in a temp dir, a free loopback port, never 5432), or the one `--postgres-url` or
//! `DATABASE_URL` names. Also a side connection of its own for the body of a critical section,
//! the server's version and the CPU time of its processes.

use std::collections::HashMap;
use std::path::PathBuf;

use async_trait::async_trait;
use lock_tests::PostgresServer;
use sqlx::postgres::{PgPool, PgPoolOptions};

use crate::BenchError;
use crate::scenario::contended::RoundTrip;

/// The variable naming a running server when `--postgres-url` is not given.
pub const URL_VAR: &str = "DATABASE_URL";

/// The database every PostgreSQL contender of a run talks to.
pub struct PgTarget {
    url: String,
    /// Our own server, stopped and removed on drop; `None` for a URL given.
    own: Option<PostgresServer>,
}

impl PgTarget {
    /// `url` if given, else `DATABASE_URL` if set, else a server of our own.
    pub async fn from_env(url: Option<&str>) -> Result<PgTarget, BenchError> {
        match url
            .map(str::to_owned)
            .or_else(|| std::env::var(URL_VAR).ok())
        {
            Some(url) => Ok(PgTarget { url, own: None }),
            None => PgTarget::start().await,
        }
    }

    /// Starts a server of our own through the test harness, which panics when it cannot (no
    /// binaries, no start): the panic is caught and becomes the error.
    pub async fn start() -> Result<PgTarget, BenchError> {
        let started = tokio::task::spawn_blocking(|| {
            std::panic::catch_unwind(PostgresServer::start).map_err(|panic| {
                let why = panic
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                    .unwrap_or_else(|| "no reason given".into());
                BenchError::new(format!(
                    "cannot start a PostgreSQL server of our own: {why}. Point --postgres-url or \
                     {URL_VAR} at a running one, or leave PostgreSQL out with --store redis"
                ))
            })
        })
        .await
        .map_err(|err| BenchError::new(format!("starting PostgreSQL: {err}")))??;
        Ok(PgTarget {
            url: started.url(),
            own: Some(started),
        })
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    /// The URL with its password hidden, for the report.
    pub fn shown(&self) -> String {
        lock_runtime::inspect::redact_url(&self.url)
    }

    /// Where the binaries of our own server are; `None` for a URL given.
    pub fn binaries(&self) -> Option<PathBuf> {
        self.own.as_ref().map(|_| lock_tests::pg_bin_dir())
    }

    /// A connection of its own; it reads the server's CPU only when the server is ours (its
    /// processes are on this machine).
    pub async fn probe(&self) -> Result<PgProbe, BenchError> {
        let pool = PgPoolOptions::new()
            .max_connections(1)
            .connect(&self.url)
            .await?;
        Ok(PgProbe {
            pool,
            local: self.own.is_some(),
        })
    }
}

/// A side connection to the server, separate from every contender's. Clones share it.
#[derive(Clone)]
pub struct PgProbe {
    pool: PgPool,
    /// The server's processes are on this machine, in this pid namespace.
    local: bool,
}

impl PgProbe {
    /// `SHOW server_version`.
    pub async fn version(&self) -> Result<String, BenchError> {
        Ok(sqlx::query_scalar("SHOW server_version")
            .fetch_one(&self.pool)
            .await?)
    }

    /// The CPU time each of the server's processes (backends and background workers, this
    /// probe's own backend left out) has used so far; `None` for a server not ours.
    pub async fn cpu(&self) -> Result<Option<CpuReading>, BenchError> {
        if !self.local {
            return Ok(None);
        }
        let pids: Vec<i32> =
            sqlx::query_scalar("SELECT pid FROM pg_stat_activity WHERE pid <> pg_backend_pid()")
                .fetch_all(&self.pool)
                .await?;
        let used = pids
            .into_iter()
            .filter_map(|pid| Some((pid, cpu_ns(pid)?)))
            .collect();
        Ok(Some(CpuReading { used }))
    }
}

#[async_trait]
impl RoundTrip for PgProbe {
    /// One `SELECT 1`.
    async fn round_trip(&self) -> Result<(), BenchError> {
        sqlx::raw_sql("SELECT 1").execute(&self.pool).await?;
        Ok(())
    }
}

/// The nanoseconds process `pid` has run on a CPU: the first field of `/proc/<pid>/schedstat`.
fn cpu_ns(pid: i32) -> Option<u64> {
    std::fs::read_to_string(format!("/proc/{pid}/schedstat"))
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// The CPU time of the server's processes at one moment.
#[derive(Debug, Clone, Default)]
pub struct CpuReading {
    used: HashMap<i32, u64>,
}

impl CpuReading {
    /// The server's CPU seconds between `before` and this reading: processes started since
    /// count from zero; processes gone since are not counted.
    pub fn since(&self, before: &CpuReading) -> f64 {
        let ns: u64 = self
            .used
            .iter()
            .map(|(pid, &now)| now.saturating_sub(before.used.get(pid).copied().unwrap_or(0)))
            .sum();
        ns as f64 / 1e9
    }
}

/// The server's CPU between two optional readings, added to `total`.
pub fn add_cpu(total: &mut Option<f64>, before: Option<CpuReading>, after: Option<CpuReading>) {
    if let (Some(before), Some(after)) = (before, after) {
        *total.get_or_insert(0.0) += after.since(&before);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_counts_new_processes_from_zero_and_leaves_gone_ones_out() {
        let before = CpuReading {
            used: HashMap::from([(1, 1_000), (2, 5_000)]),
        };
        let after = CpuReading {
            used: HashMap::from([(1, 3_000), (3, 500)]),
        };
        assert!((after.since(&before) - 2_500e-9).abs() < 1e-15);
    }

    #[test]
    fn this_process_has_a_cpu_time() {
        assert!(cpu_ns(i32::try_from(std::process::id()).expect("a pid")).is_some());
    }
}
