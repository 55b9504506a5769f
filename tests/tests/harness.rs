//! The harness itself: servers start, die, stall and come back as told; the proxy forwards and
//! injects the faults it promises.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use lock_tests::free_port;
use lock_tests::prelude::*;
use lock_tests::resp::{self, Reply};

/// How long a test reads before it says that nothing came: a blackholed or paused peer never
/// answers, so a short bound cannot fail a healthy run, however loaded the machine.
const STALL: Duration = Duration::from_millis(300);

fn ping(addr: SocketAddr) -> std::io::Result<Reply> {
    resp::command(addr, None, &["PING"], PATIENCE)
}

/// A raw connection with a PING already answered, so later failures are about the fault alone.
fn connected(addr: SocketAddr) -> TcpStream {
    let stream = TcpStream::connect(addr).expect("connect");
    stream.set_nodelay(true).expect("nodelay");
    send_ping(&stream);
    assert_eq!(
        read_pong(&stream, PATIENCE).expect("first PING"),
        "+PONG\r\n"
    );
    stream
}

fn send_ping(mut stream: &TcpStream) {
    stream
        .write_all(&resp::encode(&["PING"]))
        .expect("send PING");
}

/// Reads the 7 bytes of `+PONG\r\n`, or fails with the read error (a timeout included).
fn read_pong(mut stream: &TcpStream, timeout: Duration) -> std::io::Result<String> {
    stream.set_read_timeout(Some(timeout))?;
    let mut pong = [0; 7];
    stream.read_exact(&mut pong)?;
    Ok(String::from_utf8_lossy(&pong).into_owned())
}

/// True when nothing listens on `addr` any more (a stopped process would still accept).
fn refuses(addr: SocketAddr) -> bool {
    TcpStream::connect_timeout(&addr, PATIENCE)
        .is_err_and(|e| e.kind() == ErrorKind::ConnectionRefused)
}

fn is_timeout(e: &std::io::Error) -> bool {
    matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut)
}

/// True when the peer closed the connection: EOF or a reset, not a timeout.
fn is_closed(stream: &TcpStream) -> bool {
    stream
        .set_read_timeout(Some(PATIENCE))
        .expect("set timeout");
    let mut byte = [0; 1];
    match (&*stream).read(&mut byte) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) => !is_timeout(&e),
    }
}

#[test]
fn server_starts_and_answers_ping() {
    let server = RedisServer::start();
    assert_ne!(server.port(), 6379);
    assert_eq!(
        server.addr().to_string(),
        format!("127.0.0.1:{}", server.port())
    );
    assert_eq!(server.url(), format!("redis://127.0.0.1:{}", server.port()));
    assert_eq!(
        ping(server.addr()).expect("PING"),
        Reply::Status("PONG".into()),
        "{}",
        server.log()
    );
}

#[test]
fn server_persists_nothing() {
    let server = RedisServer::start();
    assert_eq!(server.cmd(&["CONFIG", "GET", "save"]), "save\n");
    assert_eq!(
        server.cmd(&["CONFIG", "GET", "appendonly"]),
        "appendonly\nno"
    );
}

#[test]
fn server_log_shows_the_server_starting() {
    let server = RedisServer::start();
    let log = server.log();
    assert!(log.contains("Ready to accept connections"), "{log}");
    assert!(log.contains(&format!("--port {}", server.port())), "{log}");
}

#[test]
fn two_servers_get_different_ports() {
    let first = RedisServer::start();
    let second = RedisServer::start();
    assert_ne!(first.port(), second.port());
    first.cmd(&["SET", "who", "first"]);
    assert_eq!(second.cmd(&["GET", "who"]), "(nil)", "{}", second.log());
}

#[test]
fn cmd_renders_replies_as_redis_cli_does() {
    let server = RedisServer::start();
    assert_eq!(server.cmd(&["SET", "k", "v"]), "OK");
    assert_eq!(server.cmd(&["GET", "k"]), "v");
    assert_eq!(server.cmd(&["GET", "missing"]), "(nil)");
    assert_eq!(server.cmd(&["INCR", "n"]), "1");
    assert_eq!(server.cmd(&["HSET", "h", "a", "1", "b", "2"]), "2");
    assert_eq!(server.cmd(&["TYPE", "h"]), "hash");
    assert_eq!(server.cmd(&["HKEYS", "h"]), "a\nb");
    assert_eq!(server.cmd(&["PTTL", "k"]), "-1");
    assert_eq!(server.cmd(&["KEYS", "nothing*"]), "(empty array)");
    assert!(
        server.cmd(&["NOSUCHCOMMAND"]).starts_with("(error) ERR"),
        "{}",
        server.log()
    );
}

