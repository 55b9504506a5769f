//! The service instances: `shop_service` processes on free loopback ports, started, waited for
//! and killed by the runner.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

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
