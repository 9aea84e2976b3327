//! The segments a store node serves: [`SegmentRegistry`] maps a
//! [`SegmentId`] to what holds its bytes ([`Backing`]: mapped memory, or a
//! disk segment file) and the key its requests' capabilities are checked
//! with.
//!
//! A segment is registered before it is mounted (the master must be told
//! where it is served), but its key comes in the mount's answer
//! ([`SegmentRegistry::set_key`]): until then the server refuses every
//! request for it. Each segment also holds its arena fence (`fence.rs`):
//! which arenas its WRITEs may still name, installed from the masters'
//! answers ([`SegmentRegistry::install_fence`]) and acknowledged back
//! ([`SegmentRegistry::fence_acks`]).

use std::collections::HashMap;
use std::sync::{Arc, PoisonError, RwLock};

use mooncake_auth::capability::SegmentKey;
use mooncake_segment::{DiskSegment, SegmentId, SegmentMemory};

use crate::error::TransferError;
use crate::fence::{Fence, SharedFence};

/// Most segments one node serves. A node mounts a handful (one per NUMA node
/// or device); the cap keeps a misbehaving mount loop from growing the map
/// without bound.
pub const REGISTRY_SEGMENTS_MAX: usize = 1024;

/// Segments served by this node. Lookups are frequent (one per request) and
/// changes rare (mount/unmount), hence the read-write lock.
#[derive(Debug, Default)]
pub struct SegmentRegistry {
    segments: RwLock<HashMap<SegmentId, Served>>,
    /// Disk ranges a READ found corrupt, not yet reported to the masters
    /// (the store node's heartbeat takes them: [`SegmentRegistry::take_corrupt`]).
    corrupt: std::sync::Mutex<Vec<(SegmentId, u64, u64)>>,
    /// Set when this node serves its memory segments over UCX too.
    #[cfg(feature = "ucx")]
    ucx: std::sync::OnceLock<Arc<crate::ucx::UcxExports>>,
}

/// Corrupt ranges kept for the next report at most (a disk failing
/// everywhere needs an operator, not a longer list).
pub const CORRUPT_PENDING_MAX: usize = 4096;

/// What holds a served segment's bytes.
#[derive(Clone, Debug)]
pub enum Backing {
    /// DRAM: an anonymous or `/dev/shm` mapping; bytes move between the
    /// socket and the mapping directly.
    Memory(Arc<SegmentMemory>),
    /// SSD: a disk segment file; bytes move in chunks through its aligned
    /// buffers, with O_DIRECT and per-block checksums.
    Disk(Arc<DiskSegment>),
}

impl Backing {
    /// Size of the segment's data in bytes.
    pub fn size_bytes(&self) -> u64 {
        match self {
            Backing::Memory(memory) => memory.len(),
            Backing::Disk(disk) => disk.data_bytes(),
        }
    }
}

/// One registered segment.
#[derive(Debug)]
struct Served {
    backing: Backing,
    /// `None` until the mount's answer brings it: every request is refused.
    key: Option<Arc<SegmentKey>>,
    /// Which arenas its WRITEs may name.
    fence: SharedFence,
}

