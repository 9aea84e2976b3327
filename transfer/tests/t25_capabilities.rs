//! Capabilities on the TCP data path: a store node serves a READ or WRITE
//! only under a capability the masters' key signed for exactly that segment,
//! range and access, not expired. Every other request is refused
//! UNAUTHORIZED and moves no byte: none written into the segment, none sent
//! back.

mod common;

use common::{Node, is_closed, raw_request as send};
use mooncake_auth::capability::{self, Access, Capability, Requested, SegmentKey};
use mooncake_segment::{SegmentId, SegmentMemory};
use mooncake_transfer::frame::{self, NO_CAPABILITY, Op, REQUEST_HEADER_BYTES, RequestHeader, Status};
use mooncake_transfer::testing::pattern;
use mooncake_transfer::{SegmentRegistry, TcpConfig, TcpTransport, TransferError, TransferServer};
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;

const SEGMENT_BYTES: u64 = 4 << 20;
/// The object the tests aim at: `[OBJECT_AT, OBJECT_AT + OBJECT_BYTES)`.
const OBJECT_AT: u64 = 1 << 20;
const OBJECT_BYTES: u64 = 64 * 1024;

fn header(op: Op, request_id: u64, segment_id: SegmentId, capability: [u8; 64]) -> [u8; REQUEST_HEADER_BYTES] {
    frame::encode_request(&RequestHeader {
        op,
        request_id,
        segment_id,
        offset: OBJECT_AT,
        length: OBJECT_BYTES,
        capability,
    })
}

