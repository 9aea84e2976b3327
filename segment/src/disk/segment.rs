//! [`DiskSegment`]: one disk segment, its public API (create, open, renew,
//! read, write, scrub) over the file, the checksum table, the buffer pool
//! and the I/O engine.
//!
//! Reads verify every block they cover against the table before any byte is
//! handed out. Writes are block-aligned, padded with zeros to a whole block,
//! and durable on return: data, then the table pages under their locks,
//! then one fdatasync. A write that fails or is cancelled leaves its blocks
//! undefined (they may read as [`DiskError::Corrupt`] until written again);
//! only a write that returned `Ok` may be acknowledged to anyone.
//!
//! Concurrency: any number of reads and writes may run at once on disjoint
//! blocks. The master never places two live objects on one block (offsets
//! and sizes are block multiples), so a read never races a write of its own
//! blocks; if one did, it would report `Corrupt`, never return torn bytes.

use std::fmt;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use super::blocks::{BlockTable, ENTRIES_PER_PAGE};
use super::buf::{AlignedBuf, BufPool};
use super::engine::{Engine, Held, IoKind, IoOp, JobError};
use super::file::{self, DiskHeader, FileLayout};
use super::{BackendChoice, DISK_BLOCK_BYTES, DISK_IO_CHUNK_BYTES, DiskBackend, DiskBuf, DiskError};
use crate::checksum::crc32c;
use crate::ids::{ClientId, SegmentId};

const BLOCK: usize = DISK_BLOCK_BYTES as usize;

/// A preallocated file on a local SSD holding object bytes. See the module
/// doc; the file format is in [`super::file`].
pub struct DiskSegment {
    /// Declared first: dropping it stops the I/O threads before the rest goes.
    engine: Engine,
    path: PathBuf,
    file: Arc<File>,
    layout: FileLayout,
    header: Mutex<DiskHeader>,
    table: BlockTable,
    pool: Arc<BufPool>,
}

impl DiskSegment {
    /// Creates the file of a new segment at `path` (exclusive, mode 0600,
    /// preallocated whole, header and checksum table synced) with
    /// `data_bytes` of data (a non-zero multiple of [`DISK_BLOCK_BYTES`]),
    /// and starts serving it. On error no file is left behind.
    pub fn create(
        path: &Path,
        segment: SegmentId,
        owner: ClientId,
        data_bytes: u64,
        choice: BackendChoice,
    ) -> Result<DiskSegment, DiskError> {
        let header = DiskHeader { segment, owner, data_bytes };
        let (file, layout, table) = file::create(path, &header)?;
        Self::start(path, file, header, layout, table, choice).inspect_err(|_| {
            let _ = std::fs::remove_file(path);
        })
    }

    /// Opens the segment file at `path` (a regular file, never through a
    /// symlink), checks its header and length, and loads its checksum table.
    pub fn open(path: &Path, choice: BackendChoice) -> Result<DiskSegment, DiskError> {
        let (file, header, layout, table) = file::open(path)?;
        Self::start(path, file, header, layout, table, choice)
    }

    fn start(
        path: &Path,
        file: File,
        header: DiskHeader,
        layout: FileLayout,
        table: BlockTable,
        choice: BackendChoice,
    ) -> Result<DiskSegment, DiskError> {
        let file = Arc::new(file);
        let pool = BufPool::new()?;
        let engine = Engine::start(file.clone(), pool.clone(), choice, path)?;
        Ok(DiskSegment { engine, path: path.to_path_buf(), file, layout, header: Mutex::new(header), table, pool })
    }

