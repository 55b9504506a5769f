//! The Redis under test: a server of our own on a free loopback port (never 6379), or the one
//! `REDIS_URL` names. Also reads its `INFO` from a connection of its own.

use std::collections::HashMap;
use std::fmt;
use std::fs::{self, File};
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use lock_tests::Reply;
use redis::aio::MultiplexedConnection;
use redis::{Client, ConnectionAddr};
use serde::{Deserialize, Serialize};

use crate::BenchError;
use crate::scenario::Metric;

/// The variable naming the server binary to start when `--server` is not given; `redis-server`
/// from `PATH` when neither is.
pub const SERVER_VAR: &str = "LOCK_BENCH_REDIS_SERVER";

/// How long a fresh server may take to answer.
const READY_TIMEOUT: Duration = Duration::from_secs(10);
/// How many ports to try when another process takes the chosen one first.
const PORT_ATTEMPTS: usize = 5;

/// The server binary to start: [`SERVER_VAR`] when set, else `redis-server` from `PATH`.
pub fn default_binary() -> PathBuf {
    std::env::var_os(SERVER_VAR).map_or_else(|| PathBuf::from("redis-server"), PathBuf::from)
}

/// The server every contender of a run talks to.
pub struct Target {
    url: String,
    host: String,
    port: u16,
    password: Option<String>,
    /// Our own server, killed on drop; `None` for `REDIS_URL`.
    own: Option<OwnServer>,
}

impl Target {
    /// `REDIS_URL` if set, else `binary` (by default [`default_binary`]) started by us.
    pub fn from_env(binary: Option<&Path>) -> Result<Target, BenchError> {
        match (std::env::var("REDIS_URL"), binary) {
            (Ok(_), Some(binary)) => Err(BenchError::new(format!(
                "--server {} starts a server, REDIS_URL names a running one: give only one",
                binary.display()
            ))),
            (Ok(url), None) => Target::at(&url),
            (Err(_), binary) => Target::start_binary(binary.unwrap_or(&default_binary())),
        }
    }

    /// Starts [`default_binary`] on a free loopback port, without persistence.
    pub fn start() -> Result<Target, BenchError> {
        Target::start_binary(&default_binary())
    }

    /// Starts `binary` (`redis-server`, `valkey-server` or a path to either) on a free loopback
    /// port with the test harness's arguments: `--port <port> --bind 127.0.0.1 --save ""
    /// --appendonly no --dir <temp dir>`.
    pub fn start_binary(binary: &Path) -> Result<Target, BenchError> {
        let cannot = |why: String| {
            BenchError::new(format!(
                "cannot start the server binary {}: {why}. Give one with --server PATH or {SERVER_VAR} \
                 (default: redis-server from PATH, apt-get install redis-server redis-tools), or \
                 point REDIS_URL at a running server",
                binary.display()
            ))
        };
        let version = Command::new(binary)
            .arg("--version")
            .output()
            .map_err(|err| cannot(err.to_string()))?;
        if !version.status.success() {
            return Err(cannot(format!(
                "--version failed ({}): {}",
                version.status,
                String::from_utf8_lossy(&version.stderr).trim()
            )));
        }
        for _ in 0..PORT_ATTEMPTS {
            if let Some(own) = OwnServer::launch(binary, lock_tests::free_port())? {
                let mut target = Target::at(&format!("redis://127.0.0.1:{}", own.port))?;
                target.own = Some(own);
                return Ok(target);
            }
        }
        Err(cannot(format!(
            "every port it tried was taken ({PORT_ATTEMPTS} attempts)"
        )))
    }

