//! The cluster secret: 32 random bytes that every master of one cluster
//! holds and nobody else does. Created once, when the cluster is founded;
//! kept in each master's data dir (`cluster-secret`, mode 0600); never
//! derived from public data (the cluster id is: it names, it does not
//! authenticate).
//!
//! Keys for each use are derived from it ([`ClusterSecret::key`]): Raft
//! messages carry a MAC under the `raft` key (`raft_service.rs`,
//! `network.rs`), so only a master of the cluster can send one; admin
//! tokens and data-path capability keys come from their own purposes.
//!
//! Where a new master gets it: `--cluster-secret-file FILE`, the same file
//! for every master of the cluster. A founding master that finds no such
//! file creates it (exclusively: masters started together on one host
//! agree), so `mooncake up` and the tests need no set-up. Once in the data
//! dir, the data dir's copy rules: a different file is refused.

use std::path::{Path, PathBuf};

use ring::hmac;

use crate::key_file::{self, KEY_FILE_BYTES, KeyFileError};

/// The file in a master's data dir.
pub const SECRET_FILE: &str = "cluster-secret";
const SECRET_BYTES: usize = KEY_FILE_BYTES;

/// Why this master has no usable secret.
#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    #[error(
        "this master has no cluster secret: pass --cluster-secret-file FILE, the same file for every master of the \
         cluster (a founding master creates it if it does not exist; copy it to masters on other hosts)"
    )]
    Missing,
    #[error("cluster secret {path}: {reason}")]
    Bad { path: PathBuf, reason: String },
    #[error(
        "the cluster secret in {file} differs from the one in this master's data dir ({dir}): this master belongs \
         to another cluster, or the file is wrong; pass the file its cluster was founded with"
    )]
    Differs { file: PathBuf, dir: PathBuf },
    #[error("cluster secret {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("no randomness from the operating system")]
    Random,
}

impl From<KeyFileError> for SecretError {
    fn from(e: KeyFileError) -> SecretError {
        match e {
            KeyFileError::Bad { path, reason } => SecretError::Bad { path, reason },
            KeyFileError::Io { path, source } => SecretError::Io { path, source },
            KeyFileError::Random => SecretError::Random,
        }
    }
}

/// The secret itself (never printed: `Debug` shows nothing of it).
#[derive(Clone)]
pub struct ClusterSecret([u8; SECRET_BYTES]);

impl std::fmt::Debug for ClusterSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ClusterSecret(..)")
    }
}

/// A key for one purpose, derived from the cluster secret.
#[derive(Clone)]
pub struct MacKey(hmac::Key);

impl std::fmt::Debug for MacKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MacKey(..)")
    }
}

/// A MAC's length in bytes (HMAC-SHA256).
pub const MAC_BYTES: usize = 32;

impl MacKey {
    /// A key from raw bytes (a store node's per-segment key, say).
    pub fn from_bytes(bytes: &[u8]) -> MacKey {
        MacKey(hmac::Key::new(hmac::HMAC_SHA256, bytes))
    }

    /// The MAC of `parts`, each length-prefixed (so no two different
    /// sequences of parts sign the same bytes).
    pub fn sign(&self, parts: &[&[u8]]) -> Vec<u8> {
        let mut ctx = hmac::Context::with_key(&self.0);
        for p in parts {
            ctx.update(&(p.len() as u64).to_le_bytes());
            ctx.update(p);
        }
        ctx.sign().as_ref().to_vec()
    }

    /// Whether `tag` is the MAC of `parts` (constant time).
    pub fn verify(&self, parts: &[&[u8]], tag: &[u8]) -> bool {
        constant_time_eq(&self.sign(parts), tag)
    }
}

/// Whether `a` equals `b`, comparing every byte whatever the first
/// difference (no timing oracle for a forger).
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |d, (x, y)| d | (x ^ y)) == 0
}

/// How this master came to hold its secret (logged at start).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    DataDir,
    File,
    CreatedFile,
    CreatedSingle,
}

impl ClusterSecret {
    /// The secret of the master whose data dir is `data_dir`: the data dir's
    /// copy if it has one (and `file`, if given, must hold the same);
    /// otherwise `file` (created if missing), copied into the data dir;
    /// otherwise, for the only founding member of a cluster, a new one.
    pub fn load(
        data_dir: &Path,
        file: Option<&Path>,
        sole_founder: bool,
    ) -> Result<(ClusterSecret, Origin), SecretError> {
        let in_dir = data_dir.join(SECRET_FILE);
        let ours = read_if_exists(&in_dir)?;
        let given = match file {
            Some(f) => Some(match read_if_exists(f)? {
                Some(s) => (s, Origin::File),
                None => (create_exclusive(f)?, Origin::CreatedFile),
            }),
            None => None,
        };
        match (ours, given, file) {
            (Some(ours), Some((given, _)), Some(f)) if ours.0 != given.0 => {
                Err(SecretError::Differs { file: f.to_path_buf(), dir: in_dir })
            }
            (Some(ours), _, _) => Ok((ours, Origin::DataDir)),
            (None, Some((given, origin)), _) => {
                write_private(&in_dir, &given)?;
                Ok((given, origin))
            }
            (None, None, _) if sole_founder => {
                let s = ClusterSecret(key_file::random()?);
                write_private(&in_dir, &s)?;
                Ok((s, Origin::CreatedSingle))
            }
            (None, None, _) => Err(SecretError::Missing),
        }
    }

