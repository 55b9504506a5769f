//! PostgreSQL servers owned by a test: `initdb` in a temp dir, `postgres` on a free loopback port.

use std::ffi::OsString;
use std::fs::{self, OpenOptions};
use std::io::{ErrorKind, Write};
use std::net::{Ipv4Addr, SocketAddr};
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::sync::{Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use crate::port::free_port;
use crate::server::{ProcessState, process_state, read_log, send_signal, signal_all};
use crate::tempdir::TempDir;
use crate::wait::wait_until;

const NOT_FOUND: &str = "PostgreSQL server binaries (initdb, postgres) not found: install them with 'sudo apt-get install -y postgresql' (or run scripts/test.sh, which does)";
/// The variable naming the directory of the server binaries (`initdb`, `postgres`, `psql`,
/// `pg_basebackup`) the harness runs, e.g. `/usr/lib/postgresql/16/bin`.
pub const PG_BIN_VAR: &str = "LOCK_TESTS_PG_BIN";
/// Where Debian's packages put each major version's binaries: `<root>/<major>/bin`.
const DEBIAN_ROOT: &str = "/usr/lib/postgresql";
/// The port a system PostgreSQL listens on; the harness never uses it.
const SYSTEM_POSTGRES_PORT: u16 = 5432;
/// The role and database every server is given, and the role's password.
pub const POSTGRES_ROLE: &str = "lock";
/// The password of [`POSTGRES_ROLE`]. A fixed test password: the servers listen on loopback only.
pub const POSTGRES_PASSWORD: &str = "lock-test-password";
/// The superuser `initdb` creates; reached over the server's unix socket without a password.
const SUPERUSER: &str = "postgres";
/// How long a fresh or restarted server may take to accept connections (crash recovery included).
const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// How long `initdb` and `pg_basebackup` may take.
const SETUP_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a query run by [`PostgresServer::psql`] may take.
const PSQL_TIMEOUT: Duration = Duration::from_secs(20);
/// How long a readiness probe waits for an answer before trying again.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);
/// How many ports to try when another process takes the chosen one first.
const PORT_ATTEMPTS: usize = 5;

/// A PostgreSQL server on a free loopback port, its cluster in a temp dir of its own; killed and
/// removed on drop.
///
/// `initdb` makes the cluster and `postgres` serves it, both as the `postgres` system user when
/// the tests run as root (they refuse root), else as the current user. The server listens on
/// `127.0.0.1` only (never port 5432) and on a unix socket in its temp dir; it has a role
/// [`POSTGRES_ROLE`] with the password [`POSTGRES_PASSWORD`] and a database of the same name
/// owned by it: [`url`](Self::url) connects as that role.
///
/// Durability: `fsync = off` (a test kills processes, never the machine, and the kernel keeps
/// what was written), while `synchronous_commit = on` and `full_page_writes = on` stay as
/// shipped: a commit returns only once its WAL is written, so a row committed before
/// [`kill`](Self::kill) is there after [`restart`](Self::restart), through real crash recovery.
///
/// [`kill`](Self::kill) and [`pause`](Self::pause) reach the postmaster and every process it
/// started (backends, checkpointer, WAL writer...), as a crash or a stalled host would. All
/// methods take `&self`: the server can be shared with a thread that kills or pauses it. Put
/// [`log`](Self::log) in every assertion message about it.
#[derive(Debug)]
pub struct PostgresServer {
    port: u16,
    dir: TempDir,
    process: Mutex<Process>,
}

#[derive(Debug)]
struct Process {
    /// The postmaster; `None` once killed or stopped.
    child: Option<Child>,
    /// Stopped with SIGSTOP.
    paused: bool,
}

/// Why a launch did not produce a ready server.
enum LaunchError {
    /// Another process listens on the port: try another one.
    PortTaken,
    /// Anything else; the text goes into the panic message together with the log.
    Failed(String),
}

impl PostgresServer {
    /// Makes a fresh cluster, starts it, creates the role and database [`POSTGRES_ROLE`] and
    /// waits until it accepts connections.
    ///
    /// # Panics
    ///
    /// If the server binaries are not installed (the message says how to install them), or the
    /// server does not come up within 30 s (the message then carries its log).
    pub fn start() -> Self {
        let dir = TempDir::new("postgres");
        give_to_server_user(dir.path());
        if let Err(why) = initdb(&dir) {
            panic!("{why}\n{}", log_section(&dir));
        }
        let server = Self::launch_on_free_port(dir);
        let created = server.try_admin_psql(&[
            &format!("CREATE ROLE {POSTGRES_ROLE} LOGIN PASSWORD '{POSTGRES_PASSWORD}'"),
            &format!("CREATE DATABASE {POSTGRES_ROLE} OWNER {POSTGRES_ROLE}"),
        ]);
        if let Err(why) = created {
            panic!(
                "cannot create the role and database {POSTGRES_ROLE}: {why}\n{}",
                server.log_section()
            );
        }
        server
    }

    /// Starts a read-only standby of this server: a copy made with `pg_basebackup -R` (which
    /// writes `standby.signal` and the `primary_conninfo` to stream from this server), on a free
    /// port of its own. It has this server's roles and data, answers reads, refuses writes, and
    /// `SELECT pg_is_in_recovery()` is `t` on it. Keep this server alive as long as the standby
    /// streams from it.
    ///
    /// # Panics
    ///
    /// If the copy fails or the standby does not come up; the message carries the logs.
    pub fn start_standby(&self) -> Self {
        let dir = TempDir::new("postgres-standby");
        give_to_server_user(dir.path());
        let mut command = Command::new(bin_dir().join("pg_basebackup"));
        command
            .arg("--pgdata")
            .arg(data_dir(&dir))
            .arg("--host")
            .arg(self.dir.path())
            .args(["--port", &self.port.to_string(), "--username", SUPERUSER])
            .args(["--write-recovery-conf", "--wal-method=stream"])
            .args(["--checkpoint=fast", "--no-sync"]);
        as_server_user(&mut command);
        if let Err(why) = run(&mut command, SETUP_TIMEOUT) {
            panic!(
                "pg_basebackup from the server on port {} failed: {why}\n{}",
                self.port,
                self.log_section()
            );
        }
        Self::launch_on_free_port(dir)
    }

    /// Launches the cluster in `dir` on the first free port that stays free.
    fn launch_on_free_port(dir: TempDir) -> Self {
        for _ in 0..PORT_ATTEMPTS {
            let port = loop {
                let port = free_port();
                if port != SYSTEM_POSTGRES_PORT {
                    break port;
                }
            };
            match launch(&dir, port) {
                Ok(child) => {
                    return Self {
                        port,
                        dir,
                        process: Mutex::new(Process {
                            child: Some(child),
                            paused: false,
                        }),
                    };
                }
                Err(LaunchError::PortTaken) => continue,
                Err(LaunchError::Failed(why)) => panic!("{why}\n{}", log_section(&dir)),
            }
        }
        panic!(
            "postgres found every port it tried taken ({PORT_ATTEMPTS} attempts)\n{}",
            log_section(&dir)
        );
    }

    /// The port the server listens on (stays the same across [`restart`](Self::restart)).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `127.0.0.1:<port>`, e.g. for a [`FaultProxy`](crate::FaultProxy) in front of the server
    /// (connect to it with [`url_at`](Self::url_at)`(proxy.addr())`).
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from((Ipv4Addr::LOCALHOST, self.port))
    }

    /// `postgres://lock:<password>@127.0.0.1:<port>/lock`: the role and database [`POSTGRES_ROLE`].
    pub fn url(&self) -> String {
        Self::url_at(self.addr())
    }

    /// The URL of the role and database [`POSTGRES_ROLE`] at `addr`: a proxy or pooler in front
    /// of a server.
    pub fn url_at(addr: SocketAddr) -> String {
        format!("postgres://{POSTGRES_ROLE}:{POSTGRES_PASSWORD}@{addr}/{POSTGRES_ROLE}")
    }

    /// The password of the role [`POSTGRES_ROLE`] (the same on every server:
    /// [`POSTGRES_PASSWORD`]).
    pub fn password(&self) -> &str {
        POSTGRES_PASSWORD
    }

    /// Everything the server (and `initdb` before it) has logged so far, across restarts, with a
    /// marker line before each start. Meant for assertion and panic messages.
    pub fn log(&self) -> String {
        read_log(&log_path(&self.dir))
    }

    /// Runs `sql` with `psql` as the role [`POSTGRES_ROLE`] over TCP, as a client of
    /// [`url`](Self::url) would, and returns what it prints unaligned and without headers: one
    /// line per row, columns separated by `|` (`SELECT 1, 'a'` gives `1|a`), the trailing
    /// newline removed. Several statements separated by `;` run in one transaction and only the
    /// last one's rows are printed.
    ///
    /// # Panics
    ///
    /// If the statement fails or does not finish within 20 s; the message carries psql's error
    /// and the log. Use [`try_psql`](Self::try_psql) to expect that.
    pub fn psql(&self, sql: &str) -> String {
        self.try_psql(sql).unwrap_or_else(|why| {
            panic!(
                "{sql:?} on postgres at 127.0.0.1:{} failed: {why}\n{}",
                self.port,
                self.log_section()
            )
        })
    }

    /// Like [`psql`](Self::psql), but returns a failure (psql's error message, e.g.
    /// `ERROR:  cannot execute INSERT in a read-only transaction`) as `Err`.
    pub fn try_psql(&self, sql: &str) -> Result<String, String> {
        psql_over_tcp(self.port, POSTGRES_ROLE, sql)
    }

    /// Runs `sql` as the superuser `postgres` over the server's unix socket, as
    /// [`psql`](Self::psql) does otherwise: for what the role [`POSTGRES_ROLE`] may not do
    /// (terminate another role's backends, change settings).
    ///
    /// # Panics
    ///
    /// As [`psql`](Self::psql).
    pub fn admin_psql(&self, sql: &str) -> String {
        self.try_admin_psql(&[sql]).unwrap_or_else(|why| {
            panic!(
                "{sql:?} as {SUPERUSER} on postgres at 127.0.0.1:{} failed: {why}\n{}",
                self.port,
                self.log_section()
            )
        })
    }

    /// Runs each of `statements` in a transaction of its own as the superuser.
    fn try_admin_psql(&self, statements: &[&str]) -> Result<String, String> {
        admin_psql(&self.dir, self.port, statements, PSQL_TIMEOUT)
    }

    /// Ends every connection of the role [`POSTGRES_ROLE`] (`pg_terminate_backend`, as an
    /// operator or a failover would): their clients get `terminating connection due to
    /// administrator command` or find the connection closed; the server stays up. Returns how
    /// many were ended.
    ///
    /// # Panics
    ///
    /// If the server does not answer.
    pub fn terminate_connections(&self) -> usize {
        let ended = self.admin_psql(&format!(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
             WHERE usename = '{POSTGRES_ROLE}'"
        ));
        ended.parse().unwrap_or_else(|_| {
            panic!(
                "pg_terminate_backend counted {ended:?}, not a number\n{}",
                self.log_section()
            )
        })
    }

    /// Whether the server runs, is paused or is down (killed or stopped), as far as this
    /// harness knows: a server that crashed on its own still counts as running.
    pub fn state(&self) -> ProcessState {
        let process = self.process();
        match (&process.child, process.paused) {
            (None, _) => ProcessState::Killed,
            (Some(_), true) => ProcessState::Paused,
            (Some(_), false) => ProcessState::Running,
        }
    }

    /// Brings the server back whatever this harness did to it: resumes it if paused, restarts
    /// it if down, leaves it alone if running.
    pub fn revive(&self) {
        match self.state() {
            ProcessState::Paused => self.resume(),
            ProcessState::Killed => self.restart(),
            ProcessState::Running => {}
        }
    }

    /// Kills the postmaster and all its backends with SIGKILL (no shutdown checkpoint, no goodbye
    /// to clients: a crash) and waits until they are gone. The port refuses connections
    /// afterwards; [`restart`](Self::restart) brings the server back through crash recovery.
    /// Does nothing if it is already down.
    pub fn kill(&self) {
        kill_tree(&mut self.process());
    }

    /// Shuts the server down cleanly (SIGINT: PostgreSQL's fast shutdown, which ends the
    /// sessions and writes a checkpoint) and waits until it has exited; killed if that takes
    /// longer than 30 s. Does nothing if it is already down.
    pub fn stop(&self) {
        let mut process = self.process();
        let paused = process.paused;
        let Some(child) = process.child.as_mut() else {
            return;
        };
        if paused {
            signal_tree(child.id(), "CONT");
        }
        send_signal(child.id(), "INT");
        if wait_until(READY_TIMEOUT, || child.try_wait().ok().flatten().is_some()) {
            process.child = None;
            process.paused = false;
        }
        // Backends end before the postmaster; this only kills what hung.
        kill_tree(&mut process);
    }

    /// Stops every process of the server with SIGSTOP: connections stay open and new ones are
    /// accepted by the kernel, but nothing is answered until [`resume`](Self::resume).
    ///
    /// # Panics
    ///
    /// If the server is down.
    pub fn pause(&self) {
        let mut process = self.process();
        let pid = self.pid(&process);
        signal_tree(pid, "STOP");
        process.paused = true;
        // The signal is asynchronous; return only once the postmaster is really stopped.
        wait_until(Duration::from_secs(2), || {
            process_state(pid).is_none_or(|state| state == 'T')
        });
    }

    /// Continues a server stopped by [`pause`](Self::pause) (SIGCONT to all its processes).
    /// Queries sent meanwhile are then answered.
    ///
    /// # Panics
    ///
    /// If the server is down.
    pub fn resume(&self) {
        let mut process = self.process();
        let pid = self.pid(&process);
        signal_tree(pid, "CONT");
        process.paused = false;
        wait_until(Duration::from_secs(2), || {
            process_state(pid).is_none_or(|state| state != 'T')
        });
    }

    /// Kills the server if it runs (as [`kill`](Self::kill)), then starts it again on the same
    /// directory and port and waits until it accepts connections: after a kill, PostgreSQL's
    /// crash recovery replays the WAL, so everything committed before is there.
    ///
    /// # Panics
    ///
    /// If another process took the port meanwhile, or the server does not come up.
    pub fn restart(&self) {
        let mut process = self.process();
        kill_tree(&mut process);
        // The freed port may serve meanwhile as the local end of some client's connection: that
        // ends with the connection, so the port is tried again for a while.
        let patience = Instant::now() + Duration::from_secs(15);
        let launched = loop {
            match launch(&self.dir, self.port) {
                Err(LaunchError::PortTaken) if Instant::now() < patience => {
                    std::thread::sleep(Duration::from_millis(200));
                }
                launched => break launched,
            }
        };
        match launched {
            Ok(child) => process.child = Some(child),
            Err(LaunchError::PortTaken) => panic!(
                "cannot restart postgres: port {} was taken while it was down\n{}",
                self.port,
                self.log_section()
            ),
            Err(LaunchError::Failed(why)) => {
                panic!("cannot restart postgres: {why}\n{}", self.log_section())
            }
        }
    }

    fn process(&self) -> MutexGuard<'_, Process> {
        // A panic while holding the lock leaves the state consistent enough to kill the server.
        self.process.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn pid(&self, process: &Process) -> u32 {
        match &process.child {
            Some(child) => child.id(),
            None => panic!(
                "postgres on port {} is down; restart() it first\n{}",
                self.port,
                self.log_section()
            ),
        }
    }

    fn log_section(&self) -> String {
        log_section(&self.dir)
    }
}

