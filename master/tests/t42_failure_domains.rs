//! Failure domains on a real master: the replicas of one object go to
//! distinct zones while the cluster has them, then to distinct hosts, and
//! `mooncake_placements_total{spread}` says how widely each placement
//! spread. Puts and writer chunks alike (metadata only: no bytes move).
// Test support: a failed unwrap or expect is the test failing (the
// workspace denies them in library code: Cargo.toml [workspace.lints]).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::time::Duration;

use mooncake_client::MasterClient;
use mooncake_proto::master::{PutEndRequest, PutStartRequest, Replica, Segment};
use mooncake_testkit::Cluster;
use mooncake_testkit::sample_value;

const BIN: &str = env!("CARGO_BIN_EXE_mooncake-master");
const STORE: u64 = 100;
const WRITER: u64 = 7;

fn segment(id: u64, host: &str, zone: &str) -> Segment {
    Segment {
        id,
        size: 1 << 30,
        endpoint: format!("127.0.0.1:{}", 9000 + id),
        host_id: host.into(),
        zone: zone.into(),
        ..Default::default()
    }
}

async fn put(client: &MasterClient, key: &str, replicas: u32) -> Vec<Replica> {
    let ask =
        PutStartRequest { client_id: WRITER, key: key.into(), size: 4096, replica_num: replicas, ..Default::default() };
    let placed = client.put_start(ask).await.expect("put start");
    let end = PutEndRequest {
        client_id: WRITER,
        key: key.into(),
        size: 4096,
        replicas: placed.clone(),
        ..Default::default()
    };
    client.put_end_with(end).await.expect("put end");
    placed
}

fn zones(replicas: &[Replica]) -> BTreeSet<String> {
    replicas.iter().map(|r| r.zone.clone()).collect()
}

fn hosts(replicas: &[Replica]) -> BTreeSet<String> {
    replicas.iter().map(|r| r.host_id.clone()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_land_in_distinct_zones_then_hosts_and_the_metric_says_how() {
    let cluster = Cluster::builder().masters(1).master_bin(BIN).start();
    let (leader, _) = cluster.wait_for_leader(Duration::from_secs(10)).await;
    let client = cluster.client();
    // Zone a: three hosts (one with two segments); zone b: one host, its
    // segment the highest id (ranked last among equally empty segments).
    let segments = vec![
        segment(1, "a1", "zone-a"),
        segment(2, "a1", "zone-a"),
        segment(3, "a2", "zone-a"),
        segment(4, "a3", "zone-a"),
        segment(9, "b1", "zone-b"),
    ];
    client.remount_segments(STORE, segments).await.expect("mount");
    client.remount_segments(WRITER, vec![]).await.expect("register");

    // Two replicas: one in each zone, every time.
    for i in 0..20 {
        let r = put(&client, &format!("two{i}"), 2).await;
        assert_eq!(zones(&r), BTreeSet::from(["zone-a".into(), "zone-b".into()]), "put two{i}: {r:?}");
        let listed = client.get_replica_list(WRITER, &format!("two{i}")).await.expect("readable");
        assert_eq!(zones(&listed.replicas), zones(&r), "recorded as placed");
    }
    // Four replicas, two zones, three hosts: zones repeat, hosts do not
    // until they must (a fourth replica shares host a1).
    let r = put(&client, "three", 3).await;
    assert_eq!(zones(&r).len(), 2, "{r:?}");
    assert_eq!(hosts(&r).len(), 3, "{r:?}");
    let r = put(&client, "five", 5).await;
    assert_eq!(r.len(), 5);
    assert_eq!(hosts(&r).len(), 4, "{r:?}");

    // A writer chunk of two replicas spans both zones too.
    let chunk = client.reserve_chunk(WRITER, 2, 1 << 20, 4096).await.expect("chunk");
    let chunk_zones: BTreeSet<String> = chunk.replicas.iter().map(|r| r.zone.clone()).collect();
    assert_eq!(chunk_zones.len(), 2, "{:?}", chunk.replicas);

    let m = cluster.metrics(leader);
    let count = |spread: &str| sample_value(&m, "mooncake_placements_total", &[("spread", spread)]).unwrap_or(0.0);
    assert_eq!(count("distinct"), 21.0, "20 puts and a chunk in both zones");
    assert_eq!(count("shared_zone"), 1.0, "three replicas in two zones");
    assert_eq!(count("shared_host"), 1.0, "five replicas on four hosts");
}