#[test]
fn kill_makes_server_unreachable() {
    let server = RedisServer::start();
    server.kill();
    assert!(refuses(server.addr()), "{}", server.log());
    assert!(server.try_cmd(&["PING"]).is_err());
}

#[test]
fn kill_closes_open_connections() {
    let server = RedisServer::start();
    let stream = connected(server.addr());
    server.kill();
    assert!(is_closed(&stream), "{}", server.log());
}

#[test]
fn restart_answers_again_on_the_same_port_with_no_data() {
    let server = RedisServer::start();
    let port = server.port();
    server.cmd(&["SET", "k", "v"]);
    server.kill();
    server.restart();
    assert_eq!(server.port(), port);
    assert_eq!(server.cmd(&["PING"]), "PONG", "{}", server.log());
    assert_eq!(server.cmd(&["GET", "k"]), "(nil)", "{}", server.log());
    // Restarting a running server works too.
    server.restart();
    assert_eq!(server.cmd(&["PING"]), "PONG", "{}", server.log());
}

#[test]
fn restart_fails_loudly_when_the_port_was_taken() {
    let server = RedisServer::start();
    server.kill();
    let _squatter = std::net::TcpListener::bind(server.addr()).expect("port is free after kill");
    let restarted = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| server.restart()));
    let message = restarted.expect_err("restart on a taken port must panic");
    let message = message
        .downcast_ref::<String>()
        .expect("panic message is a String");
    assert!(message.contains("was taken"), "{message}");
    assert!(message.contains("Address already in use"), "{message}");
}

#[test]
fn pause_stalls_commands_until_resume() {
    let server = RedisServer::start();
    let stream = connected(server.addr());
    server.pause();
    send_ping(&stream);
    let stalled = read_pong(&stream, STALL);
    assert!(
        stalled.as_ref().is_err_and(is_timeout),
        "answered while paused: {stalled:?}\n{}",
        server.log()
    );
    server.resume();
    assert_eq!(
        read_pong(&stream, PATIENCE).expect("PONG after resume"),
        "+PONG\r\n"
    );
}

#[test]
fn dropping_server_kills_it() {
    let server = RedisServer::start();
    let addr = server.addr();
    drop(server);
    assert!(refuses(addr));
}

#[test]
fn dropping_paused_server_kills_it() {
    let server = RedisServer::start();
    let addr = server.addr();
    server.pause();
    drop(server);
    assert!(refuses(addr));
}

#[test]
fn requirepass_server_rejects_commands_without_auth() {
    let server = RedisServer::start_with(&["--requirepass", "s3cret"]);
    let anonymous = resp::command(server.addr(), None, &["PING"], PATIENCE).expect("reply");
    assert!(
        matches!(&anonymous, Reply::Error(e) if e.starts_with("NOAUTH")),
        "{anonymous:?}\n{}",
        server.log()
    );
    let wrong = resp::command(server.addr(), Some("guess"), &["PING"], PATIENCE).expect("reply");
    assert!(
        matches!(&wrong, Reply::Error(e) if e.starts_with("WRONGPASS")),
        "{wrong:?}"
    );
    assert_eq!(server.password(), Some("s3cret"));
    assert_eq!(server.cmd(&["PING"]), "PONG", "{}", server.log());
    assert_eq!(
        server.url(),
        format!("redis://:s3cret@127.0.0.1:{}", server.port())
    );
}

#[test]
fn proxy_forwards_both_ways() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.addr());
    assert_ne!(proxy.addr(), server.addr());
    assert_eq!(proxy.url(), format!("redis://{}", proxy.addr()));
    assert_eq!(proxy.upstream(), server.addr());
    let set = resp::command(proxy.addr(), None, &["SET", "via", "proxy"], PATIENCE).expect("SET");
    assert_eq!(set, Reply::Status("OK".into()));
    assert_eq!(server.cmd(&["GET", "via"]), "proxy", "{}", server.log());
}

#[test]
fn proxy_delay_adds_latency_to_each_round_trip() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.addr());
    let stream = connected(proxy.addr());
    let delay = Duration::from_millis(150);
    proxy.set_delay(delay);
    let started = Instant::now();
    send_ping(&stream);
    read_pong(&stream, PATIENCE).expect("delayed PONG");
    let took = started.elapsed();
    assert!(
        took >= delay,
        "round trip took {took:?} with a {delay:?} delay"
    );
}

#[test]
fn proxy_blackhole_stalls_and_lifting_it_delivers() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.addr());
    let open = connected(proxy.addr());
    proxy.blackhole(true);
    send_ping(&open);
    let stalled = read_pong(&open, STALL);
    assert!(stalled.as_ref().is_err_and(is_timeout), "{stalled:?}");

    // New connections are accepted but stall as well.
    let fresh = TcpStream::connect(proxy.addr()).expect("accepted while blackholed");
    send_ping(&fresh);
    let stalled = read_pong(&fresh, STALL);
    assert!(stalled.as_ref().is_err_and(is_timeout), "{stalled:?}");

    proxy.blackhole(false);
    assert_eq!(
        read_pong(&open, PATIENCE).expect("PONG after blackhole"),
        "+PONG\r\n"
    );
    assert_eq!(
        read_pong(&fresh, PATIENCE).expect("PONG after blackhole"),
        "+PONG\r\n"
    );
}

