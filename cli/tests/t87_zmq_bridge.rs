//! The ZMQ KV-event bridge (`mooncake events`, docs/EVENTS.md "The ZMQ
//! feed") across a failover and a resync, judged as a router judges it: a
//! subscriber folds every message it got (stored adds a key, removed takes
//! it away, cleared empties) and must end holding exactly the keys the
//! cluster lists. The bridge streams from one master; that master (the
//! leader) is killed, keys are removed and stored while it is down, far
//! more than its watch history keeps, and it comes back: the bridge's
//! next watch is told its revision is gone and it resyncs ("cleared", then
//! the listing) to the subscriber that stayed connected. The same run with
//! the planted bug (a resync without "cleared") leaves the removed keys in
//! the subscriber's view, and the checker says so.
// Test support: a failed unwrap or expect is the test failing (the
// workspace denies them in library code: Cargo.toml [workspace.lints]).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use mooncake_client::{Client, ClientConfig, MasterClient, MasterClientConfig, PutOptions};
use mooncake_testkit::zmq_feed::{FeedMessage, FeedSubscriber, fold};
use mooncake_testkit::{Cluster, free_port};
use mooncake_zmq_events::{BridgeConfig, FeedOptions, Published, Sequence};

const BIN: &str = env!("CARGO_BIN_EXE_mooncake");
const T: Duration = Duration::from_secs(30);

/// What the subscriber saw and what the cluster lists at the end.
struct Run {
    seen: Vec<FeedMessage>,
    listed: BTreeSet<String>,
    published: Published,
}

/// The checker: the subscriber's folded view is the cluster's listing, and
/// the sequence frames rise.
fn feed_matches_store(run: &Run) -> Result<(), String> {
    if !run.seen.windows(2).all(|w| w[0].sequence < w[1].sequence) {
        return Err("the sequence frames do not rise".into());
    }
    let view = fold(&run.seen);
    let stale: Vec<&String> = view.difference(&run.listed).collect();
    let missing: Vec<&String> = run.listed.difference(&view).collect();
    match stale.is_empty() && missing.is_empty() {
        true => Ok(()),
        false => Err(format!("the subscriber holds keys the cluster does not: {stale:?}; misses: {missing:?}")),
    }
}

/// Reads messages into `seen` until `done` holds of the folded view.
async fn read_until(
    sub: &mut FeedSubscriber,
    seen: &mut Vec<FeedMessage>,
    what: &str,
    done: impl Fn(&BTreeSet<String>) -> bool,
) {
    tokio::time::timeout(T, async {
        while !done(&fold(seen)) {
            if let Some(m) = sub.next(Duration::from_millis(200)).await {
                seen.push(m);
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("{what} within 30 s; the subscriber saw {seen:?}"));
}

async fn bridge_through_a_failover_and_a_resync(planted: bool) -> Run {
    let mut cluster = Cluster::builder()
        .masters(3)
        .stores(1)
        .segment_size("64MiB")
        .arg("--watch-history-events=4")
        .arg("--default_kv_lease_ttl=1")
        .binary(BIN)
        .start();
    let (leader, _) = cluster.wait_for_leader(T).await;
    cluster.wait_for_segments(1, T).await;
    let client = Client::connect(ClientConfig::new(cluster.addrs())).await.expect("client");
    let opts = PutOptions { replicas: 1, ..Default::default() };
    // The bridge watches through the leader alone: its failover is the bridge's.
    let source = cluster.addrs()[(leader - 1) as usize].clone();
    let master = Arc::new(MasterClient::new(MasterClientConfig::new(vec![source])).expect("master client"));
    let port = free_port().expect("a free port");
    let cfg = BridgeConfig {
        endpoint: format!("tcp://127.0.0.1:{port}"),
        prefix: "z/".into(),
        from_revision: 0,
        sequence: Sequence::Revision,
        options: FeedOptions { backend_id: "t87".into(), ..Default::default() },
        insecure: false,
        planted_resync_without_clear: planted,
    };
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let bridge = tokio::spawn(mooncake_zmq_events::run(master, cfg, async {
        let _ = stopped.await;
    }));
    let addr = format!("127.0.0.1:{port}").parse().unwrap();
    let mut sub = tokio::time::timeout(T, async {
        loop {
            if tokio::net::TcpStream::connect(addr).await.is_ok() {
                return FeedSubscriber::connect(addr).await;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("the bridge listens");
    // A SUB peer misses what is published before its subscription reaches
    // the publisher: probes are put until one arrives.
    let mut seen = Vec::new();
    let mut probes = 0;
    tokio::time::timeout(T, async {
        while seen.is_empty() {
            client.put(&format!("z/probe-{probes}"), b"p", &opts).await.expect("probe");
            probes += 1;
            if let Some(m) = sub.next(Duration::from_millis(300)).await {
                seen.push(m);
            }
        }
    })
    .await
    .expect("the subscription reaches the bridge");
    for i in 0..7 {
        client.put(&format!("z/{i}"), b"v", &opts).await.expect("put");
    }
    read_until(&mut sub, &mut seen, "z/0..z/6", |v| (0..7).all(|i| v.contains(&format!("z/{i}")))).await;

    // The bridge's master (the leader) dies; while it is down the others
    // take removals and puts, many more than a watch history of 4 keeps.
    cluster.kill(leader);
    for i in 0..5 {
        client.remove(&format!("z/{i}"), false).await.expect("remove");
    }
    for i in 7..20 {
        client.put(&format!("z/{i}"), b"v", &opts).await.expect("put");
    }
    cluster.restart(leader);
    read_until(&mut sub, &mut seen, "the resync", |v| v.contains("z/19")).await;
    // And the feed goes on live after it.
    client.put("z/20", b"v", &opts).await.expect("put");
    read_until(&mut sub, &mut seen, "z/20", |v| v.contains("z/20")).await;

    let _ = stop.send(());
    let published = tokio::time::timeout(T, bridge).await.expect("the bridge stops").unwrap().expect("the bridge ran");
    let (objects, _) = MasterClient::new(MasterClientConfig::new(cluster.addrs()))
        .unwrap()
        .list_all_at("z/", 1000)
        .await
        .expect("listing");
    client.close().await;
    Run { seen, listed: objects.into_iter().map(|o| o.key).collect(), published }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscriber_of_the_bridge_holds_the_clusters_keys_across_a_failover_and_a_resync() {
    let run = bridge_through_a_failover_and_a_resync(false).await;
    assert!(run.published.resyncs >= 1, "the bridge did not resync: {:?}", run.published);
    assert!(run.seen.iter().any(|m| m.events.first() == Some(&mooncake_testkit::zmq_feed::FeedItem::Cleared)));
    feed_matches_store(&run).unwrap();
    assert!(!run.listed.contains("z/0") && run.listed.contains("z/19"), "{:?}", run.listed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_checker_catches_a_resync_without_cleared() {
    let run = bridge_through_a_failover_and_a_resync(true).await;
    assert!(run.published.resyncs >= 1, "the planted bug was never reached: {:?}", run.published);
    let err = feed_matches_store(&run).expect_err("the planted bug went unseen");
    assert!(err.contains("\"z/0\""), "{err}");
}
