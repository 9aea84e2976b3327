//! Memory that holds object bytes: one mapping per mounted DRAM segment.
//!
//! This module owns [`SegmentMemory`], a fixed-size mapping that is either
//! backed by a file in `/dev/shm` (so another process on the same host can map
//! the same bytes, see [`SegmentMemory::open_shm`]) or anonymous, and its error
//! type [`MemoryError`].
//!
//! The "OOM at mmap" trap: on tmpfs, `ftruncate` and `mmap` succeed for any
//! size, and the first store to a page that tmpfs cannot back kills the
//! process with `SIGBUS` — long after mounting, in the middle of a transfer.
//! So [`SegmentMemory::create_shm`] checks the free space with `statvfs` and
//! then reserves every byte with `posix_fallocate` before mapping, turning a
//! too-small `/dev/shm` into [`MemoryError::NoMemory`] at mount time.
//!
//! Concurrency: the mapping is shared memory. The master never places two live
//! objects on overlapping ranges (invariant 4 of DESIGN.md), so concurrent
//! users of one segment touch disjoint bytes; two users of one range at once
//! is the caller's bug, exactly as with memory shared between processes.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::ptr::NonNull;

use memmap2::{MmapMut, MmapOptions};

/// Directory whose files are shared-memory segments (tmpfs on Linux).
pub const SHM_DIR: &str = "/dev/shm";

/// Every segment file's name starts with this; a path to anything else is
/// never mounted or mapped ([`validate_segment_path`]).
pub const SEGMENT_FILE_PREFIX: &str = "mooncake-";

/// Whether `path` may name a segment file: absolute, directly inside
/// [`SHM_DIR`], named `mooncake-*` (a plain name: no `/`, `..`, NUL). The
/// master checks this on every mount and clients before they map a file,
/// so a forged mount cannot make a client write into (or read from) an
/// arbitrary file. Only the path: [`SegmentMemory::open_shm`] also checks
/// the file itself.
pub fn validate_segment_path(path: &Path) -> Result<(), MemoryError> {
    let refuse = |reason: &str| MemoryError::NotASegmentFile { path: path.to_path_buf(), reason: reason.to_owned() };
    if path.parent() != Some(Path::new(SHM_DIR)) {
        return Err(refuse(&format!("it is not directly inside {SHM_DIR}")));
    }
    let name = path.file_name().and_then(|n| n.to_str()).ok_or_else(|| refuse("it has no plain file name"))?;
    validate_name(name).map_err(|e| refuse(&e.to_string()))?;
    // One spelling per file: `/dev/shm//x`, `/dev//shm/x`, `/dev/shm/./x`
    // or `x/` name the same file as `/dev/shm/x`, and rules that compare
    // paths as text (one region, one segment) would take them for another.
    if path.as_os_str().to_str() != Some(format!("{SHM_DIR}/{name}").as_str()) {
        return Err(refuse(&format!("it is not spelled {SHM_DIR}/{name} (no repeated or trailing '/', no '.')")));
    }
    if !name.starts_with(SEGMENT_FILE_PREFIX) {
        return Err(refuse(&format!("its name does not start with {SEGMENT_FILE_PREFIX:?}")));
    }
    Ok(())
}

/// Longest segment file name, in bytes: Linux `NAME_MAX`. Longer names would
/// fail in `open` with a less helpful `ENAMETOOLONG`.
pub const SHM_NAME_MAX_BYTES: usize = 255;

/// The piece [`SegmentMemory::read_at_checksummed`] copies then checksums:
/// small enough that the checksum reads it back from cache.
const CHECKSUM_PIECE_BYTES: usize = 64 * 1024;

/// Writes at least this long map their pages in first
/// ([`SegmentMemory::populate_for_write`]); below it a syscall costs more
/// than the few faults it saves.
const POPULATE_MIN_BYTES: usize = 64 * 1024;

/// Page size used to prefault and to report sizes; 4 KiB on every target we run.
const PAGE_BYTES: u64 = 4096;