impl Drop for PostgresServer {
    fn drop(&mut self) {
        let process = self
            .process
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner);
        kill_tree(process);
    }
}

/// SIGKILLs the postmaster and its children (the backends and background processes, each in a
/// session of its own, so no process group holds them all), reaps the postmaster and waits until
/// none of them is left alive, so a restart finds no backend of the old server still holding its
/// shared memory.
fn kill_tree(process: &mut Process) {
    let Some(mut child) = process.child.take() else {
        return;
    };
    let postmaster = child.id();
    // Stopped, the postmaster forks no new child between the listing and the kill.
    send_signal(postmaster, "STOP");
    let children = children_of(postmaster);
    signal_all(&children, "KILL");
    let _ = child.kill();
    let _ = child.wait();
    process.paused = false;
    wait_until(Duration::from_secs(10), || {
        children
            .iter()
            .all(|&pid| process_state(pid).is_none_or(|state| state == 'Z'))
    });
}

/// Sends `signal` to the postmaster and its children: stopping, the postmaster first so that it
/// forks no child the listing misses; continuing, the children first.
fn signal_tree(postmaster: u32, signal: &str) {
    if signal == "STOP" {
        send_signal(postmaster, signal);
        signal_all(&children_of(postmaster), signal);
    } else {
        signal_all(&children_of(postmaster), signal);
        send_signal(postmaster, signal);
    }
}

