//! `pgbouncer` processes owned by a test, in front of a [`PostgresServer`].

use std::ffi::OsString;
use std::fs::{self, OpenOptions};
use std::io::{ErrorKind, Write};
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use crate::port::free_port;
use crate::postgres::{
    POSTGRES_PASSWORD, POSTGRES_ROLE, PostgresServer, as_server_user, give_to_server_user,
    psql_over_tcp,
};
use crate::server::{process_state, read_log, send_signal};
use crate::tempdir::TempDir;
use crate::wait::wait_until;

const NOT_FOUND: &str = "pgbouncer not found: install it with 'sudo apt-get install -y pgbouncer' (or run scripts/test.sh, which does)";
/// The variable naming the `pgbouncer` binary the harness runs instead of the one on `PATH` or in
/// `/usr/sbin`.
pub const PGBOUNCER_BINARY_VAR: &str = "LOCK_TESTS_PGBOUNCER";
/// The port a system PgBouncer listens on; the harness never uses it.
const SYSTEM_PGBOUNCER_PORT: u16 = 6432;
/// How long a fresh or restarted pooler may take to answer through to its server.
const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// How many ports to try when another process takes the chosen one first.
const PORT_ATTEMPTS: usize = 5;

/// A `pgbouncer` on a free loopback port in front of a [`PostgresServer`], killed and cleaned up
/// on drop.
///
/// It serves the database [`POSTGRES_ROLE`] of the server to the same role and password:
/// clients authenticate to the pooler with SCRAM against an `auth_file` that holds the password
/// in plain text (in the pooler's temp dir, readable by the server user only), which the pooler
/// also uses to log in to the server. It runs as the `postgres` system user when the tests run
/// as root (it refuses root). The role is also an admin of the pooler's console
/// ([`admin`](Self::admin)). `server_login_retry = 1` so that it reaches a restarted server
/// within a second or so, and `ignore_startup_parameters = extra_float_digits` as clients such
/// as sqlx send it.
///
/// Keep the server alive as long as the pooler: it only knows its port.
#[derive(Debug)]
pub struct PgBouncer {
    port: u16,
    dir: TempDir,
    child: Mutex<Option<Child>>,
}

/// The pool mode written to the config.
#[derive(Clone, Copy)]
enum PoolMode {
    Transaction,
    Session,
}

impl PgBouncer {
    /// Starts a pooler in **transaction** pool mode (a server connection is lent for one
    /// transaction at a time: no session state survives between transactions) in front of
    /// `server`, and waits until a query goes through it.
    ///
    /// # Panics
    ///
    /// If `pgbouncer` is not installed (the message says how to install it), or it does not
    /// answer within 30 s (the message then carries its log).
    pub fn start(server: &PostgresServer) -> Self {
        Self::start_in_mode(server, PoolMode::Transaction)
    }

    /// Starts a pooler in **session** pool mode (a client keeps its server connection until it
    /// disconnects), for tests that contrast the two.
    ///
    /// # Panics
    ///
    /// As [`start`](Self::start).
    pub fn start_session_mode(server: &PostgresServer) -> Self {
        Self::start_in_mode(server, PoolMode::Session)
    }

    fn start_in_mode(server: &PostgresServer, mode: PoolMode) -> Self {
        let dir = TempDir::new("pgbouncer");
        give_to_server_user(dir.path());
        let auth_file = dir.path().join("userlist.txt");
        write_owned(
            &auth_file,
            &format!("\"{POSTGRES_ROLE}\" \"{POSTGRES_PASSWORD}\"\n"),
        );
        for _ in 0..PORT_ATTEMPTS {
            let port = loop {
                let port = free_port();
                if port != SYSTEM_PGBOUNCER_PORT {
                    break port;
                }
            };
            write_owned(&config_path(&dir), &config(&dir, port, server.port(), mode));
            match launch(&dir, port) {
                Ok(child) => {
                    return Self {
                        port,
                        dir,
                        child: Mutex::new(Some(child)),
                    };
                }
                Err(LaunchError::PortTaken) => continue,
                Err(LaunchError::Failed(why)) => panic!("{why}\n{}", log_section(&dir)),
            }
        }
        panic!(
            "pgbouncer found every port it tried taken ({PORT_ATTEMPTS} attempts)\n{}",
            log_section(&dir)
        );
    }

