//! Who owns a store node's shared-memory files: [`ShmOwner`] holds an
//! exclusive `flock` on `<dir>/<identity>-lock` for the life of the store
//! node, names its segment files `<identity>-<segment id as 16 hex digits>`,
//! and removes the segment files a previous process of the same identity
//! left behind when it died without cleaning up (SIGKILL, OOM kill, power).
//!
//! Why a lock and not a pid in the name: the kernel drops a `flock` when its
//! holder dies, however it dies, so "the lock is free" means "no live process
//! owns this identity", with no pid reuse to fool it. A store node takes the
//! lock before it creates any segment file, so once the lock is ours every
//! file of our identity is a dead predecessor's, and removing it never takes
//! memory from a live process. Files of other identities are never touched.
//!
//! The lock file itself is removed on a clean exit. Taking the lock checks
//! that the path still names the file that was locked (a previous holder may
//! remove it in between), so removal never lets two holders in at once.
//!
//! Other users of the host. `/dev/shm` is writable by everyone and the
//! identities are public, so another local user could create the lock file
//! first and hold it, keeping the store node from ever starting. The lock
//! file is created mode 0600 and opened without following links, and one
//! owned by another user is not ours to lock: it is removed and created
//! again (a node running as root can; one that cannot says whose file it
//! is and what to do). Segment files of another user are never ours
//! either: the sweep leaves them (with a warning) instead of failing.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use mooncake_segment::{FileIdentity, SHM_NAME_MAX_BYTES, SegmentId};

use crate::error::TransferError;

/// Tries to take the identity lock before giving up: each retry means the
/// previous holder removed the lock file between our open and our lock, which
/// happens at most once per exiting holder.
const LOCK_ATTEMPTS_MAX: usize = 8;

/// Most stale segment files removed in one sweep. A dead node leaves one per
/// segment (a handful); the cap bounds a sweep of a directory somebody
/// filled with look-alike names.
pub const SHM_STALE_FILES_MAX: usize = 1024;

/// Characters after `<identity>-` in a segment file name: a u64 in hex.
const SEGMENT_HEX_DIGITS: usize = 16;

/// Suffix of the lock file after `<identity>`. Not 16 hex digits, so it can
/// never be taken for a segment file.
const LOCK_SUFFIX: &str = "-lock";

/// A segment file removed by [`ShmOwner::remove_stale`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StaleFile {
    /// The file that was removed.
    pub path: PathBuf,
    /// Its size: tmpfs memory given back to the host.
    pub size_bytes: u64,
}

/// The exclusive claim of one store-node identity on one host's shared
/// memory directory; see the module doc. Released (and its lock file
/// removed) on drop.
#[derive(Debug)]
pub struct ShmOwner {
    dir: PathBuf,
    identity: String,
    lock_path: PathBuf,
    lock_file: File,
}

impl ShmOwner {
    /// Claims `identity` in `dir` (e.g. `/dev/shm`). Fails with
    /// [`TransferError::ShmOwnerBusy`] while a live process holds it, and
    /// with [`TransferError::InvalidConfig`] for an identity that cannot be
    /// part of a file name.
    pub fn acquire(dir: &Path, identity: &str) -> Result<ShmOwner, TransferError> {
        validate_identity(identity)?;
        let lock_path = dir.join(format!("{identity}{LOCK_SUFFIX}"));
        for _ in 0..LOCK_ATTEMPTS_MAX {
            let opened = OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .mode(0o600)
                .custom_flags(libc::O_NOFOLLOW)
                .open(&lock_path);
            let lock_file = match opened {
                Ok(file) => file,
                // A symbolic link where the lock belongs: never ours.
                Err(err) if err.raw_os_error() == Some(libc::ELOOP) => {
                    fs::remove_file(&lock_path).map_err(|source| owner_io("remove a link at", &lock_path, source))?;
                    continue;
                }
                Err(source) => return Err(owner_io("open", &lock_path, source)),
            };
            if !owned_by_us(&lock_file) {
                remove_foreign_lock(&lock_path, &lock_file)?;
                continue;
            }
            lock_exclusive(&lock_file, &lock_path)?;
            // The previous holder may have removed the file between our open
            // and our lock: then we hold a lock nobody else can see. Retry.
            if identity_of_path(&lock_path) == identity_of_file(&lock_file) {
                let dir = dir.to_path_buf();
                return Ok(ShmOwner { dir, identity: identity.to_owned(), lock_path, lock_file });
            }
        }
        Err(owner_io(
            "lock",
            &lock_path,
            io::Error::other(format!("the lock file kept being replaced ({LOCK_ATTEMPTS_MAX} tries)")),
        ))
    }

