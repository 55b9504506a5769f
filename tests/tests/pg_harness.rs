//! The Postgres harness itself: servers start, answer as the role `lock`, die, stall and come
//! back as told, with what they committed; a standby is in recovery; PgBouncer pools in the mode
//! asked for.

use std::net::{Ipv4Addr, TcpStream};
use std::process::Command;
use std::sync::{Arc, mpsc};
use std::time::Duration;

use lock_tests::prelude::*;
use lock_tests::{PgBouncer, PostgresServer, ProcessState, pg_bin_dir};

/// How long a test waits before it says that nothing came: a paused server never answers, so a
/// short bound cannot fail a healthy run, however loaded the machine.
const STALL: Duration = Duration::from_millis(500);

/// True when nothing listens on the port any more (a stopped process would still accept).
fn refuses(port: u16) -> bool {
    TcpStream::connect((Ipv4Addr::LOCALHOST, port))
        .is_err_and(|e| e.kind() == std::io::ErrorKind::ConnectionRefused)
}

/// Runs `psql <url> -c <sql>` with the client beside the server binaries: what a user would type.
fn psql_at(url: &str, sql: &str) -> std::process::Output {
    Command::new(pg_bin_dir().join("psql"))
        .args([
            "--no-psqlrc",
            "--tuples-only",
            "--no-align",
            url,
            "--command",
            sql,
        ])
        .env_remove("PGPASSWORD")
        .output()
        .expect("run psql")
}

#[test]
fn server_starts_and_answers_as_the_lock_role() {
    let server = PostgresServer::start();
    assert_ne!(server.port(), 5432);
    assert_eq!(
        server.url(),
        format!(
            "postgres://lock:lock-test-password@127.0.0.1:{}/lock",
            server.port()
        )
    );
    assert_eq!(
        server.psql("SELECT current_user, current_database()"),
        "lock|lock",
        "{}",
        server.log()
    );
    assert!(
        server
            .log()
            .contains("database system is ready to accept connections"),
        "{}",
        server.log()
    );
}

#[test]
fn url_works_with_psql_and_a_wrong_password_is_refused() {
    let server = PostgresServer::start();
    let output = psql_at(&server.url(), "SELECT 40 + 2");
    assert!(output.status.success(), "{output:?}\n{}", server.log());
    assert_eq!(String::from_utf8_lossy(&output.stdout).trim(), "42");

    let wrong = server.url().replace("lock-test-password", "guess");
    let output = psql_at(&wrong, "SELECT 1");
    assert!(!output.status.success(), "{output:?}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("password authentication failed"),
        "{stderr}"
    );
}

#[test]
fn server_listens_on_loopback_with_the_chosen_durability() {
    let server = PostgresServer::start();
    let settings = server.psql(
        "SELECT current_setting('listen_addresses'), current_setting('fsync'), \
         current_setting('synchronous_commit'), current_setting('full_page_writes')",
    );
    assert_eq!(settings, "127.0.0.1|off|on|on", "{}", server.log());
}

#[test]
fn the_lock_role_owns_its_database_and_can_create_tables() {
    let server = PostgresServer::start();
    server.psql("CREATE TABLE t (id int PRIMARY KEY)");
    assert_eq!(
        server.psql("SELECT rolsuper FROM pg_roles WHERE rolname = current_user"),
        "f"
    );
    assert_eq!(server.admin_psql("SELECT current_user"), "postgres");
}

#[test]
fn try_psql_returns_the_error() {
    let server = PostgresServer::start();
    let failed = server
        .try_psql("SELECT * FROM missing")
        .expect_err("no such table");
    assert!(
        failed.contains("relation \"missing\" does not exist"),
        "{failed}"
    );
}

#[test]
fn kill_and_restart_keep_what_was_committed() {
    let server = PostgresServer::start();
    let port = server.port();
    server.psql("CREATE TABLE t (v text); INSERT INTO t VALUES ('before the crash')");
    server.kill();
    assert!(refuses(port), "{}", server.log());
    assert!(server.try_psql("SELECT 1").is_err());
    server.restart();
    assert_eq!(server.port(), port);
    assert_eq!(
        server.psql("SELECT v FROM t"),
        "before the crash",
        "{}",
        server.log()
    );
    // The restart went through crash recovery, not a clean start.
    assert!(
        server
            .log()
            .contains("not properly shut down; automatic recovery in progress"),
        "{}",
        server.log()
    );
}

#[test]
fn stop_and_restart_keep_data_after_a_clean_shutdown() {
    let server = PostgresServer::start();
    server.psql("CREATE TABLE t (v int); INSERT INTO t VALUES (7)");
    server.stop();
    assert!(refuses(server.port()), "{}", server.log());
    server.restart();
    assert_eq!(server.psql("SELECT v FROM t"), "7", "{}", server.log());
    // Restarting a running server works too.
    server.restart();
    assert_eq!(
        server.psql("SELECT count(*) FROM t"),
        "1",
        "{}",
        server.log()
    );
}