    /// The port the pooler listens on (stays the same across [`restart`](Self::restart)).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `127.0.0.1:<port>`.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from((Ipv4Addr::LOCALHOST, self.port))
    }

    /// `postgres://lock:<password>@127.0.0.1:<port>/lock`, as the server's own
    /// [`url`](PostgresServer::url) but through the pooler.
    pub fn url(&self) -> String {
        PostgresServer::url_at(self.addr())
    }

    /// Runs `sql` through the pooler, as [`PostgresServer::psql`] does on the server.
    ///
    /// # Panics
    ///
    /// If the statement fails; the message carries psql's error and the pooler's log.
    pub fn psql(&self, sql: &str) -> String {
        self.try_psql(sql).unwrap_or_else(|why| {
            panic!(
                "{sql:?} through pgbouncer at 127.0.0.1:{} failed: {why}\n{}",
                self.port,
                log_section(&self.dir)
            )
        })
    }

    /// Like [`psql`](Self::psql), but returns a failure as `Err`.
    pub fn try_psql(&self, sql: &str) -> Result<String, String> {
        psql_over_tcp(self.port, POSTGRES_ROLE, sql)
    }

    /// Runs `command` on the pooler's admin console (the database `pgbouncer`, where the role
    /// [`POSTGRES_ROLE`] is an admin), e.g. `SHOW POOLS` or `SHOW CONFIG`, and returns the rows
    /// as [`psql`](Self::psql) does.
    ///
    /// # Panics
    ///
    /// If the command fails; the message carries psql's error and the pooler's log.
    pub fn admin(&self, command: &str) -> String {
        psql_over_tcp(self.port, "pgbouncer", command).unwrap_or_else(|why| {
            panic!(
                "{command:?} on the admin console of pgbouncer at 127.0.0.1:{} failed: {why}\n{}",
                self.port,
                log_section(&self.dir)
            )
        })
    }

    /// Everything the pooler has logged so far, across restarts, with a marker line before each
    /// start.
    pub fn log(&self) -> String {
        read_log(&log_path(&self.dir))
    }

    /// Kills the pooler with SIGKILL and reaps it: its clients' connections drop, the server's
    /// connections it held end. Does nothing if it is already dead.
    pub fn kill(&self) {
        stop(&mut self.child());
    }

    /// Stops the pooler with SIGSTOP: its connections stay open and new ones are accepted by the
    /// kernel, but nothing goes through until [`resume`](Self::resume).
    ///
    /// # Panics
    ///
    /// If the pooler was killed.
    pub fn pause(&self) {
        self.signal("STOP", |state| state == 'T');
    }

    /// Continues a pooler stopped by [`pause`](Self::pause) (SIGCONT).
    ///
    /// # Panics
    ///
    /// If the pooler was killed.
    pub fn resume(&self) {
        self.signal("CONT", |state| state != 'T');
    }

    /// Sends `signal` to the pooler and waits until its state letter satisfies `done`.
    fn signal(&self, signal: &str, done: impl Fn(char) -> bool) {
        let child = self.child();
        let Some(pid) = child.as_ref().map(Child::id) else {
            panic!(
                "pgbouncer on port {} was killed; restart() it first\n{}",
                self.port,
                log_section(&self.dir)
            );
        };
        send_signal(pid, signal);
        // The signal is asynchronous; return only once the process is in the state asked for.
        wait_until(Duration::from_secs(2), || {
            process_state(pid).is_none_or(&done)
        });
    }

    /// Kills the pooler if it runs, then starts it again on the same port and waits until a
    /// query goes through it.
    ///
    /// # Panics
    ///
    /// If another process took the port meanwhile, or the pooler does not come up.
    pub fn restart(&self) {
        let mut child = self.child();
        stop(&mut child);
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
            Ok(started) => *child = Some(started),
            Err(LaunchError::PortTaken) => panic!(
                "cannot restart pgbouncer: port {} was taken while it was down\n{}",
                self.port,
                log_section(&self.dir)
            ),
            Err(LaunchError::Failed(why)) => {
                panic!(
                    "cannot restart pgbouncer: {why}\n{}",
                    log_section(&self.dir)
                )
            }
        }
    }

    fn child(&self) -> MutexGuard<'_, Option<Child>> {
        self.child.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Drop for PgBouncer {
    fn drop(&mut self) {
        stop(self.child.get_mut().unwrap_or_else(PoisonError::into_inner));
    }
}

/// Why a launch did not produce a ready pooler.
enum LaunchError {
    /// Another process listens on the port: try another one.
    PortTaken,
    /// Anything else; the text goes into the panic message together with the log.
    Failed(String),
}

/// The config: one database, `lock`, on the server's loopback port; the unix socket in the temp
/// dir; logs to standard error (the log file); no pid file.
fn config(dir: &TempDir, port: u16, server_port: u16, mode: PoolMode) -> String {
    let mode = match mode {
        PoolMode::Transaction => "transaction",
        PoolMode::Session => "session",
    };
    let dir = dir.path().display();
    format!(
        "[databases]\n\
         {POSTGRES_ROLE} = host=127.0.0.1 port={server_port} dbname={POSTGRES_ROLE}\n\
         [pgbouncer]\n\
         listen_addr = 127.0.0.1\n\
         listen_port = {port}\n\
         unix_socket_dir = {dir}\n\
         auth_type = scram-sha-256\n\
         auth_file = {dir}/userlist.txt\n\
         pool_mode = {mode}\n\
         max_client_conn = 500\n\
         default_pool_size = 20\n\
         server_login_retry = 1\n\
         server_connect_timeout = 5\n\
         ignore_startup_parameters = extra_float_digits\n\
         admin_users = {POSTGRES_ROLE}\n\
         logfile =\n\
         pidfile =\n"
    )
}