/// Why a segment's memory could not be had or used. Every message says what to do.
#[derive(Debug, thiserror::Error)]
pub enum MemoryError {
    /// The byte range `[offset, offset + len)` is not inside the segment.
    #[error(
        "range [{offset}, {offset} + {len}) is outside the segment of {size} bytes; the caller's offset or length is wrong"
    )]
    OutOfRange {
        /// First byte asked for.
        offset: u64,
        /// Number of bytes asked for.
        len: u64,
        /// Size of the segment in bytes.
        size: u64,
    },
    /// The host cannot back a segment of this size.
    #[error("cannot reserve {size} bytes for segment memory at {}: {hint}", .path.display())]
    NoMemory {
        /// Requested size in bytes.
        size: u64,
        /// The shm file, or `<anonymous>`.
        path: PathBuf,
        /// What to change, with the space that is free.
        hint: String,
    },
    /// A segment of zero bytes was asked for.
    #[error("segment size must be at least 1 byte; set a positive segment size")]
    ZeroSize,
    /// The segment is larger than this machine's address space.
    #[error("segment size {size} does not fit the address space; lower the segment size")]
    TooLarge {
        /// Requested size in bytes.
        size: u64,
    },
    /// The shm file name is not a plain file name.
    #[error("invalid shm segment name {name:?}: {reason}; use a plain file name such as \"mooncake-seg-1\"")]
    InvalidName {
        /// The name given.
        name: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A segment file path outside the segment directory, or a file that is
    /// not a segment file (a symlink, not a regular file, a stranger's).
    #[error(
        "refusing segment file {}: {reason}; segment files are regular files named {SHM_DIR}/{SEGMENT_FILE_PREFIX}*, \
         created by their store node (docs/SECURITY.md)",
        .path.display()
    )]
    NotASegmentFile {
        /// The path given.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// An existing segment file has another size than the owner announced.
    #[error("segment file {} is {actual} bytes, expected {expected}; the owner re-created it or the metadata is stale", .path.display())]
    SizeMismatch {
        /// The segment file.
        path: PathBuf,
        /// Size the caller expected.
        expected: u64,
        /// Size of the file.
        actual: u64,
    },
    /// A system call on the segment file or mapping failed.
    #[error("{op} failed for segment memory at {}: {source}", .path.display())]
    Io {
        /// The operation (`open`, `mmap`, ...).
        op: &'static str,
        /// The shm file, or `<anonymous>`.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: io::Error,
    },
}

/// The device and inode of a segment file, to tell a re-created file from the
/// one that was mapped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FileIdentity {
    /// `st_dev` of the file.
    pub dev: u64,
    /// `st_ino` of the file.
    pub ino: u64,
}

/// A mapping of `len()` bytes that holds object bytes. See the module doc.
pub struct SegmentMemory {
    /// Start of the mapping; valid for `size_bytes` bytes while `_map` lives
    /// (the kernel mapping does not move when the `MmapMut` value moves).
    ptr: NonNull<u8>,
    size_bytes: u64,
    /// Owns the mapping; unmapped on drop.
    _map: MmapMut,
    /// The backing file, for file-backed segments.
    shm_path: Option<PathBuf>,
    identity: Option<FileIdentity>,
    /// Whether drop unlinks `shm_path` (true only for a creator that did not call `keep`).
    unlink_on_drop: std::sync::atomic::AtomicBool,
}

// SAFETY: `SegmentMemory` owns its mapping; the raw pointer is only an alias of
// it. Every access goes through bounds-checked methods, and the contract on
// concurrent access to one range is documented on `slice`/`slice_mut`.
unsafe impl Send for SegmentMemory {}
// SAFETY: as above; `&SegmentMemory` hands out only bounds-checked views.
unsafe impl Sync for SegmentMemory {}

impl SegmentMemory {
    /// Creates (or truncates) `/dev/shm/<name>`, reserves `size_bytes` in it
    /// and maps it shared. The file is removed on drop unless [`Self::keep`].
    ///
    /// With `prefault`, every page is mapped in now, so later copies do not
    /// page-fault.
    pub fn create_shm(name: &str, size_bytes: u64, prefault: bool) -> Result<Self, MemoryError> {
        validate_name(name)?;
        let len = checked_len(size_bytes)?;
        let path = Path::new(SHM_DIR).join(name);
        check_free_space(&path, size_bytes)?;
        let file = io_ctx("open", &path, create_file(&path))?;
        let made = reserve(&file, &path, size_bytes).and_then(|()| map_file(&file, &path, len, prefault));
        match made {
            Ok(map) => Ok(Self::from_map(map, size_bytes, Some(path), identity_of(&file), true)),
            Err(err) => {
                // Do not leave a half-made segment file behind in tmpfs memory.
                let _ = fs::remove_file(&path);
                Err(err)
            }
        }
    }

