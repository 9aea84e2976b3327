//! The same-host backend: [`ShmTransport`] maps a target segment's
//! `/dev/shm` file once and copies with `memcpy`, no socket involved.
//!
//! A mapping is cached per path together with the file's identity (device
//! and inode). Every use re-checks the path with one `stat`: a store node that
//! restarted re-creates its file under the same name, and a write into the
//! old, unlinked mapping would be lost without a trace. A path that no longer
//! exists drops its cached mapping, so a removed segment's memory is given
//! back to the host instead of staying mapped here.

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use mooncake_segment::{FileIdentity, SegmentMemory};

use crate::error::TransferError;
use crate::transport::{RemoteSegment, Transport};

/// Most segment files kept mapped. A host runs a few store nodes with a few
/// segments each; the cap bounds address space held by stale mappings.
pub const SHM_MAPPINGS_MAX: usize = 256;

/// Copies to and from segments of other processes on this host.
#[derive(Debug, Default)]
pub struct ShmTransport {
    mappings: Mutex<HashMap<PathBuf, Arc<SegmentMemory>>>,
}

impl ShmTransport {
    /// A transport with no mappings yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// The mapping of `target`'s shm file, made on first use and re-made when
    /// the file was re-created. Fails if the file is missing, has another size
    /// than `target.size_bytes`, or cannot be mapped.
    pub fn mapping(&self, target: &RemoteSegment) -> Result<Arc<SegmentMemory>, TransferError> {
        let path = Path::new(&target.shm_path);
        let unavailable = |reason: String| TransferError::ShmUnavailable { path: path.to_path_buf(), reason };
        if target.shm_path.is_empty() {
            return Err(unavailable("the segment has no shm file".to_owned()));
        }
        let mut mappings = self.mappings.lock().unwrap_or_else(PoisonError::into_inner);
        let current = match std::fs::metadata(path) {
            Ok(current) => current,
            Err(err) => {
                // The file was removed or renamed (its store node stopped,
                // restarted, or renewed its segment): drop our mapping too,
                // or it would pin the dead segment's tmpfs memory.
                mappings.remove(path);
                return Err(unavailable(err.to_string()));
            }
        };
        let identity = FileIdentity { dev: current.dev(), ino: current.ino() };
        if let Some(memory) = mappings.get(path)
            && memory.file_identity() == Some(identity)
            && memory.len() == target.size_bytes
        {
            return Ok(memory.clone());
        }
        mappings.remove(path);
        let memory =
            Arc::new(SegmentMemory::open_shm(path, target.size_bytes).map_err(|e| unavailable(e.to_string()))?);
        if mappings.len() >= SHM_MAPPINGS_MAX
            && let Some(victim) = mappings.keys().next().cloned()
        {
            mappings.remove(&victim);
        }
        mappings.insert(path.to_path_buf(), memory.clone());
        Ok(memory)
    }

    /// Number of cached mappings.
    pub fn mapped_count(&self) -> usize {
        self.mappings.lock().unwrap_or_else(PoisonError::into_inner).len()
    }
}

impl Transport for ShmTransport {
    /// Bounds-checked copy into the mapped segment. The copy runs on the
    /// calling task (about 0.5 ms per 4 MiB); there is nothing to wait for.
    async fn write(&self, target: &RemoteSegment, offset: u64, data: &[u8]) -> Result<(), TransferError> {
        self.mapping(target)?.write_at(offset, data)?;
        Ok(())
    }

    async fn read(&self, target: &RemoteSegment, offset: u64, buf: &mut [u8]) -> Result<(), TransferError> {
        self.mapping(target)?.read_at(offset, buf)?;
        Ok(())
    }
}
