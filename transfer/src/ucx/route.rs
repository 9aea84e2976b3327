//! [`UcxRoute`]: a client's one-sided reads over UCX. The key of a segment
//! (its node's worker address, remote key and base address) is fetched once
//! over the TCP lanes with a UCX_KEY request under the replica's READ grant
//! and cached per segment; a node that answers UNSUPPORTED (or BAD_FRAME:
//! an older node) is read over TCP from then on. A read whose endpoint
//! fails drops the cached key, so a restarted node is asked again.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use mooncake_segment::SegmentId;

use super::error::UcxError;
use super::worker::UcxWorker;
use crate::error::TransferError;
use crate::frame;
use crate::tcp::TcpTransport;
use crate::transport::{RemoteSegment, Transport};

/// Most segment keys cached (one per segment read from).
const KEYS_MAX: usize = 4096;

/// What is known of a segment's UCX key.
#[derive(Clone, Debug)]
enum Known {
    Key {
        worker: Arc<[u8]>,
        rkey: Arc<[u8]>,
        base: u64,
    },
    /// Its node does not serve it over UCX.
    Unsupported,
}

/// The client side of the UCX route.
#[derive(Debug)]
pub(crate) struct UcxRoute {
    worker: UcxWorker,
    keys: Mutex<HashMap<SegmentId, Known>>,
}

impl UcxRoute {
    pub(crate) fn new(worker: UcxWorker) -> Self {
        Self { worker, keys: Mutex::new(HashMap::new()) }
    }

    /// Fills `buf` from `[offset, offset + buf.len())` of `target`: one-sided
    /// over UCX where its node serves it, else over `tcp`. Whether UCX
    /// carried it.
    pub(crate) async fn read(
        &self,
        tcp: &TcpTransport,
        target: &RemoteSegment,
        offset: u64,
        buf: &mut [u8],
    ) -> Result<bool, TransferError> {
        crate::tcp::check_target_range(target, offset, buf.len())?;
        if buf.is_empty() {
            return Ok(true);
        }
        let (worker, rkey, base) = match self.key(tcp, target, offset, buf.len() as u64).await? {
            Known::Key { worker, rkey, base } => (worker, rkey, base),
            Known::Unsupported => {
                tcp.read(target, offset, buf).await?;
                return Ok(false);
            }
        };
        let remote = base.checked_add(offset).ok_or_else(|| TransferError::Protocol {
            endpoint: target.endpoint.clone(),
            reason: format!("UCX key base {base:#x} + offset {offset} overflows"),
        })?;
        let limit = tcp.config().request_timeout;
        let read = self.worker.get(worker, rkey, remote, buf);
        let result = match tokio::time::timeout(limit, read).await {
            Ok(result) => result.map_err(|err| self.failed(target, err)),
            Err(_) => {
                self.forget(target.id);
                Err(TransferError::Timeout {
                    endpoint: target.endpoint.clone(),
                    after_ms: u64::try_from(limit.as_millis()).unwrap_or(u64::MAX),
                })
            }
        };
        result.map(|()| true)
    }

    /// Whether segment `id`'s node answered that it serves no UCX.
    pub(crate) fn known_unsupported(&self, id: SegmentId) -> bool {
        matches!(self.lock().get(&id), Some(Known::Unsupported))
    }

    /// The key of `target`, asked of its node under the READ grant for
    /// `[offset, offset + len)` if not cached.
    async fn key(
        &self,
        tcp: &TcpTransport,
        target: &RemoteSegment,
        offset: u64,
        len: u64,
    ) -> Result<Known, TransferError> {
        if let Some(known) = self.lock().get(&target.id) {
            return Ok(known.clone());
        }
        // The request is admitted like a READ of its range, which one frame
        // caps; a part of a larger read's range is covered by its grant too.
        let len = len.min(crate::frame::FRAME_PAYLOAD_MAX_BYTES);
        let known = match tcp.ucx_key(target, offset, len).await? {
            None => {
                tracing::info!(segment = %target.id, endpoint = %target.endpoint,
                    "store node does not serve this segment over UCX; reading it over TCP");
                Known::Unsupported
            }
            Some(bytes) => {
                let key = frame::decode_ucx_key(&bytes).ok_or_else(|| TransferError::Protocol {
                    endpoint: target.endpoint.clone(),
                    reason: format!("malformed UCX key ({} bytes)", bytes.len()),
                })?;
                Known::Key { worker: key.worker.into(), rkey: key.rkey.into(), base: key.base }
            }
        };
        let mut keys = self.lock();
        if keys.len() >= KEYS_MAX
            && let Some(victim) = keys.keys().next().copied()
        {
            keys.remove(&victim);
        }
        keys.insert(target.id, known.clone());
        Ok(known)
    }

    /// Maps a failed read to the TCP route's error for the same failure, and
    /// forgets the segment's key (its node may have restarted).
    fn failed(&self, target: &RemoteSegment, err: UcxError) -> TransferError {
        self.forget(target.id);
        TransferError::PeerGone { endpoint: target.endpoint.clone(), source: std::io::Error::other(err) }
    }

    fn forget(&self, id: SegmentId) {
        self.lock().remove(&id);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<SegmentId, Known>> {
        self.keys.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