    /// A server that is already running, e.g. `redis://127.0.0.1:7000`.
    pub fn at(url: &str) -> Result<Target, BenchError> {
        let client = Client::open(url).map_err(|err| BenchError::from_redis("REDIS_URL", err))?;
        let info = client.get_connection_info();
        let ConnectionAddr::Tcp(host, port) = info.addr().clone() else {
            return Err(BenchError::new(
                "only plain TCP servers (redis://host:port) can be benchmarked: redis-benchmark \
                 needs a host and a port",
            ));
        };
        Ok(Target {
            url: url.to_owned(),
            host,
            port,
            password: info.redis_settings().password().map(str::to_owned),
            own: None,
        })
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    pub fn host(&self) -> &str {
        &self.host
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn password(&self) -> Option<&str> {
        self.password.as_deref()
    }

    /// True when the server was started by this run, so its data may be flushed.
    pub fn is_own(&self) -> bool {
        self.own.is_some()
    }

    /// The binary of the server this run started; `None` for `REDIS_URL`.
    pub fn binary(&self) -> Option<&Path> {
        self.own.as_ref().map(|own| own.binary.as_path())
    }

    /// A connection of its own for INFO and other side requests.
    pub async fn probe(&self) -> Result<Probe, BenchError> {
        let client =
            Client::open(self.url.as_str()).map_err(|err| BenchError::from_redis("probe", err))?;
        let conn = client
            .get_multiplexed_async_connection()
            .await
            .map_err(|err| BenchError::from_redis("probe connect", err))?;
        Ok(Probe { conn })
    }
}

/// A server process of our own: killed, and its directory removed, on drop.
struct OwnServer {
    binary: PathBuf,
    port: u16,
    dir: PathBuf,
    child: Child,
}

impl OwnServer {
    /// Starts `binary` on `port` and waits until it answers as itself; `None` when another
    /// process holds the port.
    fn launch(binary: &Path, port: u16) -> Result<Option<OwnServer>, BenchError> {
        let dir = std::env::temp_dir().join(format!("lock-bench-{}-{port}", std::process::id()));
        fs::create_dir_all(&dir)?;
        let log_path = dir.join("server.log");
        let log = File::create(&log_path)?;
        let spawned = Command::new(binary)
            .args(["--port", &port.to_string()])
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(&dir)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn();
        let child = match spawned {
            Ok(child) => child,
            Err(err) => {
                let _ = fs::remove_dir_all(&dir);
                return Err(BenchError::new(format!(
                    "cannot start the server binary {}: {err}",
                    binary.display()
                )));
            }
        };
        let mut own = OwnServer {
            binary: binary.to_owned(),
            port,
            dir,
            child,
        };
        let failed = |own: &OwnServer, why: String| {
            let log = fs::read_to_string(&log_path).unwrap_or_default();
            BenchError::new(format!(
                "the server binary {} {why}; its log:\n{log}",
                own.binary.display()
            ))
        };
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
        let ours = format!("process_id:{}", own.child.id());
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            if let Some(status) = own.child.try_wait()? {
                let log = fs::read_to_string(&log_path).unwrap_or_default();
                if log.contains("Address already in use") {
                    return Ok(None);
                }
                return Err(failed(&own, format!("exited before answering ({status})")));
            }
            let info = ["INFO", "server"];
            match lock_tests::resp::command(addr, None, &info, Duration::from_millis(500)) {
                // Another server on the port: ours will find it taken.
                Ok(Reply::Bulk(info)) => {
                    let info = String::from_utf8_lossy(&info);
                    return Ok(info.lines().any(|l| l.trim_end() == ours).then_some(own));
                }
                Ok(Reply::Error(err)) if err.starts_with("LOADING") => {}
                Ok(_) => return Ok(Some(own)),
                Err(_) => {}
            }
            if Instant::now() >= deadline {
                let why = format!("did not answer on port {port} within {READY_TIMEOUT:?}");
                return Err(failed(&own, why));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for OwnServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// Which server a run measured, from `INFO server`: Redis, or Valkey with the Redis version it
/// is compatible with.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ServerInfo {
    /// `server_name` (`valkey`), else `redis`.
    pub name: String,
    /// `<name>_version` (`valkey_version`), else `redis_version`.
    pub version: String,
    /// `redis_version`: for Valkey, the Redis version it is compatible with.
    pub redis_version: String,
    /// The binary this run started; absent for a server `REDIS_URL` names.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub binary: Option<String>,
}

impl ServerInfo {
    fn of(info: &Info) -> ServerInfo {
        let redis_version = info.get("redis_version").unwrap_or("unknown").to_owned();
        let name = info.get("server_name").unwrap_or("redis").to_owned();
        let version = info
            .get(&format!("{name}_version"))
            .map_or_else(|| redis_version.clone(), str::to_owned);
        ServerInfo {
            name,
            version,
            redis_version,
            binary: None,
        }
    }
}

/// `redis 7.0.15`, `valkey 9.0.0 (redis_version 7.2.4)`.
impl fmt::Display for ServerInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.name, self.version)?;
        if self.version != self.redis_version {
            write!(f, " (redis_version {})", self.redis_version)?;
        }
        Ok(())
    }
}

/// A side connection to the server, separate from every contender's. Clones share it.
#[derive(Clone)]
pub struct Probe {
    conn: MultiplexedConnection,
}

impl Probe {
    /// `INFO <section> [section ...]` (Redis 7 takes several) as `field -> value`.
    pub async fn info(&mut self, sections: &str) -> Result<Info, BenchError> {
        let mut info = redis::cmd("INFO");
        for section in sections.split_whitespace() {
            info.arg(section);
        }
        let text: String = info
            .query_async(&mut self.conn)
            .await
            .map_err(|err| BenchError::from_redis("INFO", err))?;
        Ok(Info::parse(&text))
    }