/// The processes whose parent is `parent`, from `/proc`.
fn children_of(parent: u32) -> Vec<u32> {
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| {
            let pid = entry.file_name().to_str()?.parse::<u32>().ok()?;
            let stat = fs::read_to_string(entry.path().join("stat")).ok()?;
            // After the name: state, ppid.
            let (_, after_name) = stat.rsplit_once(')')?;
            let ppid = after_name.split_whitespace().nth(1)?.parse::<u32>().ok()?;
            (ppid == parent).then_some(pid)
        })
        .collect()
}

/// Runs `initdb` on `<dir>/data`: the superuser reached without a password over the unix
/// socket, and every TCP connection asked for its password (SCRAM).
fn initdb(dir: &TempDir) -> Result<(), String> {
    let mut command = Command::new(bin_dir().join("initdb"));
    command
        .arg("--pgdata")
        .arg(data_dir(dir))
        .args(["--username", SUPERUSER])
        .args(["--auth-local=trust", "--auth-host=scram-sha-256"])
        .args([
            "--encoding=UTF8",
            "--locale=C",
            "--no-sync",
            "--no-instructions",
        ]);
    as_server_user(&mut command);
    run(&mut command, SETUP_TIMEOUT)
        .map(|output| append_log(dir, &format!("=== lock-tests: initdb ===\n{output}")))
        .map_err(|why| format!("initdb failed: {why}"))
}

