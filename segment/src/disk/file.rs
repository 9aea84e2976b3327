//! The segment file: its layout ([`FileLayout`]), its header ([`DiskHeader`],
//! encoded in the first block), and creating, opening and validating it.
//!
//! Layout (all offsets multiples of [`DISK_BLOCK_BYTES`]):
//!
//! | bytes | what |
//! |---|---|
//! | `[0, 4096)` | header block |
//! | `[4096, data_offset)` | checksum table: one CRC-32C per data block, 1024 per page ([`super::blocks`]) |
//! | `[data_offset, data_offset + data_bytes)` | data region: object bytes |
//!
//! Header block (little-endian; the rest of the block is zero):
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 8 | magic [`HEADER_MAGIC`] (`"MCDISKSG"`) |
//! | 8 | 4 | format version [`FORMAT_VERSION`] |
//! | 12 | 4 | block size (4096) |
//! | 16 | 8 | segment id |
//! | 24 | 8 | owner client id |
//! | 32 | 8 | data size in bytes |
//! | 40 | 8 | table offset in bytes |
//! | 48 | 8 | data offset in bytes |
//! | 56 | 4 | CRC-32C of bytes `[0, 56)` |
//!
//! Every file is opened without following symlinks, checked to be a regular
//! file, and switched to `O_DIRECT` with `fcntl`: a file system that refuses
//! it (EINVAL) is reported as such, and `create` removes the file it made.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use super::blocks::{self, BlockTable};
use super::buf::AlignedBuf;
use super::fallback::{pread_exact, pwrite_all};
use super::{DISK_BLOCK_BYTES, DiskError};
use crate::checksum::crc32c;
use crate::ids::{ClientId, SegmentId};

/// Marks a disk segment file.
pub(crate) const HEADER_MAGIC: [u8; 8] = *b"MCDISKSG";
/// The only file format version this build reads and writes.
pub(crate) const FORMAT_VERSION: u32 = 1;
/// Bytes of the header fields the header CRC covers.
const HEADER_FIELDS_BYTES: usize = 56;
/// Table pages read or written at once at create and open (1 MiB).
const TABLE_IO_PAGES: u64 = 256;

/// What the header says about the segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DiskHeader {
    /// The segment id it is mounted under (changes on renew).
    pub segment: SegmentId,
    /// The store node that owns it.
    pub owner: ClientId,
    /// Size of the data region in bytes (a multiple of [`DISK_BLOCK_BYTES`]).
    pub data_bytes: u64,
}

/// Where the parts of a file of `data_bytes` lie.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct FileLayout {
    pub(crate) data_bytes: u64,
    pub(crate) blocks: u64,
    pub(crate) table_offset: u64,
    pub(crate) data_offset: u64,
}

impl FileLayout {
    /// The layout for `data_bytes`, refusing sizes that are zero, unaligned,
    /// or whose table would not fit this machine's memory.
    pub(crate) fn new(data_bytes: u64) -> Result<Self, DiskError> {
        let bad = |reason| DiskError::BadSize { data_bytes, reason };
        if data_bytes == 0 {
            return Err(bad("it is zero"));
        }
        if !data_bytes.is_multiple_of(DISK_BLOCK_BYTES) {
            return Err(bad("it is not a multiple of the block size"));
        }
        let blocks = data_bytes / DISK_BLOCK_BYTES;
        let table_bytes = blocks::table_pages(blocks) * DISK_BLOCK_BYTES;
        let data_offset = DISK_BLOCK_BYTES + table_bytes;
        if usize::try_from(blocks).is_err()
            || data_offset.checked_add(data_bytes).is_none_or(|end| end > i64::MAX as u64)
        {
            return Err(bad("it is too large for this machine"));
        }
        Ok(Self { data_bytes, blocks, table_offset: DISK_BLOCK_BYTES, data_offset })
    }

    pub(crate) fn file_bytes(&self) -> u64 {
        self.data_offset + self.data_bytes
    }

    pub(crate) fn table_pages(&self) -> u64 {
        blocks::table_pages(self.blocks)
    }
}