impl SegmentRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Notes that `len` bytes at `offset` of disk segment `id` failed
    /// verification (kept once, at most [`CORRUPT_PENDING_MAX`]).
    pub fn note_corrupt(&self, id: SegmentId, offset: u64, len: u64) {
        let mut corrupt = self.corrupt.lock().unwrap_or_else(PoisonError::into_inner);
        if corrupt.len() < CORRUPT_PENDING_MAX && !corrupt.contains(&(id, offset, len)) {
            corrupt.push((id, offset, len));
        }
    }

    /// Serves this registry's memory segments over UCX too, through
    /// `exports` (UCX_KEY requests; `crate::ucx`). Once: a second call is
    /// ignored and returns false.
    #[cfg(feature = "ucx")]
    pub fn serve_ucx(&self, exports: Arc<crate::ucx::UcxExports>) -> bool {
        self.ucx.set(exports).is_ok()
    }

    /// The UCX exports, when this node serves UCX.
    #[cfg(feature = "ucx")]
    pub(crate) fn ucx(&self) -> Option<&Arc<crate::ucx::UcxExports>> {
        self.ucx.get()
    }

    /// The corrupt ranges noted since the last call.
    pub fn take_corrupt(&self) -> Vec<(SegmentId, u64, u64)> {
        std::mem::take(&mut *self.corrupt.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// Serves `memory` as segment `id`, refusing every request until
    /// [`set_key`](Self::set_key) gives it its key.
    pub fn register(&self, id: SegmentId, memory: Arc<SegmentMemory>) -> Result<(), TransferError> {
        self.insert(id, Backing::Memory(memory))
    }

    /// Serves the disk segment `disk` as segment `id`, refusing every
    /// request until [`set_key`](Self::set_key) gives it its key.
    pub fn register_disk(&self, id: SegmentId, disk: Arc<DiskSegment>) -> Result<(), TransferError> {
        self.insert(id, Backing::Disk(disk))
    }

    fn insert(&self, id: SegmentId, backing: Backing) -> Result<(), TransferError> {
        let mut segments = self.segments.write().unwrap_or_else(PoisonError::into_inner);
        if segments.contains_key(&id) {
            return Err(TransferError::DuplicateSegment { id });
        }
        if segments.len() >= REGISTRY_SEGMENTS_MAX {
            return Err(TransferError::TooManySegments { max: REGISTRY_SEGMENTS_MAX });
        }
        segments.insert(id, Served { backing, key: None, fence: SharedFence::default() });
        Ok(())
    }

    /// Serves the disk segment registered as `old_id` under `new_id` instead,
    /// for a remount after the masters forgot it: registers it under
    /// `new_id` (without a key, like any new registration), rewrites the id
    /// in its file header (durably), then stops serving `old_id`, whose
    /// requests get UNKNOWN_SEGMENT from then on. On error nothing changed.
    /// Blocking: one 4 KiB write and an fdatasync.
    pub fn renew_disk(&self, old_id: SegmentId, new_id: SegmentId) -> Result<Arc<DiskSegment>, TransferError> {
        let Some(Backing::Disk(disk)) = self.lookup_backing(old_id) else {
            return Err(TransferError::UnknownSegment { id: old_id });
        };
        self.register_disk(new_id, disk.clone())?;
        if let Err(err) = disk.renew(new_id) {
            self.unregister(new_id);
            return Err(TransferError::Disk(err));
        }
        self.unregister(old_id);
        Ok(disk)
    }

    /// Checks the capabilities of requests for segment `id` with `key` from
    /// now on (the key the master sent in its mount answer).
    pub fn set_key(&self, id: SegmentId, key: SegmentKey) -> Result<(), TransferError> {
        let mut segments = self.segments.write().unwrap_or_else(PoisonError::into_inner);
        let served = segments.get_mut(&id).ok_or(TransferError::UnknownSegment { id })?;
        served.key = Some(Arc::new(key));
        Ok(())
    }

    /// Installs `fence` for segment `id` if it is newer than the one held
    /// (the masters' mount, Ping and TakeCopies answers carry it); whether
    /// it was.
    pub fn install_fence(&self, id: SegmentId, fence: Fence) -> Result<bool, TransferError> {
        let segments = self.segments.read().unwrap_or_else(PoisonError::into_inner);
        let served = segments.get(&id).ok_or(TransferError::UnknownSegment { id })?;
        Ok(served.fence.install(fence))
    }

    /// For each segment, the fence version it can acknowledge to the
    /// masters: the one it holds, once no WRITE under an arena that fence
    /// excludes is still in flight (segments still waiting for one are
    /// left out).
    pub fn fence_acks(&self) -> Vec<(SegmentId, u64)> {
        let segments = self.segments.read().unwrap_or_else(PoisonError::into_inner);
        segments.iter().filter_map(|(id, s)| s.fence.ackable().filter(|v| *v > 0).map(|v| (*id, v))).collect()
    }

    /// Whether segment `id` is registered and has its key.
    pub fn has_key(&self, id: SegmentId) -> bool {
        self.segments.read().unwrap_or_else(PoisonError::into_inner).get(&id).is_some_and(|s| s.key.is_some())
    }

    /// Stops serving segment `id`; returns what held its bytes if it was
    /// registered. Requests already running keep their own reference until
    /// they finish.
    pub fn unregister(&self, id: SegmentId) -> Option<Backing> {
        self.segments.write().unwrap_or_else(PoisonError::into_inner).remove(&id).map(|s| s.backing)
    }

    /// The memory of segment `id`, if it is registered as a memory segment.
    pub fn lookup(&self, id: SegmentId) -> Option<Arc<SegmentMemory>> {
        match self.lookup_backing(id)? {
            Backing::Memory(memory) => Some(memory),
            Backing::Disk(_) => None,
        }
    }

    /// What holds the bytes of segment `id`, if registered.
    pub fn lookup_backing(&self, id: SegmentId) -> Option<Backing> {
        self.segments.read().unwrap_or_else(PoisonError::into_inner).get(&id).map(|s| s.backing.clone())
    }

    /// What holds the bytes of segment `id`, its key (`None` while it has
    /// none) and its fence, if registered: what the server needs for one
    /// request.
    pub(crate) fn lookup_with_key(&self, id: SegmentId) -> Option<(Backing, Option<Arc<SegmentKey>>, SharedFence)> {
        let segments = self.segments.read().unwrap_or_else(PoisonError::into_inner);
        segments.get(&id).map(|s| (s.backing.clone(), s.key.clone(), s.fence.clone()))
    }

    /// Number of registered segments.
    pub fn len(&self) -> usize {
        self.segments.read().unwrap_or_else(PoisonError::into_inner).len()
    }

    /// Whether no segment is registered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn register_lookup_unregister() {
        let registry = SegmentRegistry::new();
        let memory = Arc::new(SegmentMemory::anonymous(4096, false).unwrap());
        registry.register(SegmentId(1), memory.clone()).unwrap();
        assert!(matches!(registry.register(SegmentId(1), memory), Err(TransferError::DuplicateSegment { .. })));
        assert_eq!(registry.lookup(SegmentId(1)).map(|m| m.len()), Some(4096));
        assert!(registry.lookup(SegmentId(2)).is_none());
        assert!(!registry.has_key(SegmentId(1)), "no key until the mount's answer");
        registry.set_key(SegmentId(1), SegmentKey::new(&[1; 32])).unwrap();
        assert!(registry.has_key(SegmentId(1)));
        let unknown = registry.set_key(SegmentId(2), SegmentKey::new(&[1; 32]));
        assert!(matches!(unknown, Err(TransferError::UnknownSegment { .. })));
        assert!(registry.unregister(SegmentId(1)).is_some());
        assert!(registry.is_empty());
    }
}
