//! [`UcxExports`]: a store node's segments as UCX serves them. Each memory
//! segment is mapped for peers' reads the first time a client asks for
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

use super::error::UcxError;
use super::worker::UcxWorker;
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
    /// How many exports this node made in its life; held while a segment
    /// is exported, so that two first requests for it export it once
    /// (exports are rare: one per segment).
    exports: tokio::sync::Mutex<usize>,
}

impl UcxExports {
    /// Serves segments through `worker`.
    pub fn new(worker: UcxWorker) -> Self {
        Self { worker, exported: Mutex::new(HashMap::new()), exports: tokio::sync::Mutex::new(0) }
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
        if let Some(key) = self.exported_key(id, memory) {
            return Ok(key);
        }
        let mut exports = self.exports.lock().await;
        // Another request may have exported it while this one waited.
        if let Some(key) = self.exported_key(id, memory) {
            return Ok(key);
        }
        if *exports >= EXPORTS_MAX {
            return Err(UcxError::TooManyExports { max: EXPORTS_MAX });
        }
        let owner: super::worker::Owner = memory.clone();
        let (rkey, _kind) = self.worker.export(owner, memory.as_ptr(), len).await?;
        *exports += 1;
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

    /// The key of `id` if it was exported with this very memory.
    fn exported_key(&self, id: SegmentId, memory: &Arc<SegmentMemory>) -> Option<Arc<[u8]>> {
        self.lock().get(&id).filter(|entry| Arc::ptr_eq(&entry.memory, memory)).map(|entry| entry.key.clone())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<SegmentId, Exported>> {
        self.exported.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
