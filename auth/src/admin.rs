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

use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::secret::ClusterSecret;

/// The gRPC metadata entry that carries the admin token.
pub const ADMIN_TOKEN_HEADER: &str = "x-mooncake-admin-token";
/// The token's file in a master's data dir (and in a `mooncake up` dir).
pub const ADMIN_TOKEN_FILE: &str = "admin.token";

/// Why a token file could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum TokenFileError {
    #[error("admin token file {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("admin token file {path}: {reason}")]
    Bad { path: PathBuf, reason: String },
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
    AdminToken(secret.key("admin").sign(&[b"admin token"]).iter().map(|b| format!("{b:02x}")).collect())
}

/// Whether `presented` is `expected` (compared in constant time).
pub fn token_matches(expected: &str, presented: &str) -> bool {
    let (e, p) = (expected.as_bytes(), presented.as_bytes());
    e.len() == p.len() && e.iter().zip(p).fold(0u8, |d, (a, b)| d | (a ^ b)) == 0
}

/// Writes `token` to `path` (mode 0600), replacing what is there.
pub fn write_token_file(path: &Path, token: &AdminToken) -> Result<(), TokenFileError> {
    let io = |source| TokenFileError::Io { path: path.to_path_buf(), source };
    let tmp = path.with_extension("tmp");
    let _ = std::fs::remove_file(&tmp);
    let mut f = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&tmp).map_err(io)?;
    f.write_all(format!("{}\n", token.0).as_bytes()).map_err(io)?;
    f.sync_all().map_err(io)?;
    std::fs::rename(&tmp, path).map_err(io)
}

/// Reads a token file; refuses one that other users can read.
pub fn read_token_file(path: &Path) -> Result<AdminToken, TokenFileError> {
    let io = |source| TokenFileError::Io { path: path.to_path_buf(), source };
    let text = std::fs::read_to_string(path).map_err(io)?;
    let mode = std::fs::metadata(path).map_err(io)?.permissions().mode();
    if mode & 0o077 != 0 {
        let reason = format!("readable by other users (mode {:o}); chmod 600 it", mode & 0o777);
        return Err(TokenFileError::Bad { path: path.to_path_buf(), reason });
    }
    let token = text.trim();
    if token.len() != 64 || !token.bytes().all(|b| b.is_ascii_hexdigit()) {
        let reason = "expected the 64 hex digits a master writes to admin.token in its data dir".to_string();
        return Err(TokenFileError::Bad { path: path.to_path_buf(), reason });
    }
    Ok(AdminToken(token.to_string()))
}

#[cfg(test)]
mod tests {
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
