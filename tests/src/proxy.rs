//! A TCP proxy that injects network faults between a client and a server.

use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

/// Bytes read from a socket at once.
const CHUNK_SIZE: usize = 16 * 1024;
/// Chunks read but not yet forwarded, per direction; past that the proxy stops reading, so a slow
/// or stalled direction pushes back on the sender as a slow network would.
const CHUNKS_IN_FLIGHT: usize = 64;

/// What the proxy does to traffic; every connection watches it.
#[derive(Clone, Debug, Default)]
struct Mode {
    delay: Duration,
    blackhole: bool,
    refuse: bool,
    /// Bumped by `cut()`: connections opened before the bump close.
    cut_epoch: u64,
    stopped: bool,
}

/// A TCP proxy on a free loopback port that forwards to `upstream` and can delay, stall, cut or
/// refuse connections on command.
///
/// It runs on a thread of its own with its own tokio runtime, so it works the same from plain
/// tests and from `#[tokio::test]` ones of any flavor, and the controls are plain methods callable
/// from any thread. Dropping it stops the thread and closes every connection.
#[derive(Debug)]
pub struct FaultProxy {
    addr: SocketAddr,
    upstream: SocketAddr,
    mode: watch::Sender<Mode>,
    thread: Option<JoinHandle<()>>,
}

impl FaultProxy {
    /// Starts a proxy to `upstream`, listening on a free loopback port. It forwards faithfully
    /// until told otherwise.
    pub fn start(upstream: SocketAddr) -> Self {
        // Bound here, not on the proxy thread, so the port is known and accepting on return.
        let listener = std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .expect("binding 127.0.0.1:0 should always find a free port");
        let addr = listener
            .local_addr()
            .expect("a bound listener has a local address");
        listener
            .set_nonblocking(true)
            .expect("tokio needs a non-blocking listener");
        let (mode, watcher) = watch::channel(Mode::default());
        let thread = thread::Builder::new()
            .name(format!("fault-proxy-{}", addr.port()))
            .spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("the fault proxy needs a tokio runtime");
                runtime.block_on(accept_loop(listener, upstream, watcher));
                // Dropping the runtime cancels the connection tasks, which closes their sockets.
            })
            .expect("the fault proxy needs a thread");
        Self {
            addr,
            upstream,
            mode,
            thread: Some(thread),
        }
    }

    /// The address clients connect to: `127.0.0.1:<port>`.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `redis://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("redis://{}", self.addr)
    }

    /// The address traffic is forwarded to.
    pub fn upstream(&self) -> SocketAddr {
        self.upstream
    }

    /// Holds every chunk, in both directions, for `delay` after it was read before forwarding it
    /// (`Duration::ZERO` turns it off). A request/response round trip then takes at least twice
    /// `delay`. Applies to chunks read from now on.
    pub fn set_delay(&self, delay: Duration) {
        self.mode.send_modify(|mode| mode.delay = delay);
    }

    /// While `on`, forwards nothing in either direction but keeps every connection open: bytes
    /// wait unsent, as with a network partition where packets are silently dropped. New
    /// connections are accepted and stall too. Turning it off forwards what waited.
    pub fn blackhole(&self, on: bool) {
        self.mode.send_modify(|mode| mode.blackhole = on);
    }

    /// Closes every open connection (both sides) now. Connections made afterwards work.
    pub fn cut(&self) {
        self.mode.send_modify(|mode| mode.cut_epoch += 1);
    }

    /// While `on`, closes each new connection as soon as it is accepted; open ones are untouched.
    pub fn refuse(&self, on: bool) {
        self.mode.send_modify(|mode| mode.refuse = on);
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.mode.send_modify(|mode| mode.stopped = true);
        if let Some(thread) = self.thread.take() {
            // A panic on the proxy thread has already been printed; do not panic in drop.
            let _ = thread.join();
        }
    }
}

async fn accept_loop(
    listener: std::net::TcpListener,
    upstream: SocketAddr,
    mut mode: watch::Receiver<Mode>,
) {
    let listener = TcpListener::from_std(listener)
        .expect("a non-blocking std listener converts to a tokio one");
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = mode.wait_for(|mode| mode.stopped) => return,
        };
        let Ok((client, _)) = accepted else {
            // Out of file descriptors or the like: give the system a moment.
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        let (refuse, epoch) = {
            let mode = mode.borrow();
            (mode.refuse, mode.cut_epoch)
        };
        if refuse {
            continue;
        }
        tokio::spawn(serve(client, upstream, epoch, mode.clone()));
    }
}

/// Forwards one connection until both sides are done, either side fails, or a cut.
async fn serve(
    client: TcpStream,
    upstream: SocketAddr,
    epoch: u64,
    mut mode: watch::Receiver<Mode>,
) {
    let forward = {
        let (to_server, to_client) = (mode.clone(), mode.clone());
        async move {
            let server = TcpStream::connect(upstream).await?;
            client.set_nodelay(true)?;
            server.set_nodelay(true)?;
            let (client_read, client_write) = client.into_split();
            let (server_read, server_write) = server.into_split();
            tokio::try_join!(
                pump(client_read, server_write, to_server),
                pump(server_read, client_write, to_client),
            )
        }
    };
    // Either way the sockets are dropped here, which closes them.
    tokio::select! {
        _ = forward => {}
        _ = mode.wait_for(|mode| mode.cut_epoch != epoch || mode.stopped) => {}
    }
}

/// Forwards one direction. Reading and writing are separate futures joined by a queue, so each
/// chunk is delayed from the moment it was read and delays do not add up along a stream.
async fn pump(
    mut from: OwnedReadHalf,
    mut to: OwnedWriteHalf,
    mode: watch::Receiver<Mode>,
) -> io::Result<()> {
    let (queue, mut queued) = mpsc::channel::<(Instant, Vec<u8>)>(CHUNKS_IN_FLIGHT);
    let mut read_mode = mode.clone();
    let mut write_mode = mode;
    let read = async move {
        loop {
            // Stalled: leave the bytes in the kernel's buffers.
            flowing(&mut read_mode).await?;
            let mut chunk = vec![0; CHUNK_SIZE];
            let n = from.read(&mut chunk).await?;
            if n == 0 {
                // Dropping the queue lets the writer finish and pass the half-close on.
                return Ok(());
            }
            chunk.truncate(n);
            let due = Instant::now() + read_mode.borrow().delay;
            if queue.send((due, chunk)).await.is_err() {
                return Ok(());
            }
        }
    };
    let write = async move {
        while let Some((due, chunk)) = queued.recv().await {
            tokio::time::sleep_until(due).await;
            flowing(&mut write_mode).await?;
            to.write_all(&chunk).await?;
        }
        to.shutdown().await
    };
    tokio::try_join!(read, write).map(|_| ())
}

/// Waits while the proxy is blackholed.
async fn flowing(mode: &mut watch::Receiver<Mode>) -> io::Result<()> {
    match mode.wait_for(|mode| !mode.blackhole).await {
        Ok(_) => Ok(()),
        Err(_) => Err(io::Error::other("fault proxy stopped")),
    }
}
