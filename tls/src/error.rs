//! [`TlsError`]: why TLS could not be set up. Every case names the file or
//! value at fault and what to do about it.

use std::io;
use std::path::PathBuf;

/// Why the TLS files could not be loaded, or the PKI not generated.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// Some but not all of `--tls-cert`, `--tls-key`, `--tls-ca` were given.
    #[error(
        "TLS needs all three of --tls-cert, --tls-key and --tls-ca (or none of them, for plain TCP on loopback); \
         missing: {missing}. `mooncake certs init DIR` creates a set"
    )]
    Partial {
        /// The flags that are missing, e.g. `--tls-key, --tls-ca`.
        missing: String,
    },
    /// A file could not be read.
    #[error("cannot read {what} {}: {source}; check the path and that this user may read it", .path.display())]
    Read {
        /// What the file should hold (`certificate (--tls-cert)`, …).
        what: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// A file holds no usable PEM item of the expected kind.
    #[error("{} is not a valid {what}: {reason}; give a PEM file (`mooncake certs init DIR` writes a set)", .path.display())]
    BadPem { what: &'static str, path: PathBuf, reason: String },
    /// The certificate, key and CA do not form a usable identity (a key that
    /// does not match the certificate, a CA that rustls refuses, …).
    #[error("the TLS identity in {} / {} is unusable: {reason}", .cert.display(), .key.display())]
    Identity { cert: PathBuf, key: PathBuf, reason: String },
    /// The name server certificates are checked against is not a DNS name or IP address.
    #[error("TLS server name {name:?} is not a DNS name or IP address: {reason}")]
    ServerName { name: String, reason: String },
    /// Generating the development PKI failed.
    #[error("generating certificates: {0}")]
    Generate(String),
    /// `certs init` would overwrite a file.
    #[error(
        "{} exists already; `certs init` never overwrites certificates or keys: pick an empty directory or move the old files away",
        .path.display()
    )]
    Exists { path: PathBuf },
    /// Writing a generated file failed.
    #[error("cannot write {}: {source}", .path.display())]
    Write {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}
