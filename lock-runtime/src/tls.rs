//! Certificates for the TLS forms of lock URLs (`rediss://`, `rediss+cluster://`,
//! `rediss+sentinel://`, `redlocks://`): a private CA to trust instead of the system's, and a
//! client certificate for servers that ask for one (`tls-auth-clients yes`). Given to
//! [`LockManagerBuilder::tls`](crate::LockManagerBuilder::tls), read and checked once at
//! [`build`](crate::LockManagerBuilder::build), then used by every connection the manager makes.

use std::path::PathBuf;
use std::sync::Arc;

use crate::error::LockError;

/// Where one PEM comes from: bytes given, or a file read at build.
#[derive(Clone)]
enum PemSource {
    Bytes(Arc<[u8]>),
    File(PathBuf),
}

impl PemSource {
    /// Where it comes from, for messages: a file's path, never its contents.
    fn origin(&self) -> String {
        match self {
            PemSource::Bytes(_) => "given as PEM bytes".into(),
            PemSource::File(path) => format!("file {}", path.display()),
        }
    }

    /// Its bytes; a file that cannot be read is a [`LockError::Config`] naming it and `part`.
    #[cfg_attr(not(feature = "tls"), allow(dead_code))]
    fn read(&self, part: &str) -> Result<Arc<[u8]>, LockError> {
        match self {
            PemSource::Bytes(bytes) => Ok(bytes.clone()),
            PemSource::File(path) => std::fs::read(path).map(Arc::from).map_err(|err| {
                LockError::Config(format!(
                    "cannot read the TLS {part} from {}: {err}",
                    path.display()
                ))
            }),
        }
    }
}

/// Certificates for connections over TLS: a private CA to trust, a client certificate to
/// present, or both. Give it to [`LockManagerBuilder::tls`](crate::LockManagerBuilder::tls)
/// with a TLS URL (`rediss://`, `rediss+cluster://`, `rediss+sentinel://`, `redlocks://`).
///
/// Without a CA, a server's certificate must chain to the system's trust store; with one, to
/// that CA only (it replaces the system store). Without a client certificate, none is sent, and
/// a server with `tls-auth-clients yes` refuses the connection. PEMs given as bytes are checked,
/// files are read and checked, at [`build`](crate::LockManagerBuilder::build): a bad one is a
/// [`LockError::Config`] that names the part and the file. Neither `Debug` nor any message
/// shows a certificate's or a key's contents; they show file paths.
///
/// Needs the `tls` feature of lock-runtime: without it, `build` says so.
///
/// ```no_run
/// # async fn run() -> Result<(), lock_runtime::LockError> {
/// use lock_runtime::{LockManager, TlsConfig};
///
/// let locks = LockManager::builder()
///     .url("rediss://redis.internal:6380")
///     .tls(
///         TlsConfig::new()
///             .root_ca_file("/etc/redis/tls/ca.crt")
///             .client_cert_files("/etc/redis/tls/client.crt", "/etc/redis/tls/client.key"),
///     )
///     .build()
///     .await?;
/// # let _ = locks;
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Default)]
pub struct TlsConfig {
    root_ca: Option<PemSource>,
    /// The client's certificate chain and its private key.
    client: Option<(PemSource, PemSource)>,
}

impl std::fmt::Debug for TlsConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsConfig")
            .field("root_ca", &self.root_ca.as_ref().map(PemSource::origin))
            .field(
                "client_cert",
                &self.client.as_ref().map(|(cert, _)| cert.origin()),
            )
            .field(
                "client_key",
                &self.client.as_ref().map(|(_, key)| key.origin()),
            )
            .finish()
    }
}

impl TlsConfig {
    /// No CA (the system's trust store) and no client certificate: add them with the setters.
    pub fn new() -> Self {
        Self::default()
    }

    /// The CA that signed the servers' certificates, as PEM (one or more
    /// `-----BEGIN CERTIFICATE-----` blocks); trusted instead of the system's store.
    pub fn root_ca_pem(mut self, pem: impl AsRef<[u8]>) -> Self {
        self.root_ca = Some(PemSource::Bytes(Arc::from(pem.as_ref())));
        self
    }