/// Spawns `pgbouncer` on the config in `dir` and waits until a query goes through it.
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
    let _ = writeln!(log_file, "=== lock-tests: pgbouncer on port {port} ===");
    let launch_start = log_file.metadata().map_or(0, |meta| meta.len());
    let stderr = log_file.try_clone().map_err(|e| failed("share", e))?;

    let mut command = Command::new(pgbouncer_binary());
    command
        .arg(config_path(dir))
        .current_dir(dir.path())
        .stdin(Stdio::null())
        .stdout(log_file)
        .stderr(stderr);
    as_server_user(&mut command);
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(e) if e.kind() == ErrorKind::NotFound => panic!("{}", not_found()),
        Err(e) => return Err(LaunchError::Failed(format!("cannot spawn pgbouncer: {e}"))),
    };
    match wait_ready(&mut child, port) {
        Ok(()) => Ok(child),
        Err(why) => {
            let _ = child.kill();
            let _ = child.wait();
            let said = fs::read(&log).unwrap_or_default();
            let said = said.get(launch_start as usize..).unwrap_or_default();
            if String::from_utf8_lossy(said).contains("Address already in use") {
                return Err(LaunchError::PortTaken);
            }
            Err(LaunchError::Failed(why))
        }
    }
}

/// Polls until a query goes through the pooler to the server. A foreign process on the port
/// would have made ours exit, unable to bind.
fn wait_ready(child: &mut Child, port: u16) -> Result<(), String> {
    let deadline = Instant::now() + READY_TIMEOUT;
    loop {
        if let Some(status) = child.try_wait().ok().flatten() {
            return Err(format!(
                "pgbouncer on port {port} exited before answering ({status})"
            ));
        }
        let answer = psql_over_tcp(port, POSTGRES_ROLE, "SELECT 1");
        if answer.as_deref() == Ok("1") {
            return Ok(());
        }
        if Instant::now() >= deadline {
            let why = answer.err().unwrap_or_default();
            return Err(format!(
                "pgbouncer on port {port} did not answer within {READY_TIMEOUT:?}: {why}"
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn stop(child: &mut Option<Child>) {
    if let Some(mut child) = child.take() {
        let _ = child.kill();
        let _ = child.wait();
    }
}

/// The binary every [`PgBouncer`] runs: [`PGBOUNCER_BINARY_VAR`] when set, else `pgbouncer` on
/// `PATH`, else `/usr/sbin/pgbouncer` (where Debian puts it, off a plain user's `PATH`).
pub fn pgbouncer_binary() -> OsString {
    static BINARY: OnceLock<OsString> = OnceLock::new();
    BINARY
        .get_or_init(|| {
            if let Some(binary) = std::env::var_os(PGBOUNCER_BINARY_VAR) {
                return binary;
            }
            std::env::var_os("PATH")
                .iter()
                .flat_map(std::env::split_paths)
                .chain([PathBuf::from("/usr/sbin")])
                .map(|dir| dir.join("pgbouncer"))
                .find(|path| path.is_file())
                .map_or_else(|| OsString::from("pgbouncer"), PathBuf::into_os_string)
        })
        .clone()
}

/// Why the binary could not be run, and what to do about it.
fn not_found() -> String {
    match std::env::var_os(PGBOUNCER_BINARY_VAR) {
        Some(binary) => format!(
            "{PGBOUNCER_BINARY_VAR}={} not found: give the path of a pgbouncer binary \
             (absolute, as tests run in their package's directory), or unset it to use the \
             installed one",
            binary.to_string_lossy()
        ),
        None => NOT_FOUND.to_owned(),
    }
}

/// Writes `text` to `path`, readable by the server user only.
fn write_owned(path: &Path, text: &str) {
    use std::os::unix::fs::PermissionsExt;
    fs::write(path, text).unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
    let _ = fs::set_permissions(path, fs::Permissions::from_mode(0o600));
    give_to_server_user(path);
}

fn config_path(dir: &TempDir) -> PathBuf {
    dir.path().join("pgbouncer.ini")
}

fn log_path(dir: &TempDir) -> PathBuf {
    dir.path().join("pgbouncer.log")
}

fn log_section(dir: &TempDir) -> String {
    format!("--- pgbouncer log ---\n{}", read_log(&log_path(dir)))
}
