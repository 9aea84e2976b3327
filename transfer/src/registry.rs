//! The segments a store node serves: [`SegmentRegistry`] maps a
//! [`SegmentId`] to the memory that holds its bytes.

use std::collections::HashMap;
use std::sync::{Arc, PoisonError, RwLock};

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
    segments: RwLock<HashMap<SegmentId, Arc<SegmentMemory>>>,
}

impl SegmentRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Serves `memory` as segment `id`.
    pub fn register(&self, id: SegmentId, memory: Arc<SegmentMemory>) -> Result<(), TransferError> {
        let mut segments = self.segments.write().unwrap_or_else(PoisonError::into_inner);
        if segments.contains_key(&id) {
            return Err(TransferError::DuplicateSegment { id });
        }
        if segments.len() >= REGISTRY_SEGMENTS_MAX {
            return Err(TransferError::TooManySegments { max: REGISTRY_SEGMENTS_MAX });
        }
        segments.insert(id, memory);
        Ok(())
    }

    /// Stops serving segment `id`; returns its memory if it was registered.
    /// Requests already running keep their own reference until they finish.
    pub fn unregister(&self, id: SegmentId) -> Option<Arc<SegmentMemory>> {
        self.segments.write().unwrap_or_else(PoisonError::into_inner).remove(&id)
    }

    /// The memory of segment `id`, if registered.
    pub fn lookup(&self, id: SegmentId) -> Option<Arc<SegmentMemory>> {
        self.segments.read().unwrap_or_else(PoisonError::into_inner).get(&id).cloned()
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
        assert!(registry.unregister(SegmentId(1)).is_some());
        assert!(registry.is_empty());
    }
}
