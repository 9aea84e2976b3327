//! Test support shared by the transfer engine's integration tests: a store
//! node (one segment, a registry, a real `TransferServer` on 127.0.0.1:0).

#![allow(dead_code)]

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use mooncake_segment::{SegmentId, SegmentMemory};
use mooncake_transfer::{RemoteSegment, SegmentRegistry, ServerConfig, TransferServer};

/// The host id every test node claims.
pub const HOST_ID: &str = "test-host";

static NEXT: AtomicU64 = AtomicU64::new(0);

/// A unique /dev/shm name for this process and call.
pub fn shm_name(tag: &str) -> String {
    format!("mooncake-transfer-test-{tag}-{}-{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed))
}

/// One store node serving one segment.
pub struct Node {
    pub server: TransferServer,
    pub registry: Arc<SegmentRegistry>,
    pub memory: Arc<SegmentMemory>,
    pub target: RemoteSegment,
}

impl Node {
    /// A node whose segment of `size_bytes` is anonymous memory.
    pub async fn anonymous(size_bytes: u64) -> Node {
        Self::with_memory(SegmentMemory::anonymous(size_bytes, true).unwrap()).await
    }

    /// A node whose segment lives in /dev/shm (removed when the node drops).
    pub async fn shm(tag: &str, size_bytes: u64) -> Node {
        Self::with_memory(SegmentMemory::create_shm(&shm_name(tag), size_bytes, true).unwrap()).await
    }

    /// A node with an anonymous segment served under `config`.
    pub async fn anonymous_with(size_bytes: u64, config: ServerConfig) -> Node {
        Self::with_memory_and_config(SegmentMemory::anonymous(size_bytes, true).unwrap(), config).await
    }

    async fn with_memory(memory: SegmentMemory) -> Node {
        Self::with_memory_and_config(memory, ServerConfig::default()).await
    }

    async fn with_memory_and_config(memory: SegmentMemory, config: ServerConfig) -> Node {
        let memory = Arc::new(memory);
        let registry = Arc::new(SegmentRegistry::new());
        let id = SegmentId(0x5E6 + NEXT.fetch_add(1, Ordering::Relaxed));
        registry.register(id, memory.clone()).unwrap();
        let server =
            TransferServer::bind_with_config("127.0.0.1:0".parse().unwrap(), registry.clone(), config).await.unwrap();
        let target = RemoteSegment {
            id,
            endpoint: server.local_addr().to_string(),
            host_id: HOST_ID.to_owned(),
            shm_path: memory.shm_path().map(|p| p.display().to_string()).unwrap_or_default(),
            size_bytes: memory.len(),
        };
        Node { server, registry, memory, target }
    }

    /// The same endpoint, naming a segment the node does not serve.
    pub fn unknown_target(&self) -> RemoteSegment {
        RemoteSegment {
            id: SegmentId(u64::MAX - 1),
            shm_path: "/dev/shm/mooncake-transfer-test-no-such-segment".to_owned(),
            ..self.target.clone()
        }
    }
}

/// A peer that accepts connections and never answers: its address and the
/// task holding the connections (abort it to let them go).
pub async fn hung_peer() -> (String, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let endpoint = listener.local_addr().unwrap().to_string();
    let hold = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((stream, _)) = listener.accept().await {
            held.push(stream);
        }
    });
    (endpoint, hold)
}