    /// [`root_ca_pem`](Self::root_ca_pem) read from the file at `path` when the manager is built.
    pub fn root_ca_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.root_ca = Some(PemSource::File(path.into()));
        self
    }

    /// The certificate (chain, the client's own first) and private key (PKCS#8, PKCS#1 or SEC1)
    /// the client presents, as PEM: for servers with `tls-auth-clients yes`.
    pub fn client_cert_pem(mut self, cert: impl AsRef<[u8]>, key: impl AsRef<[u8]>) -> Self {
        self.client = Some((
            PemSource::Bytes(Arc::from(cert.as_ref())),
            PemSource::Bytes(Arc::from(key.as_ref())),
        ));
        self
    }

    /// [`client_cert_pem`](Self::client_cert_pem) read from the files at `cert` and `key` when
    /// the manager is built.
    pub fn client_cert_files(mut self, cert: impl Into<PathBuf>, key: impl Into<PathBuf>) -> Self {
        self.client = Some((PemSource::File(cert.into()), PemSource::File(key.into())));
        self
    }

    /// Reads and checks every part.
    #[cfg(feature = "tls")]
    pub(crate) fn load(&self) -> Result<Certificates, LockError> {
        let root_cert = match &self.root_ca {
            Some(source) => {
                let pem = source.read("root CA")?;
                checks::root_ca(&pem, &source.origin())?;
                Some(pem.to_vec())
            }
            None => None,
        };
        let client_tls = match &self.client {
            Some((cert, key)) => {
                let (cert_pem, key_pem) =
                    (cert.read("client certificate")?, key.read("client key")?);
                checks::client(&cert_pem, &cert.origin(), &key_pem, &key.origin())?;
                Some(redis::ClientTlsConfig {
                    client_cert: cert_pem.to_vec(),
                    client_key: key_pem.to_vec(),
                })
            }
            None => None,
        };
        Ok(Certificates {
            given: Some(redis::TlsCertificates {
                client_tls,
                root_cert,
            }),
        })
    }

    /// Without the `tls` feature, certificates cannot be used: says which feature to enable.
    #[cfg(not(feature = "tls"))]
    pub(crate) fn load(&self) -> Result<Certificates, LockError> {
        Err(LockError::Config(
            "TLS certificates were given (LockManagerBuilder::tls), but lock-runtime was built \
             without TLS: enable its `tls` feature"
                .into(),
        ))
    }
}

/// The certificates every connection of one manager uses: those given to the builder, read and
/// checked, or none (the system's trust store, no client certificate).
#[derive(Clone, Default)]
pub(crate) struct Certificates {
    #[cfg(feature = "tls")]
    given: Option<redis::TlsCertificates>,
}

impl Certificates {
    /// A client for the one server of `url`, with the certificates when the URL is `rediss://`.
    pub(crate) fn client(&self, url: &str) -> redis::RedisResult<redis::Client> {
        #[cfg(feature = "tls")]
        if let Some(certs) = &self.given
            && url.starts_with("rediss://")
        {
            return redis::Client::build_with_tls(url, certs.clone());
        }
        redis::Client::open(url)
    }

    /// `builder` with the certificates, for a cluster reached over TLS.
    pub(crate) fn cluster(
        &self,
        builder: redis::cluster::ClusterClientBuilder,
    ) -> redis::cluster::ClusterClientBuilder {
        #[cfg(feature = "tls")]
        if let Some(certs) = &self.given {
            return builder.certs(certs.clone());
        }
        builder
    }

    /// The certificates given, for the clients Sentinel hands out.
    #[cfg(feature = "tls")]
    pub(crate) fn redis(&self) -> Option<&redis::TlsCertificates> {
        self.given.as_ref()
    }
}

/// `error`, the failure of a connection, with what to do about it when it is a TLS handshake
/// the configuration decides: the server's certificate is not signed by a CA the client trusts,
/// or the server wants a client certificate. `None` for any other failure. Such a failure does
/// not pass by itself.
pub(crate) fn handshake_failure(error: &str) -> Option<String> {
    let advice = handshake_advice(&error.to_ascii_lowercase())?;
    Some(format!("{error}: {advice}"))
}

