//! [`TlsArgs`]: the TLS flags, one definition flattened into every command
//! that talks to or serves the cluster (`mooncake master`, `mooncake store`,
//! the CLI's client commands), so the names are the same everywhere.

use std::path::PathBuf;

use crate::config::{DEFAULT_SERVER_NAME, TlsConfig};
use crate::error::TlsError;
use crate::files::TlsFiles;

/// `--tls-cert --tls-key --tls-ca` (all three or none) and `--tls-server-name`.
#[derive(clap::Args, Clone, Debug, Default, PartialEq, Eq)]
pub struct TlsArgs {
    /// This node's certificate (PEM). With --tls-key and --tls-ca, turns on
    /// mutual TLS for every connection this process makes or accepts.
    #[arg(long = "tls-cert", env = "MOONCAKE_TLS_CERT", value_name = "PEM")]
    pub tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert (PEM; keep it mode 0600).
    #[arg(long = "tls-key", env = "MOONCAKE_TLS_KEY", value_name = "PEM")]
    pub tls_key: Option<PathBuf>,
    /// The cluster's CA certificate (PEM): peers must present a certificate it signed.
    #[arg(long = "tls-ca", env = "MOONCAKE_TLS_CA", value_name = "PEM")]
    pub tls_ca: Option<PathBuf>,
    /// The name servers' certificates are checked against (default:
    /// `localhost`, which every `mooncake certs init` certificate carries).
    #[arg(long = "tls-server-name", env = "MOONCAKE_TLS_SERVER_NAME", value_name = "NAME")]
    pub tls_server_name: Option<String>,
}

impl TlsArgs {
    /// The flags of `files` (for a child process's command line).
    pub fn from_files(files: &TlsFiles) -> TlsArgs {
        TlsArgs {
            tls_cert: Some(files.cert.clone()),
            tls_key: Some(files.key.clone()),
            tls_ca: Some(files.ca.clone()),
            tls_server_name: None,
        }
    }

    /// The files named, `None` when TLS is off; a partial set is an error.
    pub fn files(&self) -> Result<Option<TlsFiles>, TlsError> {
        TlsFiles::from_parts(self.tls_cert.clone(), self.tls_key.clone(), self.tls_ca.clone())
    }

    /// Whether TLS is asked for (any of the three files given).
    pub fn enabled(&self) -> bool {
        self.tls_cert.is_some() || self.tls_key.is_some() || self.tls_ca.is_some()
    }

    /// Checks the flags without reading the files: all three or none.
    pub fn validate(&self) -> Result<(), TlsError> {
        self.files().map(drop)
    }

    /// Loads the files: `None` when TLS is off.
    pub fn load(&self) -> Result<Option<TlsConfig>, TlsError> {
        let Some(files) = self.files()? else { return Ok(None) };
        let config = files.load()?;
        Ok(Some(config.with_server_name(self.tls_server_name.as_deref().unwrap_or(DEFAULT_SERVER_NAME))?))
    }
}