    /// Maps `size_bytes` of anonymous memory (private to this process).
    pub fn anonymous(size_bytes: u64, prefault: bool) -> Result<Self, MemoryError> {
        let len = checked_len(size_bytes)?;
        let mut options = MmapOptions::new();
        options.len(len);
        if prefault {
            options.populate();
        }
        let map = options.map_anon().map_err(|source| no_memory_or_io(source, size_bytes, None))?;
        Ok(Self::from_map(map, size_bytes, None, None, false))
    }

    /// Maps an existing segment file that another process created, expecting
    /// it to be `expected_size` bytes. Never removes the file.
    ///
    /// Only a segment file is mapped: the path must pass
    /// [`validate_segment_path`], a symlink is never followed, and the file
    /// must be a regular file owned by this user (or root).
    pub fn open_shm(path: &Path, expected_size: u64) -> Result<Self, MemoryError> {
        validate_segment_path(path)?;
        let len = checked_len(expected_size)?;
        let opened = OpenOptions::new().read(true).write(true).custom_flags(libc::O_NOFOLLOW).open(path);
        let file = match opened {
            Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
                return Err(MemoryError::NotASegmentFile {
                    path: path.to_path_buf(),
                    reason: "it is a symlink".into(),
                });
            }
            other => io_ctx("open", path, other)?,
        };
        let meta = io_ctx("stat", path, file.metadata())?;
        // SAFETY: geteuid has no preconditions and cannot fail.
        let me = unsafe { libc::geteuid() };
        if !meta.file_type().is_file() || (meta.uid() != me && meta.uid() != 0) {
            let reason = format!("it is not a regular file owned by uid {me} or root (uid {})", meta.uid());
            return Err(MemoryError::NotASegmentFile { path: path.to_path_buf(), reason });
        }
        // A hard link is another name for a store node's memory: a segment
        // mounted under it would overlap the real one.
        if meta.nlink() != 1 {
            let reason = format!("it has {} names (hard links); a segment file has one", meta.nlink());
            return Err(MemoryError::NotASegmentFile { path: path.to_path_buf(), reason });
        }
        let actual = meta.len();
        if actual != expected_size {
            return Err(MemoryError::SizeMismatch { path: path.to_path_buf(), expected: expected_size, actual });
        }
        let map = map_file(&file, path, len, false)?;
        Ok(Self::from_map(map, expected_size, Some(path.to_path_buf()), identity_of(&file), false))
    }

    /// Maps the segment file a dead predecessor of this store node left
    /// (same checks as [`Self::open_shm`]) and takes it over: its bytes are
    /// kept, and the file is removed when this mapping is dropped, as one
    /// [`Self::create_shm`] made.
    pub fn adopt_shm(path: &Path, expected_size: u64) -> Result<Self, MemoryError> {
        let mut memory = Self::open_shm(path, expected_size)?;
        memory.unlink_on_drop = true.into();
        Ok(memory)
    }

    fn from_map(
        mut map: MmapMut,
        size_bytes: u64,
        shm_path: Option<PathBuf>,
        identity: Option<FileIdentity>,
        unlink_on_drop: bool,
    ) -> Self {
        let ptr = NonNull::new(map.as_mut_ptr()).unwrap_or(NonNull::dangling());
        Self { ptr, size_bytes, _map: map, shm_path, identity, unlink_on_drop: unlink_on_drop.into() }
    }

    /// Leaves the shm file in place when this mapping is dropped (for a
    /// segment that must outlive the process, e.g. across a restart).
    pub fn keep(&self) {
        self.unlink_on_drop.store(false, std::sync::atomic::Ordering::Relaxed);
    }

    /// Size of the mapping in bytes.
    pub fn len(&self) -> u64 {
        self.size_bytes
    }

    /// Always false: a segment has at least one byte. Present for clippy's
    /// `len_without_is_empty`.
    pub fn is_empty(&self) -> bool {
        self.size_bytes == 0
    }

    /// The backing file, for file-backed segments.
    pub fn shm_path(&self) -> Option<&Path> {
        self.shm_path.as_deref()
    }

    /// Device and inode of the backing file when it was mapped.
    pub fn file_identity(&self) -> Option<FileIdentity> {
        self.identity
    }

    /// Checks `[offset, offset + len)` against the segment and returns the
    /// start as a `usize` index.
    pub fn check_range(&self, offset: u64, len: u64) -> Result<usize, MemoryError> {
        let out = MemoryError::OutOfRange { offset, len, size: self.size_bytes };
        match offset.checked_add(len) {
            Some(end) if end <= self.size_bytes => usize::try_from(offset).map_err(|_| out),
            _ => Err(out),
        }
    }

    /// Copies `buf.len()` bytes starting at `offset` into `buf`, through raw
    /// pointers: no Rust reference to the shared bytes is formed, so another
    /// process writing them meanwhile gives torn bytes (caught by checksums),
    /// never undefined behaviour here.
    pub fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), MemoryError> {
        let start = self.check_range(offset, buf.len() as u64)?;
        // SAFETY: `check_range` proved the source lies inside the mapping,
        // which is valid while `self` lives; `buf` is a distinct allocation.
        unsafe { std::ptr::copy_nonoverlapping(self.ptr.as_ptr().add(start), buf.as_mut_ptr(), buf.len()) };
        Ok(())
    }

    /// [`read_at`](Self::read_at) that also returns the CRC-32C of the
    /// bytes copied, checksummed piece by piece right after each piece is
    /// copied (while it is still in cache), not in a second pass over `buf`.
    pub fn read_at_checksummed(&self, offset: u64, buf: &mut [u8]) -> Result<u32, MemoryError> {
        let start = self.check_range(offset, buf.len() as u64)?;
        let mut crc = crate::checksum::Crc32c::new();
        for (i, piece) in buf.chunks_mut(CHECKSUM_PIECE_BYTES).enumerate() {
            // SAFETY: `check_range` proved the whole source lies inside the
            // mapping, valid while `self` lives; this piece is a part of it,
            // and `buf` is a distinct allocation.
            unsafe {
                let from = self.ptr.as_ptr().add(start + i * CHECKSUM_PIECE_BYTES);
                std::ptr::copy_nonoverlapping(from, piece.as_mut_ptr(), piece.len());
            }
            crc.update(piece);
        }
        Ok(crc.finish())
    }

    /// Maps in the pages of `[start, start + len)` for writing with one
    /// `madvise(MADV_POPULATE_WRITE)` (Linux 5.14+) before a copy touches
    /// them, instead of one page fault per 4 KiB page inside the copy: a
    /// client's mapping of another process's segment starts with no page
    /// mapped, and a put lands on pages it has not written yet (1,024 write
    /// faults per 4 MiB; `mooncake bench data`: shm put p50 -1.2 ms at 4 MiB).
    /// Pages already mapped cost a walk of their page table entries. Reads
    /// are left alone: read faults map 16 pages at a time, and the walk cost
    /// more than it saved there. Only a hint: on an older kernel, or when it
    /// fails, the copy faults the pages in as before (and fails as it would
    /// have).
    fn populate_for_write(&self, start: usize, len: usize) {
        if len < POPULATE_MIN_BYTES {
            return;
        }
        let page = PAGE_BYTES as usize;
        let first = start - start % page;
        let end = start + len;
        // SAFETY: `[first, end)` lies inside the mapping (`check_range`
        // proved `[start, end)` does, and the mapping starts page-aligned);
        // populating page tables changes no byte of it.
        let _ = unsafe { libc::madvise(self.ptr.as_ptr().add(first).cast(), end - first, libc::MADV_POPULATE_WRITE) };
    }

    /// Copies `data` into the segment starting at `offset`, through raw
    /// pointers (see [`SegmentMemory::read_at`]).
    pub fn write_at(&self, offset: u64, data: &[u8]) -> Result<(), MemoryError> {
        let start = self.check_range(offset, data.len() as u64)?;
        self.populate_for_write(start, data.len());
        // SAFETY: `check_range` proved the destination lies inside the
        // mapping, valid while `self` lives; `data` is a distinct allocation.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), self.ptr.as_ptr().add(start), data.len()) };
        Ok(())
    }

    /// The first byte of the mapping (for address arithmetic; dereferencing
    /// it is the caller's business).
    pub fn as_ptr(&self) -> *const u8 {
        self.ptr.as_ptr()
    }

    /// A view of `[offset, offset + len)` for zero-copy I/O (e.g. writing a
    /// socket straight from the segment).
    ///
    /// # Safety
    ///
    /// While the view lives, nobody may write an overlapping range (another
    /// process through `/dev/shm`, or a [`SegmentMemory::slice_mut`] in this
    /// one). The master never places two live objects on overlapping ranges
    /// and never reuses a range a reader may still hold, so a caller that
    /// reads only a range it was handed for an object meets this contract.
    pub unsafe fn slice(&self, offset: u64, len: u64) -> Result<&[u8], MemoryError> {
        let start = self.check_range(offset, len)?;
        // SAFETY: `check_range` proved `start + len <= size_bytes`, and the
        // mapping is valid for `size_bytes` bytes while `self` lives; no
        // concurrent writer is the caller's contract.
        Ok(unsafe { std::slice::from_raw_parts(self.ptr.as_ptr().add(start), len as usize) })
    }

    /// A mutable view of `[offset, offset + len)` for zero-copy I/O (e.g.
    /// reading a socket straight into the segment).
    ///
    /// # Safety
    ///
    /// While the returned slice lives, no other view of an overlapping range
    /// may be used (from this process or another mapping of the same file).
    /// The master guarantees that live objects never overlap, so a caller that
    /// only touches the range of an object it was handed meets this contract.
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn slice_mut(&self, offset: u64, len: u64) -> Result<&mut [u8], MemoryError> {
        let start = self.check_range(offset, len)?;
        // SAFETY: bounds as in `slice`; exclusivity is the caller's contract.
        Ok(unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr().add(start), len as usize) })
    }
}