    /// Counters for the cost of renewals: every command sent by anyone is in them, so callers
    /// subtract what they sent themselves (three commands and three reads per snapshot).
    pub async fn counters(&mut self) -> Result<Counters, BenchError> {
        let stats = self.info("stats cpu").await?;
        let commands = self.info("commandstats").await?;
        let memory = self.info("memory").await?;
        Ok(Counters {
            script_calls: commands.calls("evalsha") + commands.calls("eval"),
            commands: stats.number("total_commands_processed"),
            reads: stats.number("total_reads_processed"),
            used_memory: memory.number("used_memory"),
            usage: Reading::of(&commands, &stats),
        })
    }

    /// The server's command and CPU counters now, for [`Reading::since`]: one `INFO`.
    pub async fn reading(&mut self) -> Result<Reading, BenchError> {
        let info = self.info("commandstats cpu").await?;
        Ok(Reading::of(&info, &info))
    }

    /// The server's name and version, from `INFO server`.
    pub async fn server(&mut self) -> Result<ServerInfo, BenchError> {
        Ok(ServerInfo::of(&self.info("server").await?))
    }

    /// One round trip.
    pub async fn ping(&mut self) -> Result<(), BenchError> {
        self.run(&["PING"]).await
    }

    /// Any command whose reply is not needed.
    pub async fn run(&mut self, args: &[&str]) -> Result<(), BenchError> {
        let mut cmd = redis::cmd(args[0]);
        for arg in &args[1..] {
            cmd.arg(*arg);
        }
        cmd.query_async::<redis::Value>(&mut self.conn)
            .await
            .map_err(|err| BenchError::from_redis(args[0], err))?;
        Ok(())
    }
}

/// Server-side counters at one moment.
#[derive(Debug, Clone, Copy, Default)]
pub struct Counters {
    /// EVALSHA and EVAL calls: every renewal is one.
    pub script_calls: u64,
    pub commands: u64,
    /// Socket reads served: each round trip needs at least one.
    pub reads: u64,
    pub used_memory: u64,
    pub usage: Reading,
}

impl Counters {
    /// Commands and reads a snapshot itself costs: three INFO commands, each one read.
    pub const OWN_COST: u64 = 3;
}

/// Commands the measurement sends itself: the probe's `INFO`, the body's `PING` on a side
/// connection, `CONFIG` of a harness. The library sends `PING` and `CONFIG` only when it
/// connects and `INFO` only to count replicas, none of which happens inside a measurement.
pub const NOT_THE_LOCKS: [&str; 3] = ["ping", "info", "config"];

/// The server's counters at one moment, kept only as far as [`Usage`] needs them.
#[derive(Debug, Clone, Copy, Default)]
pub struct Reading {
    /// Calls of every command but [`NOT_THE_LOCKS`]: top level and inside scripts, each once.
    calls: u64,
    /// `usec` of [`NOT_THE_LOCKS`]: the measurement's own share of the server's time.
    own_usec: u64,
    /// `used_cpu_user + used_cpu_sys` of the server process.
    cpu_s: f64,
}

impl Reading {
    /// From `INFO commandstats` and `INFO cpu` (which may be one reply of `INFO commandstats cpu`).
    pub fn of(commandstats: &Info, cpu: &Info) -> Reading {
        Reading {
            calls: commandstats.total_calls(&NOT_THE_LOCKS),
            own_usec: commandstats.total_usec_of(&NOT_THE_LOCKS),
            cpu_s: cpu.seconds("used_cpu_user") + cpu.seconds("used_cpu_sys"),
        }
    }

    /// What the server did between `before` and this reading.
    pub fn since(&self, before: &Reading) -> Usage {
        let own_s = self.own_usec.saturating_sub(before.own_usec) as f64 / 1e6;
        Usage {
            calls: self.calls.saturating_sub(before.calls),
            cpu_s: (self.cpu_s - before.cpu_s - own_s).max(0.0),
        }
    }
}

/// Redis calls and server CPU over a stretch of a measurement, the measurement's own traffic
/// left out.
///
/// Calls: Redis 7 counts each command a script runs under its own name besides the script's
/// `EVALSHA`, so the sum of `calls=` over all commands is the top-level calls plus those inside
/// scripts, each once. CPU: not a sum of `usec=`, which would count a script's inner commands
/// twice (the `EVALSHA`'s time includes theirs), but the server process's own
/// `used_cpu_user + used_cpu_sys`, less the `usec` of [`NOT_THE_LOCKS`]. It includes reading
/// requests and writing replies, for every request the locks made; the network work of the
/// measurement's own requests (a `PING` per critical section) remains in it, alike for every
/// contender.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Usage {
    pub calls: u64,
    pub cpu_s: f64,
}