#[test]
fn pause_stalls_queries_until_resume() {
    let server = Arc::new(PostgresServer::start());
    server.pause();
    let answered = query_in_background(&server, "SELECT 'answered'");
    assert!(
        answered.recv_timeout(STALL).is_err(),
        "answered while paused\n{}",
        server.log()
    );
    server.resume();
    let answer = answered
        .recv_timeout(PATIENCE)
        .expect("an answer after resume");
    assert_eq!(answer.as_deref(), Ok("answered"), "{}", server.log());
}

/// Runs `sql` on `server` in a thread; the receiver gets its result.
fn query_in_background(
    server: &Arc<PostgresServer>,
    sql: &'static str,
) -> mpsc::Receiver<Result<String, String>> {
    let (tx, rx) = mpsc::channel();
    let client = Arc::clone(server);
    std::thread::spawn(move || {
        let _ = tx.send(client.try_psql(sql));
    });
    rx
}

/// True once `server` runs a query of the role `lock` other than the one asking.
fn lock_role_query_runs(server: &PostgresServer) -> bool {
    server.admin_psql(
        "SELECT count(*) FROM pg_stat_activity WHERE usename = 'lock' AND state = 'active'",
    ) != "0"
}

#[test]
fn terminate_connections_ends_a_running_query_and_the_server_stays_up() {
    let server = Arc::new(PostgresServer::start());
    let sleeping = query_in_background(&server, "SELECT pg_sleep(60)");
    assert!(
        wait_until(PATIENCE, || lock_role_query_runs(&server)),
        "{}",
        server.log()
    );
    assert_eq!(server.terminate_connections(), 1, "{}", server.log());
    let ended = sleeping.recv_timeout(PATIENCE).expect("the query ends");
    let why = ended.expect_err("terminated");
    assert!(
        why.contains("terminating connection due to administrator command"),
        "{why}"
    );
    assert_eq!(server.psql("SELECT 1"), "1");
}

#[test]
fn state_and_revive_follow_what_the_harness_did() {
    let server = PostgresServer::start();
    assert_eq!(server.state(), ProcessState::Running);
    server.pause();
    assert_eq!(server.state(), ProcessState::Paused);
    server.revive();
    assert_eq!(server.state(), ProcessState::Running);
    server.kill();
    assert_eq!(server.state(), ProcessState::Killed);
    server.revive();
    assert_eq!(server.psql("SELECT 1"), "1", "{}", server.log());
    server.stop();
    assert_eq!(server.state(), ProcessState::Killed);
}

#[test]
fn a_fault_proxy_in_front_of_a_server_forwards_and_cuts() {
    let server = Arc::new(PostgresServer::start());
    let proxy = FaultProxy::start(server.addr());
    let url = PostgresServer::url_at(proxy.addr());
    assert_eq!(
        url,
        format!("postgres://lock:lock-test-password@{}/lock", proxy.addr())
    );
    let output = psql_at(&url, "SELECT 'through the proxy'");
    assert!(output.status.success(), "{output:?}\n{}", server.log());
    assert_eq!(
        String::from_utf8_lossy(&output.stdout).trim(),
        "through the proxy"
    );

    let (tx, rx) = mpsc::channel();
    let sleeping = std::thread::spawn(move || {
        let _ = tx.send(psql_at(&url, "SELECT pg_sleep(60)"));
    });
    assert!(
        wait_until(PATIENCE, || lock_role_query_runs(&server)),
        "{}",
        server.log()
    );
    proxy.cut();
    let cut = rx.recv_timeout(PATIENCE).expect("the client sees the cut");
    assert!(!cut.status.success(), "{cut:?}");
    sleeping.join().expect("client thread");
}

#[test]
fn dropping_a_server_kills_it() {
    let server = PostgresServer::start();
    let port = server.port();
    server.pause();
    drop(server);
    assert!(refuses(port));
}

#[test]
fn standby_is_in_recovery_streams_and_refuses_writes() {
    let primary = PostgresServer::start();
    primary.psql("CREATE TABLE t (v int); INSERT INTO t VALUES (1)");
    let standby = primary.start_standby();
    assert_ne!(standby.port(), primary.port());
    assert_eq!(
        standby.psql("SELECT pg_is_in_recovery()"),
        "t",
        "{}",
        standby.log()
    );
    assert_eq!(primary.psql("SELECT pg_is_in_recovery()"), "f");
    primary.psql("INSERT INTO t VALUES (2)");
    assert!(
        wait_until(PATIENCE, || standby.psql("SELECT count(*) FROM t") == "2"),
        "the standby did not receive the row\n{}",
        standby.log()
    );
    let refused = standby
        .try_psql("INSERT INTO t VALUES (3)")
        .expect_err("read-only");
    assert!(refused.contains("read-only transaction"), "{refused}");
}

