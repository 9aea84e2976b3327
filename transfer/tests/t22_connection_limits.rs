//! The transfer server's connection limits on 127.0.0.1, with real sockets:
//! a flood of half-header connections from one address takes only that
//! address's share; silent and idle connections give their places to
//! newcomers; when every place is serving, a client is told BUSY (a live,
//! full node), not "gone", however many are refused at once; silent,
//! trickling and idle connections are closed after their timeouts, and
//! pooled clients reconnect without an error.
//!
//! The flooding peer connects from 127.0.0.2 (all of 127/8 is loopback on
//! Linux), the well-behaved client from 127.0.0.1, so the two count as
//! different peers. Every wait is for an event (EOF, a counter), bounded by
//! [`EVENT_WAIT`]; no sleep stands in for one.
// Test support: a failed unwrap or expect is the test failing (the
// workspace denies them in library code: Cargo.toml [workspace.lints]).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::net::{Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use common::{Node, request};
use mooncake_auth::capability::Access;
use mooncake_transfer::frame::{self, Op, RESPONSE_HEADER_BYTES, Status};
use mooncake_transfer::testing::pattern;
use mooncake_transfer::{ReadItem, ServerConfig, ServerStats, TcpConfig, TcpTransport, TransferError};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

const SEGMENT_BYTES: u64 = 8 << 20;

/// Upper bound of every wait for an event; generous for a loaded machine.
const EVENT_WAIT: Duration = Duration::from_secs(10);

/// The address the flooding peer connects from.
const FLOODER: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 2);

/// Limits long enough that nothing times out within a test about counts.
fn patient(connections_max: usize, peer_connections_max: usize) -> ServerConfig {
    ServerConfig {
        connections_max,
        peer_connections_max,
        header_timeout: Duration::from_secs(60),
        idle_timeout: Duration::from_secs(60),
        ..ServerConfig::default()
    }
}

/// A connection to `server` from `from` (any port).
async fn connect_from(from: Ipv4Addr, server: SocketAddr) -> TcpStream {
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind(SocketAddr::from((from, 0))).unwrap();
    socket.connect(server).await.unwrap()
}