/// Read from the error's text: redis keeps the I/O error that carries rustls's behind an `Arc`
/// that no `source()` or downcast reaches. The names are rustls's `Debug` names of its errors
/// (`InvalidCertificate(UnknownIssuer)`, `AlertReceived(CertificateRequired)`), stable within
/// its 0.23 line.
fn handshake_advice(error: &str) -> Option<&'static str> {
    // rustls's names for them: an unknown CA, or a CA of the same name with another key.
    if error.contains("unknownissuer") || error.contains("badsignature") {
        return Some(
            "the server's TLS certificate is not signed by a CA this client trusts; give the CA \
             that signed it with LockManagerBuilder::tls(TlsConfig::new().root_ca_file(..)) (or \
             root_ca_pem), or add it to the system's trust store",
        );
    }
    if error.contains("certificaterequired") {
        return Some(
            "the server asks for a client certificate (`tls-auth-clients yes`); give one signed \
             by its CA with LockManagerBuilder::tls(TlsConfig::new().client_cert_files(cert, \
             key)) (or client_cert_pem)",
        );
    }
    // What a server that asks for a client certificate answers over TLS 1.2 without one.
    if error.contains("handshakefailure") {
        return Some(
            "the server refused the TLS handshake; one with `tls-auth-clients yes` does so \
             without a client certificate (give one with LockManagerBuilder::tls(TlsConfig::new()\
             .client_cert_files(cert, key))), and so does one that shares no TLS version or \
             cipher with this client (rustls: TLS 1.2 and 1.3)",
        );
    }
    if error.contains("notvalidforname") {
        return Some(
            "the server's TLS certificate does not name the host of the URL; connect with a host \
             name or address the certificate lists",
        );
    }
    None
}

