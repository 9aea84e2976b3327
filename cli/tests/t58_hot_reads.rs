//! Hot objects (issue 39): the reads of one object from many clients spread
//! over its equally near replicas, instead of all landing on the replica
//! the master lists first; and a key read fast enough gets more memory
//! replicas from the leader (`--dynamic_replication_mode enforce`), which
//! the reads then spread over, and loses them again once it cools.
// Test support: a failed unwrap or expect is the test failing (the
// workspace denies them in library code: Cargo.toml [workspace.lints]).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use mooncake_client::{Client, ClientConfig, PutOptions};
use mooncake_testkit::{Cluster, wait_until};

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

/// Why: a key every request reads (block 0 of a shared prefix) put with
/// one replica is served by one node whatever the clients do; the leader
/// must add replicas on the other nodes while it is hot, and give the
/// memory back once it cools.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hot_key_gets_replicas_on_every_node_spreads_its_reads_and_loses_them_when_it_cools() {
    let cluster = Cluster::builder()
        .masters(1)
        .stores(3)
        .segment_size("64MiB")
        .arg("--dynamic_replication_mode=enforce")
        .arg("--dynamic_replication_heat_window_seconds=2")
        .arg("--dynamic_replication_admission_qps_threshold=5")
        .arg("--dynamic_replication_max_memory_replicas=3")
        .arg("--default_kv_lease_ttl=500")
        .binary(BIN)
        .start();
    cluster.wait_for_segments(3, T).await;
    let cfg = || ClientConfig { local_hostname: "127.0.0.2".into(), ..ClientConfig::new(cluster.addrs()) };
    let writer = Client::connect(cfg()).await.expect("writer");
    let value = vec![7u8; 256 << 10];
    let one = PutOptions { replicas: 1, ..Default::default() };
    writer.put("t58/block0", &value, &one).await.expect("put");
    writer.put("t58/cold", &value, &one).await.expect("put");
    let master = writer.master();
    let replicas = |key: &'static str| async move {
        let listed = master.list_objects(key, 10).await.ok()?;
        listed.iter().find(|o| o.key == key).map(|o| o.replicas.len())
    };
    let mut readers = Vec::new();
    for _ in 0..CLIENTS {
        readers.push(Client::connect(cfg()).await.expect("reader"));
    }
    // Read it hot until it has a replica on every node.
    let started = Instant::now();
    let mut reads = 0;
    while replicas("t58/block0").await != Some(3) {
        assert!(started.elapsed() < T, "the hot key never got 3 replicas ({reads} reads)");
        for r in &readers {
            assert_eq!(r.get("t58/block0").await.expect("get"), value);
            reads += 1;
        }
    }
    eprintln!("3 replicas after {reads} reads, {:?}", started.elapsed());
    // The operator sees it: `mooncake status` and the cluster info.
    let (leader, _) = cluster.wait_for_leader(T).await;
    assert_eq!(cluster.info(leader).await.expect("cluster info").hot_keys_fanned, 1);
    let status = std::process::Command::new(BIN)
        .args(["status", "--masters", &cluster.addrs().join(",")])
        .output()
        .expect("mooncake status");
    let text = String::from_utf8_lossy(&status.stdout);
    assert!(text.contains("hot keys: 1 keys hold extra memory replicas"), "{text}");
    assert_eq!(replicas("t58/cold").await, Some(1), "a key nobody reads keeps its one replica");
    // The reads spread over the three.
    let before: Vec<BTreeMap<String, u64>> = readers.iter().map(per_peer).collect();
    for _ in 0..READS {
        for r in &readers {
            assert_eq!(r.get("t58/block0").await.expect("get"), value);
        }
    }
    let mut per_node: BTreeMap<String, u64> = BTreeMap::new();
    for (r, before) in readers.iter().zip(&before) {
        for (peer, bytes) in per_peer(r) {
            *per_node.entry(peer.clone()).or_default() += bytes - before.get(&peer).copied().unwrap_or(0);
        }
    }
    let total: u64 = per_node.values().sum();
    assert_eq!(total, (CLIENTS * READS * value.len()) as u64, "{per_node:?}");
    let serving = per_node.values().filter(|b| **b > 0).count();
    assert_eq!(serving, 3, "every replica served reads: {per_node:?}");
    for (node, bytes) in &per_node {
        assert!(*bytes >= total / 3 / 3, "{node} served {bytes} of {total} bytes: under a third of its fair share");
    }
    // Cooled (no reads for a window and a lease TTL): back to one replica,
    // still readable.
    let cooled = wait_until("the cooled key to lose its extra replicas", T, || async {
        (replicas("t58/block0").await? == 1).then_some(())
    });
    cooled.await;
    let fanned = wait_until("the status to forget the cooled key", T, || async {
        (cluster.info(leader).await?.hot_keys_fanned == 0).then_some(())
    });
    fanned.await;
    assert_eq!(readers[0].get("t58/block0").await.expect("get after cooling"), value);
    for r in readers {
        r.close().await;
    }
    writer.close().await;
}

/// Bytes read from each peer by `client` so far.
fn per_peer(client: &Client) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for (_, peer, s) in client.engine().stats().snapshot() {
        *out.entry(peer).or_default() += s.read_bytes;
    }
    out
}
