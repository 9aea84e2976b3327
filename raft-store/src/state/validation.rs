//! The limits on what one command may carry (key length, replicas, batch
//! size, segment size and alignment, label length) and the shape checks
//! shared by the master's edge (to fail fast) and apply (authoritative).

use mooncake_segment::{ClientId, SegmentId};

use crate::command::{Pin, SOFT_PIN_TTL_MAX_MS, SegmentSpec};
use crate::error::MetaError;

/// Longest key accepted: keys are hashes of token prefixes, 4 KiB is ample
/// and bounds the memory one entry can pin.
pub const KEY_MAX_BYTES: usize = 4096;
/// Most replicas one object may ask for.
pub const REPLICA_NUM_MAX: u32 = 16;
/// Most commands in one batch (one log entry): bounds entry size and apply latency.
pub const BATCH_MAX: usize = 4096;
/// Largest segment accepted (16 TiB).
pub const SEGMENT_SIZE_MAX_BYTES: u64 = 1 << 44;
/// Segment sizes are whole pages: a segment is mapped (shared memory) or
/// opened for direct I/O (SSD), and both want page-sized extents. A segment
/// starts at offset 0 of its own mapping, so its base is page-aligned too.
pub const SEGMENT_ALIGN_BYTES: u64 = 4096;
/// Longest endpoint, host id, zone label or shm path.
pub const LABEL_MAX_BYTES: usize = 512;

pub(super) fn invalid(msg: impl Into<String>) -> MetaError {
    MetaError::InvalidParams(msg.into())
}

/// What a tenant's stored key may add to the client's key (the tenant
/// scope of `mooncake_segment::tenant`: two NULs and a name of at most 64
/// bytes).
pub const KEY_SCOPE_MAX_BYTES: usize = 66;
/// Longest stored key: a client key of [`KEY_MAX_BYTES`] in a tenant's scope.
pub const STORED_KEY_MAX_BYTES: usize = KEY_MAX_BYTES + KEY_SCOPE_MAX_BYTES;

/// Checks a key a client sent (at most [`KEY_MAX_BYTES`]); the master edge.
pub fn validate_key(key: &str) -> Result<(), MetaError> {
    if key.len() > KEY_MAX_BYTES {
        return Err(invalid(format!("key is {} bytes; the limit is {KEY_MAX_BYTES}", key.len())));
    }
    validate_stored_key(key)
}

/// Checks a stored key (a client's key, in its tenant's scope); shared by
/// the master's services (fail fast) and apply (authoritative).
pub fn validate_stored_key(key: &str) -> Result<(), MetaError> {
    if key.is_empty() {
        return Err(invalid("key is empty"));
    }
    if key.len() > STORED_KEY_MAX_BYTES {
        return Err(invalid(format!(
            "stored key is {} bytes; the limit is {STORED_KEY_MAX_BYTES} ({KEY_MAX_BYTES} and a tenant scope)",
            key.len()
        )));
    }
    Ok(())
}

/// Checks a pin: a soft-pin TTL lies in 1..=[`SOFT_PIN_TTL_MAX_MS`].
pub fn validate_pin(pin: Pin) -> Result<(), MetaError> {
    match pin {
        Pin::SoftFor { ttl_ms } if ttl_ms == 0 || ttl_ms > SOFT_PIN_TTL_MAX_MS => Err(invalid(format!(
            "soft-pin TTL {ttl_ms} ms is outside 1..={SOFT_PIN_TTL_MAX_MS} (a day); 0 means no soft pin"
        ))),
        _ => Ok(()),
    }
}

/// Checks a segment declaration on its own (not against other segments).
pub fn validate_segment(spec: &SegmentSpec) -> Result<(), MetaError> {
    if spec.id.0 == 0 {
        return Err(invalid("segment id 0 is reserved; use a random non-zero id"));
    }
    if spec.size_bytes < SEGMENT_ALIGN_BYTES || spec.size_bytes > SEGMENT_SIZE_MAX_BYTES {
        return Err(invalid(format!(
            "segment {} size {} bytes is outside {SEGMENT_ALIGN_BYTES}..={SEGMENT_SIZE_MAX_BYTES}",
            spec.id, spec.size_bytes,
        )));
    }
    if !spec.size_bytes.is_multiple_of(SEGMENT_ALIGN_BYTES) {
        return Err(invalid(format!(
            "segment {} size {} bytes is not a multiple of {SEGMENT_ALIGN_BYTES} (a page); round it down to {}",
            spec.id,
            spec.size_bytes,
            spec.size_bytes / SEGMENT_ALIGN_BYTES * SEGMENT_ALIGN_BYTES
        )));
    }
    if spec.endpoint.is_empty() {
        return Err(invalid(format!("segment {} has no transfer endpoint", spec.id)));
    }
    let labels = [&spec.endpoint, &spec.host_id, &spec.zone, &spec.shm_path];
    if labels.iter().any(|l| l.len() > LABEL_MAX_BYTES) {
        return Err(invalid(format!("segment {} has a label longer than {LABEL_MAX_BYTES} bytes", spec.id)));
    }
    Ok(())
}

/// What a writer asks of a put before it has a range: the shape the
/// master's PutStart checks (never replicated; the put's one command is
/// `PutCommit`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PutSpec {
    pub client: ClientId,
    pub key: String,
    pub size_bytes: u64,
    pub replica_num: u32,
    /// Segments to try first, in order.
    pub preferred: Vec<SegmentId>,
    pub pin: Pin,
}

/// Checks the shape of a put (not whether there is room).
pub fn validate_put(put: &PutSpec) -> Result<(), MetaError> {
    validate_stored_key(&put.key)?;
    validate_pin(put.pin)?;
    if put.size_bytes == 0 {
        return Err(invalid(format!("object {:?} has size 0", put.key)));
    }
    // Also keeps the size's rounding to the allocation unit from wrapping.
    if put.size_bytes > SEGMENT_SIZE_MAX_BYTES {
        return Err(invalid(format!(
            "object {:?} of {} bytes is larger than any segment can be ({SEGMENT_SIZE_MAX_BYTES} bytes)",
            put.key, put.size_bytes
        )));
    }
    if put.replica_num == 0 || put.replica_num > REPLICA_NUM_MAX {
        return Err(invalid(format!("replica_num {} is outside 1..={REPLICA_NUM_MAX}", put.replica_num)));
    }
    if put.preferred.len() > REPLICA_NUM_MAX as usize {
        return Err(invalid(format!("more than {REPLICA_NUM_MAX} preferred segments")));
    }
    Ok(())
}
