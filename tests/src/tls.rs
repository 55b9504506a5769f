//! Certificates made at test time, for servers that speak TLS and the clients that talk to them.

use std::fs;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

use crate::tempdir::TempDir;

/// A private CA, a server certificate it signed for `localhost` and `127.0.0.1`, and a client
/// certificate it signed, each as PEM and as a file in a temp dir of its own (removed on drop).
/// Keep it alive as long as the servers started with it: a restart reads the files again.
///
/// ```no_run
/// use lock_tests::{RedisServer, TestCerts};
///
/// let certs = TestCerts::new();
/// let server = RedisServer::start_tls(&certs, true);
/// // connect to server.tls_url() with certs.ca_pem() as the root CA and
/// // certs.client_cert_pem() / certs.client_key_pem() as the client certificate
/// ```
#[derive(Debug)]
pub struct TestCerts {
    dir: TempDir,
    ca: String,
    server: (String, String),
    client: (String, String),
}

/// File names in a [`TestCerts`]'s dir.
const CA_FILE: &str = "ca.crt";
const SERVER_CERT_FILE: &str = "server.crt";
const SERVER_KEY_FILE: &str = "server.key";
const CLIENT_CERT_FILE: &str = "client.crt";
const CLIENT_KEY_FILE: &str = "client.key";

impl TestCerts {
    /// Makes a new CA and the certificates it signs, and writes them to files.
    ///
    /// # Panics
    ///
    /// If a certificate cannot be made or a file cannot be written.
    pub fn new() -> Self {
        // A name of its own: a client that trusts another CA of the same name would report a
        // bad signature rather than an unknown CA.
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let name = format!(
            "lock-tests CA {}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("no names");
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params.distinguished_name.push(DnType::CommonName, name);
        ca_params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca_key = KeyPair::generate().expect("a CA key");
        let ca = ca_params.self_signed(&ca_key).expect("a CA certificate");
        let issuer = Issuer::new(ca_params, ca_key);
        // A server is a client too, of its master or of the nodes a sentinel watches.
        let server = signed(
            &issuer,
            &["localhost", "127.0.0.1"],
            "lock-tests server",
            &[
                ExtendedKeyUsagePurpose::ServerAuth,
                ExtendedKeyUsagePurpose::ClientAuth,
            ],
        );
        let client = signed(
            &issuer,
            &[],
            "lock-tests client",
            &[ExtendedKeyUsagePurpose::ClientAuth],
        );
        let certs = TestCerts {
            dir: TempDir::new("tls"),
            ca: ca.pem(),
            server,
            client,
        };
        for (name, pem) in [
            (CA_FILE, &certs.ca),
            (SERVER_CERT_FILE, &certs.server.0),
            (SERVER_KEY_FILE, &certs.server.1),
            (CLIENT_CERT_FILE, &certs.client.0),
            (CLIENT_KEY_FILE, &certs.client.1),
        ] {
            let path = certs.path(name);
            fs::write(&path, pem)
                .unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
        }
        certs
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// The CA's certificate, PEM.
    pub fn ca_pem(&self) -> &str {
        &self.ca
    }

    /// The file holding [`ca_pem`](Self::ca_pem).
    pub fn ca_file(&self) -> PathBuf {
        self.path(CA_FILE)
    }

    /// The client's certificate, PEM.
    pub fn client_cert_pem(&self) -> &str {
        &self.client.0
    }

    /// The client's private key, PEM.
    pub fn client_key_pem(&self) -> &str {
        &self.client.1
    }

    /// The files holding the client's certificate and key.
    pub fn client_files(&self) -> (PathBuf, PathBuf) {
        (self.path(CLIENT_CERT_FILE), self.path(CLIENT_KEY_FILE))
    }

    /// The `redis-server` arguments for a TLS port `tls_port` with these certificates;
    /// `auth_clients`: whether clients must present a certificate signed by the CA
    /// (`--tls-auth-clients yes`).
    pub(crate) fn server_args(&self, tls_port: u16, auth_clients: bool) -> Vec<String> {
        let path = |name| self.path(name).display().to_string();
        vec![
            "--tls-port".into(),
            tls_port.to_string(),
            "--tls-cert-file".into(),
            path(SERVER_CERT_FILE),
            "--tls-key-file".into(),
            path(SERVER_KEY_FILE),
            "--tls-ca-cert-file".into(),
            path(CA_FILE),
            "--tls-auth-clients".into(),
            if auth_clients { "yes" } else { "no" }.into(),
        ]
    }
}

impl Default for TestCerts {
    fn default() -> Self {
        Self::new()
    }
}

/// A certificate for `names` (DNS names or IP addresses) signed by `issuer`, and its key, PEM.
fn signed(
    issuer: &Issuer<'_, KeyPair>,
    names: &[&str],
    common_name: &str,
    usages: &[ExtendedKeyUsagePurpose],
) -> (String, String) {
    let names: Vec<String> = names.iter().map(|&name| name.to_owned()).collect();
    let mut params = CertificateParams::new(names).expect("valid names");
    params
        .distinguished_name
        .push(DnType::CommonName, common_name);
    params.use_authority_key_identifier_extension = true;
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = usages.to_vec();
    let key = KeyPair::generate().expect("a key");
    let cert = params
        .signed_by(&key, issuer)
        .expect("a signed certificate");
    (cert.pem(), key.serialize_pem())
}
