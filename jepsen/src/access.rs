//! [`Access`]: how the harness's own clients reach the cluster under test —
//! the workloads, the nemesis's queries, the checkers' readers and the
//! stall writer processes. With mutual TLS (the default) every one of them
//! presents the run's client certificate; with `--no-tls` they speak plain
//! TCP, as the masters and store nodes then do.

use mooncake_client::{ClientConfig, MasterClientConfig, Protocol};
use mooncake_tls::TlsConfig;

/// The variables through which `mooncake` and the stall writers would pick
/// up TLS files of their own: removed from every process the harness
/// starts, so its flags alone decide (a shell's settings never turn TLS on
/// under `--no-tls`, nor swap the run's certificates).
const TLS_ENV: [&str; 4] = ["MOONCAKE_TLS_CERT", "MOONCAKE_TLS_KEY", "MOONCAKE_TLS_CA", "MOONCAKE_TLS_SERVER_NAME"];

/// Removes [`TLS_ENV`] from `cmd`'s environment.
pub fn clear_tls_env(cmd: &mut std::process::Command) {
    for name in TLS_ENV {
        cmd.env_remove(name);
    }
}

/// The identity the harness's clients connect with. Cheap to clone.
#[derive(Clone, Debug, Default)]
pub struct Access {
    /// The run's client certificate, key and CA; `None` = plain TCP.
    tls: Option<TlsConfig>,
    /// How store clients move bytes (`ucx` in `ucx-stores`, else TCP).
    protocol: Protocol,
}

impl Access {
    /// Plain TCP (`--no-tls`).
    pub fn plain() -> Access {
        Access { tls: None, protocol: Protocol::Tcp }
    }

    /// Mutual TLS with `tls` (a client certificate of the run's CA).
    pub fn tls(tls: TlsConfig) -> Access {
        Access { tls: Some(tls), protocol: Protocol::Tcp }
    }

    /// The same access, with store clients moving bytes over `protocol`.
    pub fn with_protocol(self, protocol: Protocol) -> Access {
        Access { protocol, ..self }
    }

    /// Whether connections use mutual TLS.
    pub fn is_tls(&self) -> bool {
        self.tls.is_some()
    }

    /// The certificate files, for a child process's command line.
    pub fn tls_files(&self) -> Option<&mooncake_tls::TlsFiles> {
        self.tls.as_ref().map(TlsConfig::files)
    }

    /// A master client of `masters`.
    pub fn master(&self, masters: Vec<String>) -> MasterClientConfig {
        MasterClientConfig { tls: self.tls.clone(), ..MasterClientConfig::new(masters) }
    }

    /// A store client of `masters` (its transfer lanes use the same identity).
    pub fn client(&self, masters: Vec<String>) -> ClientConfig {
        ClientConfig { tls: self.tls.clone(), protocol: self.protocol, ..ClientConfig::new(masters) }
    }
}
