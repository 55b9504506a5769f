//! `redis-server` processes owned by a test.

use std::ffi::OsString;
use std::fs::{self, OpenOptions};
use std::io::{self, ErrorKind, Write};
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use crate::port::free_port;
use crate::resp::{self, Reply};
use crate::tempdir::TempDir;
use crate::wait::wait_until;

const NOT_FOUND: &str = "redis-server not found: install it with 'sudo apt-get install redis-server' (or run scripts/test.sh, which does)";
/// How long a fresh server may take to answer.
const READY_TIMEOUT: Duration = Duration::from_secs(10);
/// How many ports to try when another process takes the chosen one first.
const PORT_ATTEMPTS: usize = 5;
/// Timeout of each command sent by [`RedisServer::cmd`] and [`RedisServer::try_cmd`].
const CMD_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a readiness probe waits for an answer before trying again.
const PROBE_TIMEOUT: Duration = Duration::from_millis(500);

/// A `redis-server` process on a free loopback port, killed and cleaned up on drop.
///
/// It runs with `--bind 127.0.0.1 --save "" --appendonly no`, its working directory and log in a
/// temp dir of its own. Put [`log`](Self::log) in every assertion message about it: when a test
/// fails, the server's side of the story is right there.
///
/// All methods take `&self`, so the server can be shared (e.g. in an `Arc`) with a thread that
/// kills or pauses it while the test waits on a client.
#[derive(Debug)]
pub struct RedisServer {
    port: u16,
    /// The config file given as the first argument, if any.
    config: Option<PathBuf>,
    args: Vec<String>,
    password: Option<String>,
    dir: TempDir,
    process: Mutex<Process>,
}

#[derive(Debug)]
struct Process {
    /// `None` once killed.
    child: Option<Child>,
    /// Stopped with SIGSTOP.
    paused: bool,
}

/// What a server's process is doing, as far as the harness knows: it started, paused and killed
/// it itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProcessState {
    /// Started (or restarted) and neither paused nor killed since.
    Running,
    /// Stopped with SIGSTOP by [`RedisServer::pause`].
    Paused,
    /// Killed by [`RedisServer::kill`]; [`RedisServer::restart`] brings it back.
    Killed,
}

/// Why a launch did not produce a ready server.
enum LaunchError {
    /// Another process listens on the port: try another one.
    PortTaken,
    /// Anything else; the text goes into the panic message together with the log.
    Failed(String),
}

impl RedisServer {
    /// Starts a server with the default arguments and waits until it answers.
    ///
    /// # Panics
    ///
    /// If `redis-server` is not installed, or the server does not come up within 10 s (the
    /// message then carries its log).
    pub fn start() -> Self {
        Self::start_with(&[])
    }

    /// Starts a server with extra command-line arguments, e.g. `&["--requirepass", "s3cret"]`, and
    /// waits until it answers. They come after the harness's own, so they can override them.
    ///
    /// A `--requirepass <password>` pair is remembered: [`cmd`](Self::cmd) authenticates with it
    /// and [`url`](Self::url) includes it.
    ///
    /// # Panics
    ///
    /// As [`start`](Self::start).
    pub fn start_with(args: &[&str]) -> Self {
        let args: Vec<String> = args.iter().map(|&arg| arg.to_owned()).collect();
        Self::start_custom(None, |_| args.clone())
    }

    /// Starts a server whose first argument is a config file holding `config`, followed by the
    /// harness's arguments and `args`, and waits until it answers. The file lives in the
    /// server's own temp dir and stays writable: Sentinel (`args` = `&["--sentinel"]`) refuses
    /// to run without a config file it can rewrite. Settings in `config` that the harness also
    /// passes on the command line (port, bind, dir, save) are overridden.
    ///
    /// # Panics
    ///
    /// As [`start`](Self::start), or when the file cannot be written.
    pub fn start_with_config(config: &str, args: &[&str]) -> Self {
        let args: Vec<String> = args.iter().map(|&arg| arg.to_owned()).collect();
        Self::start_custom(Some(config), |_| args.clone())
    }

    /// Starts a server that also speaks TLS, with the certificates of `certs`, on a second free
    /// port ([`tls_port`](Self::tls_port), [`tls_url`](Self::tls_url)); `auth_clients`: whether
    /// it asks clients for a certificate signed by the CA (`--tls-auth-clients yes`) or not
    /// (`no`). Its plain port stays on loopback for the harness: [`cmd`](Self::cmd), readiness,
    /// [`url`](Self::url). Keep `certs` alive as long as the server: a restart reads them again.
    ///
    /// # Panics
    ///
    /// As [`start`](Self::start): a server built without TLS does not come up, and the message
    /// carries its log.
    pub fn start_tls(certs: &crate::TestCerts, auth_clients: bool) -> Self {
        Self::start_tls_with_config(None, certs, auth_clients, &[])
    }