/// Encodes `header` into a zeroed header block.
pub(crate) fn encode_header(header: &DiskHeader, layout: &FileLayout, out: &mut [u8]) {
    out[..DISK_BLOCK_BYTES as usize].fill(0);
    out[0..8].copy_from_slice(&HEADER_MAGIC);
    out[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
    out[12..16].copy_from_slice(&(DISK_BLOCK_BYTES as u32).to_le_bytes());
    out[16..24].copy_from_slice(&header.segment.0.to_le_bytes());
    out[24..32].copy_from_slice(&header.owner.0.to_le_bytes());
    out[32..40].copy_from_slice(&header.data_bytes.to_le_bytes());
    out[40..48].copy_from_slice(&layout.table_offset.to_le_bytes());
    out[48..56].copy_from_slice(&layout.data_offset.to_le_bytes());
    let crc = crc32c(&out[..HEADER_FIELDS_BYTES]);
    out[HEADER_FIELDS_BYTES..HEADER_FIELDS_BYTES + 4].copy_from_slice(&crc.to_le_bytes());
}

/// Decodes and checks a header block read from `path`.
pub(crate) fn decode_header(path: &Path, raw: &[u8]) -> Result<(DiskHeader, FileLayout), DiskError> {
    let bad = |reason: String| DiskError::BadHeader { path: path.to_path_buf(), reason };
    if raw.len() < DISK_BLOCK_BYTES as usize {
        return Err(bad(format!("the header block is {} bytes, expected {DISK_BLOCK_BYTES}", raw.len())));
    }
    if raw[0..8] != HEADER_MAGIC {
        return Err(bad(format!("wrong magic {:02x?}, expected {:02x?} (\"MCDISKSG\")", &raw[0..8], HEADER_MAGIC)));
    }
    let stored_crc = u32_at(raw, HEADER_FIELDS_BYTES);
    let crc = crc32c(&raw[..HEADER_FIELDS_BYTES]);
    if stored_crc != crc {
        return Err(bad(format!("header checksum {stored_crc:#010x} does not match its contents ({crc:#010x})")));
    }
    let version = u32_at(raw, 8);
    if version != FORMAT_VERSION {
        return Err(DiskError::UnsupportedVersion {
            path: path.to_path_buf(),
            found: version,
            supported: FORMAT_VERSION,
        });
    }
    let block = u32_at(raw, 12);
    if u64::from(block) != DISK_BLOCK_BYTES {
        return Err(bad(format!("block size {block}, expected {DISK_BLOCK_BYTES}")));
    }
    let header = DiskHeader {
        segment: SegmentId(u64_at(raw, 16)),
        owner: ClientId(u64_at(raw, 24)),
        data_bytes: u64_at(raw, 32),
    };
    let layout = FileLayout::new(header.data_bytes).map_err(|e| bad(e.to_string()))?;
    let (table_offset, data_offset) = (u64_at(raw, 40), u64_at(raw, 48));
    if (table_offset, data_offset) != (layout.table_offset, layout.data_offset) {
        return Err(bad(format!(
            "table at {table_offset} and data at {data_offset}; a segment of {} data bytes has them at {} and {}",
            header.data_bytes, layout.table_offset, layout.data_offset
        )));
    }
    Ok((header, layout))
}

fn u32_at(raw: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([raw[at], raw[at + 1], raw[at + 2], raw[at + 3]])
}

fn u64_at(raw: &[u8], at: usize) -> u64 {
    let mut word = [0u8; 8];
    word.copy_from_slice(&raw[at..at + 8]);
    u64::from_le_bytes(word)
}

fn io_err<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> DiskError + 'a {
    move |source| DiskError::Io { op, path: path.to_path_buf(), source }
}

/// Creates the file of a new segment: exclusive, mode 0600, preallocated
/// whole, header and fresh table written and synced. On error nothing is
/// left at `path` (unless it existed before).
pub(crate) fn create(path: &Path, header: &DiskHeader) -> Result<(File, FileLayout, BlockTable), DiskError> {
    let layout = FileLayout::new(header.data_bytes)?;
    let opened = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path);
    let file = match opened {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            return Err(match fs::symlink_metadata(path) {
                Ok(meta) if !meta.file_type().is_file() => not_regular(path, &meta.file_type()),
                _ => DiskError::AlreadyExists { path: path.to_path_buf() },
            });
        }
        Err(e) => return Err(io_err("create", path)(e)),
    };
    let made = set_direct(&file, path)
        .and_then(|()| preallocate(&file, path, layout.file_bytes()))
        .and_then(|()| write_fresh(&file, path, header, &layout));
    match made {
        Ok(table) => Ok((file, layout, table)),
        Err(err) => {
            // We created it exclusively: it is ours to remove.
            let _ = fs::remove_file(path);
            Err(err)
        }
    }
}