/// Spawns `postgres` on `port` and waits until it accepts connections.
fn launch(dir: &TempDir, port: u16) -> Result<Child, LaunchError> {
    let log = log_path(dir);
    let failed = |what: &str, e: std::io::Error| {
        LaunchError::Failed(format!("cannot {what} {}: {e}", log.display()))
    };
    let mut log_file = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log)
        .map_err(|e| failed("open", e))?;
    // Ignoring a failed marker write is fine: it only makes the log easier to read.
    let _ = writeln!(log_file, "=== lock-tests: postgres -p {port} ===");
    // Only this launch's part of the log tells whether the port was taken.
    let launch_start = log_file.metadata().map_or(0, |meta| meta.len());
    let stderr = log_file.try_clone().map_err(|e| failed("share", e))?;

    let mut command = Command::new(bin_dir().join("postgres"));
    command
        .arg("-D")
        .arg(data_dir(dir))
        .args(["-p", &port.to_string()])
        .args(["-c", "listen_addresses=127.0.0.1"])
        .arg("-c")
        .arg(format!("unix_socket_directories={}", dir.path().display()))
        .args(["-c", "fsync=off", "-c", "synchronous_commit=on"])
        .args(["-c", "full_page_writes=on", "-c", "shared_buffers=32MB"])
        // Room for a 64-connection pool beside the test's own clients; who said what in the log.
        .args([
            "-c",
            "max_connections=200",
            "-c",
            "log_line_prefix=%m [%p] %q%u@%d ",
        ])
        .stdin(Stdio::null())
        .stdout(log_file)
        .stderr(stderr);
    as_server_user(&mut command);
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(e) if e.kind() == ErrorKind::NotFound => panic!("{NOT_FOUND}"),
        Err(e) => return Err(LaunchError::Failed(format!("cannot spawn postgres: {e}"))),
    };

    match wait_ready(&mut child, dir, port) {
        Ok(()) => Ok(child),
        Err(why) => {
            let mut process = Process {
                child: Some(child),
                paused: false,
            };
            kill_tree(&mut process);
            let said = fs::read(&log).unwrap_or_default();
            let said = said.get(launch_start as usize..).unwrap_or_default();
            if String::from_utf8_lossy(said).contains("Address already in use") {
                return Err(LaunchError::PortTaken);
            }
            Err(LaunchError::Failed(why))
        }
    }
}

