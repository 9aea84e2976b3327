//! The client-facing engine: [`TransferEngine`] picks a route for each
//! target segment, by the [`Protocol`] asked for and where the target is:
//! the local route (`local`) for this process's own segments, shared memory
//! (`shm`) for others on this host, TCP (`tcp`) otherwise; with
//! [`Protocol::Ucx`] (or `Rdma` in a `ucx` build) reads of every other
//! segment go one-sided over UCX (`crate::ucx`), writes over TCP. Batched
//! reads live in `batch`.

use std::sync::{Arc, OnceLock};

use mooncake_segment::SegmentMemory;

use crate::error::TransferError;
use crate::local::LocalRoute;
use crate::registry::SegmentRegistry;
use crate::shm::ShmTransport;
use crate::stats::{EngineStats, TransportKind};
use crate::tcp::{TcpConfig, TcpTransport};
use crate::transport::{Protocol, RemoteSegment, Transport};

mod batch;
pub use batch::BatchRead;

/// Moves bytes to and from remote segments: directly when this process
/// serves the target itself ([`route_locally`](Self::route_locally)), by
/// shared memory when the target is on this host, and TCP otherwise.
#[derive(Debug)]
pub struct TransferEngine {
    local_host_id: String,
    protocol: Protocol,
    tcp: TcpTransport,
    shm: ShmTransport,
    local: OnceLock<LocalRoute>,
    #[cfg(feature = "ucx")]
    ucx: Option<crate::ucx::UcxRoute>,
    stats: EngineStats,
}

impl TransferEngine {
    /// An engine for a process on host `local_host_id`. Fails on an invalid
    /// [`TcpConfig`].
    pub fn new(local_host_id: String, protocol: Protocol, tcp: TcpConfig) -> Result<Self, TransferError> {
        #[cfg(feature = "ucx")]
        let ucx = match protocol {
            Protocol::Ucx | Protocol::Rdma => {
                let worker = crate::ucx::UcxWorker::start().map_err(|err| {
                    TransferError::InvalidConfig(format!(
                        "protocol {protocol} needs UCX, which did not start: {err}; check UCX_TLS and the other \
                         UCX_* variables (`ucx_info -d` lists what this host has), or use protocol tcp"
                    ))
                })?;
                Some(crate::ucx::UcxRoute::new(worker))
            }
            _ => None,
        };
        #[cfg(not(feature = "ucx"))]
        match protocol {
            Protocol::Ucx => {
                return Err(TransferError::InvalidConfig(
                    "protocol ucx: this build has no UCX; build with `--features ucx` (needs libucx-dev), or use \
                     protocol tcp"
                        .into(),
                ));
            }
            Protocol::Rdma => {
                // UCX is the RDMA route (docs/TRANSFER.md).
                tracing::warn!(
                    "protocol rdma: this build has no UCX (build with `--features ucx`); falling back to tcp"
                );
            }
            _ => {}
        }
        Ok(Self {
            local_host_id,
            protocol,
            tcp: TcpTransport::new(tcp)?,
            shm: ShmTransport::new(),
            local: OnceLock::new(),
            #[cfg(feature = "ucx")]
            ucx,
            stats: EngineStats::default(),
        })
    }

    /// Reaches the segments of `registry` (this process's own transfer
    /// server's) without a socket from now on, with the server's checks
    /// (`local.rs`). Once per engine: a second call is ignored.
    pub fn route_locally(&self, registry: Arc<SegmentRegistry>) {
        let route = LocalRoute::new(registry, self.tcp.config().request_timeout);
        if self.local.set(route).is_err() {
            tracing::warn!("the engine routes to local segments already; ignoring a second registry");
        }
    }

    /// The local route, if it serves `target`.
    fn local_route(&self, target: &RemoteSegment) -> Option<&LocalRoute> {
        self.local.get().filter(|route| route.serves(target))
    }

    /// Bytes, operations and errors per transport and peer.
    pub fn stats(&self) -> &EngineStats {
        &self.stats
    }

    /// The protocol asked for.
    pub fn protocol(&self) -> Protocol {
        self.protocol
    }

    /// The TCP backend (for its config and pools).
    pub fn tcp(&self) -> &TcpTransport {
        &self.tcp
    }

    /// Writes `data` to `[offset, offset + data.len())` of `target`.
    pub async fn write(&self, target: &RemoteSegment, offset: u64, data: &[u8]) -> Result<(), TransferError> {
        let (kind, result) = if let Some(local) = self.local_route(target) {
            (TransportKind::Local, local.write(target, offset, data).await)
        } else if let Some(memory) = self.shm_route(target) {
            (TransportKind::Shm, memory.write_at(offset, data).map_err(TransferError::from))
        } else {
            (TransportKind::Tcp, self.tcp.write(target, offset, data).await)
        };
        self.stats.record(kind, &target.endpoint, true, data.len() as u64, result.is_ok());
        result
    }

