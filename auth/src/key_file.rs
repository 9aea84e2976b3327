//! Files that hold 32 secret bytes as 64 hex digits and a newline, mode
//! 0600: the cluster secret ([`crate::secret`]) and a client's credential
//! ([`crate::credential`]). One reader that refuses a file other users can
//! read, one exclusive creator (concurrent creators agree on one file), one
//! durable replacing writer.

use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use ring::rand::{SecureRandom, SystemRandom};

/// Bytes of the secret such a file holds.
pub const KEY_FILE_BYTES: usize = 32;

/// Why a key file could not be read or written. The owner of the file
/// (secret, credential) says what the file is in its own error.
#[derive(Debug, thiserror::Error)]
pub enum KeyFileError {
    #[error("{path}: {reason}")]
    Bad { path: PathBuf, reason: String },
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("no randomness from the operating system")]
    Random,
}

/// 32 fresh random bytes.
pub fn random() -> Result<[u8; KEY_FILE_BYTES], KeyFileError> {
    let mut b = [0u8; KEY_FILE_BYTES];
    SystemRandom::new().fill(&mut b).map_err(|_| KeyFileError::Random)?;
    Ok(b)
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> KeyFileError + '_ {
    move |source| KeyFileError::Io { path: path.to_path_buf(), source }
}

/// 32 bytes as 64 lowercase hex digits (the form of every secret this
/// crate writes or sends: key files, the admin token, the credential header).
pub fn to_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// 64 hex digits back to 32 bytes; `None` when malformed.
pub fn from_hex(hex: &str) -> Option<[u8; KEY_FILE_BYTES]> {
    if hex.len() != 2 * KEY_FILE_BYTES {
        return None;
    }
    let mut b = [0u8; KEY_FILE_BYTES];
    for (i, byte) in b.iter_mut().enumerate() {
        *byte = hex.get(2 * i..2 * i + 2).and_then(|d| u8::from_str_radix(d, 16).ok())?;
    }
    Some(b)
}

fn to_text(bytes: &[u8; KEY_FILE_BYTES]) -> String {
    let mut t = to_hex(bytes);
    t.push('\n');
    t
}

fn parse(path: &Path, text: &str) -> Result<[u8; KEY_FILE_BYTES], KeyFileError> {
    let bad = |reason: &str| KeyFileError::Bad { path: path.to_path_buf(), reason: reason.to_string() };
    let hex = text.trim();
    if hex.len() != 2 * KEY_FILE_BYTES {
        return Err(bad(&format!("expected {} hex digits, found {} characters", 2 * KEY_FILE_BYTES, hex.len())));
    }
    from_hex(hex).ok_or_else(|| bad("not hex digits"))
}

/// Reads a key file (`None` when there is none); refuses one that other
/// users can read.
pub fn read_if_exists(path: &Path) -> Result<Option<[u8; KEY_FILE_BYTES]>, KeyFileError> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io(path)(e)),
    };
    let mode = std::fs::metadata(path).map_err(io(path))?.permissions().mode();
    if mode & 0o077 != 0 {
        return Err(KeyFileError::Bad {
            path: path.to_path_buf(),
            reason: format!("readable by other users (mode {:o}); chmod 600 it", mode & 0o777),
        });
    }
    parse(path, &text).map(Some)
}

/// Writes new random bytes to `path` unless the file exists (then the one
/// there wins: processes started together share it), and returns the bytes
/// in force.
pub fn create_exclusive(path: &Path) -> Result<[u8; KEY_FILE_BYTES], KeyFileError> {
    let fresh = random()?;
    let tmp = path.with_extension(format!("tmp-{}", std::process::id()));
    write_file(&tmp, &fresh)?;
    // link() does not replace: exactly one creator wins.
    let linked = std::fs::hard_link(&tmp, path);
    let _ = std::fs::remove_file(&tmp);
    match linked {
        Ok(()) => {
            sync_dir(path)?;
            Ok(fresh)
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => read_if_exists(path)?
            .ok_or_else(|| KeyFileError::Bad { path: path.to_path_buf(), reason: "vanished".into() }),
        Err(e) => Err(io(path)(e)),
    }
}

/// The bytes in `path`, or new ones written there (mode 0600) if it does
/// not exist.
pub fn read_or_create(path: &Path) -> Result<[u8; KEY_FILE_BYTES], KeyFileError> {
    match read_if_exists(path)? {
        Some(b) => Ok(b),
        None => create_exclusive(path),
    }
}

/// Writes `bytes` to `path` durably, mode 0600, replacing any file there.
pub fn write_private(path: &Path, bytes: &[u8; KEY_FILE_BYTES]) -> Result<(), KeyFileError> {
    let tmp = path.with_extension("tmp");
    write_file(&tmp, bytes)?;
    std::fs::rename(&tmp, path).map_err(io(path))?;
    sync_dir(path)
}

fn write_file(path: &Path, bytes: &[u8; KEY_FILE_BYTES]) -> Result<(), KeyFileError> {
    let _ = std::fs::remove_file(path);
    let mut f = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(path).map_err(io(path))?;
    f.write_all(to_text(bytes).as_bytes()).map_err(io(path))?;
    f.sync_all().map_err(io(path))
}

fn sync_dir(path: &Path) -> Result<(), KeyFileError> {
    match path.parent().filter(|d| !d.as_os_str().is_empty()) {
        Some(dir) => std::fs::File::open(dir).and_then(|d| d.sync_all()).map_err(io(dir)),
        None => Ok(()),
    }
}