/// The checks on PEMs given as certificates, with messages that name the part and its origin
/// but never show what is in it (a key's PEM errors quote the offending line).
#[cfg(feature = "tls")]
mod checks {
    use rustls::pki_types::pem::{self, PemObject};
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};

    use crate::error::LockError;

    fn bad(part: &str, origin: &str, problem: &str) -> LockError {
        LockError::Config(format!("the TLS {part} ({origin}) {problem}"))
    }

    /// What is wrong with a PEM, without quoting it.
    fn pem_problem(err: &pem::Error) -> &'static str {
        match err {
            pem::Error::MissingSectionEnd { .. } => "is not valid PEM: a block has no END line",
            pem::Error::IllegalSectionStart { .. } => "is not valid PEM: a BEGIN line is malformed",
            pem::Error::Base64Decode(_) => "is not valid PEM: a block is not base64",
            _ => "is not valid PEM",
        }
    }

    fn certificates(
        pem: &[u8],
        part: &str,
        origin: &str,
    ) -> Result<Vec<CertificateDer<'static>>, LockError> {
        let certs = CertificateDer::pem_slice_iter(pem)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|err| bad(part, origin, pem_problem(&err)))?;
        if certs.is_empty() {
            return Err(bad(
                part,
                origin,
                "holds no certificate: expected a PEM block `-----BEGIN CERTIFICATE-----`",
            ));
        }
        Ok(certs)
    }

    /// One or more certificates, each one a usable trust anchor.
    pub(super) fn root_ca(pem: &[u8], origin: &str) -> Result<(), LockError> {
        let mut store = rustls::RootCertStore::empty();
        for cert in certificates(pem, "root CA", origin)? {
            store.add(cert).map_err(|err| {
                bad(
                    "root CA",
                    origin,
                    &format!("holds a certificate that cannot be used as a CA: {err}"),
                )
            })?;
        }
        Ok(())
    }

    /// A certificate chain and the private key of its first certificate.
    pub(super) fn client(
        cert_pem: &[u8],
        cert_origin: &str,
        key_pem: &[u8],
        key_origin: &str,
    ) -> Result<(), LockError> {
        let chain = certificates(cert_pem, "client certificate", cert_origin)?;
        let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(|err| {
            let problem = match err {
                pem::Error::NoItemsFound => {
                    "holds no private key: expected a PEM block `-----BEGIN PRIVATE KEY-----` \
                     (or RSA PRIVATE KEY, EC PRIVATE KEY)"
                }
                other => pem_problem(&other),
            };
            bad("client key", key_origin, problem)
        })?;
        let provider = rustls::crypto::ring::default_provider();
        rustls::sign::CertifiedKey::from_der(chain, key, &provider).map_err(|err| {
            let problem = match err {
                rustls::Error::InconsistentKeys(_) => format!(
                    "is not the key of the client certificate ({cert_origin}): give the key \
                     that was made with it"
                ),
                _ => "cannot be used as a client key (an RSA, ECDSA or Ed25519 key is needed)"
                    .to_owned(),
            };
            bad("client key", key_origin, &problem)
        })?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_shows_where_certificates_come_from_never_what_they_hold() {
        let tls = TlsConfig::new()
            .root_ca_pem("-----BEGIN CERTIFICATE-----\nsecretbytes")
            .client_cert_files("/etc/tls/client.crt", "/etc/tls/client.key");
        let shown = format!("{tls:?}");
        assert!(!shown.contains("secretbytes"), "{shown}");
        assert!(shown.contains("given as PEM bytes"), "{shown}");
        assert!(shown.contains("/etc/tls/client.key"), "{shown}");
    }

    #[test]
    fn handshake_failures_say_what_to_give() {
        let unknown = handshake_failure("invalid peer certificate: UnknownIssuer");
        assert!(unknown.is_some_and(|shown| shown.contains("root_ca")));
        let required = handshake_failure("received fatal alert: CertificateRequired");
        assert!(required.is_some_and(|shown| shown.contains("client_cert")));
        let tls12 = handshake_failure("received fatal alert: HandshakeFailure");
        assert!(tls12.is_some_and(|shown| shown.contains("client_cert")));
        let name =
            handshake_failure("invalid peer certificate: NotValidForNameContext { expected: .. }");
        assert!(name.is_some_and(|shown| shown.contains("does not name the host")));
        assert_eq!(handshake_failure("Connection refused (os error 111)"), None);
    }

    #[cfg(not(feature = "tls"))]
    #[test]
    fn certificates_without_the_tls_feature_say_which_feature_to_enable() {
        let err = TlsConfig::new()
            .root_ca_pem("x")
            .load()
            .err()
            .map(|err| err.to_string());
        assert!(
            err.as_deref()
                .is_some_and(|err| err.contains("`tls` feature")),
            "{err:?}"
        );
    }

    #[cfg(feature = "tls")]
    #[test]
    fn a_bad_pem_names_its_part_and_file_and_hides_its_contents() {
        let dir = std::env::temp_dir().join(format!("lock-runtime-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let key = dir.join("client.key");
        std::fs::write(&key, "-----BEGIN PRIVATE KEY-----\nc2VjcmV0a2V5\n").expect("written");
        let cert = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
        let shown = TlsConfig::new()
            .client_cert_pem(cert, "placeholder")
            .client_cert_files(dir.join("client.crt"), &key)
            .load()
            .err()
            .map(|err| err.to_string())
            .unwrap_or_default();
        assert!(shown.contains("client certificate"), "{shown}");
        assert!(shown.contains("client.crt"), "{shown}");
        std::fs::write(dir.join("client.crt"), cert).expect("written");
        let shown = TlsConfig::new()
            .client_cert_files(dir.join("client.crt"), &key)
            .load()
            .err()
            .map(|err| err.to_string())
            .unwrap_or_default();
        assert!(shown.contains("client key"), "{shown}");
        assert!(shown.contains("client.key"), "{shown}");
        assert!(!shown.contains("c2VjcmV0a2V5"), "{shown}");
        let shown = TlsConfig::new()
            .root_ca_pem("not a certificate")
            .load()
            .err()
            .map(|err| err.to_string())
            .unwrap_or_default();
        assert!(
            shown.contains("root CA (given as PEM bytes) holds no certificate"),
            "{shown}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
