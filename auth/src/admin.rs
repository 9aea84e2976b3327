//! The admin identity without TLS: a bearer token derived from the cluster
//! secret. Every master can check it and none needs to store it apart from
//! the secret; each master writes it to `admin.token` (mode 0600) in its data
//! dir, so an operator who can read a master's data dir can act as admin.
//! Requests carry it in the gRPC metadata entry [`ADMIN_TOKEN_HEADER`]. With
//! TLS, an admin certificate identifies the admin instead.
//!
//! Admin operations: membership changes, client eviction, snapshots
//! (trigger and export), and forced removals (`Remove`/`RemoveAll` with
//! `force`, which ignore KV leases and pins).

use std::path::{Path, PathBuf};

use crate::key_file::{self, KeyFileError};
use crate::secret::{ClusterSecret, constant_time_eq};

/// The gRPC metadata entry that carries the admin token.
pub const ADMIN_TOKEN_HEADER: &str = "x-mooncake-admin-token";
/// The token's file in a master's data dir (and in a `mooncake up` dir).
pub const ADMIN_TOKEN_FILE: &str = "admin.token";

/// Why a token file could not be read or written (a key file: 64 hex
/// digits, mode 0600, see [`crate::key_file`]).
#[derive(Debug, thiserror::Error)]
pub enum TokenFileError {
    #[error("admin token file {0}")]
    File(#[from] KeyFileError),
    #[error("admin token file {0}: no such file (every master writes admin.token in its data dir)")]
    Missing(PathBuf),
}

/// An admin token: 64 hex digits (never printed by `Debug`).
#[derive(Clone, PartialEq, Eq)]
pub struct AdminToken(String);

impl AdminToken {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for AdminToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AdminToken(..)")
    }
}

/// The admin token of the cluster whose secret is `secret`.
pub fn admin_token(secret: &ClusterSecret) -> AdminToken {
    AdminToken(key_file::to_hex(&secret.key("admin").sign(&[b"admin token"])))
}

/// Whether `presented` is `expected` (compared in constant time).
pub fn token_matches(expected: &str, presented: &str) -> bool {
    constant_time_eq(expected.as_bytes(), presented.as_bytes())
}

/// Writes `token` to `path` (a key file, mode 0600), replacing what is there.
pub fn write_token_file(path: &Path, token: &AdminToken) -> Result<(), TokenFileError> {
    let bytes = key_file::from_hex(token.as_str())
        .ok_or_else(|| KeyFileError::Bad { path: path.to_path_buf(), reason: "not an admin token".into() })?;
    Ok(key_file::write_private(path, &bytes)?)
}

/// Reads a token file; refuses one that other users can read.
pub fn read_token_file(path: &Path) -> Result<AdminToken, TokenFileError> {
    let bytes = key_file::read_if_exists(path)?.ok_or_else(|| TokenFileError::Missing(path.to_path_buf()))?;
    Ok(AdminToken(key_file::to_hex(&bytes)))
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    #[test]
    fn the_token_is_the_clusters_and_round_trips_through_its_file() {
        let tmp = tempfile::tempdir().unwrap();
        let (a, _) = ClusterSecret::load(tmp.path(), None, true).unwrap();
        let other = tempfile::tempdir().unwrap();
        let (b, _) = ClusterSecret::load(other.path(), None, true).unwrap();
        let (ta, tb) = (admin_token(&a), admin_token(&b));
        assert_ne!(ta, tb);
        let (sa, sb) = (ta.as_str(), tb.as_str());
        assert!(token_matches(sa, sa) && !token_matches(sa, sb) && !token_matches(sa, &sa[..63]));
        assert_eq!(format!("{ta:?}"), "AdminToken(..)", "never printed");
        let f = tmp.path().join(ADMIN_TOKEN_FILE);
        write_token_file(&f, &ta).unwrap();
        assert_eq!(read_token_file(&f).unwrap(), ta);
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(read_token_file(&f).unwrap_err().to_string().contains("chmod 600"));
    }
}
