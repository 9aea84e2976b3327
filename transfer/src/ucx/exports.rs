//! [`UcxExports`]: a store node's segments as UCX serves them. Each memory
//! segment is mapped read-only for peers the first time a client asks for
//! its key; the answer to UCX_KEY is [`crate::frame::UcxKey`] encoded.
//!
//! An exported segment stays mapped, and its memory alive, until the
//! node's UCX worker stops (at exit), even after the registry stops serving
//! it: a client may hold its key for ever, and where UCX emulates RMA (TCP,
//! shared memory) this node's worker serves such a client's read itself
//! (`UcxWorker::export`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use mooncake_segment::{SegmentId, SegmentMemory};

use super::worker::{UcxError, UcxWorker};
use crate::frame::{self, UcxKey};

/// Most segments exported in a node's life: a node serves a handful, and
/// exports are never unmapped (module doc).
const EXPORTS_MAX: usize = 4 * crate::registry::REGISTRY_SEGMENTS_MAX;

/// One mapped segment.
#[derive(Debug)]
struct Exported {
    /// Which memory was exported (the worker keeps it alive).
    memory: Arc<SegmentMemory>,
    key: Arc<[u8]>,
}

/// The segments a store node serves over UCX, and its worker.
#[derive(Debug)]
pub struct UcxExports {
    worker: UcxWorker,
    exported: Mutex<HashMap<SegmentId, Exported>>,
}

impl UcxExports {
    /// Serves segments through `worker`.
    pub fn new(worker: UcxWorker) -> Self {
        Self { worker, exported: Mutex::new(HashMap::new()) }
    }

    /// The worker.
    pub fn worker(&self) -> &UcxWorker {
        &self.worker
    }

    /// The encoded key of segment `id`, whose memory the registry serves as
    /// `memory`: mapped now if it was not (or if the segment's memory
    /// changed since).
    pub(crate) async fn key(&self, id: SegmentId, memory: &Arc<SegmentMemory>) -> Result<Arc<[u8]>, UcxError> {
        let len = usize::try_from(memory.len()).map_err(|_| UcxError::BadBlob { what: "segment", len: usize::MAX })?;
        {
            let exported = self.lock();
            if let Some(entry) = exported.get(&id)
                && Arc::ptr_eq(&entry.memory, memory)
            {
                return Ok(entry.key.clone());
            }
            if exported.len() >= EXPORTS_MAX && !exported.contains_key(&id) {
                return Err(UcxError::TooManyExports { max: EXPORTS_MAX });
            }
        }
        // Exported outside the lock; of two first requests racing, both
        // exports stand (the same memory mapped twice) and one key is kept.
        let owner: super::worker::Owner = memory.clone();
        let (rkey, _kind) = self.worker.export(owner, memory.as_ptr(), len).await?;
        let key: Arc<[u8]> = frame::encode_ucx_key(&UcxKey {
            worker: self.worker.address().to_vec(),
            rkey,
            base: memory.as_ptr() as u64,
        })
        .into();
        tracing::debug!(segment = %id, bytes = len, "segment exported for UCX reads");
        self.lock().insert(id, Exported { memory: memory.clone(), key: key.clone() });
        Ok(key)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<SegmentId, Exported>> {
        self.exported.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