    /// [`start_tls`](Self::start_tls) with a config file holding `config` first, if given, and
    /// `args` after the TLS arguments, as [`start_with_config`](Self::start_with_config) (a
    /// sentinel over TLS: `&["--sentinel", "--tls-replication", "yes"]`).
    ///
    /// # Panics
    ///
    /// As [`start_tls`](Self::start_tls).
    pub fn start_tls_with_config(
        config: Option<&str>,
        certs: &crate::TestCerts,
        auth_clients: bool,
        args: &[&str],
    ) -> Self {
        // A TLS port another process took shows in the log as for the plain one, and the
        // launch is tried again on new ports.
        Self::start_custom(config, |_| {
            let mut all = certs.server_args(free_port(), auth_clients);
            all.extend(args.iter().map(|&arg| arg.to_owned()));
            all
        })
    }

    /// The general form of the constructors: `args_for_port` is called once per attempt with the
    /// port about to be tried, for arguments that depend on it (a cluster node's config file
    /// name, a second port of its own).
    pub(crate) fn start_custom(
        config: Option<&str>,
        args_for_port: impl FnMut(u16) -> Vec<String>,
    ) -> Self {
        Self::start_custom_on(config, free_port, args_for_port)
    }

    /// [`start_custom`](Self::start_custom) with the ports to try chosen by `choose_port`.
    pub(crate) fn start_custom_on(
        config: Option<&str>,
        mut choose_port: impl FnMut() -> u16,
        mut args_for_port: impl FnMut(u16) -> Vec<String>,
    ) -> Self {
        let dir = TempDir::new("redis");
        let config = config.map(|text| {
            let path = dir.path().join("redis.conf");
            fs::write(&path, text)
                .unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
            path
        });
        for _ in 0..PORT_ATTEMPTS {
            let port = choose_port();
            let args = args_for_port(port);
            let password = password_in(&args);
            match launch(&dir, port, config.as_deref(), &args, password.as_deref()) {
                Ok(child) => {
                    return Self {
                        port,
                        config,
                        args,
                        password,
                        dir,
                        process: Mutex::new(Process {
                            child: Some(child),
                            paused: false,
                        }),
                    };
                }
                Err(LaunchError::PortTaken) => continue,
                Err(LaunchError::Failed(why)) => {
                    panic!("{why}\n{}", log_section(&log_path(&dir)))
                }
            }
        }
        panic!(
            "redis-server found every port it tried taken ({PORT_ATTEMPTS} attempts)\n{}",
            log_section(&log_path(&dir))
        );
    }

