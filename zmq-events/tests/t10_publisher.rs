//! The ZMQ PUB socket (`zmtp.rs`) on real TCP sockets, against subscribers
//! that speak ZMTP 3.0 as libzmq's SUB sockets do (written here byte by
//! byte; `python/tests/t98_zmq_events.py` checks pyzmq's), and the bridge's
//! refusal of endpoints other hosts can reach (issue 38, finding 5: one
//! subscriber that stopped reading stalled the whole feed, and
//! `--zmq tcp://0.0.0.0:P` published every key to anyone).
// Test support: a failed unwrap or expect is the test failing (the
// workspace denies them in library code: Cargo.toml [workspace.lints]).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use mooncake_client::{MasterClient, MasterClientConfig};
use mooncake_testkit::zmq_feed::{FeedSubscriber, closed_within};
use mooncake_zmq_events::zmtp::{Publisher, SUBSCRIBER_QUEUE_BYTES, TcpEndpoint};
use mooncake_zmq_events::{BridgeConfig, FeedError, FeedOptions, Sequence};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

const WAIT: Duration = Duration::from_secs(10);

async fn subscribe(publisher: &Publisher) -> FeedSubscriber {
    FeedSubscriber::connect(publisher.local_addr()).await
}

async fn wait_for_subscribers(publisher: &Publisher, n: usize) {
    tokio::time::timeout(WAIT, async {
        while publisher.subscribers() < n {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("subscribers attached");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscriber_that_stops_reading_is_disconnected_and_the_others_get_every_message() {
    let endpoint = TcpEndpoint::parse("tcp://127.0.0.1:0").expect("endpoint");
    let publisher = Publisher::bind(&endpoint).await.expect("bind");
    let mut reader = subscribe(&publisher).await;
    let mut stalled = subscribe(&publisher).await;
    wait_for_subscribers(&publisher, 2).await;
    // Enough to fill the stalled one's queue (and its socket buffers).
    let payload = Bytes::from(vec![9u8; 1 << 20]);
    let messages = SUBSCRIBER_QUEUE_BYTES / payload.len() + 64;
    let (progress, mut read) = tokio::sync::watch::channel(0u64);
    let read_all = tokio::spawn(async move {
        for i in 0..messages as u64 {
            let frames = reader.frames().await;
            assert_eq!(frames[1], i.to_be_bytes(), "in order, none missing");
            assert_eq!(frames[2].len(), 1 << 20);
            let _ = progress.send(i + 1);
        }
        reader
    });
    let mut dropped = 0;
    for i in 0..messages as u64 {
        // Publishing never waits: the publisher only queues. The test keeps
        // the reading subscriber's queue (bounded too) well below its bound.
        tokio::time::timeout(WAIT * 6, read.wait_for(|n| n + 16 >= i)).await.expect("the reader reads").expect("read");
        let d = publisher.publish(&[Bytes::new(), Bytes::copy_from_slice(&i.to_be_bytes()), payload.clone()]);
        dropped += d.dropped;
    }
    assert_eq!(dropped, 1, "the subscriber that stopped reading was disconnected");
    let _reader = tokio::time::timeout(WAIT * 6, read_all).await.expect("the reader got everything").expect("reader");
    assert_eq!(publisher.subscribers(), 1);
    // The stalled one's connection is closed: after what was buffered, EOF.
    assert!(stalled.closed_within(WAIT * 6).await, "the stalled subscriber's connection stayed open");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_that_is_not_a_subscriber_or_sends_huge_frames_is_closed() {
    let endpoint = TcpEndpoint::parse("tcp://127.0.0.1:0").expect("endpoint");
    let publisher = Publisher::bind(&endpoint).await.expect("bind");
    let mut garbage = TcpStream::connect(publisher.local_addr()).await.expect("connect");
    garbage.write_all(&[0x42; 64]).await.expect("not a greeting");
    assert!(closed_within(&mut garbage, WAIT).await, "a peer with a bad greeting was kept");
    let mut s = subscribe(&publisher).await;
    wait_for_subscribers(&publisher, 1).await;
    s.stream_mut().write_all(&[0x02]).await.expect("a long frame");
    s.stream_mut().write_all(&(1u64 << 40).to_be_bytes()).await.expect("of a terabyte");
    tokio::time::timeout(WAIT, async {
        while publisher.subscribers() > 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("a subscriber announcing a huge frame was dropped");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bridge_binds_an_address_other_hosts_reach_only_when_told_it_is_insecure() {
    let master = Arc::new(MasterClient::new(MasterClientConfig::new(vec!["127.0.0.1:1".into()])).expect("client"));
    let cfg = |endpoint: &str, insecure: bool| BridgeConfig {
        endpoint: endpoint.into(),
        prefix: String::new(),
        from_revision: 0,
        sequence: Sequence::Revision,
        options: FeedOptions { backend_id: "t10".into(), ..Default::default() },
        insecure,
        planted_resync_without_clear: false,
    };
    for endpoint in ["tcp://0.0.0.0:0", "tcp://*:0"] {
        let e = mooncake_zmq_events::run(master.clone(), cfg(endpoint, false), async {}).await.expect_err(endpoint);
        assert!(matches!(e, FeedError::Insecure { .. }), "{e}");
        assert!(e.to_string().contains("--insecure"), "{e}");
    }
    // With it, or on loopback, it binds (and stops at once here).
    mooncake_zmq_events::run(master.clone(), cfg("tcp://0.0.0.0:0", true), async {}).await.expect("insecure");
    mooncake_zmq_events::run(master.clone(), cfg("tcp://127.0.0.1:0", false), async {}).await.expect("loopback");
    let e = mooncake_zmq_events::run(master, cfg("ipc:///tmp/feed", false), async {}).await.expect_err("ipc");
    assert!(e.to_string().contains("tcp://HOST:PORT"), "{e}");
}
