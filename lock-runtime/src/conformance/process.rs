//! The processes of a check: managers made by the store author's factory, each standing for a
//! process of its own, and a runtime that can be stalled, as a process is by a long pause.

use std::future::Future;
use std::pin::Pin;
use std::sync::mpsc;

use tokio::runtime::Handle;
use tokio::sync::oneshot;

use crate::error::LockError;
use crate::manager::LockManager;

/// What makes another manager on the store under test.
pub(crate) type Factory<'a> =
    dyn Fn() -> Pin<Box<dyn Future<Output = Result<LockManager, LockError>> + 'a>> + 'a;

/// The managers one check made, shut down when it ends; and the keys it may use.
pub(crate) struct Processes<'a> {
    factory: &'a Factory<'a>,
    made: Vec<LockManager>,
    keys: String,
}

impl<'a> Processes<'a> {
    /// The processes of check `check` of run `run`; its keys start with
    /// `conformance:<run>:<check>`.
    pub(crate) fn new(factory: &'a Factory<'a>, run: &str, check: &str) -> Processes<'a> {
        Processes {
            factory,
            made: Vec::new(),
            keys: format!("conformance:{run}:{check}"),
        }
    }

    /// A key of this check's own, named `name` within it.
    pub(crate) fn key(&self, name: &str) -> String {
        format!("{}:{name}", self.keys)
    }

    /// Another process: a manager of its own on the store.
    pub(crate) async fn spawn(&mut self) -> Result<LockManager, String> {
        let manager = (self.factory)()
            .await
            .map_err(|err| format!("the factory could not make a manager: {err}"))?;
        self.made.push(manager.clone());
        Ok(manager)
    }

    /// `count` processes.
    pub(crate) async fn spawn_many(&mut self, count: usize) -> Result<Vec<LockManager>, String> {
        let mut managers = Vec::with_capacity(count);
        for _ in 0..count {
            managers.push(self.spawn().await?);
        }
        Ok(managers)
    }

    /// Shuts every manager down: what a check left held (on purpose, as a crashed holder) is
    /// released, so that the next check starts on an empty store.
    pub(crate) async fn close(self) {
        for manager in self.made {
            // A crashed holder's lock may be gone or taken by now: what its shutdown says about
            // it is no part of any check.
            let _ = manager.shutdown().await;
        }
    }
}

/// A runtime on a thread of its own that a check can stall, as a process is stalled by a long
/// pause (a stopped VM, a GC pause): while stalled, nothing spawned on it runs, the watchdog
/// of a lock taken on it included.
pub(crate) struct Stallable {
    handle: Handle,
    /// Dropped to let a stalled runtime go on.
    stall: Option<mpsc::Sender<()>>,
    /// Sent (or dropped) to end the runtime's thread.
    stop: Option<oneshot::Sender<()>>,
}

impl Stallable {
    /// Starts the runtime's thread.
    pub(crate) fn start() -> Result<Stallable, String> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|err| format!("could not build a runtime to stall: {err}"))?;
        let handle = runtime.handle().clone();
        let (stop, stopped) = oneshot::channel::<()>();
        std::thread::Builder::new()
            .name("conformance-stallable".into())
            .spawn(move || {
                let _ = runtime.block_on(stopped);
            })
            .map_err(|err| format!("could not start a thread to stall: {err}"))?;
        Ok(Stallable {
            handle,
            stall: None,
            stop: Some(stop),
        })
    }

    /// Runs `work` on this runtime: what it starts in the background (a lock's watchdog)
    /// runs there too.
    pub(crate) async fn run<F>(&self, work: F) -> Result<F::Output, String>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.handle
            .spawn(work)
            .await
            .map_err(|err| format!("work on the stallable runtime did not finish: {err}"))
    }

    /// Stalls the runtime: returns once its thread is blocked and runs nothing.
    pub(crate) async fn stall(&mut self) -> Result<(), String> {
        let (stall, stalled) = mpsc::channel::<()>();
        let (blocked, is_blocked) = oneshot::channel::<()>();
        self.handle.spawn(async move {
            let _ = blocked.send(());
            // Blocks the runtime's only thread until `resume` drops the sender.
            let _ = stalled.recv();
        });
        self.stall = Some(stall);
        is_blocked
            .await
            .map_err(|_| "the stallable runtime stopped before it stalled".to_owned())
    }

    /// Lets a stalled runtime go on.
    pub(crate) fn resume(&mut self) {
        self.stall = None;
    }
}

impl Drop for Stallable {
    fn drop(&mut self) {
        self.resume();
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}