#[test]
fn pgbouncer_answers_through_its_url_in_transaction_mode_with_the_same_password() {
    let server = PostgresServer::start();
    let pooler = PgBouncer::start(&server);
    assert_ne!(pooler.port(), server.port());
    assert_ne!(pooler.port(), 6432);
    assert_eq!(
        pooler.url(),
        format!(
            "postgres://lock:lock-test-password@127.0.0.1:{}/lock",
            pooler.port()
        )
    );
    let output = psql_at(&pooler.url(), "SELECT current_user, current_database()");
    assert!(output.status.success(), "{output:?}\n{}", pooler.log());
    assert_eq!(String::from_utf8_lossy(&output.stdout).trim(), "lock|lock");
    let config = pooler.admin("SHOW CONFIG");
    assert!(
        config
            .lines()
            .any(|line| line.starts_with("pool_mode|transaction|")),
        "{config}"
    );
    let wrong = pooler.url().replace("lock-test-password", "guess");
    let output = psql_at(&wrong, "SELECT 1");
    assert!(!output.status.success(), "{output:?}\n{}", pooler.log());
}

#[test]
fn pgbouncer_in_session_mode_says_so() {
    let server = PostgresServer::start();
    let pooler = PgBouncer::start_session_mode(&server);
    assert_eq!(pooler.psql("SELECT 1"), "1", "{}", pooler.log());
    let config = pooler.admin("SHOW CONFIG");
    assert!(
        config
            .lines()
            .any(|line| line.starts_with("pool_mode|session|")),
        "{config}"
    );
}

#[test]
fn pgbouncer_kill_and_restart_keep_its_port() {
    let server = PostgresServer::start();
    let pooler = PgBouncer::start(&server);
    let port = pooler.port();
    pooler.kill();
    assert!(refuses(port), "{}", pooler.log());
    pooler.restart();
    assert_eq!(pooler.port(), port);
    assert_eq!(pooler.psql("SELECT 1"), "1", "{}", pooler.log());
}

#[test]
fn pgbouncer_pause_stalls_queries_until_resume() {
    let server = PostgresServer::start();
    let pooler = Arc::new(PgBouncer::start(&server));
    pooler.pause();
    let (tx, rx) = mpsc::channel();
    let client = Arc::clone(&pooler);
    let query = std::thread::spawn(move || {
        let _ = tx.send(client.try_psql("SELECT 'answered'"));
    });
    assert!(
        rx.recv_timeout(STALL).is_err(),
        "answered while paused\n{}",
        pooler.log()
    );
    pooler.resume();
    let answer = rx.recv_timeout(PATIENCE).expect("an answer after resume");
    assert_eq!(answer.as_deref(), Ok("answered"), "{}", pooler.log());
    query.join().expect("query thread");
}

#[test]
fn pgbouncer_reaches_a_restarted_server() {
    let server = PostgresServer::start();
    let pooler = PgBouncer::start(&server);
    server.psql("CREATE TABLE t (v int); INSERT INTO t VALUES (5)");
    server.kill();
    server.restart();
    assert!(
        wait_until(PATIENCE, || pooler.try_psql("SELECT v FROM t").as_deref()
            == Ok("5")),
        "{}\n{}",
        pooler.log(),
        server.log()
    );
}

#[test]
fn two_servers_get_different_ports() {
    let first = PostgresServer::start();
    let second = PostgresServer::start();
    assert_ne!(first.port(), second.port());
    first.psql("CREATE TABLE only_here (v int)");
    assert!(second.try_psql("SELECT * FROM only_here").is_err());
}

/// Env var that turns the probes below on; set only by the tests that run them.
const PROBE: &str = "LOCK_TESTS_MISSING_PG_PROBE";

/// Runs the probe test `name` of this binary with `vars` set and returns its standard error,
/// checking that it failed.
fn failing_probe(name: &str, vars: &[(&str, &str)]) -> String {
    let output = Command::new(std::env::current_exe().expect("test binary path"))
        .args([name, "--exact", "--ignored", "--nocapture"])
        .env(PROBE, "1")
        .envs(vars.iter().copied())
        .output()
        .expect("run the test binary");
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(!output.status.success(), "probe passed:\n{stderr}");
    stderr
}

#[test]
fn missing_server_binaries_fail_with_a_hint() {
    let stderr = failing_probe(
        "missing_postgres_probe",
        &[("LOCK_TESTS_PG_BIN", "/nonexistent")],
    );
    assert!(
        stderr.contains("LOCK_TESTS_PG_BIN=/nonexistent has no initdb and postgres"),
        "{stderr}"
    );
}

#[test]
#[ignore = "run by missing_server_binaries_fail_with_a_hint"]
fn missing_postgres_probe() {
    if std::env::var_os(PROBE).is_none() {
        return;
    }
    let _server = PostgresServer::start();
}

#[test]
fn missing_pgbouncer_fails_with_a_hint() {
    let stderr = failing_probe(
        "missing_pgbouncer_probe",
        &[("LOCK_TESTS_PGBOUNCER", "/nonexistent/pgbouncer")],
    );
    assert!(
        stderr.contains("LOCK_TESTS_PGBOUNCER=/nonexistent/pgbouncer not found"),
        "{stderr}"
    );
}

#[test]
#[ignore = "run by missing_pgbouncer_fails_with_a_hint"]
fn missing_pgbouncer_probe() {
    if std::env::var_os(PROBE).is_none() {
        return;
    }
    let server = PostgresServer::start();
    let _pooler = PgBouncer::start(&server);
}