/// Waits until the server's counters satisfy `cond`.
async fn wait_for_stats(node: &Node, what: &str, cond: impl Fn(&ServerStats) -> bool) -> ServerStats {
    let started = Instant::now();
    loop {
        let stats = node.server.stats();
        if cond(&stats) {
            return stats;
        }
        assert!(started.elapsed() < EVENT_WAIT, "timed out waiting for {what}; stats {stats:?}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Waits until the server closes `stream` (EOF or reset, after reading and
/// dropping anything it still sends) and returns how long that took.
async fn wait_for_close(stream: &mut TcpStream, what: &str) -> Duration {
    let started = Instant::now();
    let mut buf = [0u8; 1024];
    loop {
        match tokio::time::timeout(EVENT_WAIT, stream.read(&mut buf)).await {
            Err(_) => panic!("{what}: still open after {EVENT_WAIT:?}"),
            Ok(Ok(0) | Err(_)) => return started.elapsed(),
            Ok(Ok(_)) => {}
        }
    }
}

/// Reads one response header; panics if none comes.
async fn read_response(stream: &mut TcpStream) -> frame::ResponseHeader {
    let mut raw = [0u8; RESPONSE_HEADER_BYTES];
    tokio::time::timeout(EVENT_WAIT, stream.read_exact(&mut raw)).await.expect("response in time").unwrap();
    frame::decode_response(&raw).unwrap()
}

async fn round_trip(tcp: &TcpTransport, node: &Node, seed: u64, len: usize) {
    let data = pattern(seed, len);
    let (write, read) = (node.capability(Access::Write), node.capability(Access::Read));
    tcp.write_to(&node.target.endpoint, node.target.id, Some(&write), 4096, &data).await.expect("write");
    let mut back = vec![0u8; len];
    tcp.read_from(&node.target.endpoint, node.target.id, Some(&read), 4096, &mut back).await.expect("read");
    assert!(back == data, "bytes differ after a round trip");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_from_one_peer_takes_only_its_share_and_others_still_transfer() {
    let node = Node::anonymous_with(SEGMENT_BYTES, patient(64, 8)).await;
    let addr = node.server.local_addr();

    // Phase 1: the flooder fills its share with sockets that send 10 bytes
    // of a header and stall (a request in progress: never replaced).
    let mut held = Vec::new();
    for _ in 0..8 {
        let mut stream = connect_from(FLOODER, addr).await;
        stream.write_all(&request(Op::Read, 1, node.target.id, 0, 1)[..10]).await.unwrap();
        held.push(stream);
    }
    wait_for_stats(&node, "the flood's 8 connections to be admitted and reading headers", |s| {
        s.connections_open == 8 && s.connections_waiting == 0
    })
    .await;

    // Phase 2: one more from the same address is answered BUSY and closed,
    // at once, without a request.
    let mut extra = connect_from(FLOODER, addr).await;
    let answer = read_response(&mut extra).await;
    assert_eq!((answer.status, answer.request_id, answer.length), (Status::Busy, 0, 0));
    wait_for_close(&mut extra, "the refused connection").await;
    let stats = node.server.stats();
    assert_eq!((stats.refused_peer_limit, stats.refused_total_limit), (1, 0), "{stats:?}");

    // Phase 3: why the per-peer limit exists: another client (another
    // address) still writes and reads, over several lanes.
    let tcp = TcpTransport::new(TcpConfig { split_bytes: 4096, ..TcpConfig::default() }).unwrap();
    round_trip(&tcp, &node, 1, 1 << 20).await;
    assert_eq!(node.server.stats().errors, 0);
    drop(held);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_the_total_limit_a_client_is_told_busy_not_gone_and_recovers_when_a_place_frees() {
    let node = Node::anonymous_with(SEGMENT_BYTES, patient(4, 4)).await;
    let addr = node.server.local_addr();
    // Every place serving: each holds half a request header.
    let mut held = Vec::new();
    for _ in 0..4 {
        let mut stream = connect_from(FLOODER, addr).await;
        stream.write_all(&request(Op::Read, 1, node.target.id, 0, 1)[..10]).await.unwrap();
        held.push(stream);
    }
    wait_for_stats(&node, "4 connections to be admitted and reading headers", |s| {
        s.connections_open == 4 && s.connections_waiting == 0
    })
    .await;

    // Why: a full node is alive; the client must say so and call it
    // retryable. (One lane, so that one free place is enough below.)
    let tcp = TcpTransport::new(TcpConfig { lanes: 1, ..TcpConfig::default() }).unwrap();
    let mut buf = vec![0u8; 4096];
    let (write, read) = (node.capability(Access::Write), node.capability(Access::Read));
    let err = tcp.read_from(&node.target.endpoint, node.target.id, Some(&read), 0, &mut buf).await.unwrap_err();
    assert!(matches!(err, TransferError::Busy { .. }), "read: {err}");
    assert!(err.is_retryable());
    assert!(err.to_string().contains("connection limit"), "{err}");
    let err =
        tcp.write_to(&node.target.endpoint, node.target.id, Some(&write), 0, &pattern(2, 100_000)).await.unwrap_err();
    assert!(matches!(err, TransferError::Busy { .. }), "write: {err}");
    let mut items = [ReadItem { segment: node.target.id, capability: Some(read), offset: 0, buf: &mut buf }];
    let results = tcp.read_pipelined(&node.target.endpoint, &mut items).await;
    assert!(matches!(results[0], Err(TransferError::Busy { .. })), "pipelined read: {:?}", results[0]);
    let stats = node.server.stats();
    assert_eq!((stats.refused_total_limit, stats.refused_peer_limit), (3, 0), "{stats:?}");
    assert_eq!(stats.connections, 4, "refused connections are not served");

    // Many refused at once (more than linger after their answer): every
    // one is still told BUSY, none just closed.
    let mut refused = Vec::new();
    for _ in 0..100 {
        refused.push(TcpStream::connect(addr).await.unwrap());
    }
    for (i, stream) in refused.iter_mut().enumerate() {
        let answer = read_response(stream).await;
        assert_eq!(answer.status, Status::Busy, "refused connection {i}");
    }

    // Once a place frees, the same client gets in.
    held.pop();
    wait_for_stats(&node, "a place to free", |s| s.connections_open == 3).await;
    round_trip(&tcp, &node, 3, 10_000).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_and_idle_connections_give_their_places_to_newcomers() {
    let node = Node::anonymous_with(SEGMENT_BYTES, patient(4, 4)).await;
    let addr = node.server.local_addr();
    // Why: idle sockets from many addresses (or one) used to hold every
    // place for as long as their owner kept reconnecting, and every get
    // failed. Now a flood of them only replaces its own sockets.
    let mut silent = Vec::new();
    for _ in 0..4 {
        silent.push(connect_from(FLOODER, addr).await);
    }
    wait_for_stats(&node, "4 silent connections to be admitted", |s| s.connections_open == 4).await;
    let tcp = TcpTransport::new(TcpConfig { lanes: 1, ..TcpConfig::default() }).unwrap();
    round_trip(&tcp, &node, 4, 10_000).await;
    let stats = node.server.stats();
    assert!(stats.replaced >= 1, "{stats:?}");
    assert_eq!((stats.refused_total_limit, stats.refused_peer_limit), (0, 0), "nobody was refused: {stats:?}");
    // The oldest silent one went first.
    wait_for_close(&mut silent[0], "the replaced silent connection").await;
    // More silent sockets keep replacing each other, never the client's
    // pooled lane while it serves, and the client goes on working.
    for _ in 0..20 {
        silent.push(connect_from(FLOODER, addr).await);
    }
    round_trip(&tcp, &node, 5, 10_000).await;
    assert!(node.server.stats().connections_open <= 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_trickling_and_idle_connections_are_closed_after_their_timeouts() {
    let header_timeout = Duration::from_millis(300);
    let idle_timeout = Duration::from_millis(1_000);
    let config = ServerConfig { header_timeout, idle_timeout, ..ServerConfig::default() };
    let node = Node::anonymous_with(SEGMENT_BYTES, config).await;
    let addr = node.server.local_addr();
    node.memory.write_at(0, b"ok").unwrap();

    // A connection that never sends a byte must send its first header within
    // the header timeout of the accept.
    let started = Instant::now();
    let mut silent = TcpStream::connect(addr).await.unwrap();
    let silent_close = async move {
        wait_for_close(&mut silent, "the silent connection").await;
        started.elapsed()
    };

    // A half header stalls: closed after the header timeout.
    let started = Instant::now();
    let mut half = TcpStream::connect(addr).await.unwrap();
    half.write_all(&request(Op::Read, 1, node.target.id, 0, 2)[..10]).await.unwrap();
    let half_close = async move {
        wait_for_close(&mut half, "the half-header connection").await;
        started.elapsed()
    };

    // A connection served once and then quiet: closed after the idle timeout.
    let mut idle = TcpStream::connect(addr).await.unwrap();
    idle.write_all(&request(Op::Read, 2, node.target.id, 0, 2)).await.unwrap();
    assert_eq!(read_response(&mut idle).await.status, Status::Ok);
    let mut body = [0u8; 2];
    idle.read_exact(&mut body).await.unwrap();
    // Measured from when this side read the answer: the server's idle
    // clock started when it flushed it, a little earlier.
    let idle_close = async move { wait_for_close(&mut idle, "the idle connection").await };

    // A steady client stays served for longer than both timeouts.
    let mut busy = TcpStream::connect(addr).await.unwrap();
    let steady = async move {
        let until = Instant::now() + idle_timeout + header_timeout * 2;
        let mut request_id = 10;
        while Instant::now() < until {
            request_id += 1;
            busy.write_all(&request(Op::Read, request_id, node.target.id, 0, 2)).await.unwrap();
            assert_eq!(read_response(&mut busy).await.status, Status::Ok, "request {request_id}");
            busy.read_exact(&mut body).await.unwrap();
            // Requests 100 ms apart: the idle timeout restarts after each.
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        (request_id - 10, busy)
    };

    let (silent_after, half_after, idle_after, (steady_requests, _busy)) =
        tokio::join!(silent_close, half_close, idle_close, steady);
    assert!(silent_after >= header_timeout, "silent connection closed early, after {silent_after:?}");
    assert!(half_after >= header_timeout, "half-header connection closed early, after {half_after:?}");
    assert!(silent_after < idle_timeout, "a silent new connection waits the header timeout, not the idle one");
    assert!(
        idle_after >= idle_timeout - Duration::from_millis(100),
        "idle connection closed early, after {idle_after:?}"
    );
    assert!(steady_requests >= 10, "the steady client made only {steady_requests} requests");

    let stats = node.server.stats();
    assert_eq!((stats.header_timeouts, stats.idle_closed), (2, 1), "{stats:?}");
    assert_eq!(stats.connections_open, 1, "only the steady connection is left: {stats:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pooled_client_reconnects_after_the_server_closes_its_idle_lanes() {
    let config = ServerConfig { idle_timeout: Duration::from_millis(200), ..ServerConfig::default() };
    let node = Node::anonymous_with(SEGMENT_BYTES, config).await;
    let tcp = TcpTransport::new(TcpConfig::default()).unwrap();
    round_trip(&tcp, &node, 4, 1 << 20).await;
    let lanes = node.server.stats().connections;

    // Why: idle reaping must cost a reconnect, never a failed transfer.
    wait_for_stats(&node, "every pooled lane to be closed as idle", |s| s.idle_closed == lanes).await;
    round_trip(&tcp, &node, 5, 1 << 20).await;
    let stats = node.server.stats();
    assert_eq!(stats.errors, 0, "{stats:?}");
    assert!(stats.connections > lanes, "the client reconnected: {stats:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_limits_are_refused_at_bind_with_the_bad_value_named() {
    let registry = std::sync::Arc::new(mooncake_transfer::SegmentRegistry::new());
    let base = ServerConfig::default();
    for (config, named) in [
        (ServerConfig { connections_max: 0, ..base.clone() }, "connections_max = 0"),
        (ServerConfig { peer_connections_max: base.connections_max + 1, ..base.clone() }, "peer_connections_max"),
        (ServerConfig { header_timeout: Duration::ZERO, ..base.clone() }, "header_timeout"),
        (ServerConfig { idle_timeout: Duration::ZERO, ..base.clone() }, "idle_timeout"),
    ] {
        let err = mooncake_transfer::TransferServer::bind_with_config(
            "127.0.0.1:0".parse().unwrap(),
            registry.clone(),
            config,
        )
        .await
        .unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput);
        assert!(err.to_string().contains(named), "{err}");
    }
}
