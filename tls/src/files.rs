//! [`TlsFiles`]: where a node's certificate, key and CA live, and the file
//! names `mooncake certs init` uses for each role.

use std::path::{Path, PathBuf};

use crate::config::TlsConfig;
use crate::error::TlsError;
use crate::role::Role;

/// File name of the CA certificate in a directory made by [`crate::generate`].
pub const CA_FILE: &str = "ca.pem";
/// File name of the CA's private key (keep it off the cluster's hosts).
pub const CA_KEY_FILE: &str = "ca-key.pem";

/// The three PEM files of one node: its certificate (chain), its private
/// key, and the CA certificate(s) peers are verified against.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsFiles {
    /// `--tls-cert`: this node's certificate, optionally followed by intermediates.
    pub cert: PathBuf,
    /// `--tls-key`: the private key of `cert` (PKCS#8, SEC1 or PKCS#1 PEM).
    pub key: PathBuf,
    /// `--tls-ca`: the CA certificate(s) every peer's certificate must chain to.
    pub ca: PathBuf,
}

impl TlsFiles {
    /// The files of `--tls-cert`, `--tls-key`, `--tls-ca`: all three, or
    /// none (`Ok(None)`: TLS off); a partial set is refused, naming what is missing.
    pub fn from_parts(
        cert: Option<PathBuf>,
        key: Option<PathBuf>,
        ca: Option<PathBuf>,
    ) -> Result<Option<TlsFiles>, TlsError> {
        match (cert, key, ca) {
            (None, None, None) => Ok(None),
            (Some(cert), Some(key), Some(ca)) => Ok(Some(TlsFiles { cert, key, ca })),
            (cert, key, ca) => {
                let missing: Vec<&str> =
                    [(cert.is_none(), "--tls-cert"), (key.is_none(), "--tls-key"), (ca.is_none(), "--tls-ca")]
                        .into_iter()
                        .filter_map(|(absent, flag)| absent.then_some(flag))
                        .collect();
                Err(TlsError::Partial { missing: missing.join(", ") })
            }
        }
    }

    /// The files of `role` in a directory made by `mooncake certs init`:
    /// `<dir>/<name>.pem`, `<dir>/<name>-key.pem` and `<dir>/ca.pem`, where
    /// name is `master-<id>`, `store`, `client` or `admin`.
    pub fn in_dir(dir: &Path, role: Role) -> TlsFiles {
        let name = role.file_stem();
        TlsFiles {
            cert: dir.join(format!("{name}.pem")),
            key: dir.join(format!("{name}-key.pem")),
            ca: dir.join(CA_FILE),
        }
    }

    /// The files of the client certificate bound to `tenant` in a
    /// directory made by `mooncake certs init --tenant`:
    /// `<dir>/tenant-<tenant>.pem`, its key and `<dir>/ca.pem`.
    pub fn for_tenant(dir: &Path, tenant: &str) -> TlsFiles {
        TlsFiles {
            cert: dir.join(format!("tenant-{tenant}.pem")),
            key: dir.join(format!("tenant-{tenant}-key.pem")),
            ca: dir.join(CA_FILE),
        }
    }

    /// Reads and checks the three files (see [`TlsConfig::load`]).
    pub fn load(&self) -> Result<TlsConfig, TlsError> {
        TlsConfig::load(self)
    }

    /// The flags that name these files, for a command line.
    pub fn to_args(&self) -> Vec<String> {
        vec![
            format!("--tls-cert={}", self.cert.display()),
            format!("--tls-key={}", self.key.display()),
            format!("--tls-ca={}", self.ca.display()),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_three_or_none() {
        assert_eq!(TlsFiles::from_parts(None, None, None).unwrap(), None);
        let p = |s: &str| Some(PathBuf::from(s));
        let files = TlsFiles::from_parts(p("c"), p("k"), p("a")).unwrap().unwrap();
        assert_eq!(files.ca, PathBuf::from("a"));
        let err = TlsFiles::from_parts(p("c"), None, None).unwrap_err().to_string();
        assert!(err.contains("missing: --tls-key, --tls-ca"), "{err}");
        let err = TlsFiles::from_parts(None, p("k"), p("a")).unwrap_err().to_string();
        assert!(err.contains("missing: --tls-cert") && err.contains("certs init"), "{err}");
    }

    #[test]
    fn role_files_follow_the_certs_init_layout() {
        let f = TlsFiles::in_dir(Path::new("/pki"), Role::Master { id: 3 });
        assert_eq!(f.cert, PathBuf::from("/pki/master-3.pem"));
        assert_eq!(f.key, PathBuf::from("/pki/master-3-key.pem"));
        assert_eq!(f.ca, PathBuf::from("/pki/ca.pem"));
        assert_eq!(TlsFiles::in_dir(Path::new("/pki"), Role::Store).cert, PathBuf::from("/pki/store.pem"));
    }
}
