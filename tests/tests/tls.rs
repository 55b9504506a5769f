//! TLS end to end: `rediss://` and `redlocks://` against servers started with `--tls-port` and
//! certificates made at test time (a private CA, a server and a client certificate), given to
//! the builder as PEM or as files.

use lock_runtime::TlsConfig;
use lock_tests::TestCerts;
use lock_tests::prelude::*;

/// A manager on `url` with `tls`, a short request timeout so that a refused handshake fails fast.
async fn build(url: &str, tls: TlsConfig) -> Result<LockManager, LockError> {
    LockManager::builder()
        .url(url)
        .tls(tls)
        .request_timeout(ms(2000))
        .build()
        .await
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
    let err = build(
        &server.tls_url(),
        TlsConfig::new().root_ca_pem(certs.ca_pem()),
    )
    .await
    .err()
    .unwrap_or_else(|| panic!("connected without a client certificate\n{}", server.log()));
    let shown = err.to_string();
    let port = server.tls_port().unwrap_or_default();
    assert!(shown.contains(&format!("127.0.0.1:{port}")), "{shown}");
    assert!(shown.contains("client_cert"), "{shown}");
    assert!(!err.is_retryable(), "{shown}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_whose_ca_is_not_trusted_is_refused_with_what_to_give() {
    let certs = TestCerts::new();
    let server = RedisServer::start_tls(&certs, false);
    let other = TestCerts::new();
    let err = build(
        &server.tls_url(),
        TlsConfig::new().root_ca_pem(other.ca_pem()),
    )
    .await
    .err()
    .unwrap_or_else(|| panic!("trusted a certificate of another CA\n{}", server.log()));
    let shown = err.to_string();
    let port = server.tls_port().unwrap_or_default();
    assert!(shown.contains(&format!("127.0.0.1:{port}")), "{shown}");
    assert!(shown.contains("root_ca"), "{shown}");
    assert!(!err.is_retryable(), "{shown}");
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
