//! [`Role`]: who a certificate names. The role is encoded in the subject's
//! common name (CN):
//!
//! | role | CN |
//! |---|---|
//! | master with Raft id N | `mooncake-master-N` (N ≥ 1, decimal) |
//! | store node | `mooncake-store` |
//! | client (inference server, CLI object commands) | `mooncake-client` |
//! | administrator (membership, eviction, snapshots) | `mooncake-admin` |
//!
//! Any other CN names no role ([`Role::from_common_name`] gives `None`).
//! A role is only meaningful for a certificate that was verified against
//! the cluster's CA: anyone can write any CN into a self-signed certificate.

use std::fmt;

use rustls::pki_types::CertificateDer;

/// Prefix of every role's common name.
pub const CN_PREFIX: &str = "mooncake-";

/// Who a verified peer is, by its certificate's subject common name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Role {
    /// A master, with its Raft node id.
    Master { id: u64 },
    /// A store node (serves a segment; registers with the masters as a client).
    Store,
    /// A client of the store: puts, gets, and its own segments.
    Client,
    /// An operator: membership, client eviction, snapshots, forced removals.
    Admin,
}

impl Role {
    /// The subject common name that encodes this role.
    pub fn common_name(self) -> String {
        format!("{CN_PREFIX}{}", self.file_stem())
    }

    /// The role a common name encodes, if any.
    pub fn from_common_name(cn: &str) -> Option<Role> {
        match cn.strip_prefix(CN_PREFIX)? {
            "store" => Some(Role::Store),
            "client" => Some(Role::Client),
            "admin" => Some(Role::Admin),
            other => {
                let id = other.strip_prefix("master-")?;
                // Canonical decimal only: no sign, no leading zero, no id 0.
                if id.is_empty() || id.starts_with('0') || !id.bytes().all(|b| b.is_ascii_digit()) {
                    return None;
                }
                id.parse().ok().map(|id| Role::Master { id })
            }
        }
    }

    /// The role named by a DER certificate's subject common name. `None`
    /// when the certificate cannot be parsed or names no role.
    pub fn of_certificate(cert: &CertificateDer<'_>) -> Option<Role> {
        Role::from_common_name(&crate::der::subject_common_name(cert.as_ref())?)
    }

    /// The role of a TLS peer from its certificate chain (end entity first,
    /// as rustls and tonic hand it over).
    pub fn of_peer(chain: &[CertificateDer<'_>]) -> Option<Role> {
        chain.first().and_then(Role::of_certificate)
    }

    /// The base name of this role's files in a `certs init` directory.
    pub(crate) fn file_stem(self) -> String {
        match self {
            Role::Master { id } => format!("master-{id}"),
            Role::Store => "store".into(),
            Role::Client => "client".into(),
            Role::Admin => "admin".into(),
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Role::Master { id } => write!(f, "master {id}"),
            Role::Store => f.write_str("store node"),
            Role::Client => f.write_str("client"),
            Role::Admin => f.write_str("admin"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn common_names_round_trip() {
        for role in [Role::Master { id: 1 }, Role::Master { id: u64::MAX }, Role::Store, Role::Client, Role::Admin] {
            assert_eq!(Role::from_common_name(&role.common_name()), Some(role), "{role}");
        }
        assert_eq!(Role::Master { id: 3 }.common_name(), "mooncake-master-3");
        assert_eq!(Role::Admin.common_name(), "mooncake-admin");
    }

    #[test]
    fn other_names_are_no_role() {
        for cn in [
            "",
            "mooncake",
            "mooncake-",
            "mooncake-master",
            "mooncake-master-",
            "mooncake-master-0",
            "mooncake-master-01",
            "mooncake-master-+1",
            "mooncake-master-1x",
            "mooncake-master-99999999999999999999999",
            "Mooncake-admin",
            "mooncake-admin ",
            "localhost",
        ] {
            assert_eq!(Role::from_common_name(cn), None, "{cn:?}");
        }
    }
}
