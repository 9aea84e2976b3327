//! Memory that holds object bytes, and the offset allocator the master uses
//! to place objects inside segments.
//!
//! Key types: [`SegmentId`], [`ClientId`], [`tenant::Tenant`] (a key
//! space and its stored-key scope), [`RangeAllocator`], [`Range`],
//! [`SegmentMemory`] (DRAM) and [`DiskSegment`] (SSD, io_uring); the object
//! checksum is [`checksum::crc32c`].
//! This crate sits at the bottom of the workspace: it knows nothing of Raft,
//! gRPC or the transfer engine.

mod allocator;
pub mod checksum;
pub mod disk;
mod ids;
mod memory;
pub mod tenant;
pub mod testing;

pub use allocator::{ALLOC_ALIGN_BYTES, AllocError, Range, RangeAllocator};
pub use disk::{
    BackendChoice, DISK_BLOCK_BYTES, DISK_BUFFERS_MAX, DISK_IO_CHUNK_BYTES, DiskBackend, DiskBuf, DiskError,
    DiskHeader, DiskSegment,
};
pub use ids::{ClientId, SegmentId};
pub use memory::{
    FileIdentity, MemoryError, SEGMENT_FILE_PREFIX, SHM_DIR, SHM_NAME_MAX_BYTES, SegmentMemory, free_bytes,
    validate_segment_path,
};
