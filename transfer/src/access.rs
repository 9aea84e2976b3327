//! Who may touch which bytes of a served segment: the checks every request
//! passes before a byte moves, whether it came over a socket (the server)
//! or from this process itself (the local route, `local.rs`). Both answer
//! a refused request with the same [`Status`], so a caller cannot tell
//! which path refused it.
//!
//! In order: the segment is registered here (UNKNOWN_SEGMENT), the range
//! lies inside it (OUT_OF_RANGE), the capability verifies under the
//! segment's key for exactly this segment, access and range and has not
//! expired (UNAUTHORIZED), a WRITE's arena is one the segment's fence
//! still admits (UNAUTHORIZED: the masters took the arena back), and a
//! disk WRITE starts on a block and its block-padded end stays inside the
//! capability (OUT_OF_RANGE), since the padding writes zeros up to the
//! block's end. An admitted WRITE counts as in flight under its arena
//! until its [`Admitted`] drops.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use mooncake_auth::capability::{self, Access, Capability, CapabilityError, Requested, SegmentKey};
use mooncake_segment::{DISK_BLOCK_BYTES, DiskError, SegmentId};

use crate::fence::{Revoked, Writing};
use crate::frame::Status;
use crate::registry::{Backing, SegmentRegistry};

/// One request to check: `len` bytes at `offset` of segment `segment`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Asked<'a> {
    pub(crate) segment: SegmentId,
    pub(crate) offset: u64,
    pub(crate) len: u64,
    pub(crate) access: Access,
    /// The capability as it arrived (raw bytes: a malformed one is refused
    /// like a forged one).
    pub(crate) capability: &'a [u8],
}

/// Why a request is refused, with the status that answers it.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Refused {
    #[error("segment {0} is not served here")]
    UnknownSegment(SegmentId),
    #[error("[{offset}, {offset} + {len}) lies outside the segment's {size} bytes")]
    OutOfRange { offset: u64, len: u64, size: u64 },
    #[error("the segment has no capability key yet (its mount has not been answered)")]
    NoKey,
    #[error(transparent)]
    Capability(#[from] CapabilityError),
    #[error(transparent)]
    Revoked(#[from] Revoked),
    #[error("disk segment WRITE: {0}")]
    NotBlockWrite(#[from] NotBlockWrite),
}

impl Refused {
    /// The status a refused request is answered with.
    pub(crate) fn status(&self) -> Status {
        match self {
            Refused::UnknownSegment(_) => Status::UnknownSegment,
            Refused::OutOfRange { .. } | Refused::NotBlockWrite(_) => Status::OutOfRange,
            Refused::NoKey | Refused::Capability(_) | Refused::Revoked(_) => Status::Unauthorized,
        }
    }

    /// Whether the segment's fence refused it (a WRITE into an arena the
    /// masters took back), not its capability: the same UNAUTHORIZED on
    /// the wire, told apart in the node's counters.
    pub(crate) fn is_fenced(&self) -> bool {
        matches!(self, Refused::Revoked(_))
    }
}

/// Why a WRITE to a disk segment cannot be served as asked.
#[derive(Debug, thiserror::Error)]
pub(crate) enum NotBlockWrite {
    #[error("offset {0} is not a multiple of the disk block size {DISK_BLOCK_BYTES}")]
    Unaligned(u64),
    #[error(
        "its block-padded end {padded_end} lies beyond the capability's range [{cap_offset}, {cap_offset} + {cap_len})"
    )]
    PaddingOutsideCapability { padded_end: u64, cap_offset: u64, cap_len: u64 },
}

/// What holds the bytes of an admitted request, and for a WRITE its place
/// among the segment's WRITEs in flight (held until the bytes have moved).
pub(crate) struct Admitted {
    pub(crate) backing: Backing,
    pub(crate) writing: Option<Writing>,
}

/// Checks `asked` against `registry` (see the module doc); the segment's
/// backing when it may be served.
pub(crate) fn admit(registry: &SegmentRegistry, asked: &Asked<'_>) -> Result<Admitted, Refused> {
    let (backing, key, fence) =
        registry.lookup_with_key(asked.segment).ok_or(Refused::UnknownSegment(asked.segment))?;
    let size = backing.size_bytes();
    if asked.offset.checked_add(asked.len).is_none_or(|end| end > size) {
        return Err(Refused::OutOfRange { offset: asked.offset, len: asked.len, size });
    }
    let capability = authorize(key.as_deref(), asked)?;
    if let (Backing::Disk(_), Access::Write) = (&backing, asked.access) {
        write_fits(asked.offset, asked.len, &capability)?;
    }
    let writing = match asked.access {
        Access::Write => Some(fence.begin_write(capability.arena)?),
        Access::Read => None,
    };
    Ok(Admitted { backing, writing })
}

/// The request's capability when it verifies under the segment's `key` and
/// covers exactly what it asks (segment, access, range, not expired).
fn authorize(key: Option<&SegmentKey>, asked: &Asked<'_>) -> Result<Capability, Refused> {
    let key = key.ok_or(Refused::NoKey)?;
    let requested =
        Requested { segment_id: asked.segment.0, offset: asked.offset, len: asked.len, access: asked.access };
    Ok(capability::verify(key, asked.capability, &requested, unix_ms_now())?)
}

/// Ok when a WRITE of `len` bytes at `offset` under `capability` can be
/// stored in whole blocks without touching a byte the capability does not
/// grant.
fn write_fits(offset: u64, len: u64, capability: &Capability) -> Result<(), NotBlockWrite> {
    if !offset.is_multiple_of(DISK_BLOCK_BYTES) {
        return Err(NotBlockWrite::Unaligned(offset));
    }
    let padded_len = len.div_ceil(DISK_BLOCK_BYTES) * DISK_BLOCK_BYTES;
    if !capability.covers(offset, padded_len) {
        return Err(NotBlockWrite::PaddingOutsideCapability {
            padded_end: offset.saturating_add(padded_len),
            cap_offset: capability.offset,
            cap_len: capability.len,
        });
    }
    Ok(())
}

/// The status that answers a disk error.
pub(crate) fn disk_status(err: &DiskError) -> Status {
    match err {
        DiskError::Corrupt { .. } => Status::Corrupt,
        DiskError::OutOfBounds { .. } | DiskError::Unaligned { .. } => Status::OutOfRange,
        _ => Status::Internal,
    }
}

/// This node's wall clock in unix ms, which capability expiries are
/// compared with (they are the master's wall clock plus a TTL).
fn unix_ms_now() -> u64 {
    let since_epoch = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or(Duration::ZERO);
    u64::try_from(since_epoch.as_millis()).unwrap_or(u64::MAX)
}
