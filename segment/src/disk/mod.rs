//! Disk segments: object bytes in a preallocated file on a local SSD, read
//! and written with `O_DIRECT` through io_uring (registered buffers, batched
//! submissions) or, where io_uring is unavailable, pread/pwrite threads.
//!
//! [`DiskSegment`] is the one public type that does I/O: create or open a
//! file, read verified chunks into [`DiskBuf`]s, write block-aligned chunks
//! durably, renew the segment id in the header, scrub after a restart. Every
//! data block has a CRC-32C in a table in the same file, checked on every
//! read ([`DiskError::Corrupt`]).
//!
//! Modules, one concern each: [`file`] (layout, header, create/open
//! checks), [`blocks`] (the checksum table and its page locks), [`buf`]
//! (aligned buffers and the bounded pool), [`engine`] (the job shape and
//! backend choice), [`uring`] (the io_uring thread), [`fallback`] (the
//! pread/pwrite threads), [`segment`] (the API).

mod blocks;
mod buf;
mod engine;
mod error;
mod fallback;
mod file;
mod segment;
mod uring;

#[cfg(test)]
mod tests;

pub use buf::DiskBuf;
pub use engine::{BackendChoice, DiskBackend};
pub use error::DiskError;
pub use file::DiskHeader;
pub use segment::DiskSegment;

/// Where byte `offset` of the data region of a disk segment file of
/// `data_bytes` lies in the file (after the header and checksum table), for
/// tools and tests that inspect the file; `None` for an impossible size or
/// an offset outside the data.
pub fn file_offset_of(data_bytes: u64, offset: u64) -> Option<u64> {
    let layout = file::FileLayout::new(data_bytes).ok()?;
    (offset < data_bytes).then(|| layout.data_offset + offset)
}

/// Size of a disk block: the unit of alignment (`O_DIRECT`), of placement
/// (the master places objects on disk segments at offsets and sizes that are
/// multiples of it) and of checksumming.
pub const DISK_BLOCK_BYTES: u64 = 4096;

/// Largest read or write of one call (4 MiB): the size of a pool buffer.
/// Larger transfers are split by the caller. Bigger chunks cost more pinned
/// memory per buffer; smaller ones more syscalls and completions per byte.
pub const DISK_IO_CHUNK_BYTES: usize = 4 << 20;

/// I/O buffers per segment (each [`DISK_IO_CHUNK_BYTES`] + one block, about
/// 32 MiB in all, registered with the ring): the most reads and writes of
/// one segment in flight at once. More requests wait for a buffer.
pub const DISK_BUFFERS_MAX: usize = 8;