/// The bad capabilities every test tries, each with the reason it must fail.
fn bad_capabilities(segment: SegmentId, access: Access) -> Vec<(&'static str, [u8; 64])> {
    let other_access = match access {
        Access::Read => Access::Write,
        Access::Write => Access::Read,
    };
    let valid = common::grant(segment, OBJECT_AT, OBJECT_BYTES, access);
    let mut forged = valid;
    forged.mac[0] ^= 1;
    let mut widened = common::grant(segment, OBJECT_AT, 4096, access);
    widened.len = OBJECT_BYTES; // the MAC still covers 4096 bytes
    let stranger_key = SegmentKey::new(&[0x11; 32]);
    let requested = Requested { segment_id: segment.0, offset: OBJECT_AT, len: OBJECT_BYTES, access };
    let past = common::unix_ms_now() - 10 * 60 * 1000;
    vec![
        ("none", NO_CAPABILITY),
        ("another range", common::grant(segment, 0, OBJECT_AT, access).encode()),
        ("part of the range", common::grant(segment, OBJECT_AT, OBJECT_BYTES - 1, access).encode()),
        ("another segment", common::grant(SegmentId(segment.0 + 1), OBJECT_AT, OBJECT_BYTES, access).encode()),
        ("the other access", common::grant(segment, OBJECT_AT, OBJECT_BYTES, other_access).encode()),
        ("expired", common::grant_until(segment, OBJECT_AT, OBJECT_BYTES, access, past).encode()),
        ("a forged MAC", forged.encode()),
        ("a widened range under the old MAC", widened.encode()),
        ("another cluster's key", capability::issue(&stranger_key, &requested, past + 20 * 60 * 1000).encode()),
        ("garbage", [0xA5; 64]),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_without_a_valid_capability_are_refused_and_change_no_byte() {
    let node = Node::anonymous(SEGMENT_BYTES).await;
    let before = pattern(1, SEGMENT_BYTES as usize);
    node.memory.write_at(0, &before).unwrap();
    let payload = pattern(2, OBJECT_BYTES as usize);
    let id = node.target.id;

    for (index, (why, capability)) in bad_capabilities(id, Access::Write).into_iter().enumerate() {
        let mut stream = TcpStream::connect(node.server.local_addr()).await.unwrap();
        let response = send(&mut stream, &header(Op::Write, 100 + index as u64, id, capability), &payload).await;
        assert_eq!(
            (response.status, response.request_id, response.length),
            (Status::Unauthorized, 100 + index as u64, 0),
            "a WRITE with {why}"
        );
        assert!(is_closed(&mut stream).await, "a refused WRITE ({why}) closes its connection");
    }
    let mut after = vec![0u8; before.len()];
    node.memory.read_at(0, &mut after).unwrap();
    assert!(after == before, "a refused write changed the segment");
    let stats = node.server.stats();
    assert_eq!((stats.written_bytes, stats.unauthorized), (0, 10), "{stats:?}");

    // Why: the same request under the capability the master would issue works.
    let mut stream = TcpStream::connect(node.server.local_addr()).await.unwrap();
    let valid = common::grant(id, OBJECT_AT, OBJECT_BYTES, Access::Write).encode();
    let response = send(&mut stream, &header(Op::Write, 7, id, valid), &payload).await;
    assert_eq!((response.status, response.length), (Status::Ok, OBJECT_BYTES));
    let mut landed = vec![0u8; payload.len()];
    node.memory.read_at(OBJECT_AT, &mut landed).unwrap();
    assert!(landed == payload);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_without_a_valid_capability_return_no_byte_and_keep_the_connection() {
    let node = Node::anonymous(SEGMENT_BYTES).await;
    let secret = pattern(3, OBJECT_BYTES as usize);
    node.memory.write_at(OBJECT_AT, &secret).unwrap();
    let id = node.target.id;
    let mut stream = TcpStream::connect(node.server.local_addr()).await.unwrap();

    for (index, (why, capability)) in bad_capabilities(id, Access::Read).into_iter().enumerate() {
        let response = send(&mut stream, &header(Op::Read, 200 + index as u64, id, capability), &[]).await;
        assert_eq!(
            (response.status, response.request_id, response.length),
            (Status::Unauthorized, 200 + index as u64, 0),
            "a READ with {why}"
        );
    }
    assert_eq!(node.server.stats().read_bytes, 0, "no byte of the object left the node");

    // Why: a refused READ has no payload to skip; the next request on the
    // same connection, under a valid capability, gets exactly the object.
    let valid = common::grant(id, OBJECT_AT, OBJECT_BYTES, Access::Read).encode();
    let response = send(&mut stream, &header(Op::Read, 9, id, valid), &[]).await;
    assert_eq!((response.status, response.request_id, response.length), (Status::Ok, 9, OBJECT_BYTES));
    let mut body = vec![0u8; OBJECT_BYTES as usize];
    stream.read_exact(&mut body).await.unwrap();
    assert!(body == secret);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_segment_without_its_key_refuses_everything() {
    // Why: a store node registers its segment before the master's mount
    // answer brings the key; until then no capability can be checked, so
    // nothing is served.
    let memory = std::sync::Arc::new(SegmentMemory::anonymous(SEGMENT_BYTES, false).unwrap());
    let registry = std::sync::Arc::new(SegmentRegistry::new());
    let id = SegmentId(0xC0FFEE);
    registry.register(id, memory.clone()).unwrap();
    let server = TransferServer::bind("127.0.0.1:0".parse().unwrap(), registry.clone()).await.unwrap();
    let endpoint = server.local_addr().to_string();
    let tcp = TcpTransport::new(TcpConfig::default()).unwrap();
    let data = pattern(4, 4096);
    let write = common::grant(id, 0, 4096, Access::Write);

    let err = tcp.write_to(&endpoint, id, Some(&write), 0, &data).await.unwrap_err();
    assert!(matches!(err, TransferError::Remote { status: Status::Unauthorized, .. }), "{err}");

    registry.set_key(id, SegmentKey::new(&common::KEY_BYTES)).unwrap();
    tcp.write_to(&endpoint, id, Some(&write), 0, &data).await.unwrap();
    let mut back = vec![0u8; data.len()];
    memory.read_at(0, &mut back).unwrap();
    assert!(back == data);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_reports_unauthorized_as_final_and_says_why() {
    let node = Node::anonymous(SEGMENT_BYTES).await;
    let tcp = TcpTransport::new(TcpConfig { split_bytes: 4096, ..TcpConfig::default() }).unwrap();
    let (endpoint, id) = (&node.target.endpoint, node.target.id);
    let data = pattern(5, 1 << 20);

    // Why: a transfer split over lanes carries the one capability with every
    // chunk; each chunk lies inside its range, so the whole transfer works.
    let write: Capability = common::grant(id, OBJECT_AT, data.len() as u64, Access::Write);
    tcp.write_to(endpoint, id, Some(&write), OBJECT_AT, &data).await.unwrap();
    let read = common::grant(id, OBJECT_AT, data.len() as u64, Access::Read);
    let mut back = vec![0u8; data.len()];
    tcp.read_from(endpoint, id, Some(&read), OBJECT_AT, &mut back).await.unwrap();
    assert!(back == data);

    // Why: retrying with the same capability cannot help; the caller must
    // ask the master again, so the error is not retryable.
    let err = tcp.write_to(endpoint, id, None, 0, &data).await.unwrap_err();
    assert!(matches!(err, TransferError::Remote { status: Status::Unauthorized, .. }), "{err}");
    assert!(!err.is_retryable());
    assert!(err.to_string().contains("capability"), "{err}");
    // A chunk past the capability's end is refused, not written.
    let err = tcp.write_to(endpoint, id, Some(&write), OBJECT_AT + 4096, &data).await.unwrap_err();
    assert!(matches!(err, TransferError::Remote { status: Status::Unauthorized, .. }), "{err}");
    let mut tail = vec![0u8; 4096];
    node.memory.read_at(OBJECT_AT + data.len() as u64, &mut tail).unwrap();
    assert!(tail.iter().all(|b| *b == 0), "nothing landed past the capability's range");
}
