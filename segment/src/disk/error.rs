//! [`DiskError`]: why a disk segment could not be created, opened, read or
//! written. Every message names the file or range and says what to do.

use std::io;
use std::path::PathBuf;

use super::DISK_BLOCK_BYTES;

/// Why a disk segment operation failed.
#[derive(Debug, thiserror::Error)]
pub enum DiskError {
    /// The data size asked for at create is zero, not a multiple of
    /// [`DISK_BLOCK_BYTES`], or too large for this machine.
    #[error(
        "invalid disk segment size {data_bytes} bytes: {reason}; use a non-zero multiple of {DISK_BLOCK_BYTES} bytes"
    )]
    BadSize {
        /// The size asked for.
        data_bytes: u64,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// The path exists but is not a regular file (a directory, a symlink, a
    /// device), or a regular file cannot be created there.
    #[error(
        "refusing disk segment file {}: {reason}; a disk segment is a regular file created by its store node \
         (never a symlink, directory or device)",
        .path.display()
    )]
    NotRegularFile {
        /// The path given.
        path: PathBuf,
        /// What it is instead.
        reason: String,
    },
    /// `create` found a file already at the path.
    #[error(
        "disk segment file {} exists already; open it to reuse its contents, or remove it to start empty",
        .path.display()
    )]
    AlreadyExists {
        /// The path given.
        path: PathBuf,
    },
    /// The file system refuses `O_DIRECT` (e.g. tmpfs before Linux 6.6,
    /// some network and FUSE file systems).
    #[error(
        "the file system holding {} does not support direct I/O (O_DIRECT); put disk segments on a local SSD \
         file system such as ext4 or xfs",
        .path.display()
    )]
    NoDirectIo {
        /// The segment file.
        path: PathBuf,
    },
    /// The file system cannot preallocate (`fallocate`): the file would be
    /// sparse and could run out of space in the middle of a write.
    #[error(
        "the file system holding {} cannot preallocate files (fallocate: {source}); put disk segments on ext4 or xfs",
        .path.display()
    )]
    NoFallocate {
        /// The segment file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// The file system has too little free space for the segment file.
    #[error(
        "cannot preallocate {size_bytes} bytes for disk segment {}: the file system has {free_bytes} bytes free; \
         choose a smaller disk segment or free space there",
        .path.display()
    )]
    NoSpace {
        /// The segment file.
        path: PathBuf,
        /// Bytes the whole file needs (header, checksum table and data).
        size_bytes: u64,
        /// Bytes free for this user when it failed (0 when unknown).
        free_bytes: u64,
    },
    /// The file is not a disk segment of this format: wrong magic, a header
    /// checksum that does not match, or fields that contradict each other.
    #[error(
        "{} is not a valid disk segment: {reason}; it was not written by a mooncake store node, or its header is \
         damaged (remove it and create the segment afresh)",
        .path.display()
    )]
    BadHeader {
        /// The segment file.
        path: PathBuf,
        /// What does not match.
        reason: String,
    },
    /// The header names a format version this build does not read.
    #[error(
        "disk segment {} has format version {found}; this build reads version {supported}; run the matching store \
         node version, or remove the file and create the segment afresh",
        .path.display()
    )]
    UnsupportedVersion {
        /// The segment file.
        path: PathBuf,
        /// The version in the file.
        found: u32,
        /// The version this build reads.
        supported: u32,
    },
    /// The file's length differs from what its header implies (truncated or
    /// appended to).
    #[error(
        "disk segment {} is {actual} bytes but its header implies {expected}; the file was truncated or extended \
         by something else (remove it and create the segment afresh)",
        .path.display()
    )]
    SizeMismatch {
        /// The segment file.
        path: PathBuf,
        /// Length the header implies.
        expected: u64,
        /// Length of the file.
        actual: u64,
    },
    /// `[offset, offset + len)` is not inside the data region.
    #[error(
        "range [{offset}, {offset} + {len}) is outside the disk segment's {size} data bytes; the caller's offset or \
         length is wrong"
    )]
    OutOfBounds {
        /// First byte asked for.
        offset: u64,
        /// Bytes asked for.
        len: u64,
        /// Size of the data region.
        size: u64,
    },
    /// A write offset that is not a multiple of [`DISK_BLOCK_BYTES`].
    #[error(
        "disk write at offset {offset} is not aligned to {DISK_BLOCK_BYTES} bytes; the master places objects on disk \
         segments only at block-aligned offsets"
    )]
    Unaligned {
        /// The offset given.
        offset: u64,
    },
    /// One read or write asked for more than a buffer holds.
    #[error("one disk I/O of {len} bytes exceeds the chunk limit of {max} bytes; split it into chunks")]
    ChunkTooLarge {
        /// Bytes asked for.
        len: u64,
        /// [`super::DISK_IO_CHUNK_BYTES`].
        max: u64,
    },
    /// A write was handed a buffer that did not come from this segment's
    /// [`DiskSegment::buffer`](super::DiskSegment::buffer) (another segment's,
    /// or one returned by a read).
    #[error("disk write of segment {} was given a buffer that is not a fresh buffer of this segment; take one from its buffer()", .path.display())]
    ForeignBuffer {
        /// The segment file.
        path: PathBuf,
    },
    /// Blocks failed checksum verification: the bytes on disk are not what
    /// was written (media error, or something else wrote the file).
    #[error(
        "disk segment bytes [{offset}, {offset} + {len}) failed checksum verification: the data on disk is corrupt; \
         read another replica (the object on this segment is lost)"
    )]
    Corrupt {
        /// First byte of the first bad block, in the data region.
        offset: u64,
        /// Bytes of the bad run (whole blocks).
        len: u64,
    },
    /// io_uring was asked for but cannot be used here.
    #[error(
        "io_uring is not available for disk segment {}: {reason}; use the pread backend (BackendChoice::Pread) or \
         Auto, or allow io_uring (kernel.io_uring_disabled=0, seccomp profile, RLIMIT_MEMLOCK)",
        .path.display()
    )]
    IoUringUnavailable {
        /// The segment file.
        path: PathBuf,
        /// Why setup or the probe failed.
        reason: String,
    },
    /// Aligned I/O memory could not be allocated.
    #[error("cannot allocate {bytes} bytes of aligned I/O buffers; free memory or lower the number of disk segments")]
    NoMemory {
        /// Bytes asked for.
        bytes: usize,
    },
    /// The segment's I/O thread is gone (it panicked, or the segment is
    /// shutting down).
    #[error(
        "the I/O thread of disk segment {} stopped; the store node must restart to serve it again",
        .path.display()
    )]
    Stopped {
        /// The segment file.
        path: PathBuf,
    },
    /// A system call on the segment file failed.
    #[error("{op} of disk segment {} failed: {source}; check the device and the kernel log (dmesg)", .path.display())]
    Io {
        /// The operation (`open`, `read`, `write`, `fdatasync`, ...).
        op: &'static str,
        /// The segment file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: io::Error,
    },
}