    /// Reads the secret file an operator (or `mooncake up`) gives masters.
    pub fn read_file(path: &Path) -> Result<ClusterSecret, SecretError> {
        read_if_exists(path)?.ok_or_else(|| SecretError::Io {
            path: path.to_path_buf(),
            source: std::io::Error::from(std::io::ErrorKind::NotFound),
        })
    }

    /// Creates a new secret file at `path` (mode 0600), or reads the one
    /// there: what a tool that starts a cluster's masters does first.
    pub fn create_file(path: &Path) -> Result<ClusterSecret, SecretError> {
        Ok(ClusterSecret(key_file::read_or_create(path)?))
    }

    /// The key for `purpose` (`"raft"`, `"admin"`, ...).
    pub fn key(&self, purpose: &str) -> MacKey {
        let derived = hmac::sign(&hmac::Key::new(hmac::HMAC_SHA256, &self.0), purpose.as_bytes());
        MacKey::from_bytes(derived.as_ref())
    }
}

fn read_if_exists(path: &Path) -> Result<Option<ClusterSecret>, SecretError> {
    Ok(key_file::read_if_exists(path)?.map(ClusterSecret))
}

fn create_exclusive(path: &Path) -> Result<ClusterSecret, SecretError> {
    Ok(ClusterSecret(key_file::create_exclusive(path)?))
}

fn write_private(path: &Path, secret: &ClusterSecret) -> Result<(), SecretError> {
    Ok(key_file::write_private(path, &secret.0)?)
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    #[test]
    fn masters_started_together_share_the_file_and_keep_it() {
        let tmp = tempfile::tempdir().unwrap();
        let file = tmp.path().join("cluster.secret");
        let (d1, d2) = (tmp.path().join("m1"), tmp.path().join("m2"));
        std::fs::create_dir_all(&d1).unwrap();
        std::fs::create_dir_all(&d2).unwrap();
        let (a, oa) = ClusterSecret::load(&d1, Some(&file), false).unwrap();
        let (b, ob) = ClusterSecret::load(&d2, Some(&file), false).unwrap();
        assert_eq!((oa, ob), (Origin::CreatedFile, Origin::File));
        assert_eq!(a.0, b.0);
        let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        // Restarted without the flag: the data dir's copy.
        let (c, oc) = ClusterSecret::load(&d1, None, false).unwrap();
        assert_eq!((c.0, oc), (a.0, Origin::DataDir));
    }

    #[test]
    fn a_master_without_a_secret_or_with_another_clusters_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path().join("m");
        std::fs::create_dir_all(&d).unwrap();
        assert!(matches!(ClusterSecret::load(&d, None, false), Err(SecretError::Missing)));
        let (single, o) = ClusterSecret::load(&d, None, true).unwrap();
        assert_eq!(o, Origin::CreatedSingle);
        let other = tmp.path().join("other.secret");
        std::fs::create_dir_all(tmp.path().join("y")).unwrap();
        let (o2, _) = ClusterSecret::load(&tmp.path().join("y"), Some(&other), false).unwrap();
        assert_ne!(o2.0, single.0);
        assert!(matches!(ClusterSecret::load(&d, Some(&other), false), Err(SecretError::Differs { .. })));
    }

    #[test]
    fn unreadable_or_exposed_files_are_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path().join("m");
        std::fs::create_dir_all(&d).unwrap();
        let f = tmp.path().join("s");
        std::fs::write(&f, "abc\n").unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert!(matches!(ClusterSecret::load(&d, Some(&f), false), Err(SecretError::Bad { .. })));
        std::fs::write(&f, format!("{}\n", "ab".repeat(32))).unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = ClusterSecret::load(&d, Some(&f), false).unwrap_err().to_string();
        assert!(e.contains("chmod 600"), "{e}");
        assert!(!d.join(SECRET_FILE).exists(), "a refused secret changes nothing");
    }

    #[test]
    fn macs_bind_every_part_and_keys_differ_by_purpose() {
        let s = ClusterSecret([7; SECRET_BYTES]);
        let k = s.key("raft");
        let tag = k.sign(&[b"ab", b"c"]);
        assert!(k.verify(&[b"ab", b"c"], &tag));
        assert!(!k.verify(&[b"a", b"bc"], &tag), "part boundaries are signed");
        assert!(!s.key("admin").verify(&[b"ab", b"c"], &tag));
        assert!(!k.verify(&[b"ab", b"c"], &tag[..31]));
    }
}
