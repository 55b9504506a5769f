//! The service instances: `shop_service` processes on free loopback ports, started, waited for
//! and killed by the runner.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use lock_examples::shop::OnLeaseLost;
use tokio::process::{Child, Command};

use crate::load::Client;

/// How long a fresh instance may take to answer its health check.
const READY_TIMEOUT: Duration = Duration::from_secs(20);

/// A running `shop_service` process, killed when dropped.
pub(crate) struct Instance {
    pub(crate) name: String,
    pub(crate) addr: SocketAddr,
    child: Child,
}

impl Instance {
    /// Starts `bin` as instance `name` on a free port, with its locks on `redis_url`, and waits
    /// until it answers.
    pub(crate) async fn start(
        bin: &Path,
        name: &str,
        db: &Path,
        redis_url: &str,
        on_lease_lost: OnLeaseLost,
        client: &Client,
    ) -> Result<Instance, String> {
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, lock_tests::free_port()));
        let child = Command::new(bin)
            .arg("--port")
            .arg(addr.port().to_string())
            .arg("--db")
            .arg(db)
            .arg("--name")
            .arg(name)
            .args(["--on-lease-lost", on_lease_lost.as_arg()])
            .env("REDIS_URL", redis_url)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .map_err(|err| format!("cannot start {}: {err}", bin.display()))?;
        let mut instance = Instance {
            name: name.to_owned(),
            addr,
            child,
        };
        instance.wait_ready(client).await?;
        Ok(instance)
    }

    async fn wait_ready(&mut self, client: &Client) -> Result<(), String> {
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(format!("{} exited at start ({status})", self.name));
            }
            if crate::load::is_healthy(client, self.addr).await {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "{} did not answer on {} within {READY_TIMEOUT:?}",
                    self.name, self.addr
                ));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
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