impl Drop for SegmentMemory {
    fn drop(&mut self) {
        if let (true, Some(path)) = (*self.unlink_on_drop.get_mut(), &self.shm_path) {
            // Only unlink the file we created: a successor may have re-created
            // the name, and its segment must survive our drop.
            let same = fs::metadata(path).ok().map(|m| FileIdentity { dev: m.dev(), ino: m.ino() }) == self.identity;
            if same && let Err(err) = fs::remove_file(path) {
                tracing::warn!(path = %path.display(), "could not remove segment file: {err}");
            }
        }
    }
}

impl std::fmt::Debug for SegmentMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SegmentMemory").field("size_bytes", &self.size_bytes).field("shm_path", &self.shm_path).finish()
    }
}

fn validate_name(name: &str) -> Result<(), MemoryError> {
    let reason = if name.is_empty() {
        Some("it is empty")
    } else if name.len() > SHM_NAME_MAX_BYTES {
        Some("it is longer than 255 bytes")
    } else if name.contains('/') || name.contains('\0') {
        Some("it contains '/' or a NUL byte")
    } else if name == "." || name == ".." {
        Some("it names a directory")
    } else {
        None
    };
    match reason {
        Some(reason) => Err(MemoryError::InvalidName { name: name.to_owned(), reason }),
        None => Ok(()),
    }
}