/// Polls until the server answers a query over its unix socket, which is in its own temp dir:
/// an answer there comes from this server, not from another that grabbed the port (that one
/// would have made ours exit, unable to bind).
fn wait_ready(child: &mut Child, dir: &TempDir, port: u16) -> Result<(), String> {
    let deadline = Instant::now() + READY_TIMEOUT;
    loop {
        if let Some(status) = child.try_wait().ok().flatten() {
            return Err(format!(
                "postgres on port {port} exited before accepting connections ({status})"
            ));
        }
        // Refused while it starts up or replays the WAL ("the database system is starting up").
        if admin_psql(dir, port, &["SELECT 1"], PROBE_TIMEOUT).is_ok() {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "postgres on port {port} did not accept connections within {READY_TIMEOUT:?}"
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Runs `statements` with `psql` as the superuser over the unix socket in `dir`, each in a
/// transaction of its own (`CREATE DATABASE` refuses to run in one with others).
fn admin_psql(
    dir: &TempDir,
    port: u16,
    statements: &[&str],
    timeout: Duration,
) -> Result<String, String> {
    let mut command = psql_command();
    command
        .arg("--host")
        .arg(dir.path())
        .args(["--port", &port.to_string()])
        .args(["--username", SUPERUSER, "--dbname", "postgres"]);
    for statement in statements {
        command.args(["--command", statement]);
    }
    run(&mut command, timeout)
}

/// Runs `sql` with `psql` as [`POSTGRES_ROLE`] on the database `dbname` at `127.0.0.1:<port>`,
/// the password in the environment (never on the command line, where `ps` would show it).
pub(crate) fn psql_over_tcp(port: u16, dbname: &str, sql: &str) -> Result<String, String> {
    let mut command = psql_command();
    command
        .args(["--host", "127.0.0.1", "--port", &port.to_string()])
        .args([
            "--username",
            POSTGRES_ROLE,
            "--dbname",
            dbname,
            "--command",
            sql,
        ])
        .env("PGPASSWORD", POSTGRES_PASSWORD)
        .env("PGCONNECT_TIMEOUT", "10");
    run(&mut command, PSQL_TIMEOUT)
}

/// `psql` from the server's bin dir (or `PATH`), quiet, unaligned, tuples only, stopping at the
/// first error, reading no `~/.psqlrc`.
fn psql_command() -> Command {
    let beside = bin_dir().join("psql");
    let mut command = Command::new(if beside.exists() {
        beside.into_os_string()
    } else {
        OsString::from("psql")
    });
    command.args(["--no-psqlrc", "--no-align", "--tuples-only", "--quiet"]);
    command.args(["--set", "ON_ERROR_STOP=1"]);
    command.env_remove("PGSERVICE").env_remove("PGOPTIONS");
    command
}

/// Runs `command` to its end, at most `timeout` (then kills it), and returns its standard output
/// without the trailing newline, or why it failed with its standard error.
pub(crate) fn run(command: &mut Command, timeout: Duration) -> Result<String, String> {
    let program = Path::new(command.get_program())
        .file_name()
        .map_or_else(String::new, |name| name.to_string_lossy().into_owned());
    let child = command
        .current_dir(std::env::temp_dir())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run {program}: {e}"))?;
    let pid = child.id();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    let output = match rx.recv_timeout(timeout) {
        Ok(Ok(output)) => output,
        Ok(Err(e)) => return Err(format!("cannot run {program}: {e}")),
        Err(_) => {
            send_signal(pid, "KILL");
            return Err(format!("{program} did not finish within {timeout:?}"));
        }
    };
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stdout = stdout.strip_suffix('\n').unwrap_or(&stdout).to_owned();
    if output.status.success() {
        Ok(stdout)
    } else {
        let stderr = String::from_utf8_lossy(&output.stderr);
        Err(format!(
            "{program} exited with {}: {}",
            output.status,
            stderr.trim_end()
        ))
    }
}

/// `url` percent-encoded for a query parameter's value (`?listen_url=...`).
pub fn encoded(url: &str) -> String {
    url.bytes()
        .map(|byte| match byte {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (byte as char).to_string()
            }
            _ => format!("%{byte:02X}"),
        })
        .collect()
}

/// The directory of the server binaries every [`PostgresServer`] runs: [`PG_BIN_VAR`] when set,
/// else the newest `/usr/lib/postgresql/<major>/bin` (Debian's layout), else the directory of
/// `postgres` on `PATH`. Found once.
///
/// # Panics
///
/// If none has `initdb` and `postgres`; the message says how to install them.
pub fn pg_bin_dir() -> PathBuf {
    bin_dir().to_owned()
}

fn bin_dir() -> &'static Path {
    static DIR: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let found = DIR.get_or_init(|| {
        find_bin_dir(
            std::env::var_os(PG_BIN_VAR),
            Path::new(DEBIAN_ROOT),
            std::env::var_os("PATH"),
        )
    });
    match found {
        Ok(dir) => dir,
        Err(why) => panic!("{why}"),
    }
}

/// [`pg_bin_dir`]'s search, from the variable's value, the Debian root and `PATH` given.
fn find_bin_dir(
    var: Option<OsString>,
    debian_root: &Path,
    path: Option<OsString>,
) -> Result<PathBuf, String> {
    let has_server = |dir: &Path| dir.join("initdb").is_file() && dir.join("postgres").is_file();
    if let Some(dir) = var {
        let dir = PathBuf::from(dir);
        return if has_server(&dir) {
            Ok(dir)
        } else {
            Err(format!(
                "{PG_BIN_VAR}={} has no initdb and postgres: give the directory of the server \
                 binaries (absolute, as tests run in their package's directory), or unset it to \
                 use the installed ones",
                dir.display()
            ))
        };
    }
    let mut majors: Vec<(u32, PathBuf)> = fs::read_dir(debian_root)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let major = entry.file_name().to_str()?.parse::<u32>().ok()?;
            Some((major, entry.path().join("bin")))
        })
        .filter(|(_, dir)| has_server(dir))
        .collect();
    majors.sort();
    if let Some((_, dir)) = majors.pop() {
        return Ok(dir);
    }
    path.iter()
        .flat_map(std::env::split_paths)
        .find(|dir| has_server(dir))
        .ok_or_else(|| NOT_FOUND.to_owned())
}

