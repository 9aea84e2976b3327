//! The local route: segments this process serves itself (its own transfer
//! server's registry), reached without a socket. A store node's copies
//! (offload to its own disk, promotion back to its own memory) and the
//! reads and writes of a client that is also a store node take it.
//!
//! It admits a request exactly as the server does (`access.rs`: registered,
//! in range, capability, disk block rules) and answers a refusal or a disk
//! error with the same status, as a [`TransferError`] a caller cannot tell
//! from the server's answer. Disk bytes move in chunks of at most
//! [`DISK_IO_CHUNK_BYTES`] through the segment's aligned buffers, two
//! chunks in flight; a read verifies every block and notes a corrupt range
//! for the store node to report, as the server does; a write is durable
//! when it returns `Ok`. The whole request runs under the engine's request
//! timeout, as a TCP request does.

use std::sync::Arc;
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use mooncake_auth::capability::Access;
use mooncake_segment::{DISK_IO_CHUNK_BYTES, DiskError, DiskSegment};

use crate::access::{self, Admitted, Asked};
use crate::error::TransferError;
use crate::frame::Status;
use crate::registry::{Backing, SegmentRegistry};
use crate::transport::RemoteSegment;

/// Disk chunks of one request in flight at once (the segment's buffer pool
/// is shared with the server's connections: each holds at most two too).
const CHUNKS_IN_FLIGHT: usize = 2;

/// This process's own segments, reached directly.
#[derive(Debug)]
pub(crate) struct LocalRoute {
    registry: Arc<SegmentRegistry>,
    timeout: Duration,
}

impl LocalRoute {
    pub(crate) fn new(registry: Arc<SegmentRegistry>, timeout: Duration) -> Self {
        LocalRoute { registry, timeout }
    }

    /// Whether `target` is one of this process's segments.
    pub(crate) fn serves(&self, target: &RemoteSegment) -> bool {
        self.registry.lookup_backing(target.id).is_some()
    }

    /// Writes `data` to `[offset, offset + data.len())` of `target`.
    pub(crate) async fn write(&self, target: &RemoteSegment, offset: u64, data: &[u8]) -> Result<(), TransferError> {
        let Admitted { backing, writing: _writing } = self.admit(target, offset, data.len(), Access::Write)?;
        self.in_time(target, async {
            match backing {
                Backing::Memory(memory) => Ok(memory.write_at(offset, data)?),
                Backing::Disk(disk) => write_disk(&disk, offset, data).await.map_err(|e| self.disk_failed(target, e)),
            }
        })
        .await
    }

    /// Fills `buf` from `[offset, offset + buf.len())` of `target`.
    pub(crate) async fn read(&self, target: &RemoteSegment, offset: u64, buf: &mut [u8]) -> Result<(), TransferError> {
        let Admitted { backing, .. } = self.admit(target, offset, buf.len(), Access::Read)?;
        self.in_time(target, async {
            match backing {
                Backing::Memory(memory) => Ok(memory.read_at(offset, buf)?),
                Backing::Disk(disk) => read_disk(&disk, offset, buf).await.map_err(|e| self.disk_failed(target, e)),
            }
        })
        .await
    }

    fn admit(
        &self,
        target: &RemoteSegment,
        offset: u64,
        len: usize,
        access: Access,
    ) -> Result<Admitted, TransferError> {
        let capability = target.capability.map(|c| c.encode());
        let asked = Asked {
            segment: target.id,
            offset,
            len: len as u64,
            access,
            capability: capability.as_ref().map_or(&[][..], |c| &c[..]),
        };
        match access::admit(&self.registry, &asked) {
            Ok(admitted) => Ok(admitted),
            Err(why) => {
                tracing::debug!(segment = %target.id, offset, len, ?access, "local transfer refused: {why}");
                Err(TransferError::Remote { status: why.status(), endpoint: target.endpoint.clone() })
            }
        }
    }

    /// The error a disk failure answers, the corrupt range noted for the
    /// store node's next report.
    fn disk_failed(&self, target: &RemoteSegment, err: DiskError) -> TransferError {
        let endpoint = target.endpoint.clone();
        match access::disk_status(&err) {
            Status::Corrupt => {
                if let DiskError::Corrupt { offset, len } = err {
                    self.registry.note_corrupt(target.id, offset, len);
                }
                tracing::warn!(segment = %target.id, "local disk read answered CORRUPT: {err}");
                TransferError::Corrupt { endpoint }
            }
            status => {
                tracing::error!(segment = %target.id, "local disk segment transfer failed: {err}");
                TransferError::Remote { status, endpoint }
            }
        }
    }

    async fn in_time<T>(
        &self,
        target: &RemoteSegment,
        op: impl Future<Output = Result<T, TransferError>>,
    ) -> Result<T, TransferError> {
        match tokio::time::timeout(self.timeout, op).await {
            Ok(result) => result,
            Err(_) => Err(TransferError::Timeout {
                endpoint: target.endpoint.clone(),
                after_ms: u64::try_from(self.timeout.as_millis()).unwrap_or(u64::MAX),
            }),
        }
    }
}

/// The disk offset of chunk `index` of a request at `offset`.
fn chunk_offset(offset: u64, index: usize) -> u64 {
    offset + (index * DISK_IO_CHUNK_BYTES) as u64
}

/// Reads `buf.len()` bytes at `offset` of `disk`, verified: each chunk is
/// read into its own piece of `buf`.
async fn read_disk(disk: &DiskSegment, offset: u64, buf: &mut [u8]) -> Result<(), DiskError> {
    let reads: Vec<_> = buf
        .chunks_mut(DISK_IO_CHUNK_BYTES)
        .enumerate()
        .map(|(index, piece)| async move {
            let read = disk.read(chunk_offset(offset, index), piece.len()).await?;
            piece.copy_from_slice(read.as_slice());
            Ok(())
        })
        .collect();
    futures::stream::iter(reads).buffered(CHUNKS_IN_FLIGHT).try_collect().await
}

/// Writes `data` at `offset` of `disk` (a block boundary), durably.
async fn write_disk(disk: &DiskSegment, offset: u64, data: &[u8]) -> Result<(), DiskError> {
    let writes: Vec<_> = data
        .chunks(DISK_IO_CHUNK_BYTES)
        .enumerate()
        .map(|(index, piece)| async move {
            let mut buf = disk.buffer(piece.len()).await?;
            buf.as_mut_slice().copy_from_slice(piece);
            disk.write(chunk_offset(offset, index), buf).await
        })
        .collect();
    futures::stream::iter(writes).buffered(CHUNKS_IN_FLIGHT).try_collect().await
}
