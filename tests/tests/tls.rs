//! TLS end to end: `rediss://` and `redlocks://` against servers started with `--tls-port` and
//! certificates made at test time (a private CA, a server and a client certificate), given to
//! the builder as PEM or as files.

use std::time::Duration;

use lock_runtime::TlsConfig;
use lock_tests::prelude::*;
use lock_tests::{Deployment, MASTER_NAME, TestCerts};

/// A manager on `url` with `tls`, a short request timeout so that a refused handshake fails fast.
async fn build(url: &str, tls: TlsConfig) -> Result<LockManager, LockError> {
    LockManager::builder()
        .url(url)
        .tls(tls)
        .request_timeout(ms(2000))
        .build()
        .await
}

/// The error of a connect to `url` with `tls` that must be refused; `refused_for` says why it
/// should have been, and the panic shows `log`.
async fn refused(
    url: &str,
    tls: TlsConfig,
    refused_for: &str,
    log: impl Fn() -> String,
) -> LockError {
    match build(url, tls).await {
        Ok(_) => panic!("{refused_for}\n{}", log()),
        Err(err) => err,
    }
}

/// `err` names the server at `port` (where given), says to give `what`, and is not retryable:
/// a refusal that stays until the configuration changes.
fn assert_says_to_give(err: &LockError, port: Option<u16>, what: &str) {
    let shown = err.to_string();
    if let Some(port) = port {
        assert!(shown.contains(&format!("127.0.0.1:{port}")), "{shown}");
    }
    assert!(shown.contains(what), "{shown}");
    assert!(!err.is_retryable(), "{shown}");
}