/// Opens an existing segment file: a regular file (never through a
/// symlink), `O_DIRECT`, with a valid header, the length it implies, and
/// its table loaded.
pub(crate) fn open(path: &Path) -> Result<(File, DiskHeader, FileLayout, BlockTable), DiskError> {
    // Look first, so a FIFO or device is never opened (opening some has
    // side effects); the fstat below closes the race with a swap.
    match fs::symlink_metadata(path) {
        Ok(meta) if !meta.file_type().is_file() => return Err(not_regular(path, &meta.file_type())),
        Ok(_) => {}
        Err(e) => return Err(io_err("stat", path)(e)),
    }
    let opened = OpenOptions::new().read(true).write(true).custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK).open(path);
    let file = match opened {
        Ok(file) => file,
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => return Err(not_regular_reason(path, "it is a symlink")),
        Err(e) if e.raw_os_error() == Some(libc::EISDIR) => return Err(not_regular_reason(path, "it is a directory")),
        Err(e) => return Err(io_err("open", path)(e)),
    };
    let meta = file.metadata().map_err(io_err("stat", path))?;
    if !meta.file_type().is_file() {
        return Err(not_regular(path, &meta.file_type()));
    }
    set_direct(&file, path)?;
    let mut block = AlignedBuf::zeroed(DISK_BLOCK_BYTES as usize)?;
    // The first O_DIRECT read is the probe: some file systems accept the
    // flag and refuse the I/O.
    pread_exact(file.as_raw_fd(), block.as_mut_slice(), 0).map_err(|e| direct_io_err("read", path, e))?;
    let (header, layout) = decode_header(path, block.as_slice())?;
    if meta.len() != layout.file_bytes() {
        return Err(DiskError::SizeMismatch {
            path: path.to_path_buf(),
            expected: layout.file_bytes(),
            actual: meta.len(),
        });
    }
    let table = load_table(&file, path, &layout)?;
    Ok((file, header, layout, table))
}

/// Writes `header` into the header block of `file` and syncs it.
pub(crate) fn write_header(
    file: &File,
    path: &Path,
    header: &DiskHeader,
    layout: &FileLayout,
) -> Result<(), DiskError> {
    let mut block = AlignedBuf::zeroed(DISK_BLOCK_BYTES as usize)?;
    encode_header(header, layout, block.as_mut_slice());
    pwrite_all(file.as_raw_fd(), block.as_slice(), 0).map_err(io_err("write header", path))?;
    file.sync_data().map_err(io_err("fdatasync", path))
}

fn not_regular(path: &Path, kind: &fs::FileType) -> DiskError {
    let what = if kind.is_symlink() {
        "it is a symlink"
    } else if kind.is_dir() {
        "it is a directory"
    } else if kind.is_block_device() || kind.is_char_device() {
        "it is a device"
    } else {
        "it is not a regular file"
    };
    not_regular_reason(path, what)
}

fn not_regular_reason(path: &Path, reason: &str) -> DiskError {
    DiskError::NotRegularFile { path: path.to_path_buf(), reason: reason.to_owned() }
}

/// An I/O error of `op`, or [`DiskError::NoDirectIo`] when it is the EINVAL
/// of a file system that refuses direct I/O.
fn direct_io_err(op: &'static str, path: &Path, source: io::Error) -> DiskError {
    if source.raw_os_error() == Some(libc::EINVAL) {
        DiskError::NoDirectIo { path: path.to_path_buf() }
    } else {
        DiskError::Io { op, path: path.to_path_buf(), source }
    }
}

/// Switches `file` to direct I/O (and back to blocking mode).
fn set_direct(file: &File, path: &Path) -> Result<(), DiskError> {
    let fd = file.as_raw_fd();
    // SAFETY: F_GETFL on a descriptor `file` keeps open; no pointers.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if flags < 0 {
        return Err(io_err("fcntl", path)(io::Error::last_os_error()));
    }
    // SAFETY: F_SETFL with an integer flag set on the same open descriptor.
    if unsafe { libc::fcntl(fd, libc::F_SETFL, (flags | libc::O_DIRECT) & !libc::O_NONBLOCK) } < 0 {
        return Err(direct_io_err("fcntl(O_DIRECT)", path, io::Error::last_os_error()));
    }
    Ok(())
}

/// Backs every byte of the file now (not sparse), so a write never meets
/// ENOSPC later.
fn preallocate(file: &File, path: &Path, size_bytes: u64) -> Result<(), DiskError> {
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let free = crate::memory::free_bytes(dir).ok();
    let no_space = || DiskError::NoSpace { path: path.to_path_buf(), size_bytes, free_bytes: free.unwrap_or(0) };
    if free.is_some_and(|free| free < size_bytes) {
        return Err(no_space());
    }
    let len = libc::off_t::try_from(size_bytes).map_err(|_| no_space())?;
    // SAFETY: fallocate on a descriptor `file` keeps open for writing; no pointers.
    if unsafe { libc::fallocate(file.as_raw_fd(), 0, 0, len) } == 0 {
        return Ok(());
    }
    let source = io::Error::last_os_error();
    Err(match source.raw_os_error() {
        Some(libc::ENOSPC | libc::EFBIG | libc::EDQUOT) => no_space(),
        Some(libc::EOPNOTSUPP) => DiskError::NoFallocate { path: path.to_path_buf(), source },
        _ => DiskError::Io { op: "fallocate", path: path.to_path_buf(), source },
    })
}

