//! The service instances: `shop_service` processes on ports of their own choosing, started,
//! waited for and killed by the runner.
//!
//! Each instance is started with `--port 0`: it binds a port the system picks and says which in
//! its `listening on http://<addr>` line, so no port is chosen here and bound later by a process
//! that another one can beat to it.

use std::net::SocketAddr;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use lock_service_examples::shop::OnLeaseLost;
use tokio::io::{AsyncBufReadExt, BufReader, Lines};
use tokio::process::{Child, ChildStdout, Command};

use crate::load::Client;

/// How long a fresh instance may take to say where it listens, and then to answer its health
/// check: the runner's patience, generous for a loaded machine.
const READY_TIMEOUT: Duration = Duration::from_secs(20);

/// What precedes the address in the line the service prints once it listens.
const LISTENING: &str = "listening on http://";

/// A running `shop_service` process, killed when dropped.
pub(crate) struct Instance {
    pub(crate) name: String,
    pub(crate) addr: SocketAddr,
    child: Child,
}

impl Instance {
    /// Starts `bin` as instance `name` on a port it chooses, with its locks on `redis_url`, and
    /// waits until it answers.
    pub(crate) async fn start(
        bin: &Path,
        name: &str,
        db: &Path,
        redis_url: &str,
        on_lease_lost: OnLeaseLost,
        client: &Client,
    ) -> Result<Instance, String> {
        let mut child = Command::new(bin)
            .args(["--port", "0"])
            .arg("--db")
            .arg(db)
            .arg("--name")
            .arg(name)
            .args(["--on-lease-lost", on_lease_lost.as_arg()])
            .env("REDIS_URL", redis_url)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|err| format!("cannot start {}: {err}", bin.display()))?;
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| format!("{name}: no stdout"))?;
        let mut lines = BufReader::new(stdout).lines();
        let addr = match tokio::time::timeout(READY_TIMEOUT, listening_addr(&mut lines)).await {
            Ok(Ok(addr)) => addr,
            Ok(Err(why)) => {
                // Its output ended because it exited, most likely; dropping it kills it if not.
                let status = match tokio::time::timeout(READY_TIMEOUT, child.wait()).await {
                    Ok(Ok(status)) => status.to_string(),
                    Ok(Err(err)) => err.to_string(),
                    Err(_) => "still running".to_owned(),
                };
                return Err(format!("{name} did not start ({status}): {why}"));
            }
            Err(_) => {
                return Err(format!(
                    "{name} did not say where it listens within {READY_TIMEOUT:?}"
                ));
            }
        };
        // What it prints from now on (its warnings) goes to our stderr, and never fills the pipe.
        let prefix = name.to_owned();
        tokio::spawn(async move {
            while let Ok(Some(line)) = lines.next_line().await {
                eprintln!("[{prefix}] {line}");
            }
        });
        // The port is bound before the line is printed: a request waits in its backlog until the
        // server accepts it, so one health check tells it serves.
        if !tokio::time::timeout(READY_TIMEOUT, crate::load::is_healthy(client, addr))
            .await
            .unwrap_or(false)
        {
            return Err(format!(
                "{name} listens on {addr} but did not answer its health check within \
                 {READY_TIMEOUT:?}"
            ));
        }
        Ok(Instance {
            name: name.to_owned(),
            addr,
            child,
        })
    }

    /// The process id, for signals; `None` once it was reaped.
    pub(crate) fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// SIGKILL: no shutdown, no lock released, a transaction in flight left unfinished.
    pub(crate) async fn kill(&mut self) -> Result<(), String> {
        self.child
            .start_kill()
            .map_err(|err| format!("cannot kill {}: {err}", self.name))?;
        self.child
            .wait()
            .await
            .map_err(|err| format!("cannot reap {}: {err}", self.name))?;
        Ok(())
    }
}

/// Reads the service's lines up to the one that says where it listens, and returns that address.
/// An error when its output ends first (it exited) or the line does not hold an address.
async fn listening_addr(lines: &mut Lines<BufReader<ChildStdout>>) -> Result<SocketAddr, String> {
    loop {
        let line = lines
            .next_line()
            .await
            .map_err(|err| format!("reading its output: {err}"))?
            .ok_or("its output ended before it said where it listens")?;
        let Some((_, rest)) = line.split_once(LISTENING) else {
            eprintln!("{line}");
            continue;
        };
        let addr = rest
            .split(|c: char| c == ',' || c == '/' || c.is_whitespace())
            .next()
            .unwrap_or_default();
        return addr
            .parse()
            .map_err(|err| format!("`{addr}` in `{line}` is not an address: {err}"));
    }
}

/// Stops process `pid` with SIGSTOP for `pause`, then continues it: its connections stay open,
/// nothing it does happens meanwhile (its lease renewals included), and it carries on where it
/// stood, as after a long GC pause or a VM migration.
pub(crate) async fn pause(pid: u32, pause: Duration) -> Result<(), String> {
    signal(pid, "STOP").await?;
    tokio::time::sleep(pause).await;
    signal(pid, "CONT").await
}

async fn signal(pid: u32, name: &str) -> Result<(), String> {
    // `unsafe` is forbidden in the workspace, so no kill(2): the shell's builtin sends it.
    let status = Command::new("sh")
        .args(["-c", r#"kill -s "$0" "$1""#, name, &pid.to_string()])
        .status()
        .await
        .map_err(|err| format!("kill -s {name} {pid}: {err}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("kill -s {name} {pid}: {status}"))
    }
}
