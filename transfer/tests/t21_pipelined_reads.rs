//! Pipelined and batched reads on 127.0.0.1: many small READs on one
//! connection with per-item outcomes, batches larger than the socket
//! buffers, dead and hung peers, and the engine's batch read that mixes
//! pipelined, chunked and refused items.

mod common;

use std::time::{Duration, Instant};

use common::{Node, one_lane, request};
use mooncake_auth::capability::Access;
use mooncake_segment::SegmentId;
use mooncake_transfer::frame::Status;
use mooncake_transfer::testing::pattern;
use mooncake_transfer::{BatchRead, Protocol, ReadItem, TcpConfig, TcpTransport, TransferEngine, TransferError};

const SEGMENT_BYTES: u64 = 96 << 20;
const ITEM_BYTES: usize = 4096;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pipeline_reads_every_item_and_a_refused_item_fails_alone() {
    let node = Node::anonymous(SEGMENT_BYTES).await;
    let data = pattern(3, 200 * ITEM_BYTES);
    node.memory.write_at(0, &data).unwrap();
    let tcp = one_lane();
    let capability = Some(node.capability(Access::Read));

    // Why: 150 items span three pipelines on one lane; an unknown segment and
    // an out-of-range item in the middle must not disturb the items after them.
    let mut bufs: Vec<Vec<u8>> = (0..150).map(|_| vec![0u8; ITEM_BYTES]).collect();
    let mut items: Vec<ReadItem<'_>> = bufs
        .iter_mut()
        .enumerate()
        .map(|(i, buf)| ReadItem {
            segment: node.target.id,
            capability,
            offset: (149 - i as u64) * ITEM_BYTES as u64,
            buf,
        })
        .collect();
    items[40].segment = SegmentId(999);
    items[70].offset = SEGMENT_BYTES;
    let results = tcp.read_pipelined(&node.target.endpoint, &mut items).await;
    drop(items);

    assert_eq!(results.len(), 150);
    for (i, (result, buf)) in results.iter().zip(&bufs).enumerate() {
        match i {
            40 => assert!(matches!(result, Err(TransferError::Remote { status: Status::UnknownSegment, .. }))),
            70 => assert!(matches!(result, Err(TransferError::Remote { status: Status::OutOfRange, .. }))),
            _ => {
                let start = (149 - i) * ITEM_BYTES;
                let expected = &data[start..start + ITEM_BYTES];
                assert!(buf[..] == expected[..], "item {i} read other bytes");
                assert_eq!(*result.as_ref().unwrap(), crc32c::crc32c(expected), "crc of item {i}");
            }
        }
    }
    let stats = node.server.stats();
    assert_eq!(stats.connections, 1, "every pipeline used the one lane's connection");
    assert_eq!((stats.ops, stats.read_bytes), (150, 148 * ITEM_BYTES as u64));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pipeline_larger_than_the_socket_buffers_completes() {
    let node = Node::anonymous(SEGMENT_BYTES).await;
    let item_bytes = 1 << 20;
    let data = pattern(9, 64 * item_bytes);
    node.memory.write_at(0, &data).unwrap();
    let tcp = one_lane();
    let capability = Some(node.capability(Access::Read));

    // Why: 64 MiB of responses on one connection; the client must read while
    // the server writes or both sides would stall on full buffers.
    let mut back = vec![0u8; data.len()];
    let mut items: Vec<ReadItem<'_>> = back
        .chunks_mut(item_bytes)
        .enumerate()
        .map(|(i, buf)| ReadItem { segment: node.target.id, capability, offset: (i * item_bytes) as u64, buf })
        .collect();
    let results = tcp.read_pipelined(&node.target.endpoint, &mut items).await;
    drop(items);
    assert!(results.iter().all(Result::is_ok), "{:?}", results.iter().find(|r| r.is_err()));
    assert!(back == data, "bytes differ after a 64 MiB pipeline");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pipeline_to_a_dead_or_hung_peer_fails_every_item_without_hanging() {
    let node = Node::anonymous(SEGMENT_BYTES).await;
    let endpoint = node.target.endpoint.clone();
    let segment = node.target.id;
    let capability = Some(node.capability(Access::Read));
    let tcp = TcpTransport::new(TcpConfig { lanes: 1, request_timeout: Duration::from_secs(2), ..Default::default() })
        .unwrap();
    let mut bufs: Vec<Vec<u8>> = (0..8).map(|_| vec![0u8; ITEM_BYTES]).collect();
    let mut items: Vec<ReadItem<'_>> =
        bufs.iter_mut().map(|buf| ReadItem { segment, capability, offset: 0, buf }).collect();
    assert!(tcp.read_pipelined(&endpoint, &mut items).await.iter().all(Result::is_ok));

    // Why: the pooled connection now points at a server that is gone
    // (shutdown returns once every connection is closed).
    node.server.shutdown().await;
    let started = Instant::now();
    let results = tcp.read_pipelined(&endpoint, &mut items).await;
    assert!(results.iter().all(|r| matches!(r, Err(TransferError::PeerGone { .. }))), "{results:?}");
    assert!(started.elapsed() < Duration::from_secs(1), "took {:?}", started.elapsed());

    // Why: a peer that accepts but never answers costs one timeout per pipeline.
    let (hung, hold) = common::hung_peer().await;
    let tcp =
        TcpTransport::new(TcpConfig { request_timeout: Duration::from_millis(300), ..Default::default() }).unwrap();
    let results = tcp.read_pipelined(&hung, &mut items).await;
    assert!(results.iter().all(|r| matches!(r, Err(TransferError::Timeout { after_ms: 300, .. }))), "{results:?}");
    hold.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_engine_batch_mixes_pipelined_chunked_and_refused_reads() {
    let (a, b) = (Node::anonymous(SEGMENT_BYTES).await, Node::anonymous(SEGMENT_BYTES).await);
    let (small, large) = (pattern(1, 64 * ITEM_BYTES), pattern(2, 3 << 20));
    a.memory.write_at(0, &small).unwrap();
    b.memory.write_at(ITEM_BYTES as u64, &large).unwrap();
    b.memory.write_at(0, &small[..ITEM_BYTES]).unwrap();
    let engine = TransferEngine::new("other-host".into(), Protocol::Tcp, TcpConfig::default()).unwrap();

    // Why: 64 small reads from `a`, one from `b`, a 3 MiB read (above the
    // split size, so chunked over lanes), an unknown segment and a range past
    // the segment's end, each with its own outcome and in order.
    let mut smalls: Vec<Vec<u8>> = (0..65).map(|_| vec![0u8; ITEM_BYTES]).collect();
    let mut big = vec![0u8; large.len()];
    let (mut unknown, mut past_end) = (vec![0u8; 16], vec![0u8; 16]);
    let unknown_target = a.unknown_target();
    let (a_reader, b_reader) = (a.reader(), b.reader());
    let mut items: Vec<BatchRead<'_>> = Vec::new();
    let (from_b, from_a) = smalls.split_at_mut(1);
    for (i, buf) in from_a.iter_mut().enumerate() {
        items.push(BatchRead { target: &a_reader, offset: (i * ITEM_BYTES) as u64, buf });
    }
    items.push(BatchRead { target: &b_reader, offset: 0, buf: &mut from_b[0] });
    items.push(BatchRead { target: &b_reader, offset: ITEM_BYTES as u64, buf: &mut big });
    items.push(BatchRead { target: &unknown_target, offset: 0, buf: &mut unknown });
    items.push(BatchRead { target: &a_reader, offset: SEGMENT_BYTES - 8, buf: &mut past_end });
    let results = engine.read_batch_checksummed(items).await;

    assert_eq!(results.len(), 68);
    for (i, buf) in from_a.iter().enumerate() {
        let expected = &small[i * ITEM_BYTES..(i + 1) * ITEM_BYTES];
        assert!(buf[..] == expected[..], "item {i} read other bytes");
        assert_eq!(*results[i].as_ref().unwrap(), crc32c::crc32c(expected));
    }
    assert_eq!(*results[64].as_ref().unwrap(), crc32c::crc32c(&small[..ITEM_BYTES]));
    assert_eq!(from_b[0][..], small[..ITEM_BYTES]);
    assert_eq!(*results[65].as_ref().unwrap(), crc32c::crc32c(&large));
    assert!(big == large, "the chunked read differs");
    assert!(matches!(results[66], Err(TransferError::Remote { status: Status::UnknownSegment, .. })));
    assert!(matches!(results[67], Err(TransferError::Memory(_))), "{:?}", results[67]);
    assert_eq!(a.server.stats().read_bytes, 64 * ITEM_BYTES as u64, "the range past the end never left");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_answer_is_not_held_back_behind_a_pipelined_write() {
    use mooncake_transfer::frame::{self, Op, RESPONSE_HEADER_BYTES};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let node = Node::anonymous(SEGMENT_BYTES).await;
    node.memory.write_at(0, b"before").unwrap();
    let header = |op, request_id, offset, length| request(op, request_id, node.target.id, offset, length);
    let mut stream = tokio::net::TcpStream::connect(node.server.local_addr()).await.unwrap();
    // Why: the server holds READ answers back while further requests are
    // buffered; a client that sends a WRITE header and waits for the READ's
    // answer before the payload must still get it, not a deadlock.
    let mut both = header(Op::Read, 1, 0, 6).to_vec();
    both.extend_from_slice(&header(Op::Write, 2, 4096, 5));
    stream.write_all(&both).await.unwrap();
    let mut answer = [0u8; RESPONSE_HEADER_BYTES + 6];
    tokio::time::timeout(Duration::from_secs(5), stream.read_exact(&mut answer))
        .await
        .expect("the READ's answer was held back behind the WRITE")
        .unwrap();
    assert_eq!(&answer[RESPONSE_HEADER_BYTES..], b"before");
    stream.write_all(b"after").await.unwrap();
    let mut ack = [0u8; RESPONSE_HEADER_BYTES];
    stream.read_exact(&mut ack).await.unwrap();
    assert_eq!(frame::decode_response(&ack).unwrap().request_id, 2);
    let mut landed = [0u8; 5];
    node.memory.read_at(4096, &mut landed).unwrap();
    assert_eq!(&landed, b"after");
}
