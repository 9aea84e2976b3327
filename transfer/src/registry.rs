//! The segments a store node serves: [`SegmentRegistry`] maps a
//! [`SegmentId`] to the memory that holds its bytes and the key its
//! requests' capabilities are checked with.
//!
//! A segment is registered before it is mounted (the master must be told
//! where it is served), but its key comes in the mount's answer
//! ([`SegmentRegistry::set_key`]): until then the server refuses every
//! request for it.

use std::collections::HashMap;
use std::sync::{Arc, PoisonError, RwLock};

use mooncake_auth::capability::SegmentKey;
use mooncake_segment::{SegmentId, SegmentMemory};

use crate::error::TransferError;

/// Most segments one node serves. A node mounts a handful (one per NUMA node
/// or device); the cap keeps a misbehaving mount loop from growing the map
/// without bound.
pub const REGISTRY_SEGMENTS_MAX: usize = 1024;

/// Segments served by this node. Lookups are frequent (one per request) and
/// changes rare (mount/unmount), hence the read-write lock.
#[derive(Debug, Default)]
pub struct SegmentRegistry {
    segments: RwLock<HashMap<SegmentId, Served>>,
}

/// One registered segment.
#[derive(Debug)]
struct Served {
    memory: Arc<SegmentMemory>,
    /// `None` until the mount's answer brings it: every request is refused.
    key: Option<Arc<SegmentKey>>,
}

impl SegmentRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Serves `memory` as segment `id`, refusing every request until
    /// [`set_key`](Self::set_key) gives it its key.
    pub fn register(&self, id: SegmentId, memory: Arc<SegmentMemory>) -> Result<(), TransferError> {
        let mut segments = self.segments.write().unwrap_or_else(PoisonError::into_inner);
        if segments.contains_key(&id) {
            return Err(TransferError::DuplicateSegment { id });
        }
        if segments.len() >= REGISTRY_SEGMENTS_MAX {
            return Err(TransferError::TooManySegments { max: REGISTRY_SEGMENTS_MAX });
        }
        segments.insert(id, Served { memory, key: None });
        Ok(())
    }

    /// Checks the capabilities of requests for segment `id` with `key` from
    /// now on (the key the master sent in its mount answer).
    pub fn set_key(&self, id: SegmentId, key: SegmentKey) -> Result<(), TransferError> {
        let mut segments = self.segments.write().unwrap_or_else(PoisonError::into_inner);
        let served = segments.get_mut(&id).ok_or(TransferError::UnknownSegment { id })?;
        served.key = Some(Arc::new(key));
        Ok(())
    }

    /// Whether segment `id` is registered and has its key.
    pub fn has_key(&self, id: SegmentId) -> bool {
        self.segments.read().unwrap_or_else(PoisonError::into_inner).get(&id).is_some_and(|s| s.key.is_some())
    }

    /// Stops serving segment `id`; returns its memory if it was registered.
    /// Requests already running keep their own reference until they finish.
    pub fn unregister(&self, id: SegmentId) -> Option<Arc<SegmentMemory>> {
        self.segments.write().unwrap_or_else(PoisonError::into_inner).remove(&id).map(|s| s.memory)
    }

    /// The memory of segment `id`, if registered.
    pub fn lookup(&self, id: SegmentId) -> Option<Arc<SegmentMemory>> {
        self.segments.read().unwrap_or_else(PoisonError::into_inner).get(&id).map(|s| s.memory.clone())
    }

    /// The memory of segment `id` and its key (`None` while it has none), if
    /// registered: what the server needs for one request.
    pub(crate) fn lookup_with_key(&self, id: SegmentId) -> Option<(Arc<SegmentMemory>, Option<Arc<SegmentKey>>)> {
        let segments = self.segments.read().unwrap_or_else(PoisonError::into_inner);
        segments.get(&id).map(|s| (s.memory.clone(), s.key.clone()))
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