/// Takes and releases one lock on `locks`.
async fn lock_and_release(locks: &LockManager, server: &RedisServer) {
    let guard = locks
        .lock("tls:order:1", LockOptions::new().ttl(ms(5000)))
        .await
        .unwrap_or_else(|err| panic!("lock over TLS: {err}\n{}", server.log()));
    assert_eq!(
        server.cmd(&["EXISTS", "lock:{tls:order:1}"]),
        "1",
        "{}",
        server.log()
    );
    guard
        .release()
        .await
        .unwrap_or_else(|err| panic!("release over TLS: {err}\n{}", server.log()));
    assert_eq!(
        server.cmd(&["EXISTS", "lock:{tls:order:1}"]),
        "0",
        "{}",
        server.log()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_is_taken_and_released_over_tls_with_a_private_ca_given_as_pem() {
    let certs = TestCerts::new();
    let server = RedisServer::start_tls(&certs, false);
    let locks = build(
        &server.tls_url(),
        TlsConfig::new().root_ca_pem(certs.ca_pem()),
    )
    .await
    .unwrap_or_else(|err| panic!("connect over TLS: {err}\n{}", server.log()));
    lock_and_release(&locks, &server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_is_taken_and_released_over_tls_with_certificates_given_as_files() {
    let certs = TestCerts::new();
    let server = RedisServer::start_tls(&certs, true);
    let (cert, key) = certs.client_files();
    let tls = TlsConfig::new()
        .root_ca_file(certs.ca_file())
        .client_cert_files(cert, key);
    let locks = build(&server.tls_url(), tls)
        .await
        .unwrap_or_else(|err| panic!("connect over TLS: {err}\n{}", server.log()));
    lock_and_release(&locks, &server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_authenticates_clients_takes_a_client_certificate_given_as_pem() {
    let certs = TestCerts::new();
    let server = RedisServer::start_tls(&certs, true);
    let tls = TlsConfig::new()
        .root_ca_pem(certs.ca_pem())
        .client_cert_pem(certs.client_cert_pem(), certs.client_key_pem());
    let locks = build(&server.tls_url(), tls)
        .await
        .unwrap_or_else(|err| panic!("connect with a client certificate: {err}\n{}", server.log()));
    lock_and_release(&locks, &server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_authenticates_clients_refuses_one_without_a_certificate_and_says_what_to_give()
 {
    let certs = TestCerts::new();
    let server = RedisServer::start_tls(&certs, true);
    let err = refused(
        &server.tls_url(),
        TlsConfig::new().root_ca_pem(certs.ca_pem()),
        "connected without a client certificate",
        || server.log(),
    )
    .await;
    assert_says_to_give(
        &err,
        Some(server.tls_port().expect("a TLS port")),
        "client_cert",
    );
}

/// Over TLS 1.2 the server answers a handshake without a client certificate with a generic
/// failure, which says what to give too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_1_2_server_that_authenticates_clients_refuses_one_without_a_certificate_and_says_what_to_give()
 {
    let certs = TestCerts::new();
    let server =
        RedisServer::start_tls_with_config(None, &certs, true, &["--tls-protocols", "TLSv1.2"]);
    let err = refused(
        &server.tls_url(),
        TlsConfig::new().root_ca_pem(certs.ca_pem()),
        "connected without a client certificate",
        || server.log(),
    )
    .await;
    assert_says_to_give(&err, None, "client_cert");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_whose_ca_is_not_trusted_is_refused_with_what_to_give() {
    let certs = TestCerts::new();
    let server = RedisServer::start_tls(&certs, false);
    let other = TestCerts::new();
    let err = refused(
        &server.tls_url(),
        TlsConfig::new().root_ca_pem(other.ca_pem()),
        "trusted a certificate of another CA",
        || server.log(),
    )
    .await;
    assert_says_to_give(
        &err,
        Some(server.tls_port().expect("a TLS port")),
        "root_ca",
    );
}

/// Without a CA given, the system's trust store decides: the test CA is not in it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_private_ca_not_given_is_refused_with_what_to_give() {
    let certs = TestCerts::new();
    let server = RedisServer::start_tls(&certs, false);
    let err = LockManager::builder()
        .url(server.tls_url())
        .request_timeout(ms(2000))
        .build()
        .await
        .err()
        .unwrap_or_else(|| panic!("trusted a private CA\n{}", server.log()));
    let shown = err.to_string();
    assert!(shown.contains("root_ca"), "{shown}");
}

/// Redlock's masters each speak TLS; the certificates given apply to every one of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_takes_and_releases_a_lock_on_masters_that_authenticate_clients() {
    let certs = TestCerts::new();
    let masters: Vec<RedisServer> = (0..3)
        .map(|_| RedisServer::start_tls(&certs, true))
        .collect();
    let ports: Vec<String> = masters
        .iter()
        .map(|master| format!("127.0.0.1:{}", master.tls_port().unwrap_or_default()))
        .collect();
    let url = format!("redlocks://{}", ports.join(","));
    let (cert, key) = certs.client_files();
    let tls = TlsConfig::new()
        .root_ca_file(certs.ca_file())
        .client_cert_files(cert, key);
    let logs = || {
        masters
            .iter()
            .map(RedisServer::log)
            .collect::<Vec<_>>()
            .join("\n")
    };
    let locks = build(&url, tls)
        .await
        .unwrap_or_else(|err| panic!("connect to the masters over TLS: {err}\n{}", logs()));
    let guard = locks
        .lock("tls:order:1", LockOptions::new().ttl(ms(5000)))
        .await
        .unwrap_or_else(|err| panic!("lock over TLS: {err}\n{}", logs()));
    for master in &masters {
        assert_eq!(
            master.cmd(&["EXISTS", "lock:{tls:order:1}"]),
            "1",
            "{}",
            logs()
        );
    }
    guard
        .release()
        .await
        .unwrap_or_else(|err| panic!("release over TLS: {err}\n{}", logs()));
    for master in &masters {
        assert_eq!(
            master.cmd(&["EXISTS", "lock:{tls:order:1}"]),
            "0",
            "{}",
            logs()
        );
    }
}

/// Masters that all refuse the handshake fail Redlock's connect for good, saying what to give:
/// a shortfall of the quorum is retryable only while a master may come back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_masters_whose_ca_is_not_trusted_are_refused_for_good() {
    let certs = TestCerts::new();
    let masters: Vec<RedisServer> = (0..3)
        .map(|_| RedisServer::start_tls(&certs, false))
        .collect();
    let ports: Vec<String> = masters
        .iter()
        .map(|master| format!("127.0.0.1:{}", master.tls_port().unwrap_or_default()))
        .collect();
    let other = TestCerts::new();
    let err = build(
        &format!("redlocks://{}", ports.join(",")),
        TlsConfig::new().root_ca_pem(other.ca_pem()),
    )
    .await
    .err()
    .unwrap_or_else(|| panic!("trusted certificates of another CA"));
    assert_says_to_give(&err, None, "root_ca");
}

/// Certificates with a plain URL would be ignored and the connection go out in plain text.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certificates_with_a_plain_url_are_refused() {
    let certs = TestCerts::new();
    let server = RedisServer::start_tls(&certs, false);
    let err = build(&server.url(), TlsConfig::new().root_ca_pem(certs.ca_pem()))
        .await
        .err()
        .unwrap_or_else(|| panic!("connected in plain text with certificates given"));
    let shown = err.to_string();
    assert!(matches!(err, LockError::Config(_)), "{shown}");
    assert!(shown.contains("rediss://"), "{shown}");
}

/// A key file that holds no key is named in the error, and what it holds is not shown.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_key_file_without_a_key_is_named_and_not_shown() {
    let certs = TestCerts::new();
    let server = RedisServer::start_tls(&certs, true);
    let (cert, _) = certs.client_files();
    // The client's certificate where its key should be.
    let err = build(
        &server.tls_url(),
        TlsConfig::new()
            .root_ca_file(certs.ca_file())
            .client_cert_files(&cert, &cert),
    )
    .await
    .err()
    .unwrap_or_else(|| panic!("a certificate was taken for a key"));
    let shown = err.to_string();
    assert!(matches!(err, LockError::Config(_)), "{shown}");
    assert!(shown.contains("client key"), "{shown}");
    assert!(shown.contains(&cert.display().to_string()), "{shown}");
    let body: String = certs.client_cert_pem().lines().nth(1).unwrap_or("x").into();
    assert!(!shown.contains(&body), "{shown}");
}

/// The key of another certificate is refused at build, not at the server's handshake.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_key_that_is_not_the_certificates_is_refused_at_build() {
    let certs = TestCerts::new();
    let other = TestCerts::new();
    let err = build(
        "rediss://127.0.0.1:1",
        TlsConfig::new().client_cert_pem(certs.client_cert_pem(), other.client_key_pem()),
    )
    .await
    .err()
    .unwrap_or_else(|| panic!("a mismatched key was taken"));
    let shown = err.to_string();
    assert!(matches!(err, LockError::Config(_)), "{shown}");
    assert!(
        shown.contains("is not the key of the client certificate"),
        "{shown}"
    );
}

/// The release notification comes over the subscription connection, TLS too: a waiter of
/// another manager enters at the release, not when the 30 s lease runs out.
async fn a_waiter_is_woken_by_the_release(d: Deployment) {
    let held = d
        .locks
        .lock("tls:wake", LockOptions::new().ttl(Duration::from_secs(30)))
        .await
        .unwrap_or_else(|err| panic!("lock: {err}\n{}", d.log()));
    let other = d.connect().await;
    let (asked, told_busy) = tokio::sync::oneshot::channel();
    let waiter = tokio::spawn(async move {
        let first = other.lock("tls:wake", LockOptions::new()).await;
        let _ = asked.send(first.as_ref().err().is_some_and(LockError::is_busy));
        drop(first);
        let guard = other
            .lock("tls:wake", LockOptions::new().wait(PATIENCE))
            .await?;
        Ok::<_, LockError>((guard, tokio::time::Instant::now()))
    });
    assert!(told_busy.await.expect("the waiter asks"), "{}", d.log());
    let released = tokio::time::Instant::now();
    held.release().await.expect("release");
    let (next, entered) = waiter.await.expect("task").expect("the waiter enters");
    next.release().await.expect("release");
    let handover = entered.duration_since(released);
    assert!(
        handover < Duration::from_secs(10),
        "{handover:?}\n{}",
        d.log()
    );
}

/// A lock held past its ttl is renewed over TLS.
async fn a_held_lock_is_renewed(d: Deployment) {
    let guard = d
        .locks
        .lock("tls:renewed", LockOptions::new().ttl(ms(1000)))
        .await
        .unwrap_or_else(|err| panic!("lock: {err}\n{}", d.log()));
    assert!(renewed(|| guard.remaining()).await, "{}", d.log());
    guard.release().await.expect("release");
}

lock_tests::on_backends!([redis_tls, cluster_tls] [a_waiter_is_woken_by_the_release, a_held_lock_is_renewed]);

/// A master and a sentinel watching it, both over TLS and asking for client certificates.
fn sentinel_over_tls(certs: &TestCerts) -> (RedisServer, RedisServer) {
    let master = RedisServer::start_tls(certs, true);
    let master_port = master.tls_port().unwrap_or_default();
    // The sentinel watches the master on its TLS port, over TLS (`tls-replication yes`), with
    // the server certificate as its client certificate.
    let config = format!(
        "sentinel monitor {MASTER_NAME} 127.0.0.1 {master_port} 1\n\
         sentinel down-after-milliseconds {MASTER_NAME} 5000\n"
    );
    let sentinel = RedisServer::start_tls_with_config(
        Some(&config),
        certs,
        true,
        &["--sentinel", "--tls-replication", "yes"],
    );
    let watching = wait_until(PATIENCE, || {
        let fields = sentinel.cmd(&["SENTINEL", "MASTER", MASTER_NAME]);
        let fields: Vec<&str> = fields.lines().collect();
        fields
            .windows(2)
            .any(|pair| pair[0] == "flags" && pair[1] == "master")
    });
    assert!(
        watching,
        "the sentinel does not see the master up\n{}\n{}",
        master.log(),
        sentinel.log()
    );
    (master, sentinel)
}

/// `rediss+sentinel://`: the sentinel and the master both speak TLS and ask for client
/// certificates; the certificates given reach the sentinel, the master's role check and the
/// master's connections.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinel_over_tls_finds_the_master_and_a_lock_is_taken_and_released_there() {
    let certs = TestCerts::new();
    let (master, sentinel) = tokio::task::block_in_place(|| sentinel_over_tls(&certs));
    let url = format!(
        "rediss+sentinel://127.0.0.1:{}/{MASTER_NAME}",
        sentinel.tls_port().unwrap_or_default()
    );
    let tls = TlsConfig::new()
        .root_ca_pem(certs.ca_pem())
        .client_cert_pem(certs.client_cert_pem(), certs.client_key_pem());
    let locks = build(&url, tls).await.unwrap_or_else(|err| {
        panic!(
            "connect through the sentinel over TLS: {err}\n{}\n{}",
            master.log(),
            sentinel.log()
        )
    });
    lock_and_release(&locks, &master).await;
}

/// Sentinels whose CA is not trusted: the error says what to give.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinels_whose_ca_is_not_trusted_are_refused_with_what_to_give() {
    let certs = TestCerts::new();
    let (_master, sentinel) = tokio::task::block_in_place(|| sentinel_over_tls(&certs));
    let url = format!(
        "rediss+sentinel://127.0.0.1:{}/{MASTER_NAME}",
        sentinel.tls_port().unwrap_or_default()
    );
    let other = TestCerts::new();
    let err = build(&url, TlsConfig::new().root_ca_pem(other.ca_pem()))
        .await
        .err()
        .unwrap_or_else(|| panic!("trusted certificates of another CA"));
    let shown = err.to_string();
    assert!(shown.contains(MASTER_NAME), "{shown}");
    assert!(shown.contains("root_ca"), "{shown}");
}

/// The files can be named in the URL instead: `LockManager::connect` (and a URL kept in the
/// environment) reaches a server that asks for a client certificate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certificates_named_in_the_url_are_used() {
    let certs = TestCerts::new();
    let server = RedisServer::start_tls(&certs, true);
    let (cert, key) = certs.client_files();
    let url = format!(
        "{}/?tls_ca={}&tls_cert={}&tls_key={}",
        server.tls_url(),
        certs.ca_file().display(),
        cert.display(),
        key.display()
    );
    let locks = LockManager::connect(&url)
        .await
        .unwrap_or_else(|err| panic!("connect with the files in the URL: {err}\n{}", server.log()));
    lock_and_release(&locks, &server).await;
}

