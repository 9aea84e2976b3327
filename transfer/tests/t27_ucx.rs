//! The UCX route (feature `ucx`): the conformance suite through the engine
//! with protocol `ucx` against a store node that serves UCX (reads one-sided
//! over UCX, writes over TCP), the keys a node hands out only under a READ
//! grant, fallback to TCP where a node serves no UCX, and a read from a
//! node whose UCX worker is gone failing instead of hanging.
//!
//! UCX picks its transports from `UCX_TLS` (unset: every one it finds);
//! `.ci/run` runs this file with `UCX_TLS=tcp` and with `UCX_TLS=posix,cma`
//! (shared memory), each with `self` left out, so the bytes really cross a
//! transport between two workers.
#![cfg(feature = "ucx")]

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{HOST_ID, Node, grant};
use mooncake_auth::capability::Access;
use mooncake_transfer::frame::{self, Status};
use mooncake_transfer::testing::{self, SUITE_SEGMENT_MIN_BYTES};
use mooncake_transfer::ucx::{UcxExports, UcxWorker};
use mooncake_transfer::{BatchRead, Protocol, TcpConfig, TransferEngine, TransferError, TransportKind};

/// A node whose registry also serves UCX.
async fn ucx_node(size: u64) -> (Node, Arc<UcxExports>) {
    let node = Node::anonymous(size).await;
    let exports =
        Arc::new(UcxExports::new(UcxWorker::start().unwrap_or_else(|e| panic!("UCX starts (see UCX_TLS): {e}"))));
    assert!(node.registry.serve_ucx(exports.clone()));
    (node, exports)
}

fn ucx_engine() -> TransferEngine {
    TransferEngine::new(HOST_ID.to_owned(), Protocol::Ucx, TcpConfig::default())
        .unwrap_or_else(|e| panic!("engine with UCX: {e}"))
}

