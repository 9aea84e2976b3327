//! The store-node role of a client: the memory it contributes (a segment in
//! /dev/shm or anonymous memory), the transfer server that serves it, and the
//! segment's declaration for the masters.

use std::net::SocketAddr;
use std::sync::Arc;

use mooncake_proto::master::{Segment, Tier};
use mooncake_segment::{SegmentId, SegmentMemory};
use mooncake_transfer::{SegmentRegistry, TransferServer};
use tokio::sync::Mutex;

use crate::config::ClientConfig;
use crate::error::ClientError;

pub struct LocalSegment {
    spec: Segment,
    memory: Arc<SegmentMemory>,
    server: Mutex<Option<TransferServer>>,
    addr: SocketAddr,
}

impl LocalSegment {
    /// Allocates the memory (a clear error when the host cannot back it),
    /// starts serving it, and describes it for MountSegment.
    pub async fn start(cfg: &ClientConfig, client_id: u64, size: u64) -> Result<Self, ClientError> {
        let id = SegmentId(rand::random::<u64>() >> 1);
        let memory = if cfg.shm_segment {
            let name = format!("mooncake-{client_id:016x}-{:016x}", id.0);
            SegmentMemory::create_shm(&name, size, cfg.prefault)?
        } else {
            SegmentMemory::anonymous(size, cfg.prefault)?
        };
        let memory = Arc::new(memory);
        let registry = Arc::new(SegmentRegistry::new());
        registry.register(id, memory.clone())?;
        let server = TransferServer::bind(cfg.transfer_listen, registry).await?;
        let addr = server.local_addr();
        let shm_path = memory.shm_path().map(|p| p.display().to_string()).unwrap_or_default();
        let spec = Segment {
            id: id.0,
            size,
            endpoint: format!("{}:{}", cfg.local_hostname, addr.port()),
            host_id: cfg.local_hostname.clone(),
            zone: cfg.zone.clone(),
            tier: Tier::Dram as i32,
            shm_path,
        };
        Ok(LocalSegment { spec, memory, server: Mutex::new(Some(server)), addr })
    }

    /// The declaration sent to the masters.
    pub fn spec(&self) -> Segment {
        self.spec.clone()
    }

    pub fn memory(&self) -> &SegmentMemory {
        &self.memory
    }

    pub fn transfer_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Counters of the transfer server (None once stopped).
    pub async fn server_stats(&self) -> Option<mooncake_transfer::ServerStats> {
        self.server.lock().await.as_ref().map(|s| s.stats())
    }

    pub async fn stop(&self) {
        if let Some(s) = self.server.lock().await.take() {
            s.shutdown().await;
        }
    }
}