/// Certificates in the URL and in the builder at once: which one wins would be a guess.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certificates_in_the_url_and_the_builder_at_once_are_refused() {
    let certs = TestCerts::new();
    let url = format!("rediss://127.0.0.1:1/?tls_ca={}", certs.ca_file().display());
    let err = build(&url, TlsConfig::new().root_ca_pem(certs.ca_pem()))
        .await
        .err()
        .unwrap_or_else(|| panic!("certificates given twice were taken"));
    let shown = err.to_string();
    assert!(matches!(err, LockError::Config(_)), "{shown}");
    assert!(shown.contains("one way"), "{shown}");
}

/// `rediss+cluster://`: every node speaks TLS and asks for a client certificate; the cluster
/// client reaches the master of the lock's slot, which the seeds name by its TLS port.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_over_tls_takes_and_releases_a_lock_on_the_master_of_its_slot() {
    let certs = TestCerts::new();
    let cluster = tokio::task::block_in_place(|| RedisCluster::start_tls(3, &certs));
    let (cert, key) = certs.client_files();
    let tls = TlsConfig::new()
        .root_ca_file(certs.ca_file())
        .client_cert_files(cert, key);
    let locks = build(&cluster.tls_url(), tls)
        .await
        .unwrap_or_else(|err| panic!("connect to the cluster over TLS: {err}\n{}", cluster.log()));
    let master = cluster.master_for_key("lock:{tls:order:1}");
    lock_and_release(&locks, master).await;
}