/// The major version of the server binaries, e.g. `15`, from `postgres --version`
/// (`postgres (PostgreSQL) 15.18 (Debian 15.18-0+deb12u1)`).
///
/// # Panics
///
/// If the binaries are missing or print no version.
pub fn pg_major_version() -> u32 {
    static VERSION: OnceLock<u32> = OnceLock::new();
    *VERSION.get_or_init(|| {
        let mut command = Command::new(bin_dir().join("postgres"));
        command.arg("--version");
        let text = run(&mut command, SETUP_TIMEOUT).unwrap_or_else(|why| panic!("{why}"));
        parse_major(&text)
            .unwrap_or_else(|| panic!("no version in the output of postgres --version: {text:?}"))
    })
}

/// The major version in a `postgres --version` line.
fn parse_major(line: &str) -> Option<u32> {
    let version = line.split_whitespace().nth(2)?;
    version.split(['.', 'b', 'r']).next()?.parse().ok()
}

/// The uid and gid the server processes run as: the `postgres` system user's when the tests run
/// as root, `None` (the current user) otherwise.
pub(crate) fn server_user() -> Option<(u32, u32)> {
    static USER: OnceLock<Option<(u32, u32)>> = OnceLock::new();
    *USER.get_or_init(|| {
        // /proc/self belongs to the effective user.
        let root = fs::metadata("/proc/self").is_ok_and(|meta| meta.uid() == 0);
        if !root {
            return None;
        }
        let passwd = fs::read_to_string("/etc/passwd").unwrap_or_default();
        let found = passwd.lines().find_map(|line| {
            let fields: Vec<&str> = line.split(':').collect();
            match fields.as_slice() {
                [name, _, uid, gid, ..] if *name == SUPERUSER => {
                    Some((uid.parse().ok()?, gid.parse().ok()?))
                }
                _ => None,
            }
        });
        match found {
            Some(ids) => Some(ids),
            None => panic!(
                "the tests run as root, where initdb, postgres and pgbouncer refuse to run, and \
                 there is no postgres user to run them as: install the server with 'sudo apt-get \
                 install -y postgresql' (or run scripts/test.sh, which does), which creates it"
            ),
        }
    })
}