/// Writes the table of a fresh segment and then its header, each synced:
/// a crash in between leaves a file without a valid header, which `open`
/// refuses, never one whose header points at a half-written table. Then
/// syncs the directory, so the new name survives a crash too.
fn write_fresh(file: &File, path: &Path, header: &DiskHeader, layout: &FileLayout) -> Result<BlockTable, DiskError> {
    let table = BlockTable::fresh(layout.blocks as usize);
    let mut chunk = AlignedBuf::zeroed((TABLE_IO_PAGES * DISK_BLOCK_BYTES) as usize)?;
    let mut page = 0;
    while page < layout.table_pages() {
        let count = TABLE_IO_PAGES.min(layout.table_pages() - page);
        let bytes = (count * DISK_BLOCK_BYTES) as usize;
        for i in 0..count {
            let at = (i * DISK_BLOCK_BYTES) as usize;
            table.encode_page(page + i, &mut chunk.as_mut_slice()[at..at + DISK_BLOCK_BYTES as usize]);
        }
        let offset = layout.table_offset + page * DISK_BLOCK_BYTES;
        pwrite_all(file.as_raw_fd(), &chunk.as_slice()[..bytes], offset).map_err(io_err("write table", path))?;
        page += count;
    }
    file.sync_data().map_err(io_err("fdatasync", path))?;
    write_header(file, path, header, layout)?;
    sync_parent(path)?;
    Ok(table)
}

fn load_table(file: &File, path: &Path, layout: &FileLayout) -> Result<BlockTable, DiskError> {
    let table = BlockTable::empty(layout.blocks as usize);
    let mut chunk = AlignedBuf::zeroed((TABLE_IO_PAGES * DISK_BLOCK_BYTES) as usize)?;
    let mut page = 0;
    while page < layout.table_pages() {
        let count = TABLE_IO_PAGES.min(layout.table_pages() - page);
        let bytes = (count * DISK_BLOCK_BYTES) as usize;
        let offset = layout.table_offset + page * DISK_BLOCK_BYTES;
        pread_exact(file.as_raw_fd(), &mut chunk.as_mut_slice()[..bytes], offset)
            .map_err(io_err("read table", path))?;
        table.load_pages(page, &chunk.as_slice()[..bytes]);
        page += count;
    }
    Ok(table)
}

fn sync_parent(path: &Path) -> Result<(), DiskError> {
    let dir: PathBuf = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new(".")).to_path_buf();
    let handle = File::open(&dir).map_err(io_err("open directory", path))?;
    handle.sync_all().map_err(io_err("fsync directory", path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_header_round_trips_and_any_flipped_field_is_refused() {
        let header = DiskHeader { segment: SegmentId(7), owner: ClientId(9), data_bytes: 5 * DISK_BLOCK_BYTES };
        let layout = FileLayout::new(header.data_bytes).unwrap();
        assert_eq!((layout.table_offset, layout.data_offset, layout.file_bytes()), (4096, 8192, 8192 + 5 * 4096));
        let mut raw = vec![0u8; DISK_BLOCK_BYTES as usize];
        encode_header(&header, &layout, &mut raw);
        let path = Path::new("/x");
        assert_eq!(decode_header(path, &raw).unwrap(), (header, layout));
        for at in 0..HEADER_FIELDS_BYTES + 4 {
            let mut bad = raw.clone();
            bad[at] ^= 0x40;
            assert!(decode_header(path, &bad).is_err(), "byte {at} flipped");
        }
    }

    #[test]
    fn a_newer_format_version_is_refused_by_name() {
        let header = DiskHeader { segment: SegmentId(1), owner: ClientId(2), data_bytes: DISK_BLOCK_BYTES };
        let layout = FileLayout::new(header.data_bytes).unwrap();
        let mut raw = vec![0u8; DISK_BLOCK_BYTES as usize];
        encode_header(&header, &layout, &mut raw);
        raw[8..12].copy_from_slice(&2u32.to_le_bytes());
        let crc = crc32c(&raw[..HEADER_FIELDS_BYTES]);
        raw[HEADER_FIELDS_BYTES..HEADER_FIELDS_BYTES + 4].copy_from_slice(&crc.to_le_bytes());
        let err = decode_header(Path::new("/x"), &raw).unwrap_err();
        assert!(matches!(err, DiskError::UnsupportedVersion { found: 2, supported: 1, .. }), "{err}");
    }

    #[test]
    fn sizes_must_be_whole_blocks() {
        assert!(matches!(FileLayout::new(0), Err(DiskError::BadSize { .. })));
        assert!(matches!(FileLayout::new(4097), Err(DiskError::BadSize { .. })));
        assert!(matches!(FileLayout::new(u64::MAX - 4095), Err(DiskError::BadSize { .. })));
        let big = FileLayout::new(1 << 30).unwrap();
        assert_eq!(big.table_pages(), 256, "a GiB of data needs 1 MiB of table");
    }
}
