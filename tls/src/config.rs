//! [`TlsConfig`]: a node's loaded certificate, key and CA, and the rustls
//! configurations built from them once, at load, so a bad file fails the
//! start rather than the first connection.

use std::fmt;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rustls::crypto::CryptoProvider;
use rustls::crypto::ring::{cipher_suite, default_provider};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, RootCertStore, ServerConfig};

use crate::error::TlsError;
use crate::files::TlsFiles;
use crate::role::Role;

/// The name a client checks the server's certificate against, unless told
/// otherwise (`--tls-server-name`). Every certificate `mooncake certs init`
/// issues carries it (with `127.0.0.1` and the `--host` names), so one name
/// works for every master and store node whatever address a client dials:
/// the CA, not the host name, is what admits a peer to the cluster.
pub const DEFAULT_SERVER_NAME: &str = "localhost";

/// Longest time a TLS handshake may take on a server before the connection
/// is closed: a handshake is two round trips and a few signatures, so only a
/// broken or hostile peer takes this long (it holds a connection slot meanwhile).
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Largest PEM file read (certificate chains and keys are a few KiB): a
/// wrong path (a log, a disk image) fails fast instead of being read whole.
const PEM_FILE_MAX_BYTES: u64 = 1 << 20;

/// A node's TLS identity and trust, loaded and checked. Cheap to clone.
#[derive(Clone)]
pub struct TlsConfig {
    inner: Arc<Inner>,
    server_name: ServerName<'static>,
}

struct Inner {
    files: TlsFiles,
    cert_pem: Vec<u8>,
    key_pem: Vec<u8>,
    ca_pem: Vec<u8>,
    role: Option<Role>,
    server: Arc<ServerConfig>,
    client: Arc<ClientConfig>,
}

impl TlsConfig {
    /// Reads the three files, and builds the server config (client
    /// certificate required, verified against the CA) and the client config
    /// (server verified against the CA, this certificate presented).
    pub fn load(files: &TlsFiles) -> Result<TlsConfig, TlsError> {
        let cert_pem = read_pem(&files.cert, "certificate (--tls-cert)")?;
        let key_pem = read_pem(&files.key, "private key (--tls-key)")?;
        let ca_pem = read_pem(&files.ca, "CA certificate (--tls-ca)")?;
        let bad = |path: &Path, what, reason: String| TlsError::BadPem { what, path: path.to_owned(), reason };
        let chain = certificates(&cert_pem).map_err(|r| bad(&files.cert, "certificate (--tls-cert)", r))?;
        let cas = certificates(&ca_pem).map_err(|r| bad(&files.ca, "CA certificate (--tls-ca)", r))?;
        let key = PrivateKeyDer::from_pem_slice(&key_pem)
            .map_err(|e| bad(&files.key, "private key (--tls-key)", e.to_string()))?;
        let mut roots = RootCertStore::empty();
        for ca in cas {
            roots.add(ca).map_err(|e| bad(&files.ca, "CA certificate (--tls-ca)", e.to_string()))?;
        }
        let identity = |e: &dyn fmt::Display| TlsError::Identity {
            cert: files.cert.clone(),
            key: files.key.clone(),
            reason: e.to_string(),
        };
        let roots = Arc::new(roots);
        let provider = provider();
        let verifier = WebPkiClientVerifier::builder_with_provider(roots.clone(), provider.clone())
            .build()
            .map_err(|e| identity(&e))?;
        let server = ServerConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(|e| identity(&e))?
            .with_client_cert_verifier(verifier)
            .with_single_cert(chain.clone(), key.clone_key())
            .map_err(|e| identity(&e))?;
        let client = ClientConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(|e| identity(&e))?
            .with_root_certificates(roots)
            .with_client_auth_cert(chain.clone(), key)
            .map_err(|e| identity(&e))?;
        let role = chain.first().and_then(Role::of_certificate);
        let inner = Inner {
            files: files.clone(),
            cert_pem,
            key_pem,
            ca_pem,
            role,
            server: Arc::new(server),
            client: Arc::new(client),
        };
        let server_name = ServerName::try_from(DEFAULT_SERVER_NAME)
            .map_err(|e| TlsError::ServerName { name: DEFAULT_SERVER_NAME.into(), reason: e.to_string() })?;
        Ok(TlsConfig { inner: Arc::new(inner), server_name })
    }

