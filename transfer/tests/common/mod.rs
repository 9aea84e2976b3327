//! Test support shared by the transfer engine's integration tests: a store
//! node (one segment with its capability key, a registry, a real
//! `TransferServer` on 127.0.0.1:0) serving memory ([`Node`]) or a disk
//! segment file ([`DiskNode`]), capabilities for it, signed as a master
//! would, raw request headers carrying them, and clients.
// Test support: a failed unwrap or expect is the test failing (the
// workspace denies them in library code: Cargo.toml [workspace.lints]).
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(dead_code)]

use std::os::unix::fs::FileExt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use mooncake_auth::capability::{self, Access, Capability, Requested, SegmentKey};
use mooncake_segment::{BackendChoice, ClientId, DiskSegment, SegmentId, SegmentMemory};
use mooncake_transfer::frame::{self, Op, REQUEST_HEADER_BYTES, RequestHeader};
use mooncake_transfer::testing::Fixture;
use mooncake_transfer::{
    RemoteSegment, SegmentRegistry, ServerConfig, TcpConfig, TcpTransport, TransferServer, Transport,
};

/// The host id every test node claims.
pub const HOST_ID: &str = "test-host";

/// The capability key of every test node's segment (what a master would
/// send in its mount answer).
pub const KEY_BYTES: [u8; 32] = [0x6B; 32];

/// How long the test capabilities live.
pub const CAPABILITY_TTL_MS: u64 = 60_000;

/// Now, in unix ms, on this host's clock.
pub fn unix_ms_now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as u64
}

/// A capability for `access` to `[offset, offset + len)` of `segment`,
/// under the test key, valid for [`CAPABILITY_TTL_MS`].
pub fn grant(segment: SegmentId, offset: u64, len: u64, access: Access) -> Capability {
    grant_until(segment, offset, len, access, unix_ms_now() + CAPABILITY_TTL_MS)
}

/// [`grant`] expiring at `expires_unix_ms`.
pub fn grant_until(segment: SegmentId, offset: u64, len: u64, access: Access, expires_unix_ms: u64) -> Capability {
    let requested = Requested { segment_id: segment.0, offset, len, access };
    capability::issue(&SegmentKey::new(&KEY_BYTES), &requested, expires_unix_ms)
}

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
        registry.set_key(id, SegmentKey::new(&KEY_BYTES)).unwrap();
        let server =
            TransferServer::bind_with_config("127.0.0.1:0".parse().unwrap(), registry.clone(), config).await.unwrap();
        let target = RemoteSegment {
            id,
            endpoint: server.local_addr().to_string(),
            host_id: HOST_ID.to_owned(),
            shm_path: memory.shm_path().map(|p| p.display().to_string()).unwrap_or_default(),
            size_bytes: memory.len(),
            capability: None,
        };
        Node { server, registry, memory, target }
    }

    /// A capability for `access` to the whole segment.
    pub fn capability(&self, access: Access) -> Capability {
        grant(self.target.id, 0, self.memory.len(), access)
    }

    /// The segment under a WRITE capability for all of it.
    pub fn writer(&self) -> RemoteSegment {
        RemoteSegment { capability: Some(self.capability(Access::Write)), ..self.target.clone() }
    }

    /// The segment under a READ capability for all of it.
    pub fn reader(&self) -> RemoteSegment {
        RemoteSegment { capability: Some(self.capability(Access::Read)), ..self.target.clone() }
    }

    /// The same endpoint, naming a segment the node does not serve.
    pub fn unknown_target(&self) -> RemoteSegment {
        RemoteSegment {
            id: SegmentId(u64::MAX - 1),
            shm_path: "/dev/shm/mooncake-transfer-test-no-such-segment".to_owned(),
            ..self.target.clone()
        }
    }

    /// The conformance suite's fixture for `transport` reaching this node.
    pub fn fixture<'a, T: Transport>(&'a self, transport: &'a T) -> Fixture<'a, T> {
        Fixture {
            transport,
            writer: self.writer(),
            reader: self.reader(),
            memory: &self.memory,
            unknown: self.unknown_target(),
        }
    }
}

/// A store node serving one disk segment file in a temp directory.
pub struct DiskNode {
    pub server: TransferServer,
    pub registry: Arc<SegmentRegistry>,
    pub disk: Arc<DiskSegment>,
    pub id: SegmentId,
    pub size_bytes: u64,
    _dir: tempfile::TempDir,
}