    /// The port the server listens on (stays the same across [`restart`](Self::restart)).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `127.0.0.1:<port>`.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from((Ipv4Addr::LOCALHOST, self.port))
    }

    /// The URL a client connects with: `redis://127.0.0.1:<port>`, or
    /// `redis://:<password>@127.0.0.1:<port>` for a server started with `--requirepass`.
    pub fn url(&self) -> String {
        match &self.password {
            Some(password) => format!("redis://:{password}@{}", self.addr()),
            None => format!("redis://{}", self.addr()),
        }
    }

    /// The TLS port of a server started with [`start_tls`](Self::start_tls).
    pub fn tls_port(&self) -> Option<u16> {
        self.args
            .windows(2)
            .rev()
            .find(|pair| pair[0] == "--tls-port")
            .and_then(|pair| pair[1].parse().ok())
    }

    /// `rediss://127.0.0.1:<tls port>` (with the password, as [`url`](Self::url)); the server's
    /// certificate names `127.0.0.1` and `localhost`.
    ///
    /// # Panics
    ///
    /// If the server was not started with [`start_tls`](Self::start_tls).
    pub fn tls_url(&self) -> String {
        let Some(port) = self.tls_port() else {
            panic!(
                "redis-server on port {} has no TLS port: start it with start_tls",
                self.port
            )
        };
        match &self.password {
            Some(password) => format!("rediss://:{password}@127.0.0.1:{port}"),
            None => format!("rediss://127.0.0.1:{port}"),
        }
    }

    /// The password given with `--requirepass`, if any.
    pub fn password(&self) -> Option<&str> {
        self.password.as_deref()
    }

    /// Everything the server has logged so far, across restarts, with a marker line before each
    /// start. Meant for assertion and panic messages.
    pub fn log(&self) -> String {
        read_log(&log_path(&self.dir))
    }

    /// Runs one command on a fresh connection (authenticating when the server has a password) and
    /// returns the reply as `redis-cli` prints it: `PONG`, `OK`, `42`, `(nil)`,
    /// `(error) ERR ...`, arrays one element per line. See [`Reply`] for the details.
    ///
    /// # Panics
    ///
    /// When the server cannot be reached or does not answer within 5 s; the message carries the
    /// log. Use [`try_cmd`](Self::try_cmd) to expect that.
    pub fn cmd(&self, args: &[&str]) -> String {
        match self.try_cmd(args) {
            Ok(reply) => reply.to_string(),
            Err(e) => panic!(
                "{args:?} on redis-server at {} failed: {e}\n{}",
                self.addr(),
                self.log_section()
            ),
        }
    }

    /// Like [`cmd`](Self::cmd), but returns the reply as it came, and I/O failures (refused,
    /// timed out, closed) as `Err` instead of panicking.
    pub fn try_cmd(&self, args: &[&str]) -> io::Result<Reply> {
        resp::command(self.addr(), self.password(), args, CMD_TIMEOUT)
    }

    /// Brings the server back whatever this harness did to it: resumes it if paused, restarts
    /// it if killed, leaves it alone if running.
    pub fn revive(&self) {
        match self.state() {
            ProcessState::Paused => self.resume(),
            ProcessState::Killed => self.restart(),
            ProcessState::Running => {}
        }
    }

    /// Whether the server runs, is paused or was killed (by this harness: a server that crashed
    /// on its own still counts as running).
    pub fn state(&self) -> ProcessState {
        let process = self.process();
        match (&process.child, process.paused) {
            (None, _) => ProcessState::Killed,
            (Some(_), true) => ProcessState::Paused,
            (Some(_), false) => ProcessState::Running,
        }
    }

    /// Kills the server with SIGKILL (no shutdown, no goodbye to clients) and reaps it. The port
    /// refuses connections afterwards. Does nothing if it is already dead.
    pub fn kill(&self) {
        stop(&mut self.process());
    }

    /// Stops the server with SIGSTOP: connections stay open and new ones are accepted by the
    /// kernel, but nothing is answered until [`resume`](Self::resume).
    ///
    /// # Panics
    ///
    /// If the server was killed.
    pub fn pause(&self) {
        let mut process = self.process();
        let pid = self.pid(&process);
        send_signal(pid, "STOP");
        process.paused = true;
        // The signal is asynchronous; return only once the process is really stopped.
        wait_until(Duration::from_secs(2), || {
            process_state(pid).is_none_or(|state| state == 'T')
        });
    }

    /// Continues a server stopped by [`pause`](Self::pause) (SIGCONT). Commands sent meanwhile
    /// are then answered.
    ///
    /// # Panics
    ///
    /// If the server was killed.
    pub fn resume(&self) {
        let mut process = self.process();
        let pid = self.pid(&process);
        send_signal(pid, "CONT");
        process.paused = false;
        wait_until(Duration::from_secs(2), || {
            process_state(pid).is_none_or(|state| state != 'T')
        });
    }

    /// Kills the server if it runs, then starts it again on the same port with the same
    /// arguments and waits until it answers. Data is gone (nothing is persisted).
    ///
    /// # Panics
    ///
    /// If another process took the port meanwhile, or the server does not come up.
    pub fn restart(&self) {
        let mut process = self.process();
        stop(&mut process);
        // The freed port may serve meanwhile as the local end of some client's connection (an
        // ephemeral port, as every port of this harness is): that ends with the connection,
        // so the port is tried again for a while before the restart gives up.
        let patience = Instant::now() + Duration::from_secs(15);
        let launched = loop {
            match launch(
                &self.dir,
                self.port,
                self.config.as_deref(),
                &self.args,
                self.password(),
            ) {
                Err(LaunchError::PortTaken) if Instant::now() < patience => {
                    std::thread::sleep(Duration::from_millis(200));
                }
                launched => break launched,
            }
        };
        match launched {
            Ok(child) => process.child = Some(child),
            Err(LaunchError::PortTaken) => panic!(
                "cannot restart redis-server: port {} was taken while it was down\n{}",
                self.port,
                self.log_section()
            ),
            Err(LaunchError::Failed(why)) => {
                panic!("cannot restart redis-server: {why}\n{}", self.log_section())
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
                "redis-server on port {} was killed; restart() it first\n{}",
                self.port,
                self.log_section()
            ),
        }
    }

    fn log_section(&self) -> String {
        log_section(&log_path(&self.dir))
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let process = self
            .process
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner);
        stop(process);
    }
}