    /// The file name (in [`Self::dir`]) of segment `segment` of this identity.
    pub fn segment_file_name(&self, segment: SegmentId) -> String {
        format!("{}-{:016x}", self.identity, segment.0)
    }

    /// The directory the files live in.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The lock file held while this owner lives.
    pub fn lock_path(&self) -> &Path {
        &self.lock_path
    }

    /// The segment file of this identity a dead predecessor left that is
    /// `size_bytes` long and owned by this user (the newest, if several),
    /// with its segment id: memory a restarted store node may serve again
    /// ([`ShmOwner::remove_stale`] then keeps it). Call it before creating
    /// this process's segments.
    pub fn predecessor(&self, size_bytes: u64) -> Result<Option<(SegmentId, PathBuf)>, TransferError> {
        let entries = fs::read_dir(&self.dir).map_err(|source| owner_io("list", &self.dir, source))?;
        // SAFETY: geteuid(2) cannot fail.
        let ours = unsafe { libc::geteuid() };
        let mut newest: Option<(std::time::SystemTime, SegmentId, PathBuf)> = None;
        for entry in entries.take(SHM_STALE_FILES_MAX * 4) {
            let entry = entry.map_err(|source| owner_io("list", &self.dir, source))?;
            let Some(id) = entry.file_name().to_str().and_then(|name| self.segment_id_of(name)) else { continue };
            // Not following links: a link is never a predecessor's file.
            let Ok(meta) = fs::symlink_metadata(entry.path()) else { continue };
            if !meta.file_type().is_file() || meta.uid() != ours || meta.nlink() != 1 || meta.len() != size_bytes {
                continue;
            }
            let modified = meta.modified().unwrap_or(std::time::UNIX_EPOCH);
            if newest.as_ref().is_none_or(|(t, _, _)| modified > *t) {
                newest = Some((modified, id, entry.path()));
            }
        }
        Ok(newest.map(|(_, id, path)| (id, path)))
    }

    /// Removes every segment file of this identity but `keep`: they belong
    /// to a dead predecessor, since we hold the identity lock and have not
    /// created any yet. Call it before creating this process's segments.
    /// Files of other identities, and names that only look alike, are left
    /// alone.
    pub fn remove_stale(&self, keep: Option<&Path>) -> Result<Vec<StaleFile>, TransferError> {
        let entries = fs::read_dir(&self.dir).map_err(|source| owner_io("list", &self.dir, source))?;
        let mut removed = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|source| owner_io("list", &self.dir, source))?;
            let name = entry.file_name();
            if !name.to_str().is_some_and(|name| self.is_segment_file(name)) {
                continue;
            }
            if removed.len() >= SHM_STALE_FILES_MAX {
                tracing::warn!(dir = %self.dir.display(), max = SHM_STALE_FILES_MAX,
                    "more stale segment files than one sweep removes; the next start removes more");
                break;
            }
            let path = entry.path();
            if keep == Some(path.as_path()) {
                continue;
            }
            let meta = entry.metadata().ok();
            // SAFETY: geteuid(2) cannot fail.
            let ours = unsafe { libc::geteuid() };
            if let Some(owner) = meta.as_ref().map(MetadataExt::uid).filter(|uid| *uid != ours) {
                tracing::warn!(path = %path.display(), owner, "a file named as this node's segment belongs to another \
                    user: left alone (not a predecessor's)");
                continue;
            }
            let size_bytes = meta.map(|m| m.len()).unwrap_or(0);
            match fs::remove_file(&path) {
                Ok(()) => removed.push(StaleFile { path, size_bytes }),
                // Gone already (an operator, or a previous sweep racing us).
                Err(err) if err.kind() == io::ErrorKind::NotFound => {}
                Err(source) => return Err(owner_io("remove", &path, source)),
            }
        }
        Ok(removed)
    }

    /// Whether `name` is `<identity>-<16 lowercase hex digits>`.
    fn is_segment_file(&self, name: &str) -> bool {
        self.segment_id_of(name).is_some()
    }

    /// The segment id a file named `<identity>-<16 lowercase hex digits>`
    /// is of.
    fn segment_id_of(&self, name: &str) -> Option<SegmentId> {
        let hex = name.strip_prefix(self.identity.as_str())?.strip_prefix('-')?;
        let lower_hex = hex.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
        (hex.len() == SEGMENT_HEX_DIGITS && lower_hex).then(|| u64::from_str_radix(hex, 16).ok().map(SegmentId))?
    }
}

