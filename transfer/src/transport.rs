//! The client-facing engine: [`TransferEngine`] picks a backend for each
//! target segment ([`Protocol`]), behind the [`Transport`] trait that every
//! backend implements. [`RemoteSegment`] is what the master tells a client
//! about a replica's segment.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use mooncake_auth::capability::Capability;
use mooncake_segment::{SegmentId, SegmentMemory};

use crate::error::TransferError;
use crate::shm::ShmTransport;
use crate::stats::{EngineStats, TransportKind};
use crate::tcp::{TcpConfig, TcpTransport};

mod batch;
pub use batch::BatchRead;

/// A segment on some store node, as the master describes it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct RemoteSegment {
    /// The segment's id, as the store node registered it.
    pub id: SegmentId,
    /// The store node's transfer server, `host:port`.
    pub endpoint: String,
    /// Identifies the store node's host; equal ids mean shared memory works.
    pub host_id: String,
    /// The segment's `/dev/shm` file, or empty if it has none.
    pub shm_path: String,
    /// Size of the segment in bytes.
    pub size_bytes: u64,
    /// The master's grant for the range being moved (one replica's: WRITE
    /// from PutStart, READ from GetReplicaList), sent with every TCP
    /// request; `None` and the store node refuses. Shared memory needs none.
    pub capability: Option<Capability>,
}

/// Moves bytes between a local buffer and a remote segment. Every backend
/// runs the conformance suite in [`crate::testing`].
pub trait Transport: Send + Sync {
    /// Writes `data` to `[offset, offset + data.len())` of `target`.
    fn write(
        &self,
        target: &RemoteSegment,
        offset: u64,
        data: &[u8],
    ) -> impl Future<Output = Result<(), TransferError>> + Send;

    /// Fills `buf` from `[offset, offset + buf.len())` of `target`.
    fn read(
        &self,
        target: &RemoteSegment,
        offset: u64,
        buf: &mut [u8],
    ) -> impl Future<Output = Result<(), TransferError>> + Send;
}

/// Which backend the engine uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Protocol {
    /// Always TCP.
    Tcp,
    /// Shared memory for same-host targets, TCP otherwise.
    Shm,
    /// RDMA; not compiled in yet, so TCP (with a warning).
    Rdma,
    /// The fastest that works: shared memory on the same host, else TCP.
    Auto,
}

/// A protocol name that is not one of ours.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown transfer protocol {input:?}; expected one of: tcp, shm, rdma, auto")]
pub struct ParseProtocolError {
    /// The text given.
    pub input: String,
}

impl FromStr for Protocol {
    type Err = ParseProtocolError;

    fn from_str(input: &str) -> Result<Self, Self::Err> {
        match input.trim().to_ascii_lowercase().as_str() {
            "tcp" => Ok(Protocol::Tcp),
            "shm" => Ok(Protocol::Shm),
            "rdma" => Ok(Protocol::Rdma),
            "auto" => Ok(Protocol::Auto),
            _ => Err(ParseProtocolError { input: input.to_owned() }),
        }
    }
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Protocol::Tcp => "tcp",
            Protocol::Shm => "shm",
            Protocol::Rdma => "rdma",
            Protocol::Auto => "auto",
        })
    }
}

/// Moves bytes to and from remote segments, by shared memory when the
/// target is on this host and TCP otherwise.
#[derive(Debug)]
pub struct TransferEngine {
    local_host_id: String,
    protocol: Protocol,
    tcp: TcpTransport,
    shm: ShmTransport,
    stats: EngineStats,
}

impl TransferEngine {
    /// An engine for a process on host `local_host_id`. Fails on an invalid
    /// [`TcpConfig`].
    pub fn new(local_host_id: String, protocol: Protocol, tcp: TcpConfig) -> Result<Self, TransferError> {
        if protocol == Protocol::Rdma {
            tracing::warn!(reason = %crate::rdma::unavailable_reason(), "rdma unavailable; falling back to tcp");
        }
        Ok(Self {
            local_host_id,
            protocol,
            tcp: TcpTransport::new(tcp)?,
            shm: ShmTransport::new(),
            stats: EngineStats::default(),
        })
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
        let (kind, result) = match self.shm_route(target) {
            Some(memory) => (TransportKind::Shm, memory.write_at(offset, data).map_err(TransferError::from)),
            None => (TransportKind::Tcp, self.tcp.write(target, offset, data).await),
        };
        self.stats.record(kind, &target.endpoint, true, data.len() as u64, result.is_ok());
        result
    }

    /// Fills `buf` from `[offset, offset + buf.len())` of `target`.
    pub async fn read(&self, target: &RemoteSegment, offset: u64, buf: &mut [u8]) -> Result<(), TransferError> {
        let (kind, result) = match self.shm_route(target) {
            Some(memory) => (TransportKind::Shm, memory.read_at(offset, buf).map_err(TransferError::from)),
            None => (TransportKind::Tcp, self.tcp.read(target, offset, buf).await),
        };
        self.stats.record(kind, &target.endpoint, false, buf.len() as u64, result.is_ok());
        result
    }

    /// [`read`](Self::read) that also returns the crc32c of `buf` (over TCP
    /// computed per chunk as chunks land, overlapping the transfer).
    pub async fn read_checksummed(
        &self,
        target: &RemoteSegment,
        offset: u64,
        buf: &mut [u8],
    ) -> Result<u32, TransferError> {
        if let Some(memory) = self.shm_route(target) {
            return self.read_shm_checksummed(&memory, target, offset, buf);
        }
        let result = self.tcp.read_checksummed(target, offset, buf).await;
        self.stats.record(TransportKind::Tcp, &target.endpoint, false, buf.len() as u64, result.is_ok());
        result
    }

    /// The shared-memory half of [`read_checksummed`](Self::read_checksummed):
    /// copies from `memory`, the mapping of `target`, and checksums the copy.
    fn read_shm_checksummed(
        &self,
        memory: &SegmentMemory,
        target: &RemoteSegment,
        offset: u64,
        buf: &mut [u8],
    ) -> Result<u32, TransferError> {
        let result =
            memory.read_at(offset, buf).map(|()| mooncake_segment::checksum::crc32c(buf)).map_err(TransferError::from);
        self.stats.record(TransportKind::Shm, &target.endpoint, false, buf.len() as u64, result.is_ok());
        result
    }

    /// The target's mapping if shared memory applies and works, else `None`
    /// (use TCP). A mapping that fails is not an error: TCP still reaches it.
    fn shm_route(&self, target: &RemoteSegment) -> Option<Arc<SegmentMemory>> {
        let wants_shm = match self.protocol {
            Protocol::Shm | Protocol::Auto => true,
            Protocol::Tcp | Protocol::Rdma => false,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn protocol_parses_and_names_the_choices() {
        assert_eq!("TCP".parse::<Protocol>(), Ok(Protocol::Tcp));
        assert_eq!(" auto ".parse::<Protocol>(), Ok(Protocol::Auto));
        let err = "infiniband".parse::<Protocol>().unwrap_err();
        assert!(err.to_string().contains("tcp, shm, rdma, auto"), "{err}");
        for p in [Protocol::Tcp, Protocol::Shm, Protocol::Rdma, Protocol::Auto] {
            assert_eq!(p.to_string().parse::<Protocol>(), Ok(p));
        }
    }
}
