//! The lock server: a `redis-server` this experiment starts, kills and restarts itself, because a
//! restart chooses whether the data survives (`--appendonly yes`, `appendfsync always`) or not
//! (the data dir wiped, started with `--appendonly no`).

use std::fs;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use lock_tests::resp;
use lock_tests::{Reply, wait_until};

/// How long a fresh server may take to answer (loading its append-only file on a loaded
/// machine included): the experiment's patience, not a figure it measures.
const READY_TIMEOUT: Duration = Duration::from_secs(20);
/// How many ports to try when another process holds the chosen one.
const PORT_ATTEMPTS: usize = 10;

pub(crate) struct LockServer {
    port: u16,
    dir: PathBuf,
    child: Option<Child>,
}

impl LockServer {
    /// Starts a persistent server on a free port (never 6379) with its data in `dir`; another
    /// port when another process takes the chosen one first.
    pub(crate) fn start(dir: &Path) -> Result<Self, String> {
        fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let mut last = String::new();
        for _ in 0..PORT_ATTEMPTS {
            let mut server = LockServer {
                port: lock_tests::free_port(),
                dir: dir.to_owned(),
                child: None,
            };
            match server.launch(true) {
                Ok(()) => return Ok(server),
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    pub(crate) fn addr(&self) -> SocketAddr {
        SocketAddr::from((Ipv4Addr::LOCALHOST, self.port))
    }

    pub(crate) fn cmd(&self, args: &[&str]) -> Result<Reply, String> {
        resp::command(self.addr(), None, args, Duration::from_secs(2)).map_err(|e| e.to_string())
    }

    /// SIGKILL (no shutdown, no last save), then start again on the same port. With `persist`
    /// the append-only file written so far is loaded; without it the data is wiped and the server
    /// starts empty with persistence off, then turns it on again for the faults that follow.
    pub(crate) fn restart(&mut self, persist: bool) -> Result<(), String> {
        self.kill();
        if !persist {
            let aof = self.dir.join("appendonlydir");
            if aof.exists() {
                fs::remove_dir_all(&aof).map_err(|e| format!("{}: {e}", aof.display()))?;
            }
        }
        self.launch(persist)?;
        if !persist {
            self.enable_aof()?;
        }
        Ok(())
    }

    /// Stops the server with SIGSTOP: connections stay open and nothing is answered until
    /// [`resume`](Self::resume).
    pub(crate) fn pause(&self) -> Result<(), String> {
        crate::signal(self.pid()?, "STOP")
    }

    pub(crate) fn resume(&self) -> Result<(), String> {
        crate::signal(self.pid()?, "CONT")
    }

    fn pid(&self) -> Result<u32, String> {
        self.child
            .as_ref()
            .map(Child::id)
            .ok_or_else(|| format!("the lock server on port {} is not running", self.port))
    }

    pub(crate) fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    fn launch(&mut self, appendonly: bool) -> Result<(), String> {
        let log = fs::File::options()
            .create(true)
            .append(true)
            .open(self.dir.join("redis.log"))
            .map_err(|e| format!("lock server log: {e}"))?;
        let stderr = log.try_clone().map_err(|e| e.to_string())?;
        let mut child = Command::new("redis-server")
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendfsync", "always"])
            .args(["--appendonly", if appendonly { "yes" } else { "no" }])
            .arg("--dir")
            .arg(&self.dir)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(stderr)
            .spawn()
            .map_err(|e| format!("cannot start redis-server (install redis-server): {e}"))?;
        let addr = self.addr();
        let ours = format!("process_id:{}", child.id());
        let mut outcome = None;
        wait_until(READY_TIMEOUT, || {
            outcome = started(&mut child, addr, &ours);
            outcome.is_some()
        });
        let outcome = outcome.unwrap_or_else(|| {
            Err(format!(
                "lock redis-server on port {} did not answer within {READY_TIMEOUT:?}",
                self.port
            ))
        });
        match outcome {
            Ok(()) => self.child = Some(child),
            Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
        outcome
    }

    /// Turns the append-only file on and waits until its first rewrite is done, so that a
    /// persistent restart right after finds everything.
    fn enable_aof(&self) -> Result<(), String> {
        self.cmd(&["CONFIG", "SET", "appendonly", "yes"])?;
        let rewritten = wait_until(READY_TIMEOUT, || {
            let Ok(Reply::Bulk(info)) = self.cmd(&["INFO", "persistence"]) else {
                return false;
            };
            let info = String::from_utf8_lossy(&info).into_owned();
            let field = |name: &str| {
                info.lines()
                    .find_map(|l| l.trim_end().strip_prefix(name).map(str::to_owned))
            };
            field("aof_enabled:").as_deref() == Some("1")
                && field("aof_rewrite_in_progress:").as_deref() == Some("0")
                && field("aof_rewrite_scheduled:").as_deref() == Some("0")
        });
        if rewritten {
            Ok(())
        } else {
            Err(format!(
                "the lock server did not finish turning on its AOF within {READY_TIMEOUT:?}"
            ))
        }
    }
}

/// Whether the server `child` started on `addr` is up: `None` while it is not answering yet
/// (still loading, or not listening yet), `Some(Ok)` once it answers as the process `ours`
/// (`process_id:<pid>`), `Some(Err)` when it exited or another server answers on its port.
fn started(child: &mut Child, addr: SocketAddr, ours: &str) -> Option<Result<(), String>> {
    if let Ok(Some(status)) = child.try_wait() {
        return Some(Err(format!(
            "lock redis-server on {addr} exited at start ({status})"
        )));
    }
    let probe = resp::command(addr, None, &["INFO", "server"], Duration::from_millis(500));
    let Ok(Reply::Bulk(info)) = probe else {
        return None;
    };
    if String::from_utf8_lossy(&info)
        .lines()
        .any(|l| l.trim_end() == ours)
    {
        Some(Ok(()))
    } else {
        Some(Err(format!("{addr} belongs to another server")))
    }
}

impl Drop for LockServer {
    fn drop(&mut self) {
        self.kill();
    }
}