impl Drop for ShmOwner {
    fn drop(&mut self) {
        // Remove the lock file while still holding the lock, and only if the
        // path still names our file; the lock goes with the descriptor.
        if identity_of_path(&self.lock_path) == identity_of_file(&self.lock_file)
            && let Err(err) = fs::remove_file(&self.lock_path)
        {
            tracing::warn!(path = %self.lock_path.display(), "could not remove the store node's lock file: {err}");
        }
    }
}

fn validate_identity(identity: &str) -> Result<(), TransferError> {
    let longest = identity.len() + 1 + SEGMENT_HEX_DIGITS.max(LOCK_SUFFIX.len());
    let plain = identity.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.');
    if identity.is_empty() || !plain || identity.starts_with('.') || longest > SHM_NAME_MAX_BYTES {
        return Err(TransferError::InvalidConfig(format!(
            "shared-memory identity {identity:?} must be 1..={} ASCII letters, digits, '-', '_' or '.', not starting with '.'",
            SHM_NAME_MAX_BYTES - 1 - SEGMENT_HEX_DIGITS
        )));
    }
    Ok(())
}

/// Whether `file` belongs to this process's effective user.
fn owned_by_us(file: &File) -> bool {
    // SAFETY: geteuid(2) cannot fail.
    let ours = unsafe { libc::geteuid() };
    file.metadata().is_ok_and(|m| m.uid() == ours)
}

/// `path` (opened as `file`) is another user's: a lock file nobody of ours
/// made. Removes it so the next try creates our own, or says whose it is.
fn remove_foreign_lock(path: &Path, file: &File) -> Result<(), TransferError> {
    let owner = file.metadata().map(|m| m.uid()).unwrap_or(u32::MAX);
    match fs::remove_file(path) {
        Ok(()) => {
            tracing::warn!(path = %path.display(), owner, "removed a lock file of another user (it could have kept \
                this node from starting)");
            Ok(())
        }
        Err(err) if err.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(err) => Err(owner_io(
            "claim",
            path,
            io::Error::new(
                err.kind(),
                format!(
                    "the lock file belongs to uid {owner}, not to this node's user (uid {}), and cannot be removed \
                     ({err}): another local user may be holding it to keep this node from starting. Remove it as \
                     root, or run the store node as root",
                    // SAFETY: geteuid(2) cannot fail.
                    unsafe { libc::geteuid() }
                ),
            ),
        )),
    }
}

/// Takes an exclusive `flock` without waiting.
fn lock_exclusive(file: &File, path: &Path) -> Result<(), TransferError> {
    // SAFETY: flock(2) on a descriptor owned by `file` for the whole call.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
        return Ok(());
    }
    let err = io::Error::last_os_error();
    if err.kind() == io::ErrorKind::WouldBlock {
        return Err(TransferError::ShmOwnerBusy { lock_path: path.to_path_buf() });
    }
    Err(owner_io("lock", path, err))
}

fn identity_of_path(path: &Path) -> Option<FileIdentity> {
    fs::metadata(path).ok().map(|m| FileIdentity { dev: m.dev(), ino: m.ino() })
}