#[test]
fn proxy_cut_closes_open_connections_and_new_ones_work() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.addr());
    let stream = connected(proxy.addr());
    proxy.cut();
    assert!(is_closed(&stream));
    assert_eq!(
        ping(proxy.addr()).expect("PING after cut"),
        Reply::Status("PONG".into())
    );
}

#[test]
fn proxy_refuse_closes_new_connections_until_lifted() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.addr());
    let open = connected(proxy.addr());
    proxy.refuse(true);
    let refused = TcpStream::connect(proxy.addr()).expect("TCP connect still succeeds");
    assert!(is_closed(&refused));
    assert!(ping(proxy.addr()).is_err());
    // Connections made before are untouched.
    send_ping(&open);
    assert_eq!(read_pong(&open, PATIENCE).expect("PONG"), "+PONG\r\n");
    proxy.refuse(false);
    assert_eq!(
        ping(proxy.addr()).expect("PING"),
        Reply::Status("PONG".into())
    );
}

#[test]
fn proxy_closes_client_when_server_dies() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.addr());
    let stream = connected(proxy.addr());
    server.kill();
    assert!(is_closed(&stream), "{}", server.log());
}

#[test]
fn dropping_proxy_closes_its_connections() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.addr());
    let addr = proxy.addr();
    let stream = connected(addr);
    drop(proxy);
    assert!(is_closed(&stream));
    // Whether the port now refuses is not asserted: a test running alongside may already have
    // been given the freed port.
}

#[tokio::test(flavor = "current_thread")]
async fn proxy_works_from_a_current_thread_runtime() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.addr());
    let mut stream = tokio::net::TcpStream::connect(proxy.addr())
        .await
        .expect("connect");
    stream
        .write_all(&resp::encode(&["PING"]))
        .await
        .expect("send");
    let mut pong = [0; 7];
    tokio::time::timeout(PATIENCE, stream.read_exact(&mut pong))
        .await
        .expect("PONG in time")
        .expect("read");
    assert_eq!(&pong, b"+PONG\r\n");
    proxy.cut();
    let mut byte = [0; 1];
    let after_cut = tokio::time::timeout(PATIENCE, stream.read(&mut byte))
        .await
        .expect("closed in time");
    assert!(matches!(after_cut, Ok(0) | Err(_)), "{after_cut:?}");
}

#[test]
fn free_port_is_bindable_and_never_6379() {
    let port = free_port();
    assert_ne!(port, 6379);
    std::net::TcpListener::bind(("127.0.0.1", port)).expect("the port is free");
}

#[test]
fn wait_until_reports_whether_the_condition_came_true() {
    let calls = AtomicUsize::new(0);
    assert!(wait_until(PATIENCE, || calls
        .fetch_add(1, Ordering::Relaxed)
        >= 3));
    let started = Instant::now();
    assert!(!wait_until(Duration::from_millis(50), || false));
    assert!(started.elapsed() >= Duration::from_millis(50));
}

#[tokio::test(flavor = "current_thread")]
async fn wait_until_async_lets_other_tasks_run() {
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(20)).await;
        let _ = tx.send(());
    });
    let mut rx = rx;
    assert!(wait_until_async(PATIENCE, || rx.try_recv().is_ok()).await);
}

/// Env var that turns [`missing_redis_server_probe`] on; set only by the test below.
const PROBE: &str = "LOCK_TESTS_MISSING_REDIS_PROBE";

#[test]
fn missing_redis_server_fails_with_install_hint() {
    let output = Command::new(std::env::current_exe().expect("test binary path"))
        .args([
            "missing_redis_server_probe",
            "--exact",
            "--ignored",
            "--nocapture",
        ])
        .env(PROBE, "1")
        .env("PATH", "/nonexistent")
        .output()
        .expect("run the test binary");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        !output.status.success(),
        "probe passed without redis-server:\n{stderr}"
    );
    assert!(
        stderr.lines().any(|line| line
            == "redis-server not found: install it with 'sudo apt-get install redis-server' (or run scripts/test.sh, which does)"),
        "{stderr}"
    );
}

#[test]
#[ignore = "run by missing_redis_server_fails_with_install_hint with an empty PATH"]
fn missing_redis_server_probe() {
    if std::env::var_os(PROBE).is_none() {
        return;
    }
    let _server = RedisServer::start();
}