    /// What the header says now (segment id, owner, data size).
    pub fn header(&self) -> DiskHeader {
        *self.header.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The segment id in the header.
    pub fn segment_id(&self) -> SegmentId {
        self.header().segment
    }

    /// Size of the data region in bytes.
    pub fn data_bytes(&self) -> u64 {
        self.layout.data_bytes
    }

    /// The segment file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The backend serving the segment's I/O.
    pub fn backend(&self) -> DiskBackend {
        self.engine.backend()
    }

    /// Rewrites the header with segment id `new_id` and syncs it, for a
    /// remount after the masters forgot the segment. Blocking (one 4 KiB
    /// write and an fdatasync). On error the in-memory header is unchanged.
    pub fn renew(&self, new_id: SegmentId) -> Result<(), DiskError> {
        let mut header = self.header.lock().unwrap_or_else(PoisonError::into_inner);
        let renewed = DiskHeader { segment: new_id, ..*header };
        file::write_header(&self.file, &self.path, &renewed, &self.layout)?;
        *header = renewed;
        Ok(())
    }

    /// An I/O buffer whose window is `len` zero-or-stale bytes to fill, for
    /// [`Self::write`]; waits while every buffer of the segment is lent out.
    /// `len` is at most [`DISK_IO_CHUNK_BYTES`].
    pub async fn buffer(&self, len: usize) -> Result<DiskBuf, DiskError> {
        check_chunk(len)?;
        self.pool.take(len).await.ok_or_else(|| self.stopped())
    }

    /// Reads `[offset, offset + len)` of the data region (`len` at most
    /// [`DISK_IO_CHUNK_BYTES`]), verifying every block it covers; the
    /// returned buffer's window is exactly those bytes.
    pub async fn read(&self, offset: u64, len: usize) -> Result<DiskBuf, DiskError> {
        check_chunk(len)?;
        self.check_bounds(offset, len as u64)?;
        let mut buf = self.pool.take(0).await.ok_or_else(|| self.stopped())?;
        let first = align_down(offset);
        if len > 0 {
            let bytes = (align_up(offset + len as u64) - first) as usize;
            buf = self.read_blocks(first, bytes, buf).await?;
            if let Some(&(block, count)) = self.table.verify(first / DISK_BLOCK_BYTES, &buf.slot()[..bytes]).first() {
                let (offset, len) = (block * DISK_BLOCK_BYTES, count * DISK_BLOCK_BYTES);
                tracing::warn!(path = %self.path.display(), offset, len,
                    "disk segment blocks failed checksum verification");
                return Err(DiskError::Corrupt { offset, len });
            }
        }
        buf.set_window((offset - first) as usize, len);
        Ok(buf)
    }

    /// Writes the window of `buf` (from [`Self::buffer`]) at `offset`, a
    /// multiple of [`DISK_BLOCK_BYTES`]; the last block is padded with
    /// zeros. Durable when it returns `Ok` (see the module doc).
    pub async fn write(&self, offset: u64, mut buf: DiskBuf) -> Result<(), DiskError> {
        if !buf.belongs_to(&self.pool) || buf.window_start() != 0 {
            return Err(DiskError::ForeignBuffer { path: self.path.clone() });
        }
        if !offset.is_multiple_of(DISK_BLOCK_BYTES) {
            return Err(DiskError::Unaligned { offset });
        }
        let len = buf.len();
        self.check_bounds(offset, len as u64)?;
        if len == 0 {
            return Ok(());
        }
        let padded = len.div_ceil(BLOCK) * BLOCK;
        buf.slot_mut()[len..padded].fill(0);
        let crcs: Vec<u32> = buf.slot()[..padded].chunks_exact(BLOCK).map(crc32c).collect();
        let ops = vec![op(IoKind::Write, self.layout.data_offset + offset, 0, padded)];
        drop(self.run("write", ops, false, vec![Held::Pool(buf)]).await?);
        let first_block = offset / DISK_BLOCK_BYTES;
        for (i, crc) in crcs.iter().enumerate() {
            self.table.set(first_block + i as u64, *crc);
        }
        self.write_table(first_block, crcs.len() as u64).await?;
        self.run("fdatasync", Vec::new(), true, Vec::new()).await?;
        Ok(())
    }

    /// Verifies every block of the data region (reading all of it); returns
    /// the corrupt runs as (offset, len) in bytes, in order. Meant for a
    /// segment not yet serving (after a restart): a block written meanwhile
    /// may be reported.
    pub async fn scrub(&self) -> Result<Vec<(u64, u64)>, DiskError> {
        let mut runs: Vec<(u64, u64)> = Vec::new();
        let mut offset = 0;
        while offset < self.layout.data_bytes {
            let bytes = (self.layout.data_bytes - offset).min(DISK_IO_CHUNK_BYTES as u64) as usize;
            let buf = self.pool.take(0).await.ok_or_else(|| self.stopped())?;
            let buf = self.read_blocks(offset, bytes, buf).await?;
            for (block, count) in self.table.verify(offset / DISK_BLOCK_BYTES, &buf.slot()[..bytes]) {
                let (at, len) = (block * DISK_BLOCK_BYTES, count * DISK_BLOCK_BYTES);
                match runs.last_mut() {
                    Some((start, run)) if *start + *run == at => *run += len,
                    _ => runs.push((at, len)),
                }
            }
            offset += bytes as u64;
        }
        if !runs.is_empty() {
            tracing::warn!(path = %self.path.display(), runs = runs.len(), "disk segment scrub found corrupt blocks");
        }
        Ok(runs)
    }

    /// Reads `bytes` (whole blocks) at data offset `first` into the start of `buf`'s slot.
    async fn read_blocks(&self, first: u64, bytes: usize, buf: DiskBuf) -> Result<DiskBuf, DiskError> {
        let ops = vec![op(IoKind::Read, self.layout.data_offset + first, 0, bytes)];
        let held = self.run("read", ops, false, vec![Held::Pool(buf)]).await?;
        held.into_iter()
            .find_map(|h| match h {
                Held::Pool(buf) => Some(buf),
                _ => None,
            })
            .ok_or_else(|| self.stopped())
    }

    /// Writes the table pages holding blocks `[first_block, first_block +
    /// blocks)`, each snapshotted under its lock; the locks travel with the
    /// write, so they are held until it completes even if this is cancelled.
    async fn write_table(&self, first_block: u64, blocks: u64) -> Result<(), DiskError> {
        let pages = first_block / ENTRIES_PER_PAGE..=(first_block + blocks - 1) / ENTRIES_PER_PAGE;
        let guards = self.table.lock_pages(pages.clone()).await;
        let mut held = Vec::with_capacity(pages.clone().count() + guards.len());
        let mut ops = Vec::new();
        for page in pages {
            let mut bytes = AlignedBuf::zeroed(BLOCK)?;
            self.table.encode_page(page, bytes.as_mut_slice());
            ops.push(op(IoKind::Write, self.layout.table_offset + page * DISK_BLOCK_BYTES, held.len(), BLOCK));
            held.push(Held::Own(bytes));
        }
        held.extend(guards.into_iter().map(|guard| Held::Lock { _guard: guard }));
        self.run("write checksum table", ops, false, held).await.map(drop)
    }

    async fn run(
        &self,
        what: &'static str,
        ops: Vec<IoOp>,
        sync: bool,
        held: Vec<Held>,
    ) -> Result<Vec<Held>, DiskError> {
        self.engine.run(ops, sync, held).await.map_err(|err| match err {
            JobError::Io(source) => DiskError::Io { op: what, path: self.path.clone(), source },
            JobError::Stopped => self.stopped(),
        })
    }

    fn check_bounds(&self, offset: u64, len: u64) -> Result<(), DiskError> {
        let size = self.layout.data_bytes;
        match offset.checked_add(len) {
            Some(end) if end <= size => Ok(()),
            _ => Err(DiskError::OutOfBounds { offset, len, size }),
        }
    }

    fn stopped(&self) -> DiskError {
        DiskError::Stopped { path: self.path.clone() }
    }
}

impl fmt::Debug for DiskSegment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DiskSegment")
            .field("path", &self.path)
            .field("header", &self.header())
            .field("backend", &self.backend())
            .finish()
    }
}

fn op(kind: IoKind, file_offset: u64, buf: usize, len: usize) -> IoOp {
    IoOp { kind, file_offset, buf, at: 0, len }
}

fn check_chunk(len: usize) -> Result<(), DiskError> {
    if len > DISK_IO_CHUNK_BYTES {
        return Err(DiskError::ChunkTooLarge { len: len as u64, max: DISK_IO_CHUNK_BYTES as u64 });
    }
    Ok(())
}

fn align_down(offset: u64) -> u64 {
    offset / DISK_BLOCK_BYTES * DISK_BLOCK_BYTES
}

fn align_up(offset: u64) -> u64 {
    offset.div_ceil(DISK_BLOCK_BYTES) * DISK_BLOCK_BYTES
}