impl std::ops::AddAssign for Usage {
    fn add_assign(&mut self, other: Usage) {
        self.calls += other.calls;
        self.cpu_s += other.cpu_s;
    }
}

/// What a scenario's unit of work is, for the names of its calls and CPU metrics.
#[derive(Debug, Clone, Copy)]
pub enum Per {
    /// An uncontended acquire and release.
    Pair,
    /// A critical section under contention, handover included.
    Section,
    /// A hung holder's lease running out and a waiter taking the lock over.
    Takeover,
    /// A read or write of the read-heavy load: acquire, section, release, waiting included.
    Operation,
    /// A semaphore permit taken and given back, waiting included.
    Permit,
}

impl Usage {
    /// Calls and CPU (in µs) per unit of work: the two metrics every lock scenario reports.
    pub fn metrics(&self, per: Per, units: u64) -> [Metric; 2] {
        let units = units.max(1) as f64;
        let (calls, cpu) = match per {
            Per::Pair => ("redis_calls_per_pair", "redis_cpu_per_pair"),
            Per::Section => ("redis_calls_per_section", "redis_cpu_per_section"),
            Per::Takeover => ("redis_calls_per_takeover", "redis_cpu_per_takeover"),
            Per::Operation => ("redis_calls_per_op", "redis_cpu_per_op"),
            Per::Permit => ("redis_calls_per_permit", "redis_cpu_per_permit"),
        };
        [
            Metric::new(calls, "calls", self.calls as f64 / units),
            Metric::new(cpu, "µs", self.cpu_s * 1e6 / units),
        ]
    }
}

/// One INFO section.
#[derive(Debug, Default)]
pub struct Info {
    fields: HashMap<String, String>,
}

impl Info {
    fn parse(text: &str) -> Info {
        let fields = text
            .lines()
            .filter(|line| !line.starts_with('#'))
            .filter_map(|line| line.trim_end().split_once(':'))
            .map(|(key, value)| (key.to_owned(), value.to_owned()))
            .collect();
        Info { fields }
    }

    pub fn get(&self, field: &str) -> Option<&str> {
        self.fields.get(field).map(String::as_str)
    }

    /// A numeric field; 0 when absent.
    pub fn number(&self, field: &str) -> u64 {
        self.get(field).and_then(|v| v.parse().ok()).unwrap_or(0)
    }

    /// A field in seconds, such as `used_cpu_user` in `INFO cpu`; 0 when absent.
    pub fn seconds(&self, field: &str) -> f64 {
        self.get(field).and_then(|v| v.parse().ok()).unwrap_or(0.0)
    }

    /// The calls of every command in `INFO commandstats` but `except`. Redis 7 counts a
    /// command a script runs under its own name besides the script's `EVALSHA`, so this is the
    /// calls at the top level plus those inside scripts, each counted once.
    pub fn total_calls(&self, except: &[&str]) -> u64 {
        self.fields
            .iter()
            .filter_map(|(field, stat)| {
                let command = field.strip_prefix("cmdstat_")?;
                // Redis 7 names subcommands `config|resetstat`.
                let base = command.split('|').next().unwrap_or(command);
                if except.contains(&base) {
                    return None;
                }
                stat.split(',')
                    .find_map(|pair| pair.strip_prefix("calls="))
                    .and_then(|calls| calls.parse::<u64>().ok())
            })
            .sum()
    }

    /// The `usec=` of `commands` (without subcommand), summed.
    pub fn total_usec_of(&self, commands: &[&str]) -> u64 {
        self.fields
            .iter()
            .filter_map(|(field, stat)| {
                let command = field.strip_prefix("cmdstat_")?;
                let base = command.split('|').next().unwrap_or(command);
                if !commands.contains(&base) {
                    return None;
                }
                stat.split(',')
                    .find_map(|pair| pair.strip_prefix("usec="))
                    .and_then(|usec| usec.parse::<u64>().ok())
            })
            .sum()
    }