/// (bytes, ops) the engine moved over `kind`, reads and writes together.
fn moved(engine: &TransferEngine, kind: TransportKind) -> (u64, u64) {
    engine.stats().snapshot().into_iter().filter(|(k, _, _)| *k == kind).fold((0, 0), |(bytes, ops), (_, _, peer)| {
        (bytes + peer.read_bytes + peer.written_bytes, ops + peer.reads + peer.writes)
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn engine_over_ucx_conforms_reading_one_sided() {
    let (node, _exports) = ucx_node(SUITE_SEGMENT_MIN_BYTES).await;
    let engine = ucx_engine();
    let fixture = node.fixture(&engine);
    testing::run_all(&fixture).await;
    let stats = node.server.stats();
    assert!(stats.written_bytes > 0, "writes go over TCP, where the node checks them");
    assert_eq!(stats.read_bytes, 0, "no read went over the TCP lanes");
    assert_eq!(stats.ucx_keys, 1, "the segment's key was asked for once, then cached");
    let (ucx_bytes, _) = moved(&engine, TransportKind::Ucx);
    assert!(ucx_bytes > 8 << 20, "the suite's reads moved over UCX: {ucx_bytes} bytes");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_without_ucx_is_read_over_tcp() {
    let node = Node::anonymous(1 << 20).await;
    let engine = ucx_engine();
    let data = testing::pattern(11, 300_000);
    engine.write(&node.writer(), 4096, &data).await.unwrap();
    for _ in 0..2 {
        let mut back = vec![0u8; data.len()];
        engine.read(&node.reader(), 4096, &mut back).await.unwrap();
        assert!(back == data, "bytes read over the TCP fallback differ");
    }
    assert_eq!(node.server.stats().read_bytes, 2 * data.len() as u64, "both reads went over TCP");
    assert_eq!(node.server.stats().ucx_keys, 0);
    assert_eq!(moved(&engine, TransportKind::Ucx), (0, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_key_is_handed_out_only_under_a_read_grant() {
    let (node, _exports) = ucx_node(1 << 20).await;
    let engine = ucx_engine();
    let mut forged = node.reader();
    forged.capability = Some(grant(node.target.id, 0, 1 << 20, Access::Write));
    let mut none = node.reader();
    none.capability = None;
    for (what, target) in [("a WRITE grant", forged), ("no grant", none)] {
        let mut buf = vec![0u8; 4096];
        match engine.read(&target, 0, &mut buf).await {
            Err(TransferError::Remote { status: Status::Unauthorized, .. }) => {}
            other => panic!("a key request under {what} must be UNAUTHORIZED, got {other:?}"),
        }
    }
    assert_eq!(node.server.stats().unauthorized, 2);
    assert_eq!(moved(&engine, TransportKind::Ucx).0, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_from_a_node_whose_ucx_worker_is_gone_fails_instead_of_hanging() {
    let (node, exports) = ucx_node(1 << 20).await;
    let engine = ucx_engine();
    let data = testing::pattern(5, 65_536);
    engine.write(&node.writer(), 0, &data).await.unwrap();
    let mut back = vec![0u8; data.len()];
    engine.read(&node.reader(), 0, &mut back).await.unwrap();
    assert!(back == data);
    // The node goes away, UCX worker and all, while the client still holds
    // the segment's key: its worker thread stops with the last handle.
    let Node { server, registry, memory, target } = node;
    let exports_alive = Arc::downgrade(&exports);
    drop((server, registry, exports, memory));
    // Connection tasks let go of the registry as they wind down; the last
    // one joins the worker thread, after its worker is destroyed.
    let gone_by = std::time::Instant::now() + Duration::from_secs(10);
    while exports_alive.strong_count() > 0 {
        assert!(std::time::Instant::now() < gone_by, "the node's connections never let go of its registry");
        tokio::task::yield_now().await;
    }
    let mut reader = target.clone();
    reader.capability = Some(grant(target.id, 0, 1 << 20, Access::Read));
    let started = std::time::Instant::now();
    let result = tokio::time::timeout(Duration::from_secs(60), engine.read(&reader, 0, &mut back)).await;
    let result = result.expect("a read from a vanished UCX peer must not hang");
    match result {
        Err(TransferError::PeerGone { .. } | TransferError::Timeout { .. }) => {}
        other => panic!("a read from a node whose UCX worker is gone must fail as PeerGone or Timeout: {other:?}"),
    }
    eprintln!("failed after {:?}", started.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batched_small_reads_go_over_ucx_too() {
    let (node, _exports) = ucx_node(4 << 20).await;
    let engine = ucx_engine();
    let values: Vec<Vec<u8>> = (0..16).map(|i| testing::pattern(100 + i, 4096 + i as usize * 512)).collect();
    let mut offset = 0u64;
    let mut offsets = Vec::new();
    for value in &values {
        engine.write(&node.writer(), offset, value).await.unwrap();
        offsets.push(offset);
        offset += (value.len() as u64).next_multiple_of(4096);
    }
    let reader = node.reader();
    let mut bufs: Vec<Vec<u8>> = values.iter().map(|v| vec![0u8; v.len()]).collect();
    let items = bufs
        .iter_mut()
        .zip(&offsets)
        .map(|(buf, &offset)| BatchRead { target: &reader, offset, buf: buf.as_mut_slice() })
        .collect();
    let results = engine.read_batch_checksummed(items).await;
    for (i, (result, value)) in results.iter().zip(&values).enumerate() {
        let crc = result.as_ref().unwrap_or_else(|e| panic!("item {i}: {e}"));
        assert_eq!(*crc, mooncake_segment::checksum::crc32c(value), "item {i}'s checksum");
        assert!(bufs[i] == *value, "item {i}'s bytes");
    }
    assert_eq!(node.server.stats().read_bytes, 0, "no item of the batch went over the TCP lanes");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_given_up_mid_flight_leaves_the_buffer_alone_and_the_route_working() {
    let size = 32 << 20;
    let (node, _exports) = ucx_node(size as u64).await;
    let engine = ucx_engine();
    let data = testing::pattern(9, size);
    engine.write(&node.writer(), 0, &data).await.unwrap();
    let mut warm = vec![0u8; 4096];
    engine.read(&node.reader(), 0, &mut warm).await.unwrap();
    // Reads of 32 MiB given up after 1 ms, over and over: each drop ends
    // the read's endpoint and returns only once UCX has let go of the
    // buffer, which is then freed (a write after that would be a
    // use-after-free; the allocator reuses the memory at once).
    let mut given_up = 0;
    let reader = node.reader();
    for _ in 0..8 {
        let mut buf = vec![0u8; size];
        let read = engine.read(&reader, 0, &mut buf);
        if tokio::time::timeout(Duration::from_millis(1), read).await.is_err() {
            given_up += 1;
        }
        drop(buf);
        let mut filler = vec![0xEEu8; size];
        std::hint::black_box(&mut filler);
    }
    assert!(given_up > 0, "no read was slow enough to be given up; the test proves nothing");
    let mut back = vec![0u8; size];
    engine.read(&node.reader(), 0, &mut back).await.unwrap();
    assert!(back == data, "a read after the given-up ones returned other bytes");
}

#[test]
fn ucx_keys_round_trip_and_malformed_ones_are_refused() {
    let key = frame::UcxKey { worker: vec![1; 77], rkey: vec![2; 33], base: 0xDEAD_BEEF };
    let bytes = frame::encode_ucx_key(&key);
    assert_eq!(frame::decode_ucx_key(&bytes), Some(key));
    for cut in 0..bytes.len() {
        assert_eq!(frame::decode_ucx_key(&bytes[..cut]), None, "a key cut at {cut} bytes");
    }
    let mut longer = bytes.clone();
    longer.push(0);
    assert_eq!(frame::decode_ucx_key(&longer), None, "trailing bytes");
    let empty_rkey = frame::encode_ucx_key(&frame::UcxKey { worker: vec![1], rkey: vec![], base: 0 });
    assert_eq!(frame::decode_ucx_key(&empty_rkey), None, "an empty remote key");
}

/// Issue 38, finding 4: over UCX's TCP and shared-memory transports UCX
/// emulates RMA, and a key holder read the store node's heap (a get at
/// 0x1000 crashed it). The worker says which transports it opened and
/// whether any does RMA in a NIC; store nodes refuse `--ucx` without one
/// (`client/src/store_node/local_segment.rs`). Here (`UCX_TLS` without
/// rc or dc, as `.ci/run` sets it) none does.
#[test]
fn the_worker_tells_emulated_rma_from_a_nics() {
    let worker = UcxWorker::start().unwrap_or_else(|e| panic!("UCX starts (see UCX_TLS): {e}"));
    let transports = worker.transports().to_vec();
    assert!(!transports.is_empty(), "UCX listed no transport");
    assert!(transports.iter().all(|t| t.contains('/')), "{transports:?}");
    let tls = std::env::var("UCX_TLS").unwrap_or_default();
    if !tls.is_empty() && !["rc", "dc", "gga", "ib", "all", "^"].iter().any(|t| tls.contains(t)) {
        assert!(!worker.has_hardware_rma(), "UCX_TLS={tls} has no RMA in a NIC, yet {transports:?} said so");
    }
}
