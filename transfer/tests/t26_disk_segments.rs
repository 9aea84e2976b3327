//! Disk segments served over TCP: a store node serves a segment file on
//! local disk (io_uring or pread) through the same protocol and
//! capabilities as memory; bytes put through the client read back equal, a
//! block that fails verification answers CORRUPT, and a WRITE that does not
//! start on a block (or whose block padding leaves its capability) is
//! refused before a byte is written. The engine's local route (a store
//! node reaching its own segments without a socket) does the same.
// Test support: a failed unwrap or expect is the test failing (the
// workspace denies them in library code: Cargo.toml [workspace.lints]).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{DiskNode, is_closed, one_lane, raw_request as send, request_under};
use mooncake_auth::capability::{Access, SegmentKey};
use mooncake_segment::{BackendChoice, DISK_BLOCK_BYTES, DiskSegment, SegmentId};
use mooncake_transfer::frame::{Op, Status};
use mooncake_transfer::testing::pattern;
use mooncake_transfer::{
    Backing, Protocol, ReadItem, RemoteSegment, TcpConfig, TcpTransport, TransferEngine, TransferError, Transport,
    TransportKind,
};
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;

const SEGMENT_BYTES: u64 = 24 << 20;
const BLOCK: u64 = DISK_BLOCK_BYTES;
const BACKENDS: [BackendChoice; 2] = [BackendChoice::IoUring, BackendChoice::Pread];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bytes_put_to_a_disk_segment_read_back_equal() {
    for choice in BACKENDS {
        let node = DiskNode::start(choice, SEGMENT_BYTES).await;
        let (writer, reader) = (node.target(Access::Write), node.target(Access::Read));
        // Why: the default client splits over 4 lanes (chunks under the
        // disk chunk); one lane sends 9 MiB requests, which the server moves
        // in three pipelined disk chunks.
        let lanes = [TcpTransport::new(TcpConfig::default()).unwrap(), one_lane()];
        for (l, tcp) in lanes.iter().enumerate() {
            for (i, len) in [1usize, 4096, (4 << 20) + 7, (9 << 20) + 5].into_iter().enumerate() {
                let padded = (len as u64).div_ceil(BLOCK) * BLOCK;
                for offset in [0, 2 * BLOCK, SEGMENT_BYTES - padded] {
                    let data = pattern((l * 100 + i) as u64 ^ offset, len);
                    let at = format!("{choice:?}, lane config {l}: {len} bytes at {offset}");
                    tcp.write(&writer, offset, &data).await.unwrap_or_else(|e| panic!("write of {at}: {e}"));
                    assert!(node.local(offset, len).await == data, "landed bytes differ: {at}");
                    let mut back = vec![0u8; len];
                    tcp.read(&reader, offset, &mut back).await.unwrap_or_else(|e| panic!("read of {at}: {e}"));
                    assert!(back == data, "read-back bytes differ: {at}");
                    // An unaligned window of it, as a reader of a part would ask.
                    if len > 10 {
                        let mut part = vec![0u8; len - 10];
                        tcp.read(&reader, offset + 5, &mut part).await.unwrap();
                        assert!(part[..] == data[5..len - 5], "window differs: {at}");
                    }
                }
            }
        }
        let stats = node.server.stats();
        assert_eq!(stats.errors, 0, "{choice:?}: {stats:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupted_block_answers_corrupt_to_a_read() {
    for choice in BACKENDS {
        let node = DiskNode::start(choice, SEGMENT_BYTES).await;
        let tcp = TcpTransport::new(TcpConfig::default()).unwrap();
        let object_at = 1 << 20;
        let data = pattern(5, 256 * 1024);
        tcp.write(&node.target(Access::Write), object_at, &data).await.unwrap();
        node.corrupt(object_at + 3 * BLOCK + 100);

        // Why: the client gets a final error of its own kind, saying the
        // node's disk copy is bad, so it reads another replica instead.
        let mut back = vec![0u8; data.len()];
        let err = tcp.read(&node.target(Access::Read), object_at, &mut back).await.unwrap_err();
        assert!(matches!(err, TransferError::Corrupt { .. }), "{choice:?}: {err}");
        assert!(!err.is_retryable());
        assert!(err.to_string().contains("failed checksum verification"), "{err}");

        // Why: on the wire it is a CORRUPT answer to that READ, and the
        // connection stays usable for the next request.
        let mut stream = TcpStream::connect(node.server.local_addr()).await.unwrap();
        let whole = (object_at, data.len() as u64);
        let response = send(&mut stream, &request_under(Op::Read, 11, node.id, object_at, 8192 * 4, whole), &[]).await;
        assert_eq!((response.status, response.request_id, response.length), (Status::Corrupt, 11, 0));
        let response = send(&mut stream, &request_under(Op::Read, 12, node.id, object_at, 8192, whole), &[]).await;
        assert_eq!((response.status, response.length), (Status::Ok, 8192));
        let mut body = vec![0u8; 8192];
        stream.read_exact(&mut body).await.unwrap();
        assert!(body[..] == data[..8192]);

        // Why: a pipelined batch fails only the item over the bad block.
        let mut bufs: Vec<Vec<u8>> = (0..8).map(|_| vec![0u8; BLOCK as usize]).collect();
        let capability = node.target(Access::Read).capability;
        let mut items: Vec<ReadItem<'_>> = bufs
            .iter_mut()
            .enumerate()
            .map(|(i, buf)| ReadItem { segment: node.id, capability, offset: object_at + i as u64 * BLOCK, buf })
            .collect();
        let results = one_lane().read_pipelined(&node.endpoint(), &mut items).await;
        for (i, result) in results.iter().enumerate() {
            assert_eq!(i == 3, matches!(result, Err(TransferError::Corrupt { .. })), "{choice:?} item {i}: {result:?}");
        }

        // Why: a READ of several disk chunks whose bad block lies past the
        // first chunk has already sent its OK header; the node cuts the
        // payload (closes the connection) rather than send bad bytes.
        let big_at = 8 << 20;
        let big = pattern(6, 9 << 20);
        let tcp = one_lane();
        tcp.write(&node.target(Access::Write), big_at, &big).await.unwrap();
        node.corrupt(big_at + (5 << 20) + 1);
        let mut back = vec![0u8; big.len()];
        let err = tcp.read(&node.target(Access::Read), big_at, &mut back).await.unwrap_err();
        assert!(!matches!(err, TransferError::Remote { .. }), "{choice:?}: {err}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unaligned_write_to_a_disk_segment_is_refused_and_writes_nothing() {
    for choice in BACKENDS {
        let node = DiskNode::start(choice, SEGMENT_BYTES).await;
        let payload = pattern(9, 5000);
        let everything = (0, SEGMENT_BYTES);
        // Why: an offset off a block boundary cannot be stored in whole
        // blocks; padding 5000 bytes to 8192 would write zeros past a
        // capability of exactly 5000 bytes. Both are refused before the
        // payload is read, and the connection closes.
        for (why, offset, cap) in [("unaligned", 100, everything), ("padding outside the capability", 0, (0, 5000))] {
            let mut stream = TcpStream::connect(node.server.local_addr()).await.unwrap();
            let response = send(&mut stream, &request_under(Op::Write, 21, node.id, offset, 5000, cap), &payload).await;
            assert_eq!((response.status, response.request_id), (Status::OutOfRange, 21), "{choice:?}: {why}");
            assert!(is_closed(&mut stream).await, "{choice:?}: a refused WRITE ({why}) closes its connection");
        }
        let tcp = TcpTransport::new(TcpConfig::default()).unwrap();
        let err = tcp.write(&node.target(Access::Write), BLOCK + 1, &payload).await.unwrap_err();
        assert!(matches!(err, TransferError::Remote { status: Status::OutOfRange, .. }), "{err}");
        assert!(!err.is_retryable());
        assert!(node.local(0, 4 * BLOCK as usize).await.iter().all(|b| *b == 0), "{choice:?}: no byte was written");
        assert_eq!(node.server.stats().written_bytes, 0);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewed_disk_segment_is_served_under_its_new_id_only() {
    let node = DiskNode::start(BackendChoice::Auto, SEGMENT_BYTES).await;
    let tcp = TcpTransport::new(TcpConfig::default()).unwrap();
    let data = pattern(13, 10_000);
    tcp.write(&node.target(Access::Write), 0, &data).await.unwrap();

    // Why: after the masters forgot the segment, the same file is served
    // under a fresh id (written into its header), and a writer still
    // holding the old id is refused instead of landing in it.
    let new_id = SegmentId(node.id.0 + 1_000_000);
    node.registry.renew_disk(node.id, new_id).unwrap();
    node.registry.set_key(new_id, SegmentKey::new(&common::KEY_BYTES)).unwrap();
    assert_eq!(node.disk.segment_id(), new_id);
    assert!(matches!(node.registry.lookup_backing(new_id), Some(Backing::Disk(_))));
    assert!(node.registry.lookup_backing(node.id).is_none() && node.registry.lookup(new_id).is_none());
    let err = tcp.write(&node.target(Access::Write), 0, &data).await.unwrap_err();
    assert!(matches!(err, TransferError::Remote { status: Status::UnknownSegment, .. }), "{err}");
    let renewed = RemoteSegment {
        id: new_id,
        capability: Some(common::grant(new_id, 0, SEGMENT_BYTES, Access::Read)),
        ..node.target(Access::Read)
    };
    let mut back = vec![0u8; data.len()];
    tcp.read(&renewed, 0, &mut back).await.unwrap();
    assert!(back == data, "the renewed segment keeps its bytes");
    let reopened_header = DiskSegment::open(node.disk.path(), BackendChoice::Pread).unwrap().header();
    assert_eq!(reopened_header.segment, new_id, "the new id is durable in the file");
    assert!(matches!(node.registry.renew_disk(node.id, new_id), Err(TransferError::UnknownSegment { .. })));
}

/// Throughput of 4 MiB puts and gets over loopback TCP to a disk segment on
/// each backend (run with `cargo test -p mooncake-transfer --test
/// t26_disk_segments -- --ignored --nocapture`).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "a measurement, not a check"]
async fn throughput_of_4_mib_objects_over_tcp() {
    let rounds = 5 * (SEGMENT_BYTES >> 22) as usize;
    for choice in BACKENDS {
        let node = DiskNode::start(choice, SEGMENT_BYTES).await;
        let tcp = TcpTransport::new(TcpConfig::default()).unwrap();
        let (writer, reader) = (node.target(Access::Write), node.target(Access::Read));
        let data = pattern(1, 4 << 20);
        let started = std::time::Instant::now();
        for round in 0..rounds {
            tcp.write(&writer, ((round as u64) << 22) % SEGMENT_BYTES, &data).await.unwrap();
        }
        let write = (rounds * 4) as f64 / started.elapsed().as_secs_f64();
        let mut back = vec![0u8; data.len()];
        let started = std::time::Instant::now();
        for round in 0..rounds {
            tcp.read(&reader, ((round as u64) << 22) % SEGMENT_BYTES, &mut back).await.unwrap();
        }
        let read = (rounds * 4) as f64 / started.elapsed().as_secs_f64();
        assert!(back == data);
        println!("{choice:?}: 4 MiB put {write:.0} MiB/s, get {read:.0} MiB/s (4 lanes, loopback)");
    }
}

/// An engine that reaches `node`'s segments by the local route, and the
/// node's segment under `access` at an endpoint nothing listens on: a
/// request that took a socket would fail.
fn local_engine(node: &DiskNode) -> TransferEngine {
    let engine = TransferEngine::new(common::HOST_ID.to_owned(), Protocol::Auto, TcpConfig::default()).unwrap();
    engine.route_locally(node.registry.clone());
    engine
}

fn unreachable_target(node: &DiskNode, access: Access) -> RemoteSegment {
    RemoteSegment { endpoint: "127.0.0.1:1".to_owned(), ..node.target(access) }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_local_route_moves_bytes_of_a_segment_this_process_serves_without_a_socket() {
    for choice in BACKENDS {
        let node = DiskNode::start(choice, SEGMENT_BYTES).await;
        let engine = local_engine(&node);
        let (writer, reader) = (unreachable_target(&node, Access::Write), unreachable_target(&node, Access::Read));
        // Why: a store node's copy to its own disk (and its reads of it)
        // take no socket, for objects of one disk chunk and of several.
        for (i, len) in [1usize, 4096, (4 << 20) + 7, (9 << 20) + 5].into_iter().enumerate() {
            let offset = (i as u64) * BLOCK;
            let data = pattern(40 + i as u64, len);
            engine.write(&writer, offset, &data).await.unwrap_or_else(|e| panic!("{choice:?}: write of {len}: {e}"));
            assert!(node.local(offset, len).await == data, "{choice:?}: landed bytes of {len} differ");
            let mut back = vec![0u8; len];
            let crc = engine.read_checksummed(&reader, offset, &mut back).await.unwrap();
            assert!(back == data, "{choice:?}: read-back bytes of {len} differ");
            assert_eq!(crc, mooncake_segment::checksum::crc32c(&data));
        }
        let kinds: Vec<_> = engine.stats().snapshot().into_iter().map(|(kind, _, s)| (kind, s.errors)).collect();
        assert_eq!(kinds, vec![(TransportKind::Local, 0)], "{choice:?}: every move took the local route");
        assert_eq!(node.server.stats().ops, 0, "{choice:?}: the server saw no request");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_local_route_refuses_what_the_server_refuses_and_writes_nothing() {
    let node = DiskNode::start(BackendChoice::Pread, SEGMENT_BYTES).await;
    let engine = local_engine(&node);
    let payload = pattern(9, 5000);
    let refused = |err: TransferError| match err {
        TransferError::Remote { status, .. } => status,
        other => panic!("expected a refusal, got {other}"),
    };
    // Why: the masters' grant bounds what a store node writes even to its
    // own disk: an unaligned offset, padding past the capability, a READ
    // capability, none at all, a range past the segment.
    let mut writer = unreachable_target(&node, Access::Write);
    let err = engine.write(&writer, BLOCK + 1, &payload).await.unwrap_err();
    assert_eq!(refused(err), Status::OutOfRange, "unaligned");
    writer.capability = Some(common::grant(node.id, 0, 5000, Access::Write));
    assert_eq!(refused(engine.write(&writer, 0, &payload).await.unwrap_err()), Status::OutOfRange, "padding");
    let reader = unreachable_target(&node, Access::Read);
    assert_eq!(refused(engine.write(&reader, 0, &payload).await.unwrap_err()), Status::Unauthorized, "READ grant");
    let none = RemoteSegment { capability: None, ..unreachable_target(&node, Access::Write) };
    assert_eq!(refused(engine.write(&none, 0, &payload).await.unwrap_err()), Status::Unauthorized, "no grant");
    let past = engine.write(&unreachable_target(&node, Access::Write), SEGMENT_BYTES - BLOCK, &payload).await;
    assert_eq!(refused(past.unwrap_err()), Status::OutOfRange, "past the end");
    assert!(node.local(0, 4 * BLOCK as usize).await.iter().all(|b| *b == 0), "no byte was written");
    let tail = node.local(SEGMENT_BYTES - BLOCK, BLOCK as usize).await;
    assert!(tail.iter().all(|b| *b == 0), "no byte was written at the end");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_local_route_never_returns_a_corrupted_block_and_notes_it() {
    for choice in BACKENDS {
        let node = DiskNode::start(choice, SEGMENT_BYTES).await;
        let engine = local_engine(&node);
        let object_at = 1 << 20;
        let data = pattern(5, 256 * 1024);
        engine.write(&unreachable_target(&node, Access::Write), object_at, &data).await.unwrap();
        node.corrupt(object_at + 3 * BLOCK + 100);
        // Why: the bad bytes are never handed out, the error says read
        // another replica, and the range waits for the node's report.
        let mut back = vec![0u8; data.len()];
        let err = engine.read(&unreachable_target(&node, Access::Read), object_at, &mut back).await.unwrap_err();
        assert!(matches!(err, TransferError::Corrupt { .. }), "{choice:?}: {err}");
        assert_eq!(node.registry.take_corrupt(), vec![(node.id, object_at + 3 * BLOCK, BLOCK)], "{choice:?}");
    }
}
