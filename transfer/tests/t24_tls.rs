//! Mutual TLS on the transfer port (127.0.0.1, real sockets): a client with
//! a certificate of the cluster's CA writes and reads as over plain TCP; a
//! client without one, or with one of another CA, is refused before a byte
//! of its request reaches a segment; a TLS client refuses a plain server;
//! and a full server still answers BUSY, inside TLS.
// Test support: a failed unwrap or expect is the test failing (the
// workspace denies them in library code: Cargo.toml [workspace.lints]).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::Node;
use mooncake_auth::capability::Access;
use mooncake_tls::{Role, TlsConfig, TlsFiles};
use mooncake_transfer::testing::pattern;
use mooncake_transfer::{ReadItem, ServerConfig, TcpConfig, TcpTransport, TransferError};

const SEGMENT_BYTES: u64 = 16 << 20;
/// The segment a connection reads whole to hold the server busy.
const HOLDER_SEGMENT_BYTES: u64 = 128 << 20;

/// Two CAs: the cluster's, and a stranger's that trusts the cluster's CA
/// certificate (it is no secret) but holds a certificate the cluster never issued.
struct Pki {
    _dirs: [tempfile::TempDir; 2],
    ours: std::path::PathBuf,
    theirs: std::path::PathBuf,
}

impl Pki {
    fn new() -> Pki {
        let (ours, theirs) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        mooncake_tls::generate(ours.path(), 1, &[]).unwrap();
        mooncake_tls::generate(theirs.path(), 1, &[]).unwrap();
        Pki { ours: ours.path().to_owned(), theirs: theirs.path().to_owned(), _dirs: [ours, theirs] }
    }
    fn ours(&self, role: Role) -> TlsConfig {
        TlsFiles::in_dir(&self.ours, role).load().unwrap()
    }
    fn stranger(&self) -> TlsConfig {
        let files = TlsFiles { ca: self.ours.join("ca.pem"), ..TlsFiles::in_dir(&self.theirs, Role::Client) };
        files.load().unwrap()
    }
}

fn client(tls: Option<TlsConfig>) -> TcpTransport {
    TcpTransport::new(TcpConfig { tls, request_timeout: Duration::from_secs(5), ..TcpConfig::default() }).unwrap()
}