fn identity_of_file(file: &File) -> Option<FileIdentity> {
    file.metadata().ok().map(|m| FileIdentity { dev: m.dev(), ino: m.ino() })
}

fn owner_io(op: &'static str, path: &Path, source: io::Error) -> TransferError {
    TransferError::ShmOwnerIo { op, path: path.to_path_buf(), source }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fresh directory under the system temp dir, removed on drop.
    struct TempDir(PathBuf);

    impl TempDir {
        fn new() -> TempDir {
            use std::sync::atomic::{AtomicU64, Ordering};
            static NEXT: AtomicU64 = AtomicU64::new(0);
            let name =
                format!("mooncake-shm-owner-test-{}-{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed));
            let path = std::env::temp_dir().join(name);
            fs::create_dir_all(&path).unwrap();
            TempDir(path)
        }

        fn path(&self) -> &Path {
            &self.0
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    fn touch(dir: &Path, name: &str, size_bytes: u64) -> PathBuf {
        let path = dir.join(name);
        File::create(&path).unwrap().set_len(size_bytes).unwrap();
        path
    }

    #[test]
    fn a_second_claim_of_a_held_identity_is_refused_and_the_lock_frees_on_drop() {
        let dir = TempDir::new();
        let first = ShmOwner::acquire(dir.path(), "mooncake-00000000000000aa").unwrap();
        let err = ShmOwner::acquire(dir.path(), "mooncake-00000000000000aa").unwrap_err();
        assert!(matches!(err, TransferError::ShmOwnerBusy { .. }), "{err}");
        assert!(err.to_string().contains("same identity"), "{err}");
        let other = ShmOwner::acquire(dir.path(), "mooncake-00000000000000bb").expect("another identity is free");
        let lock = first.lock_path().to_path_buf();
        assert!(lock.exists());
        drop(first);
        assert!(!lock.exists(), "a clean exit removes the lock file");
        ShmOwner::acquire(dir.path(), "mooncake-00000000000000aa").expect("free again");
        drop(other);
    }

    #[test]
    fn a_lock_file_left_by_a_dead_holder_is_reused() {
        let dir = TempDir::new();
        // A crashed holder leaves its lock file, unlocked.
        touch(dir.path(), "mooncake-00000000000000aa-lock", 0);
        let owner = ShmOwner::acquire(dir.path(), "mooncake-00000000000000aa").unwrap();
        assert!(owner.lock_path().ends_with("mooncake-00000000000000aa-lock"));
    }

    #[test]
    fn only_segment_files_of_the_same_identity_are_removed() {
        let dir = TempDir::new();
        let d = dir.path();
        let stale = touch(d, "mooncake-00000000000000aa-0123456789abcdef", 4096);
        let keep = [
            touch(d, "mooncake-00000000000000bb-0123456789abcdef", 1), // another identity
            touch(d, "mooncake-00000000000000aa-0123456789ABCDEF", 1), // not our format
            touch(d, "mooncake-00000000000000aa-0123456789abcde", 1),  // 15 digits
            touch(d, "mooncake-00000000000000aa-0123456789abcdef0", 1), // 17 digits
            touch(d, "mooncake-00000000000000aa", 1),
            touch(d, "mooncake-00000000000000aaa-0123456789abcdef", 1), // a longer identity
        ];
        let owner = ShmOwner::acquire(d, "mooncake-00000000000000aa").unwrap();
        let removed = owner.remove_stale(None).unwrap();
        assert_eq!(removed, vec![StaleFile { path: stale.clone(), size_bytes: 4096 }]);
        assert!(!stale.exists());
        for path in &keep {
            assert!(path.exists(), "{} was removed", path.display());
        }
        assert!(owner.lock_path().exists(), "the lock file is not a segment file");
        assert_eq!(
            owner.segment_file_name(SegmentId(0x0123_4567_89ab_cdef)),
            "mooncake-00000000000000aa-0123456789abcdef"
        );
    }

    /// Issue 39: a restarted store node serves the memory its dead
    /// predecessor left (the file of its segment size), and the sweep
    /// removes the others; a file of another size, a link or another
    /// identity's is never taken.
    #[test]
    fn the_predecessors_file_of_the_segment_size_is_found_and_kept_by_the_sweep() {
        let dir = TempDir::new();
        let d = dir.path();
        let other_size = touch(d, "mooncake-00000000000000aa-00000000000000a1", 4096);
        let theirs = touch(d, "mooncake-00000000000000bb-00000000000000b1", 8192);
        let ours = touch(d, "mooncake-00000000000000aa-00000000000000a2", 8192);
        std::os::unix::fs::symlink(&ours, d.join("mooncake-00000000000000aa-00000000000000a3")).unwrap();
        let owner = ShmOwner::acquire(d, "mooncake-00000000000000aa").unwrap();
        assert_eq!(owner.predecessor(8192).unwrap(), Some((SegmentId(0xa2), ours.clone())));
        assert_eq!(owner.predecessor(1 << 20).unwrap(), None, "no file of that size");
        let removed: Vec<PathBuf> = owner.remove_stale(Some(&ours)).unwrap().into_iter().map(|f| f.path).collect();
        assert!(removed.contains(&other_size) && !removed.contains(&ours), "{removed:?}");
        assert!(ours.exists() && theirs.exists());
    }

    /// Issue 38, finding 6: another local user created the lock file first
    /// and held it, and the store node could never start. A lock file of
    /// another user is not ours: it is replaced by our own (mode 0600), and
    /// another user's look-alike segment file is left alone. Needs root (to
    /// give files away); otherwise it says so and passes.
    #[test]
    fn another_users_lock_file_is_replaced_and_its_look_alikes_left_alone() {
        // SAFETY: geteuid(2) cannot fail.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("SKIPPED: needs root to make files of another user");
            return;
        }
        let nobody = 65_534;
        let dir = TempDir::new();
        let d = dir.path();
        let squatted = touch(d, "mooncake-00000000000000aa-lock", 0);
        std::os::unix::fs::chown(&squatted, Some(nobody), Some(nobody)).unwrap();
        // The squatter holds it locked too.
        let held = File::open(&squatted).unwrap();
        // SAFETY: flock(2) on a descriptor `held` owns.
        assert_eq!(unsafe { libc::flock(held.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) }, 0);
        let theirs = touch(d, "mooncake-00000000000000aa-0123456789abcdef", 1);
        std::os::unix::fs::chown(&theirs, Some(nobody), Some(nobody)).unwrap();
        let mine = touch(d, "mooncake-00000000000000aa-00000000000000ff", 1);
        let owner = ShmOwner::acquire(d, "mooncake-00000000000000aa").expect("the squatted lock is replaced");
        drop(owner);
        // A link planted where the lock belongs is not followed.
        let target = touch(d, "elsewhere", 0);
        std::os::unix::fs::symlink(&target, d.join("mooncake-00000000000000aa-lock")).unwrap();
        let owner = ShmOwner::acquire(d, "mooncake-00000000000000aa").expect("the planted link is replaced");
        assert!(!fs::symlink_metadata(owner.lock_path()).unwrap().file_type().is_symlink());
        let meta = fs::metadata(owner.lock_path()).unwrap();
        assert_eq!((meta.uid(), meta.mode() & 0o777), (0, 0o600), "our own lock file, for us alone");
        let removed = owner.remove_stale(None).expect("another user's file does not fail the sweep");
        assert_eq!(removed.iter().map(|f| f.path.clone()).collect::<Vec<_>>(), vec![mine]);
        assert!(theirs.exists(), "another user's file was removed");
        drop(held);
    }

    #[test]
    fn identities_that_cannot_be_file_names_are_refused() {
        let dir = TempDir::new();
        for bad in ["", "a/b", ".hidden", "x y", &"n".repeat(250)] {
            let err = ShmOwner::acquire(dir.path(), bad).unwrap_err();
            assert!(matches!(err, TransferError::InvalidConfig(_)), "{bad:?}: {err}");
        }
    }
}
