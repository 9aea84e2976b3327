//! The TCP data path end to end on 127.0.0.1: lanes and splitting,
//! concurrency, the server's refusals of bad frames (sent by hand), and what
//! a client sees when its peer dies or hangs.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{Node, is_closed, raw_request, request};
use mooncake_auth::capability::{Access, CAPABILITY_BYTES};
use mooncake_segment::SegmentId;
use mooncake_transfer::frame::{
    self, FRAME_MAGIC, FRAME_PAYLOAD_MAX_BYTES, Op, REQUEST_HEADER_BYTES, ResponseHeader, Status,
};
use mooncake_transfer::testing::pattern;
use mooncake_transfer::{TcpConfig, TcpTransport, TransferError};
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;

const SEGMENT_BYTES: u64 = 32 << 20;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_4_mib_object_round_trips_across_lanes() {
    let node = Node::anonymous(SEGMENT_BYTES).await;
    let tcp = TcpTransport::new(TcpConfig::default()).unwrap();
    let data = pattern(42, 4 << 20);

    let (write, read) = (node.capability(Access::Write), node.capability(Access::Read));

    // Why: the default config must split 4 MiB into one chunk per lane.
    tcp.write_to(&node.target.endpoint, node.target.id, Some(&write), 64, &data).await.unwrap();
    let mut back = vec![0u8; data.len()];
    tcp.read_from(&node.target.endpoint, node.target.id, Some(&read), 64, &mut back).await.unwrap();
    assert!(back == data, "bytes differ after a 4 MiB round trip");

    // The server counts a read once its bytes are sent, which the client may
    // see first: the counters are read once they settle (or time out).
    let settled = tokio::time::timeout(std::time::Duration::from_secs(10), async {
        loop {
            let stats = node.server.stats();
            if stats.read_bytes >= 4 << 20 && stats.ops >= 8 {
                return stats;
            }
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
    });
    let stats = settled.await.unwrap_or_else(|_| node.server.stats());
    assert_eq!(stats.ops, 8, "4 chunks each way");
    assert_eq!(stats.connections, 4, "one connection per lane");
    assert_eq!((stats.written_bytes, stats.read_bytes, stats.errors), (4 << 20, 4 << 20, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_checksummed_read_returns_the_crc32c_of_all_chunks_combined() {
    let node = Node::anonymous(SEGMENT_BYTES).await;
    // Why: chunk crcs are combined in order; an uneven last chunk, a single
    // chunk and an empty read must all give the crc of the whole.
    let config = TcpConfig { lanes: 3, split_bytes: 4096, ..TcpConfig::default() };
    let tcp = TcpTransport::new(config).unwrap();
    let data = pattern(7, (1 << 20) + 4097);
    let (write, read) = (node.capability(Access::Write), node.capability(Access::Read));
    tcp.write_to(&node.target.endpoint, node.target.id, Some(&write), 0, &data).await.unwrap();
    for len in [data.len(), 4096, 1, 0] {
        let mut back = vec![0u8; len];
        let crc =
            tcp.read_from_checksummed(&node.target.endpoint, node.target.id, Some(&read), 0, &mut back).await.unwrap();
        assert_eq!(back[..], data[..len]);
        assert_eq!(crc, crc32c::crc32c(&data[..len]), "crc of a {len}-byte read");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_transfers_from_several_tasks_stay_apart() {
    let node = Node::anonymous(SEGMENT_BYTES).await;
    let tcp = Arc::new(TcpTransport::new(TcpConfig::default()).unwrap());
    let tasks_count = 8u64;
    let slot_bytes = 3 << 20;
    let mut tasks = Vec::new();
    for task in 0..tasks_count {
        let (tcp, target) = (tcp.clone(), node.target.clone());
        let (write, read) = (node.capability(Access::Write), node.capability(Access::Read));
        tasks.push(tokio::spawn(async move {
            // Why: odd sizes and offsets cross chunk and page boundaries.
            let data = pattern(task, (1 << 20) + 4097 * task as usize + 13);
            let offset = task * slot_bytes + 7;
            for _round in 0..3 {
                tcp.write_to(&target.endpoint, target.id, Some(&write), offset, &data).await.unwrap();
                let mut back = vec![0u8; data.len()];
                tcp.read_from(&target.endpoint, target.id, Some(&read), offset, &mut back).await.unwrap();
                assert!(back == data, "task {task} read back other bytes");
            }
            (offset, data)
        }));
    }
    for task in tasks {
        let (offset, data) = task.await.unwrap();
        let mut landed = vec![0u8; data.len()];
        node.memory.read_at(offset, &mut landed).unwrap();
        assert!(landed == data, "segment bytes at {offset} differ");
    }
    assert_eq!(node.server.stats().errors, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_writes_get_their_status_and_change_no_byte() {
    let node = Node::anonymous(SEGMENT_BYTES).await;
    let guard = pattern(9, 1 << 20);
    node.memory.write_at(0, &guard).unwrap();
    node.memory.write_at(SEGMENT_BYTES - (1 << 20), &guard).unwrap();
    let addr = node.server.local_addr();
    let payload = pattern(10, 64 * 1024);

    // Why: a write crossing the end must be refused before its payload is read.
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let header = request(Op::Write, 77, node.target.id, SEGMENT_BYTES - 10, payload.len() as u64);
    let response = raw_request(&mut stream, &header, &payload).await;
    assert_eq!((response.status, response.request_id, response.length), (Status::OutOfRange, 77, 0));
    assert!(is_closed(&mut stream).await, "a refused WRITE closes its connection");

    // Why: offset + length overflowing u64 must not wrap into the segment.
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let header = request(Op::Write, 78, node.target.id, u64::MAX - 100, payload.len() as u64);
    assert_eq!(raw_request(&mut stream, &header, &payload).await.status, Status::OutOfRange);

    // Why: a write to a segment the node does not serve lands nowhere.
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let header = request(Op::Write, 79, SegmentId(12345), 0, payload.len() as u64);
    let response = raw_request(&mut stream, &header, &payload).await;
    assert_eq!((response.status, response.request_id), (Status::UnknownSegment, 79));
    assert!(is_closed(&mut stream).await);

    let mut head = vec![0u8; guard.len()];
    node.memory.read_at(0, &mut head).unwrap();
    let mut tail = vec![0u8; guard.len()];
    node.memory.read_at(SEGMENT_BYTES - (1 << 20), &mut tail).unwrap();
    assert!(head == guard && tail == guard, "a refused write changed the segment");
    assert_eq!(node.server.stats().written_bytes, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_reads_keep_the_connection_usable() {
    let node = Node::anonymous(SEGMENT_BYTES).await;
    node.memory.write_at(4096, b"still here").unwrap();
    let mut stream = TcpStream::connect(node.server.local_addr()).await.unwrap();

    let unknown = raw_request(&mut stream, &request(Op::Read, 1, SegmentId(999), 0, 10), &[]).await;
    assert_eq!(unknown.status, Status::UnknownSegment);
    let out = raw_request(&mut stream, &request(Op::Read, 2, node.target.id, SEGMENT_BYTES, 1), &[]).await;
    assert_eq!(out.status, Status::OutOfRange);

    // Why: a READ has no payload to skip, so the same connection goes on.
    let ok = raw_request(&mut stream, &request(Op::Read, 3, node.target.id, 4096, 10), &[]).await;
    assert_eq!((ok.status, ok.request_id, ok.length), (Status::Ok, 3, 10));
    let mut body = [0u8; 10];
    stream.read_exact(&mut body).await.unwrap();
    assert_eq!(&body, b"still here");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ucx_key_request_to_a_node_without_ucx_is_unsupported_and_keeps_the_connection() {
    let node = Node::anonymous(SEGMENT_BYTES).await;
    let mut stream = TcpStream::connect(node.server.local_addr()).await.unwrap();
    let ask = raw_request(&mut stream, &request(Op::UcxKey, 7, node.target.id, 0, 4096), &[]).await;
    assert_eq!((ask.status, ask.request_id, ask.length), (Status::Unsupported, 7, 0));
    // Admitted like a READ first: no key is even considered without a grant.
    let mut unsigned = request(Op::UcxKey, 8, node.target.id, 0, 4096);
    unsigned[REQUEST_HEADER_BYTES - CAPABILITY_BYTES..].fill(0);
    let refused = raw_request(&mut stream, &unsigned, &[]).await;
    assert_eq!((refused.status, refused.request_id), (Status::Unauthorized, 8));
    let ok = raw_request(&mut stream, &request(Op::Read, 9, node.target.id, 0, 16), &[]).await;
    assert_eq!((ok.status, ok.request_id, ok.length), (Status::Ok, 9, 16));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_headers_get_bad_frame_and_the_server_keeps_serving() {
    let node = Node::anonymous(SEGMENT_BYTES).await;
    let addr = node.server.local_addr();
    let good = request(Op::Read, 5, node.target.id, 0, 16);
    let mut bad_magic = good;
    bad_magic[0..4].copy_from_slice(&(FRAME_MAGIC ^ 1).to_le_bytes());
    let mut bad_version = good;
    bad_version[4] = 99;
    let mut bad_op = good;
    bad_op[5] = 4;
    let mut bad_reserved = good;
    bad_reserved[7] = 1;
    let mut garbage = [0xA5u8; REQUEST_HEADER_BYTES];
    garbage[8..16].copy_from_slice(&5u64.to_le_bytes());

    for raw in [bad_magic, bad_version, bad_op, bad_reserved, garbage] {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        let response = raw_request(&mut stream, &raw, &[]).await;
        assert_eq!((response.status, response.request_id), (Status::BadFrame, 5));
        assert!(is_closed(&mut stream).await, "a bad frame closes its connection");
    }

    let too_large = request(Op::Write, 6, node.target.id, 0, FRAME_PAYLOAD_MAX_BYTES + 1);
    let mut stream = TcpStream::connect(addr).await.unwrap();
    assert_eq!(raw_request(&mut stream, &too_large, &[]).await.status, Status::TooLarge);

    // Why: one peer's garbage must not hurt anyone else.
    let tcp = TcpTransport::new(TcpConfig::default()).unwrap();
    let data = pattern(11, 100_000);
    let (write, read) = (node.capability(Access::Write), node.capability(Access::Read));
    tcp.write_to(&node.target.endpoint, node.target.id, Some(&write), 0, &data).await.unwrap();
    let mut back = vec![0u8; data.len()];
    tcp.read_from(&node.target.endpoint, node.target.id, Some(&read), 0, &mut back).await.unwrap();
    assert!(back == data);
    assert_eq!(node.server.stats().errors, 6);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_sees_the_remote_status_of_a_refused_split_write() {
    let node = Node::anonymous(SEGMENT_BYTES).await;
    let tcp = TcpTransport::new(TcpConfig::default()).unwrap();
    let data = pattern(12, 2 << 20);

    // Why: the server answers and closes without reading the payload; the
    // client must report that answer, not the broken pipe that follows.
    let write = node.capability(Access::Write);
    let err =
        tcp.write_to(&node.target.endpoint, node.target.id, Some(&write), SEGMENT_BYTES, &data).await.unwrap_err();
    assert!(matches!(err, TransferError::Remote { status: Status::OutOfRange, .. }), "{err}");
    assert!(!err.is_retryable());
    let elsewhere = common::grant(SegmentId(4242), 0, data.len() as u64, Access::Write);
    let err = tcp.write_to(&node.target.endpoint, SegmentId(4242), Some(&elsewhere), 0, &data).await.unwrap_err();
    assert!(matches!(err, TransferError::Remote { status: Status::UnknownSegment, .. }), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_peer_gives_peer_gone_quickly() {
    let node = Node::anonymous(SEGMENT_BYTES).await;
    let config = TcpConfig { request_timeout: Duration::from_secs(2), ..TcpConfig::default() };
    let tcp = TcpTransport::new(config).unwrap();
    let data = pattern(13, 4 << 20);
    let target = node.target.clone();
    let (write, read) = (node.capability(Access::Write), node.capability(Access::Read));
    tcp.write_to(&target.endpoint, target.id, Some(&write), 0, &data).await.unwrap();

    // Why: the pooled lanes now point at a dead process; no call may hang.
    node.server.shutdown().await;
    for _ in 0..2 {
        let started = Instant::now();
        let err = tcp.write_to(&target.endpoint, target.id, Some(&write), 0, &data).await.unwrap_err();
        assert!(matches!(err, TransferError::PeerGone { .. }), "{err}");
        assert!(err.is_retryable());
        assert!(started.elapsed() < Duration::from_secs(1), "took {:?}", started.elapsed());
        let mut back = vec![0u8; 4096];
        let err = tcp.read_from(&target.endpoint, target.id, Some(&read), 0, &mut back).await.unwrap_err();
        assert!(matches!(err, TransferError::PeerGone { .. }), "{err}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_peer_gives_timeout() {
    // Why: a peer that accepts but never answers must cost one timeout, not forever.
    let (endpoint, hold) = common::hung_peer().await;
    let config = TcpConfig { request_timeout: Duration::from_millis(300), ..TcpConfig::default() };
    let tcp = TcpTransport::new(config).unwrap();
    let started = Instant::now();
    let mut buf = vec![0u8; 4096];
    let err = tcp.read_from(&endpoint, SegmentId(1), None, 0, &mut buf).await.unwrap_err();
    assert!(matches!(err, TransferError::Timeout { after_ms: 300, .. }), "{err}");
    assert!(started.elapsed() < Duration::from_secs(2));
    hold.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_stops_accepting_and_closes_connections() {
    let node = Node::anonymous(SEGMENT_BYTES).await;
    let addr = node.server.local_addr();
    let mut idle = TcpStream::connect(addr).await.unwrap();
    let ok = raw_request(&mut idle, &request(Op::Read, 1, node.target.id, 0, 0), &[]).await;
    assert_eq!(ok.status, Status::Ok);
    node.server.shutdown().await;
    assert!(is_closed(&mut idle).await, "open connections are closed");
    assert!(TcpStream::connect(addr).await.is_err(), "no longer accepting");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn response_header_matches_the_documented_layout() {
    let raw = frame::encode_response(&ResponseHeader { status: Status::TooLarge, request_id: 0x0102, length: 3 });
    assert_eq!(&raw[0..4], b"FTCM", "magic 0x4D435446 little-endian");
    assert_eq!((raw[4], raw[5], raw[6], raw[7]), (2, 4, 0, 0));
    assert_eq!(u64::from_le_bytes(raw[8..16].try_into().unwrap()), 0x0102);
    assert_eq!(u64::from_le_bytes(raw[16..24].try_into().unwrap()), 3);
}