fn checked_len(size_bytes: u64) -> Result<usize, MemoryError> {
    if size_bytes == 0 {
        return Err(MemoryError::ZeroSize);
    }
    // `isize::MAX` bounds every Rust slice; larger cannot be viewed at all.
    match usize::try_from(size_bytes) {
        Ok(len) if len <= isize::MAX as usize => Ok(len),
        _ => Err(MemoryError::TooLarge { size: size_bytes }),
    }
}

/// A new segment file, readable and writable by its owner only (0600):
/// other users' processes cannot read or change the objects in it.
fn create_file(path: &Path) -> io::Result<File> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)?;
    // An existing file keeps its mode through O_TRUNC: set it.
    file.set_permissions(std::os::unix::fs::PermissionsExt::from_mode(0o600))?;
    Ok(file)
}

fn identity_of(file: &File) -> Option<FileIdentity> {
    file.metadata().ok().map(|m| FileIdentity { dev: m.dev(), ino: m.ino() })
}

fn io_ctx<T>(op: &'static str, path: &Path, result: io::Result<T>) -> Result<T, MemoryError> {
    result.map_err(|source| MemoryError::Io { op, path: path.to_path_buf(), source })
}

/// Bytes free for an unprivileged writer in the file system that holds `dir`.
pub fn free_bytes(dir: &Path) -> io::Result<u64> {
    let c_dir = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains a NUL byte"))?;
    // SAFETY: `statvfs` is plain old data; all-zero is a valid value.
    let mut stat: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c_dir` is NUL-terminated and `stat` is a valid out-pointer.
    if unsafe { libc::statvfs(c_dir.as_ptr(), &mut stat) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((stat.f_bavail as u64).saturating_mul(stat.f_frsize as u64))
}

fn no_memory(size: u64, path: &Path) -> MemoryError {
    let dir = path.parent().unwrap_or(Path::new(SHM_DIR));
    let free = free_bytes(dir).map(|n| n.to_string()).unwrap_or_else(|_| "an unknown number of".to_owned());
    let hint = format!(
        "{} is {free} bytes free; lower global_segment_size or grow {} (mount -o remount,size=<bytes> {})",
        dir.display(),
        dir.display(),
        dir.display()
    );
    MemoryError::NoMemory { size, path: path.to_path_buf(), hint }
}

/// Refuses early when the file system cannot hold the segment at all. A
/// concurrent writer can still take the space; `reserve` is the real check.
fn check_free_space(path: &Path, size_bytes: u64) -> Result<(), MemoryError> {
    let dir = path.parent().unwrap_or(Path::new(SHM_DIR));
    match free_bytes(dir) {
        Ok(free) if free < size_bytes => Err(no_memory(size_bytes, path)),
        _ => Ok(()),
    }
}

/// Sets the file length and backs every byte of it now, so that no page fault
/// on the mapping can hit `SIGBUS` later.
fn reserve(file: &File, path: &Path, size_bytes: u64) -> Result<(), MemoryError> {
    let len = libc::off_t::try_from(size_bytes).map_err(|_| MemoryError::TooLarge { size: size_bytes })?;
    io_ctx("ftruncate", path, file.set_len(size_bytes))?;
    // SAFETY: the descriptor is open for writing for the whole call.
    let rc = unsafe { libc::posix_fallocate(file.as_raw_fd(), 0, len) };
    match rc {
        0 => Ok(()),
        libc::ENOSPC | libc::ENOMEM | libc::EFBIG => Err(no_memory(size_bytes, path)),
        // A file system without fallocate (not tmpfs): fall back to sparse.
        libc::EOPNOTSUPP => Ok(()),
        errno => Err(MemoryError::Io {
            op: "posix_fallocate",
            path: path.to_path_buf(),
            source: io::Error::from_raw_os_error(errno),
        }),
    }
}

fn map_file(file: &File, path: &Path, len: usize, prefault: bool) -> Result<MmapMut, MemoryError> {
    let mut options = MmapOptions::new();
    options.len(len);
    if prefault {
        options.populate();
    }
    // SAFETY: the mapping aliases a file that other processes may change;
    // that is the purpose of a shm segment, and all access goes through the
    // bounds-checked views of `SegmentMemory` under the documented contract.
    let map = unsafe { options.map_mut(file) };
    map.map_err(|source| no_memory_or_io(source, len as u64, Some(path)))
}

fn no_memory_or_io(source: io::Error, size: u64, path: Option<&Path>) -> MemoryError {
    let anon = Path::new("<anonymous>");
    match (source.raw_os_error(), path) {
        (Some(libc::ENOMEM), Some(path)) => no_memory(size, path),
        (Some(libc::ENOMEM), None) => MemoryError::NoMemory {
            size,
            path: anon.to_path_buf(),
            hint: format!(
                "the kernel refused {size} bytes of anonymous memory; lower global_segment_size or free RAM ({} KiB pages)",
                PAGE_BYTES / 1024
            ),
        },
        (_, path) => MemoryError::Io { op: "mmap", path: path.unwrap_or(anon).to_path_buf(), source },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};

    static NEXT: AtomicU64 = AtomicU64::new(0);

    /// A forged mount must not turn a client into a tool that writes into
    /// (or reads from) any file: only segment files are ever mapped.
    #[test]
    fn only_segment_files_are_mapped() {
        for bad in [
            "/etc/passwd",
            "/dev/shm/../etc/passwd",
            "/dev/shm/other-file",
            "relative/mooncake-x",
            "/tmp/mooncake-x",
            "/dev/shm//mooncake-x",
            "//dev/shm/mooncake-x",
            "/dev/shm/./mooncake-x",
            "/dev//shm/mooncake-x",
            "/dev/shm/mooncake-x/",
            "/dev/./shm/mooncake-x",
        ] {
            let e = SegmentMemory::open_shm(Path::new(bad), 4096).map(|_| ()).unwrap_err();
            assert!(matches!(e, MemoryError::NotASegmentFile { .. }), "{bad}: {e}");
        }
        assert!(validate_segment_path(Path::new("/dev/shm/mooncake-abc")).is_ok());
        // A symlink named like a segment file, pointing at a real file, is refused.
        let target = std::env::temp_dir().join(format!("mooncake-victim-{}", std::process::id()));
        std::fs::write(&target, vec![7u8; 4096]).unwrap();
        let link = Path::new(SHM_DIR).join(unique_name("link"));
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let e = SegmentMemory::open_shm(&link, 4096).map(|_| ()).unwrap_err();
        assert!(e.to_string().contains("symlink"), "{e}");
        let _ = std::fs::remove_file(&link);
        assert_eq!(std::fs::read(&target).unwrap(), vec![7u8; 4096], "the victim file is untouched");
        let _ = std::fs::remove_file(&target);
    }

    #[test]
    fn a_segment_file_is_mapped_under_its_one_name_only() {
        let mem = SegmentMemory::create_shm(&unique_name("real"), 4096, false).unwrap();
        let real = mem.shm_path().unwrap().to_path_buf();
        mem.write_at(0, &[9; 16]).unwrap();
        // Other spellings of the same file are refused before any open.
        let name = real.file_name().unwrap().to_str().unwrap();
        for alias in [format!("/dev/shm//{name}"), format!("/dev/shm/./{name}"), format!("{}/", real.display())] {
            let e = SegmentMemory::open_shm(Path::new(&alias), 4096).map(|_| ()).unwrap_err();
            assert!(matches!(e, MemoryError::NotASegmentFile { .. }), "{alias}: {e}");
        }
        // A second name (hard link) for the same memory is refused too.
        let link = Path::new(SHM_DIR).join(unique_name("alias"));
        std::fs::hard_link(&real, &link).unwrap();
        let e = SegmentMemory::open_shm(&link, 4096).map(|_| ()).unwrap_err();
        assert!(e.to_string().contains("hard links"), "{e}");
        let e = SegmentMemory::open_shm(&real, 4096).map(|_| ()).unwrap_err();
        assert!(e.to_string().contains("hard links"), "the real name too, while an alias exists: {e}");
        std::fs::remove_file(&link).unwrap();
        let opened = SegmentMemory::open_shm(&real, 4096).unwrap();
        let mut buf = [0u8; 16];
        opened.read_at(0, &mut buf).unwrap();
        assert_eq!(buf, [9; 16], "with one name again it maps");
    }

    /// Large writes through another process's view of a segment (mapped
    /// in before the copy) land exactly where asked, at unaligned offsets
    /// and up to the segment's last byte, and touch nothing around them.
    #[test]
    fn large_unaligned_writes_through_a_second_mapping_land_exactly() {
        let size: u64 = 4 << 20;
        let owner = SegmentMemory::create_shm(&unique_name("populate"), size, false).unwrap();
        let client = SegmentMemory::open_shm(owner.shm_path().unwrap(), size).unwrap();
        let data: Vec<u8> = (0..(1usize << 20) + 123).map(|i| (i % 251) as u8 + 1).collect();
        for offset in [4095u64, 1 << 20, size - data.len() as u64] {
            client.write_at(offset, &data).unwrap();
            let mut back = vec![0u8; data.len()];
            owner.read_at(offset, &mut back).unwrap();
            assert_eq!(back, data, "at {offset}");
        }
        let mut edge = [0u8; 1];
        owner.read_at(4094, &mut edge).unwrap();
        assert_eq!(edge, [0], "the byte before the first write is untouched");
        let past = client.write_at(size - data.len() as u64 + 1, &data).unwrap_err();
        assert!(matches!(past, MemoryError::OutOfRange { .. }), "{past}");
    }

    #[test]
    fn segment_files_are_private_to_their_owner() {
        use std::os::unix::fs::PermissionsExt;
        let mem = SegmentMemory::create_shm(&unique_name("mode"), 4096, false).unwrap();
        let mode = std::fs::metadata(mem.shm_path().unwrap()).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
    }

    fn unique_name(tag: &str) -> String {
        format!("mooncake-test-{tag}-{}-{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed))
    }

    #[test]
    fn bounds_are_checked_with_overflow() {
        let mem = SegmentMemory::anonymous(8192, false).unwrap();
        assert!(mem.write_at(8190, &[1, 2]).is_ok());
        assert!(matches!(
            mem.write_at(8191, &[1, 2]),
            Err(MemoryError::OutOfRange { offset: 8191, len: 2, size: 8192 })
        ));
        // SAFETY: no view is formed (out of range); nobody writes this memory.
        assert!(matches!(unsafe { mem.slice(u64::MAX, 2) }, Err(MemoryError::OutOfRange { .. })));
        // SAFETY: as above: the range overflows, so no view is formed.
        assert!(matches!(unsafe { mem.slice(1, u64::MAX) }, Err(MemoryError::OutOfRange { .. })));
        let mut buf = [0u8; 4];
        assert!(mem.read_at(8189, &mut buf).is_err());
        // SAFETY: an empty view; nobody writes this memory.
        assert!(unsafe { mem.slice(8192, 0) }.is_ok(), "an empty range at the end is inside");
        mem.read_at(8188, &mut buf).unwrap();
        assert_eq!(buf, [0, 0, 1, 2]);
    }

    #[test]
    fn a_checksummed_read_copies_the_bytes_and_checksums_exactly_them() {
        let size = 3 * CHECKSUM_PIECE_BYTES + 8192;
        let mem = SegmentMemory::anonymous(size as u64, false).unwrap();
        let data: Vec<u8> = (0..size - 4096).map(|i| (i * 31 % 251) as u8).collect();
        mem.write_at(4096, &data).unwrap();
        // Across piece boundaries, from an unaligned offset, and empty.
        for (offset, len) in [(4096u64, data.len()), (4097, 2 * CHECKSUM_PIECE_BYTES + 3), (5000, 0)] {
            let mut buf = vec![0u8; len];
            let crc = mem.read_at_checksummed(offset, &mut buf).unwrap();
            let from = offset as usize - 4096;
            assert_eq!(buf, data[from..from + len]);
            assert_eq!(crc, crate::checksum::crc32c(&buf));
        }
        let mut past_the_end = vec![0u8; 4097];
        assert!(matches!(
            mem.read_at_checksummed(size as u64 - 4096, &mut past_the_end),
            Err(MemoryError::OutOfRange { .. })
        ));
    }

    #[test]
    fn zero_size_and_bad_names_are_refused() {
        assert!(matches!(SegmentMemory::anonymous(0, false), Err(MemoryError::ZeroSize)));
        for name in ["", "a/b", "..", "."] {
            assert!(matches!(SegmentMemory::create_shm(name, 4096, false), Err(MemoryError::InvalidName { .. })));
        }
    }

    #[test]
    fn prefaulted_anonymous_memory_round_trips() {
        let mem = SegmentMemory::anonymous(1 << 20, true).unwrap();
        mem.write_at(12345, b"hello").unwrap();
        let mut buf = [0u8; 5];
        mem.read_at(12345, &mut buf).unwrap();
        assert_eq!(&buf, b"hello");
        assert!(mem.shm_path().is_none());
    }

    #[test]
    fn two_mappings_of_one_shm_file_see_each_others_writes() {
        let owner = SegmentMemory::create_shm(&unique_name("rt"), 64 * 1024, true).unwrap();
        let path = owner.shm_path().unwrap().to_path_buf();
        let peer = SegmentMemory::open_shm(&path, 64 * 1024).unwrap();
        owner.write_at(100, b"from owner").unwrap();
        peer.write_at(60_000, b"from peer").unwrap();
        let mut buf = [0u8; 10];
        peer.read_at(100, &mut buf).unwrap();
        assert_eq!(&buf, b"from owner");
        let mut buf = [0u8; 9];
        owner.read_at(60_000, &mut buf).unwrap();
        assert_eq!(&buf, b"from peer");
        assert!(matches!(SegmentMemory::open_shm(&path, 4096), Err(MemoryError::SizeMismatch { .. })));
    }

    #[test]
    fn drop_removes_the_file_unless_kept() {
        let mem = SegmentMemory::create_shm(&unique_name("drop"), 4096, false).unwrap();
        let path = mem.shm_path().unwrap().to_path_buf();
        let reader = SegmentMemory::open_shm(&path, 4096).unwrap();
        drop(reader);
        assert!(path.exists(), "a reader's drop must not remove the owner's file");
        drop(mem);
        assert!(!path.exists());

        let kept = SegmentMemory::create_shm(&unique_name("keep"), 4096, false).unwrap();
        kept.keep();
        let path = kept.shm_path().unwrap().to_path_buf();
        drop(kept);
        assert!(path.exists());
        fs::remove_file(&path).unwrap();
    }

    #[test]
    fn a_request_larger_than_dev_shm_is_no_memory_not_a_crash() {
        let free = free_bytes(Path::new(SHM_DIR)).unwrap();
        let name = unique_name("huge");
        let err = SegmentMemory::create_shm(&name, free + (1 << 30), false).unwrap_err();
        assert!(matches!(err, MemoryError::NoMemory { .. }), "{err}");
        assert!(err.to_string().contains("global_segment_size"), "{err}");
        assert!(!Path::new(SHM_DIR).join(&name).exists(), "no half-made file is left behind");
    }
}