/// The password of the last `--requirepass <password>` pair in `args`.
fn password_in(args: &[String]) -> Option<String> {
    args.windows(2)
        .rev()
        .find(|pair| pair[0] == "--requirepass")
        .map(|pair| pair[1].clone())
}

/// Spawns a server on `port` and waits until it answers.
fn launch(
    dir: &TempDir,
    port: u16,
    config: Option<&Path>,
    args: &[String],
    password: Option<&str>,
) -> Result<Child, LaunchError> {
    let log = log_path(dir);
    let mut log_file = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log)
        .map_err(|e| LaunchError::Failed(format!("cannot open {}: {e}", log.display())))?;
    // Ignoring a failed marker write is fine: it only makes the log easier to read.
    let config_arg = config.map_or(String::new(), |path| format!("{} ", path.display()));
    let _ = writeln!(
        log_file,
        "=== lock-tests: redis-server {config_arg}--port {port} {args:?} ==="
    );
    // Only this launch's part of the log tells whether the port was taken.
    let launch_start = log_file.metadata().map_or(0, |meta| meta.len());
    let stderr = log_file
        .try_clone()
        .map_err(|e| LaunchError::Failed(format!("cannot share {}: {e}", log.display())))?;

    // redis-server takes a config file only as its first argument.
    let spawned = Command::new(server_binary())
        .args(config)
        .args(["--port", &port.to_string()])
        .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
        .arg("--dir")
        .arg(dir.path())
        .args(args)
        .stdin(Stdio::null())
        .stdout(log_file)
        .stderr(stderr)
        .spawn();
    let mut child = match spawned {
        Ok(child) => child,
        Err(e) if e.kind() == ErrorKind::NotFound => panic!("{}", not_found()),
        Err(e) => {
            return Err(LaunchError::Failed(format!(
                "cannot spawn redis-server: {e}"
            )));
        }
    };

    match wait_ready(&mut child, port, password) {
        Ok(()) => Ok(child),
        Err(why) => {
            let _ = child.kill();
            let _ = child.wait();
            let said = fs::read(&log).unwrap_or_default();
            let said = said.get(launch_start as usize..).unwrap_or_default();
            if String::from_utf8_lossy(said).contains("Address already in use") {
                return Err(LaunchError::PortTaken);
            }
            Err(why)
        }
    }
}

/// The variable naming the server binary the harness starts instead of `redis-server` from
/// `PATH`: scripts/compat.sh points it at other servers (older Redis, Valkey) to run the suites on
/// them.
pub const SERVER_BINARY_VAR: &str = "LOCK_TESTS_REDIS_SERVER";

/// The server binary every [`RedisServer`] runs: [`SERVER_BINARY_VAR`] when set, else
/// `redis-server` from `PATH`.
pub fn server_binary() -> OsString {
    std::env::var_os(SERVER_BINARY_VAR).unwrap_or_else(|| OsString::from("redis-server"))
}

/// Why the server binary could not be run, and what to do about it.
fn not_found() -> String {
    match std::env::var_os(SERVER_BINARY_VAR) {
        Some(binary) => format!(
            "{SERVER_BINARY_VAR}={} not found: give the path of a server binary (absolute, as \
             tests run in their package's directory), or unset it to use redis-server from PATH",
            binary.to_string_lossy()
        ),
        None => NOT_FOUND.to_owned(),
    }
}

/// The version of [`server_binary`] as `(major, minor, patch)`, read once from its `--version`
/// line (`Redis server v=7.0.15 ...`, `Valkey server v=8.0.1 ...`). Valkey reports its own
/// version here; for the Redis feature level it matches (Valkey 7.2 and later are at least
/// Redis 7.2).
///
/// # Panics
///
/// If the binary cannot be run or prints no version.
pub fn server_version() -> (u32, u32, u32) {
    static VERSION: OnceLock<(u32, u32, u32)> = OnceLock::new();
    *VERSION.get_or_init(|| {
        let binary = server_binary();
        let output = match Command::new(&binary).arg("--version").output() {
            Ok(output) => output,
            Err(e) if e.kind() == ErrorKind::NotFound => panic!("{}", not_found()),
            Err(e) => panic!("cannot run {} --version: {e}", binary.to_string_lossy()),
        };
        let text = String::from_utf8_lossy(&output.stdout);
        parse_version(&text).unwrap_or_else(|| {
            panic!(
                "no version in the output of {} --version: {text:?}",
                binary.to_string_lossy()
            )
        })
    })
}