    /// The same identity, checking servers' certificates against `name`
    /// (a DNS name or IP address their certificates carry) instead of
    /// [`DEFAULT_SERVER_NAME`].
    pub fn with_server_name(mut self, name: &str) -> Result<TlsConfig, TlsError> {
        self.server_name = ServerName::try_from(name.to_owned())
            .map_err(|e| TlsError::ServerName { name: name.into(), reason: e.to_string() })?;
        Ok(self)
    }

    /// For servers: requires and verifies a client certificate.
    pub fn server_config(&self) -> Arc<ServerConfig> {
        self.inner.server.clone()
    }

    /// For clients: verifies the server, presents this node's certificate.
    pub fn client_config(&self) -> Arc<ClientConfig> {
        self.inner.client.clone()
    }

    /// The name servers' certificates are checked against.
    pub fn server_name(&self) -> &ServerName<'static> {
        &self.server_name
    }

    /// The role this node's own certificate names, if it names one.
    pub fn own_role(&self) -> Option<Role> {
        self.inner.role
    }

    /// The files this was loaded from.
    pub fn files(&self) -> &TlsFiles {
        &self.inner.files
    }

    /// The certificate chain, PEM (for tonic's `Identity`).
    pub fn cert_pem(&self) -> &[u8] {
        &self.inner.cert_pem
    }

    /// The private key, PEM (for tonic's `Identity`).
    pub fn key_pem(&self) -> &[u8] {
        &self.inner.key_pem
    }

    /// The CA certificate(s), PEM (for tonic's trust roots).
    pub fn ca_pem(&self) -> &[u8] {
        &self.inner.ca_pem
    }
}

/// Equal when loaded from the same files with the same contents and server
/// name (configs that hold a `TlsConfig` compare by value).
impl PartialEq for TlsConfig {
    fn eq(&self, other: &Self) -> bool {
        let (a, b) = (&self.inner, &other.inner);
        self.server_name == other.server_name
            && (Arc::ptr_eq(a, b)
                || (a.files == b.files && a.cert_pem == b.cert_pem && a.key_pem == b.key_pem && a.ca_pem == b.ca_pem))
    }
}

impl Eq for TlsConfig {}

/// Names the files and the role; never prints the key.
impl fmt::Debug for TlsConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsConfig")
            .field("cert", &self.inner.files.cert)
            .field("key", &self.inner.files.key)
            .field("ca", &self.inner.files.ca)
            .field("role", &self.inner.role)
            .field("server_name", &self.server_name)
            .finish()
    }
}

/// ring, TLS 1.3 suites only, AES-128-GCM first: the cheapest AEAD per byte
/// with AES-NI, which is what the data path's throughput rests on.
fn provider() -> Arc<CryptoProvider> {
    let mut provider = default_provider();
    provider.cipher_suites = vec![
        cipher_suite::TLS13_AES_128_GCM_SHA256,
        cipher_suite::TLS13_AES_256_GCM_SHA384,
        cipher_suite::TLS13_CHACHA20_POLY1305_SHA256,
    ];
    Arc::new(provider)
}

fn read_pem(path: &Path, what: &'static str) -> Result<Vec<u8>, TlsError> {
    use std::io::Read;
    let read = |source| TlsError::Read { what, path: path.to_owned(), source };
    let file = std::fs::File::open(path).map_err(read)?;
    let mut bytes = Vec::new();
    file.take(PEM_FILE_MAX_BYTES + 1).read_to_end(&mut bytes).map_err(read)?;
    if bytes.len() as u64 > PEM_FILE_MAX_BYTES {
        return Err(TlsError::BadPem {
            what,
            path: path.to_owned(),
            reason: format!("larger than {PEM_FILE_MAX_BYTES} bytes"),
        });
    }
    Ok(bytes)
}

/// Every certificate of a PEM file; at least one.
fn certificates(pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs = CertificateDer::pem_slice_iter(pem).collect::<Result<Vec<_>, _>>().map_err(|e| e.to_string())?;
    if certs.is_empty() {
        return Err("no CERTIFICATE block in it".into());
    }
    Ok(certs)
}
