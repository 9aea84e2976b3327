//! Hot objects (issue 39): the reads of one object from many clients spread
//! over its equally near replicas, instead of all landing on the replica
//! the master lists first.
// Test support: a failed unwrap or expect is the test failing (the
// workspace denies them in library code: Cargo.toml [workspace.lints]).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::time::Duration;

use mooncake_client::{Client, ClientConfig, PutOptions};
use mooncake_testkit::Cluster;

const BIN: &str = env!("CARGO_BIN_EXE_mooncake");
const T: Duration = Duration::from_secs(30);
const CLIENTS: usize = 8;
const READS: usize = 12;

/// Why: in Mooncake's traces block 0 is in every request; served from one
/// replica, that one node's network bounds every prefill.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_of_a_hot_object_from_8_clients_spread_over_its_replicas() {
    let cluster = Cluster::builder().masters(1).stores(2).segment_size("64MiB").binary(BIN).start();
    cluster.wait_for_segments(2, T).await;
    // Clients on another host than the store nodes: no replica is nearer.
    let cfg = || ClientConfig { local_hostname: "127.0.0.2".into(), ..ClientConfig::new(cluster.addrs()) };
    let writer = Client::connect(cfg()).await.expect("writer");
    let value = vec![9u8; 256 << 10];
    let two = PutOptions { replicas: 2, min_replicas: 2, ..Default::default() };
    writer.put("t58/hot", &value, &two).await.expect("put");
    let mut per_node: BTreeMap<String, u64> = BTreeMap::new();
    for _ in 0..CLIENTS {
        let reader = Client::connect(cfg()).await.expect("reader");
        for _ in 0..READS {
            assert_eq!(reader.get("t58/hot").await.expect("get"), value);
        }
        for (_, peer, s) in reader.engine().stats().snapshot() {
            *per_node.entry(peer).or_default() += s.read_bytes;
        }
        reader.close().await;
    }
    let total: u64 = per_node.values().sum();
    assert_eq!(total, (CLIENTS * READS * value.len()) as u64, "{per_node:?}");
    assert_eq!(per_node.len(), 2, "both replicas served reads: {per_node:?}");
    let fair = total / 2;
    for (node, bytes) in &per_node {
        assert!(*bytes >= fair / 3, "{node} served {bytes} of {total} bytes: under a third of its fair share");
    }
    writer.close().await;
}