/// The `v=X.Y.Z` of a `--version` line.
fn parse_version(line: &str) -> Option<(u32, u32, u32)> {
    let version = line
        .split_whitespace()
        .find_map(|word| word.strip_prefix("v="))?;
    let mut parts = version.split('.').map(|part| part.parse::<u32>().ok());
    Some((
        parts.next()??,
        parts.next()??,
        parts.next().flatten().unwrap_or(0),
    ))
}

/// Polls until the server answers a command as itself: the `process_id` in `INFO server` must be
/// the child's, so a foreign server that grabbed the port is not mistaken for ours.
fn wait_ready(child: &mut Child, port: u16, password: Option<&str>) -> Result<(), LaunchError> {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let deadline = Instant::now() + READY_TIMEOUT;
    loop {
        if let Some(status) = child.try_wait().ok().flatten() {
            return Err(LaunchError::Failed(format!(
                "redis-server on port {port} exited before answering ({status})"
            )));
        }
        match resp::command(addr, password, &["INFO", "server"], PROBE_TIMEOUT) {
            Ok(Reply::Bulk(info)) => {
                let info = String::from_utf8_lossy(&info);
                let ours = format!("process_id:{}", child.id());
                if info.lines().any(|line| line.trim_end() == ours) {
                    return Ok(());
                }
                return Err(LaunchError::PortTaken);
            }
            Ok(Reply::Error(e)) if e.starts_with("LOADING") => {}
            // NOAUTH (a password set other than by `--requirepass`) and the like: it answers.
            Ok(_) => return Ok(()),
            Err(_) => {}
        }
        if Instant::now() >= deadline {
            return Err(LaunchError::Failed(format!(
                "redis-server on port {port} did not answer within {READY_TIMEOUT:?}"
            )));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Resumes (a stopped process still dies of SIGKILL, but resuming first keeps it simple to
/// reason about), kills and reaps the process.
fn stop(process: &mut Process) {
    let Some(mut child) = process.child.take() else {
        return;
    };
    if process.paused {
        send_signal(child.id(), "CONT");
        process.paused = false;
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// Sends a signal by name with the shell's `kill` builtin (the workspace forbids `unsafe`, so
/// no direct `kill(2)`).
pub(crate) fn send_signal(pid: u32, signal: &str) {
    let status = Command::new("sh")
        .args(["-c", r#"kill -s "$0" "$1""#, signal, &pid.to_string()])
        .status()
        .expect("sh must be available to send signals");
    assert!(status.success(), "kill -s {signal} {pid} failed: {status}");
}

/// Sends a signal by name to each of `pids`, as [`send_signal`] does to one, ignoring those that
/// have exited meanwhile.
pub(crate) fn signal_all(pids: &[u32], signal: &str) {
    if pids.is_empty() {
        return;
    }
    let _ = Command::new("sh")
        .args(["-c", r#"kill -s "$0" "$@" 2>/dev/null"#, signal])
        .args(pids.iter().map(u32::to_string))
        .status();
}

/// The state letter from `/proc/<pid>/stat` (`T` = stopped), or `None` where there is no procfs.
pub(crate) fn process_state(pid: u32) -> Option<char> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, after_name) = stat.rsplit_once(')')?;
    after_name.trim_start().chars().next()
}

fn log_path(dir: &TempDir) -> PathBuf {
    dir.path().join("redis.log")
}

/// The file at `path` as text, or a line saying why it cannot be read: for logs.
pub(crate) fn read_log(path: &std::path::Path) -> String {
    match fs::read(path) {
        Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
        Err(e) => format!("<cannot read {}: {e}>", path.display()),
    }
}

fn log_section(path: &std::path::Path) -> String {
    format!("--- redis-server log ---\n{}", read_log(path))
}

#[cfg(test)]
mod tests {
    use super::parse_version;

    #[test]
    fn versions_are_read_from_redis_and_valkey_version_lines() {
        let redis = "Redis server v=7.0.15 sha=00000000:0 malloc=jemalloc-5.3.0 bits=64 build=1";
        assert_eq!(parse_version(redis), Some((7, 0, 15)));
        let valkey = "Valkey server v=8.0.1 sha=00000000:0 malloc=jemalloc-5.3.0 bits=64 build=2";
        assert_eq!(parse_version(valkey), Some((8, 0, 1)));
        assert_eq!(parse_version("Redis server v=5.0 sha=1"), Some((5, 0, 0)));
        assert_eq!(parse_version("redis-server: command not found"), None);
    }
}