    /// `calls=` of `cmdstat_<command>` in `INFO commandstats`; 0 when never called.
    pub fn calls(&self, command: &str) -> u64 {
        self.get(&format!("cmdstat_{command}"))
            .and_then(|stat| {
                stat.split(',')
                    .find_map(|pair| pair.strip_prefix("calls="))
                    .and_then(|calls| calls.parse().ok())
            })
            .unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commandstats_calls_are_read() {
        let info = Info::parse(
            "# Commandstats\r\ncmdstat_evalsha:calls=1200,usec=3456,usec_per_call=2.88,\
             rejected_calls=0,failed_calls=0\r\ncmdstat_ping:calls=3,usec=1\r\n",
        );
        assert_eq!(info.calls("evalsha"), 1200);
        assert_eq!(info.calls("ping"), 3);
        assert_eq!(info.calls("eval"), 0);
    }

    #[test]
    fn total_calls_count_every_command_once_but_the_excepted() {
        let info = Info::parse(
            "# Commandstats\r\ncmdstat_evalsha:calls=2,usec=9\r\ncmdstat_get:calls=2,usec=1\r\n\
             cmdstat_set:calls=2,usec=1\r\ncmdstat_time:calls=1,usec=1\r\n\
             cmdstat_ping:calls=5,usec=1\r\ncmdstat_config|resetstat:calls=1,usec=1\r\n",
        );
        assert_eq!(info.total_calls(&["ping", "config"]), 7);
    }

    #[test]
    fn usage_counts_script_commands_once_and_leaves_the_measurement_out() {
        let before = Info::parse(
            "# Commandstats\r\ncmdstat_evalsha:calls=10,usec=100\r\ncmdstat_get:calls=10,usec=10\r\n\
             cmdstat_info:calls=4,usec=400\r\n# CPU\r\nused_cpu_sys:1.000000\r\n\
             used_cpu_user:2.000000\r\n",
        );
        // One more pair: SET at the top level, EVALSHA running GET and DEL; two INFO and a PING.
        let after = Info::parse(
            "# Commandstats\r\ncmdstat_evalsha:calls=11,usec=110\r\ncmdstat_get:calls=11,usec=11\r\n\
             cmdstat_set:calls=1,usec=1\r\ncmdstat_del:calls=1,usec=1\r\n\
             cmdstat_info:calls=6,usec=600\r\ncmdstat_ping:calls=1,usec=50\r\n\
             # CPU\r\nused_cpu_sys:1.000100\r\nused_cpu_user:2.000400\r\n",
        );
        let usage = Reading::of(&after, &after).since(&Reading::of(&before, &before));
        assert_eq!(usage.calls, 4);
        // 500 µs of server CPU, 250 µs of it the INFO and PING.
        assert!((usage.cpu_s - 250e-6).abs() < 1e-9, "{usage:?}");
    }

    #[test]
    fn redis_and_valkey_are_told_apart() {
        let redis = ServerInfo::of(&Info::parse("# Server\r\nredis_version:7.0.15\r\n"));
        assert_eq!(redis.to_string(), "redis 7.0.15");
        let valkey = ServerInfo::of(&Info::parse(
            "# Server\r\nredis_version:7.2.4\r\nserver_name:valkey\r\nvalkey_version:9.0.0\r\n",
        ));
        assert_eq!(
            (valkey.name.as_str(), valkey.version.as_str()),
            ("valkey", "9.0.0")
        );
        assert_eq!(valkey.to_string(), "valkey 9.0.0 (redis_version 7.2.4)");
    }

    #[test]
    fn a_binary_that_cannot_start_is_named_in_the_error() {
        let Err(err) = Target::start_binary(Path::new("/nonexistent/valkey-server")) else {
            panic!("a missing binary started");
        };
        assert!(
            err.to_string()
                .contains("cannot start the server binary /nonexistent/valkey-server"),
            "{err}"
        );
    }

    #[tokio::test]
    async fn a_server_of_our_own_reports_what_it_is_and_is_gone_on_drop() {
        let target = Target::start_binary(Path::new("redis-server")).expect("redis-server starts");
        assert_ne!(target.port(), 6379);
        assert_eq!(target.binary(), Some(Path::new("redis-server")));
        let server = target
            .probe()
            .await
            .expect("probe")
            .server()
            .await
            .expect("INFO");
        assert_eq!(server.name, "redis");
        let dir = target
            .own
            .as_ref()
            .map(|own| own.dir.clone())
            .expect("ours");
        assert!(dir.is_dir());
        drop(target);
        assert!(!dir.exists());
    }

    #[test]
    fn numeric_fields_are_read() {
        let info = Info::parse("# Stats\r\ntotal_reads_processed:77\r\nredis_version:7.0.15\r\n");
        assert_eq!(info.number("total_reads_processed"), 77);
        assert_eq!(info.get("redis_version"), Some("7.0.15"));
        assert_eq!(info.number("missing"), 0);
    }
}