impl DiskNode {
    /// A node whose segment of `size_bytes` is a file on `choice`'s backend.
    pub async fn start(choice: BackendChoice, size_bytes: u64) -> DiskNode {
        let dir = tempfile::tempdir().unwrap();
        let id = SegmentId(0xD15C + NEXT.fetch_add(1, Ordering::Relaxed));
        let path = dir.path().join("segment");
        let disk = Arc::new(DiskSegment::create(&path, id, ClientId(7), size_bytes, choice).unwrap());
        let registry = Arc::new(SegmentRegistry::new());
        registry.register_disk(id, disk.clone()).unwrap();
        registry.set_key(id, SegmentKey::new(&KEY_BYTES)).unwrap();
        let server = TransferServer::bind("127.0.0.1:0".parse().unwrap(), registry.clone()).await.unwrap();
        DiskNode { server, registry, disk, id, size_bytes, _dir: dir }
    }

    pub fn endpoint(&self) -> String {
        self.server.local_addr().to_string()
    }

    /// The segment under a capability for `access` to all of it.
    pub fn target(&self, access: Access) -> RemoteSegment {
        RemoteSegment {
            id: self.id,
            endpoint: self.endpoint(),
            host_id: HOST_ID.to_owned(),
            shm_path: String::new(),
            size_bytes: self.size_bytes,
            capability: Some(grant(self.id, 0, self.size_bytes, access)),
        }
    }

    /// Flips a bit of data byte `at` with a plain write to the segment file.
    pub fn corrupt(&self, at: u64) {
        let file = std::fs::OpenOptions::new().read(true).write(true).open(self.disk.path()).unwrap();
        // The data region is the file's tail (docs of the segment format).
        let data_offset = file.metadata().unwrap().len() - self.size_bytes;
        let mut byte = [0u8; 1];
        file.read_exact_at(&mut byte, data_offset + at).unwrap();
        file.write_all_at(&[byte[0] ^ 0x01], data_offset + at).unwrap();
        file.sync_all().unwrap();
    }

    /// What the segment holds at `[offset, offset + len)`, read locally.
    pub async fn local(&self, offset: u64, len: usize) -> Vec<u8> {
        let mut out = Vec::new();
        while out.len() < len {
            let n = (len - out.len()).min(mooncake_segment::DISK_IO_CHUNK_BYTES);
            out.extend_from_slice(self.disk.read(offset + out.len() as u64, n).await.unwrap().as_slice());
        }
        out
    }
}

/// A request header under a capability for exactly its own range.
pub fn request(op: Op, request_id: u64, segment_id: SegmentId, offset: u64, length: u64) -> [u8; REQUEST_HEADER_BYTES] {
    request_under(op, request_id, segment_id, offset, length, (offset, length))
}

/// A request header under a capability for `op`'s access to
/// `[cap.0, cap.0 + cap.1)` of the segment.
pub fn request_under(
    op: Op,
    request_id: u64,
    segment_id: SegmentId,
    offset: u64,
    length: u64,
    cap: (u64, u64),
) -> [u8; REQUEST_HEADER_BYTES] {
    let access = match op {
        Op::Read | Op::UcxKey => Access::Read,
        Op::Write => Access::Write,
    };
    let capability = grant(segment_id, cap.0, cap.1, access).encode();
    frame::encode_request(&RequestHeader { op, request_id, segment_id, offset, length, capability })
}

/// A client with a single lane (one connection) per store node.
pub fn one_lane() -> TcpTransport {
    TcpTransport::new(TcpConfig { lanes: 1, ..TcpConfig::default() }).unwrap()
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

/// Sends one raw request (header bytes, then `payload`) and reads the response header.
pub async fn raw_request(
    stream: &mut tokio::net::TcpStream,
    header: &[u8],
    payload: &[u8],
) -> mooncake_transfer::frame::ResponseHeader {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    stream.write_all(header).await.unwrap();
    // A refused WRITE closes the connection; the payload may not all go out.
    let _ = stream.write_all(payload).await;
    let mut raw = [0u8; mooncake_transfer::frame::RESPONSE_HEADER_BYTES];
    stream.read_exact(&mut raw).await.unwrap();
    mooncake_transfer::frame::decode_response(&raw).unwrap()
}

/// Whether the server closed the connection (EOF or reset) within a second.
pub async fn is_closed(stream: &mut tokio::net::TcpStream) -> bool {
    use tokio::io::AsyncReadExt;
    let mut byte = [0u8; 1];
    let read = tokio::time::timeout(std::time::Duration::from_secs(1), stream.read(&mut byte)).await;
    matches!(read, Ok(Ok(0) | Err(_)))
}