    /// Fills `buf` from `[offset, offset + buf.len())` of `target`.
    pub async fn read(&self, target: &RemoteSegment, offset: u64, buf: &mut [u8]) -> Result<(), TransferError> {
        let (kind, result) = if let Some(local) = self.local_route(target) {
            (TransportKind::Local, local.read(target, offset, buf).await)
        } else if let Some(result) = self.read_ucx(target, offset, buf).await {
            result
        } else if let Some(memory) = self.shm_route(target) {
            (TransportKind::Shm, memory.read_at(offset, buf).map_err(TransferError::from))
        } else {
            (TransportKind::Tcp, self.tcp.read(target, offset, buf).await)
        };
        self.stats.record(kind, &target.endpoint, false, buf.len() as u64, result.is_ok());
        result
    }

    /// A read over the UCX route, if this engine has one: with the route
    /// that carried it (UCX, or TCP where the node serves no UCX).
    #[cfg(feature = "ucx")]
    async fn read_ucx(
        &self,
        target: &RemoteSegment,
        offset: u64,
        buf: &mut [u8],
    ) -> Option<(TransportKind, Result<(), TransferError>)> {
        let route = self.ucx.as_ref()?;
        Some(match route.read(&self.tcp, target, offset, buf).await {
            Ok(true) => (TransportKind::Ucx, Ok(())),
            Ok(false) => (TransportKind::Tcp, Ok(())),
            Err(err) => (TransportKind::Ucx, Err(err)),
        })
    }

    /// Whether reads of `target` go to the UCX route: this engine has one,
    /// and `target`'s node is not known to lack UCX.
    #[cfg(feature = "ucx")]
    fn reads_over_ucx(&self, target: &RemoteSegment) -> bool {
        self.ucx.as_ref().is_some_and(|route| !route.known_unsupported(target.id))
    }

    #[cfg(not(feature = "ucx"))]
    fn reads_over_ucx(&self, _target: &RemoteSegment) -> bool {
        false
    }

    #[cfg(not(feature = "ucx"))]
    async fn read_ucx(
        &self,
        _target: &RemoteSegment,
        _offset: u64,
        _buf: &mut [u8],
    ) -> Option<(TransportKind, Result<(), TransferError>)> {
        None
    }

    /// [`read`](Self::read) that also returns the crc32c of `buf` (over TCP
    /// computed per chunk as chunks land, overlapping the transfer).
    pub async fn read_checksummed(
        &self,
        target: &RemoteSegment,
        offset: u64,
        buf: &mut [u8],
    ) -> Result<u32, TransferError> {
        if let Some(local) = self.local_route(target) {
            let result = local.read(target, offset, buf).await.map(|()| mooncake_segment::checksum::crc32c(buf));
            self.stats.record(TransportKind::Local, &target.endpoint, false, buf.len() as u64, result.is_ok());
            return result;
        }
        if let Some((kind, result)) = self.read_ucx(target, offset, buf).await {
            let result = result.map(|()| mooncake_segment::checksum::crc32c(buf));
            self.stats.record(kind, &target.endpoint, false, buf.len() as u64, result.is_ok());
            return result;
        }
        if let Some(memory) = self.shm_route(target) {
            return self.read_shm_checksummed(&memory, target, offset, buf);
        }
        let result = self.tcp.read_checksummed(target, offset, buf).await;
        self.stats.record(TransportKind::Tcp, &target.endpoint, false, buf.len() as u64, result.is_ok());
        result
    }

    /// The shared-memory half of [`read_checksummed`](Self::read_checksummed):
    /// copies from `memory`, the mapping of `target`, checksumming each piece
    /// as it is copied.
    fn read_shm_checksummed(
        &self,
        memory: &SegmentMemory,
        target: &RemoteSegment,
        offset: u64,
        buf: &mut [u8],
    ) -> Result<u32, TransferError> {
        let result = memory.read_at_checksummed(offset, buf).map_err(TransferError::from);
        self.stats.record(TransportKind::Shm, &target.endpoint, false, buf.len() as u64, result.is_ok());
        result
    }

    /// The target's mapping if shared memory applies and works, else `None`
    /// (use TCP). A mapping that fails is not an error: TCP still reaches it.
    fn shm_route(&self, target: &RemoteSegment) -> Option<Arc<SegmentMemory>> {
        let wants_shm = match self.protocol {
            Protocol::Shm | Protocol::Auto => true,
            Protocol::Tcp | Protocol::Rdma | Protocol::Ucx => false,
        };
        let same_host = !self.local_host_id.is_empty() && target.host_id == self.local_host_id;
        if !wants_shm || !same_host || target.shm_path.is_empty() {
            return None;
        }
        match self.shm.mapping(target) {
            Ok(memory) => Some(memory),
            Err(err) => {
                tracing::debug!(segment = %target.id, "shm route unavailable, using tcp: {err}");
                None
            }
        }
    }
}

impl Transport for TransferEngine {
    async fn write(&self, target: &RemoteSegment, offset: u64, data: &[u8]) -> Result<(), TransferError> {
        TransferEngine::write(self, target, offset, data).await
    }

    async fn read(&self, target: &RemoteSegment, offset: u64, buf: &mut [u8]) -> Result<(), TransferError> {
        TransferEngine::read(self, target, offset, buf).await
    }
}