async fn tls_node(pki: &Pki, config: ServerConfig) -> Node {
    Node::anonymous_with(SEGMENT_BYTES, ServerConfig { tls: Some(pki.ours(Role::Store)), ..config }).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_client_writes_and_reads_over_tls() {
    let pki = Pki::new();
    let node = tls_node(&pki, ServerConfig::default()).await;
    let tcp = client(Some(pki.ours(Role::Client)));
    let (endpoint, id) = (&node.target.endpoint, node.target.id);
    let (write, read) = (node.capability(Access::Write), node.capability(Access::Read));

    // Why: 4 MiB is split over the four lanes, each its own TLS session.
    let data = pattern(1, 4 << 20);
    tcp.write_to(endpoint, id, Some(&write), 128, &data).await.unwrap();
    let mut back = vec![0u8; data.len()];
    let crc = tcp.read_from_checksummed(endpoint, id, Some(&read), 128, &mut back).await.unwrap();
    assert!(back == data, "bytes differ after a 4 MiB TLS round trip");
    assert_eq!(crc, crc32c::crc32c(&data));

    // Small writes (coalesced with their header) and a pipeline of small reads.
    let small = pattern(2, 4096);
    for i in 0..8u64 {
        tcp.write_to(endpoint, id, Some(&write), (8 << 20) + i * 4096, &small).await.unwrap();
    }
    let mut bufs: Vec<Vec<u8>> = (0..8).map(|_| vec![0u8; 4096]).collect();
    let mut items: Vec<ReadItem<'_>> = bufs
        .iter_mut()
        .enumerate()
        .map(|(i, buf)| ReadItem { segment: id, capability: Some(read), offset: (8 << 20) + i as u64 * 4096, buf })
        .collect();
    for result in tcp.read_pipelined(endpoint, &mut items).await {
        assert_eq!(result.unwrap(), crc32c::crc32c(&small));
    }
    let stats = node.server.stats();
    assert_eq!((stats.tls_handshake_failures, stats.errors), (0, 0), "{stats:?}");
    assert_eq!(stats.written_bytes, (4 << 20) + 8 * 4096);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_without_a_cluster_certificate_moves_no_byte() {
    let pki = Pki::new();
    let node = tls_node(&pki, ServerConfig::default()).await;
    let (endpoint, id) = (&node.target.endpoint, node.target.id);
    let data = pattern(3, 64 << 10);
    // Valid capabilities: what refuses these clients is TLS alone.
    let (write, read) = (node.capability(Access::Write), node.capability(Access::Read));

    // Phase 1: a plain TCP client (no certificate at all). Its header is not
    // a TLS hello: the server closes the connection unanswered.
    let err = client(None).write_to(endpoint, id, Some(&write), 0, &data).await.unwrap_err();
    assert!(matches!(err, TransferError::PeerGone { .. }), "plain write: {err}");
    let mut buf = vec![0u8; 4096];
    let err = client(None).read_from(endpoint, id, Some(&read), 0, &mut buf).await.unwrap_err();
    assert!(matches!(err, TransferError::PeerGone { .. }), "plain read: {err}");

    // Phase 2: a TLS client whose certificate another CA signed. In TLS 1.3
    // the client finishes its side first, so it learns of the refusal when
    // it reads (the server's alert) rather than at connect.
    let stranger = client(Some(pki.stranger()));
    let err = stranger.write_to(endpoint, id, Some(&write), 0, &data).await.unwrap_err();
    assert!(matches!(err, TransferError::PeerGone { .. } | TransferError::Tls { .. }), "stranger write: {err}");
    let err = stranger.read_from(endpoint, id, Some(&read), 0, &mut buf).await.unwrap_err();
    assert!(matches!(err, TransferError::PeerGone { .. } | TransferError::Tls { .. }), "stranger read: {err}");

    let stats = node.server.stats();
    assert_eq!((stats.ops, stats.written_bytes, stats.read_bytes), (0, 0, 0), "nothing served: {stats:?}");
    assert!(stats.tls_handshake_failures >= 4, "every attempt is counted: {stats:?}");
    // SAFETY: no transfer runs on this segment any more.
    let segment = unsafe { node.memory.slice(0, data.len() as u64) }.unwrap();
    assert!(segment.iter().all(|b| *b == 0), "no byte of the refused writes landed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_client_refuses_a_plain_or_foreign_server() {
    let pki = Pki::new();
    let tcp = client(Some(pki.ours(Role::Client)));
    let mut buf = vec![0u8; 4096];

    // A plain server answers the hello with garbage (or closes): no transfer.
    let plain = Node::anonymous(SEGMENT_BYTES).await;
    let read = plain.capability(Access::Read);
    let err = tcp.read_from(&plain.target.endpoint, plain.target.id, Some(&read), 0, &mut buf).await.unwrap_err();
    assert!(matches!(err, TransferError::PeerGone { .. } | TransferError::Tls { .. }), "{err}");
    assert_eq!(plain.server.stats().read_bytes, 0);

    // A TLS server whose certificate another CA signed: refused at connect.
    let foreign_files = TlsFiles::in_dir(&pki.theirs, Role::Store);
    let foreign = Node::anonymous_with(
        SEGMENT_BYTES,
        ServerConfig { tls: Some(foreign_files.load().unwrap()), ..ServerConfig::default() },
    )
    .await;
    let read = foreign.capability(Access::Read);
    let err = tcp.read_from(&foreign.target.endpoint, foreign.target.id, Some(&read), 0, &mut buf).await.unwrap_err();
    assert!(matches!(err, TransferError::Tls { .. }), "{err}");
    assert!(!err.is_retryable());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_tls_server_answers_busy_inside_tls() {
    let pki = Pki::new();
    let config = ServerConfig { connections_max: 1, peer_connections_max: 1, ..ServerConfig::default() };
    // A segment larger than the loopback socket buffers can hold (about
    // 10 MB here): the holder's read below must keep the server sending.
    let node =
        Node::anonymous_with(HOLDER_SEGMENT_BYTES, ServerConfig { tls: Some(pki.ours(Role::Store)), ..config }).await;
    let (endpoint, id) = (&node.target.endpoint, node.target.id);
    let one_lane =
        || TcpTransport::new(TcpConfig { lanes: 1, tls: Some(pki.ours(Role::Client)), ..TcpConfig::default() });

    // The first client's pooled lane holds the only place while it idles;
    // a second client takes it (an idle place is given to a newcomer).
    let first = one_lane().unwrap();
    first.write_to(endpoint, id, Some(&node.capability(Access::Write)), 0, &pattern(4, 4096)).await.unwrap();
    let mut buf = vec![0u8; 4096];
    let read = node.capability(Access::Read);
    one_lane().unwrap().read_from(endpoint, id, Some(&read), 0, &mut buf).await.expect("an idle place is taken");
    assert!(buf == pattern(4, 4096));
    assert_eq!(node.server.stats().replaced, 1);
    // That client is gone (its transport dropped): wait until the server has
    // seen its connection close, so the holder below takes a free place
    // rather than meeting a connection still finishing its answer (BUSY).
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    while node.server.stats().connections_open > 0 {
        assert!(tokio::time::Instant::now() < deadline, "the reader's connection never closed");
        tokio::time::sleep(std::time::Duration::from_millis(2)).await;
    }

    // A connection serving a request holds the place for good: it reads the
    // whole segment and takes only the answer's header, so the server stays
    // busy sending. Why: a full node is alive; over TLS too the client must
    // say busy, not gone.
    let tls = pki.ours(Role::Client);
    let tcp = tokio::net::TcpStream::connect(endpoint.as_str()).await.unwrap();
    let connector = tokio_rustls::TlsConnector::from(tls.client_config());
    let mut holder = connector.connect(tls.server_name().clone(), tcp).await.unwrap();
    let header = common::request(mooncake_transfer::frame::Op::Read, 1, id, 0, HOLDER_SEGMENT_BYTES);
    tokio::io::AsyncWriteExt::write_all(&mut holder, &header).await.unwrap();
    tokio::io::AsyncWriteExt::flush(&mut holder).await.unwrap();
    let mut answer = [0u8; mooncake_transfer::frame::RESPONSE_HEADER_BYTES];
    tokio::io::AsyncReadExt::read_exact(&mut holder, &mut answer).await.unwrap();
    let err = one_lane().unwrap().read_from(endpoint, id, Some(&read), 0, &mut buf).await.unwrap_err();
    assert!(matches!(err, TransferError::Busy { .. }), "{err}");
    assert_eq!(node.server.stats().refused_total_limit, 1);
    drop(holder);
}
