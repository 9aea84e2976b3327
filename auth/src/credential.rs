//! A client's credential: 32 random bytes that one client process holds
//! and sends with every request that acts as its client id (MountSegment,
//! UnmountSegment, RemountSegment, Ping). The masters keep only its SHA-256
//! ([`Credential::hash`]) in the client's replicated record: the credential
//! that registers an id holds it until the registration expires or an admin
//! evicts it, and any other is refused (docs/SECURITY.md).
//!
//! Where a process gets it: made at start, one per process
//! ([`Credential::of_process`]); or, so that a restarted store node is the
//! same client at once, from a file ([`Credential::load_or_create`],
//! `mooncake store --credential-file`), kept like the cluster secret (mode
//! 0600, 64 hex digits; a file other users can read is refused).

use std::path::Path;
use std::sync::OnceLock;

use ring::digest;

use crate::key_file::{self, KEY_FILE_BYTES, KeyFileError};

/// Bytes of a credential.
pub const CREDENTIAL_BYTES: usize = KEY_FILE_BYTES;
/// Bytes of its hash (SHA-256), what the masters keep.
pub const CREDENTIAL_HASH_BYTES: usize = 32;

/// Why a credential could not be had.
#[derive(Debug, thiserror::Error)]
pub enum CredentialError {
    #[error("client credential {0}")]
    File(KeyFileError),
    #[error("a client credential is {CREDENTIAL_BYTES} bytes, not {found}")]
    Length { found: usize },
    #[error("no randomness from the operating system for a client credential")]
    Random,
}

impl From<KeyFileError> for CredentialError {
    fn from(e: KeyFileError) -> CredentialError {
        match e {
            KeyFileError::Random => CredentialError::Random,
            other => CredentialError::File(other),
        }
    }
}

/// A client's credential (never printed: `Debug` shows nothing of it).
#[derive(Clone, PartialEq, Eq)]
pub struct Credential([u8; CREDENTIAL_BYTES]);

impl std::fmt::Debug for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Credential(..)")
    }
}

impl Credential {
    /// A new random credential.
    pub fn random() -> Result<Credential, CredentialError> {
        Ok(Credential(key_file::random()?))
    }

    /// This process's credential: made at its first use, the same for every
    /// client of the process after that (a client reconnected in the same
    /// process is the same client).
    pub fn of_process() -> Result<Credential, CredentialError> {
        static PROCESS: OnceLock<Credential> = OnceLock::new();
        if let Some(c) = PROCESS.get() {
            return Ok(c.clone());
        }
        let fresh = Credential::random()?;
        Ok(PROCESS.get_or_init(|| fresh).clone())
    }

    /// The credential in `path`, or a new one written there (mode 0600) if
    /// there is no file. A file other users can read is refused.
    pub fn load_or_create(path: &Path) -> Result<Credential, CredentialError> {
        Ok(Credential(key_file::read_or_create(path)?))
    }

    /// A credential as a request carries it.
    pub fn from_bytes(bytes: &[u8]) -> Result<Credential, CredentialError> {
        <[u8; CREDENTIAL_BYTES]>::try_from(bytes)
            .map(Credential)
            .map_err(|_| CredentialError::Length { found: bytes.len() })
    }

    pub fn as_bytes(&self) -> &[u8; CREDENTIAL_BYTES] {
        &self.0
    }

    /// SHA-256 of the credential: what the masters keep and compare.
    pub fn hash(&self) -> [u8; CREDENTIAL_HASH_BYTES] {
        let mut out = [0u8; CREDENTIAL_HASH_BYTES];
        out.copy_from_slice(digest::digest(&digest::SHA256, &self.0).as_ref());
        out
    }
}

/// File name of a store node's credential in its directory (`mooncake up`,
/// the tests' local clusters).
pub const CREDENTIAL_FILE: &str = "client.credential";

/// The gRPC metadata entry that carries the client's credential (hex) on
/// every call: PutStart, PutEnd and PutRevoke act as their writer only with
/// the writer's credential.
pub const CREDENTIAL_HEADER: &str = "x-mooncake-client-credential";

impl Credential {
    /// The credential as 64 hex digits (for [`CREDENTIAL_HEADER`]).
    pub fn to_hex(&self) -> String {
        key_file::to_hex(&self.0)
    }

    /// A credential from 64 hex digits; `None` when malformed.
    pub fn from_hex(text: &str) -> Option<Credential> {
        key_file::from_hex(text).map(Credential)
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    #[test]
    fn a_credential_file_is_created_once_and_read_back() {
        let tmp = tempfile::tempdir().unwrap();
        let f = tmp.path().join("store.credential");
        let a = Credential::load_or_create(&f).unwrap();
        let b = Credential::load_or_create(&f).unwrap();
        assert_eq!(a, b, "a restart with the file is the same client");
        assert_eq!(std::fs::metadata(&f).unwrap().permissions().mode() & 0o777, 0o600);
        assert_ne!(a, Credential::load_or_create(&tmp.path().join("other")).unwrap());
        assert_eq!(format!("{a:?}"), "Credential(..)", "never printed");
    }

    #[test]
    fn exposed_or_malformed_files_are_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let f = tmp.path().join("c");
        std::fs::write(&f, format!("{}\n", "ab".repeat(32))).unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = Credential::load_or_create(&f).unwrap_err().to_string();
        assert!(e.contains("chmod 600") && e.contains("client credential"), "{e}");
        std::fs::write(&f, "é".repeat(32)).unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert!(Credential::load_or_create(&f).unwrap_err().to_string().contains("hex"));
    }

    #[test]
    fn the_hash_is_sha256_and_requests_must_carry_all_32_bytes() {
        let c = Credential::from_bytes(&[0u8; 32]).unwrap();
        // SHA-256 of 32 zero bytes.
        assert_eq!(c.hash()[..4], [0x66, 0x68, 0x7a, 0xad]);
        assert!(matches!(Credential::from_bytes(&[]), Err(CredentialError::Length { found: 0 })));
        assert!(Credential::from_bytes(&[1; 33]).is_err());
        assert_eq!(Credential::of_process().unwrap(), Credential::of_process().unwrap());
    }
}