/// Makes `command` run as [`server_user`].
pub(crate) fn as_server_user(command: &mut Command) {
    if let Some((uid, gid)) = server_user() {
        command.uid(uid).gid(gid);
    }
}

/// Gives `path` to [`server_user`], so the server can write in it.
///
/// # Panics
///
/// If that fails.
pub(crate) fn give_to_server_user(path: &Path) {
    if let Some((uid, gid)) = server_user() {
        std::os::unix::fs::chown(path, Some(uid), Some(gid))
            .unwrap_or_else(|e| panic!("cannot give {} to the postgres user: {e}", path.display()));
    }
}

fn data_dir(dir: &TempDir) -> PathBuf {
    dir.path().join("data")
}

fn log_path(dir: &TempDir) -> PathBuf {
    dir.path().join("postgres.log")
}

fn append_log(dir: &TempDir, text: &str) {
    let file = OpenOptions::new()
        .create(true)
        .append(true)
        .open(log_path(dir));
    // Best effort, as the markers: the log is for reading.
    if let Ok(mut file) = file {
        let _ = writeln!(file, "{text}");
    }
}

fn log_section(dir: &TempDir) -> String {
    format!("--- postgres log ---\n{}", read_log(&log_path(dir)))
}

#[cfg(test)]
mod tests {
    use super::{NOT_FOUND, find_bin_dir, parse_major};
    use std::path::Path;

    #[test]
    fn major_versions_are_read_from_version_lines() {
        let debian = "postgres (PostgreSQL) 15.18 (Debian 15.18-0+deb12u1)";
        assert_eq!(parse_major(debian), Some(15));
        assert_eq!(parse_major("postgres (PostgreSQL) 17beta1"), Some(17));
        assert_eq!(parse_major("postgres (PostgreSQL) 16rc1"), Some(16));
        assert_eq!(parse_major("sh: postgres: not found"), None);
    }

    #[test]
    fn missing_binaries_give_the_install_hint() {
        let nowhere = Path::new("/nonexistent/postgresql");
        let found = find_bin_dir(None, nowhere, Some("/nonexistent/bin".into()));
        assert_eq!(found, Err(NOT_FOUND.to_owned()));
    }

    #[test]
    fn a_variable_without_the_binaries_is_named_in_the_failure() {
        let found = find_bin_dir(Some("/nonexistent/bin".into()), Path::new("/"), None);
        let why = found.expect_err("no binaries there");
        assert!(
            why.starts_with("LOCK_TESTS_PG_BIN=/nonexistent/bin has no initdb"),
            "{why}"
        );
    }
}
