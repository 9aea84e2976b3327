//! Memory that holds object bytes, and the offset allocator the master uses
//! to place objects inside segments.
//!
//! Key types: [`SegmentId`], [`ClientId`], [`RangeAllocator`], [`Range`]; the
//! object checksum is [`checksum::crc32c`].
//! This crate sits at the bottom of the workspace: it knows nothing of Raft,
//! gRPC or the transfer engine.

mod allocator;
pub mod checksum;
mod ids;
mod memory;

pub use allocator::{ALLOC_ALIGN_BYTES, AllocError, Range, RangeAllocator};
pub use ids::{ClientId, SegmentId};
pub use memory::{
    FileIdentity, MemoryError, SEGMENT_FILE_PREFIX, SHM_DIR, SHM_NAME_MAX_BYTES, SegmentMemory, free_bytes,
    validate_segment_path,
};
