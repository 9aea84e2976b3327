//! Repair (issue 39; docs/OPERATIONS.md, "Lost replicas"): when a store node
//! dies for good, the masters expire it, and every object that had a memory
//! replica on it and another one elsewhere gets a copy on a segment that
//! holds none of it, from a readable replica, as a copy task of the leader's
//! (rate-limited), until it has the replicas it had before.
// Test support: a failed unwrap or expect is the test failing (the
// workspace denies them in library code: Cargo.toml [workspace.lints]).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use mooncake_client::{Client, ClientConfig, PutOptions};
use mooncake_testkit::{Cluster, wait_until};

const BIN: &str = env!("CARGO_BIN_EXE_mooncake");
const T: Duration = Duration::from_secs(30);
const CLIENT_TTL: Duration = Duration::from_secs(2);
const OBJECTS: u8 = 30;

fn value(i: u8) -> Vec<u8> {
    vec![i; 200 << 10]
}

/// Why: an object put with 2 replicas that loses one with its node would
/// otherwise keep one copy until it is evicted: the next loss loses it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn objects_that_lost_a_replica_with_a_dead_store_node_get_it_back() {
    let mut cluster = Cluster::builder()
        .masters(1)
        .stores(3)
        .segment_size("64MiB")
        .arg(format!("--client_ttl={}", CLIENT_TTL.as_secs()))
        .binary(BIN)
        .start();
    cluster.wait_for_segments(3, T).await;
    let client = Client::connect(ClientConfig::new(cluster.addrs())).await.expect("client");
    let two = PutOptions { replicas: 2, min_replicas: 2, ..Default::default() };
    for i in 0..OBJECTS {
        client.put(&format!("t57/{i}"), &value(i), &two).await.expect("put");
    }
    let master = client.master();
    let (leader, _) = cluster.wait_for_leader(T).await;
    let dead = cluster.inner.store_client_id(1);
    let info = cluster.info(leader).await.expect("cluster info");
    let lost: BTreeSet<u64> = info
        .segments
        .iter()
        .filter(|u| u.owner_client_id == dead)
        .filter_map(|u| u.segment.as_ref())
        .map(|g| g.id)
        .collect();
    let listed = master.list_objects("t57/", 1000).await.expect("list");
    let hit = listed.iter().filter(|o| o.replicas.iter().any(|r| lost.contains(&r.segment_id))).count();
    assert!(hit > 0, "no object had a replica on store node 1: {listed:?}");

    // Store node 1 dies for good.
    cluster.kill_store(1);
    let killed = Instant::now();
    wait_until("every object to have 2 replicas again, none on the dead node", T, || async {
        let objects = master.list_objects("t57/", 1000).await.ok()?;
        let whole = objects.len() == usize::from(OBJECTS)
            && objects.iter().all(|o| {
                let segments: BTreeSet<u64> = o.replicas.iter().map(|r| r.segment_id).collect();
                segments.len() == 2 && segments.is_disjoint(&lost)
            });
        whole.then_some(())
    })
    .await;
    let took = killed.elapsed();
    eprintln!("{hit} objects repaired {took:?} after the kill (client_ttl {CLIENT_TTL:?})");
    assert!(took < CLIENT_TTL + Duration::from_secs(10), "repair took {took:?}");
    for i in 0..OBJECTS {
        assert_eq!(client.get(&format!("t57/{i}")).await.expect("get"), value(i), "object {i}");
    }
    // The copies are real: with the other original node gone too, every
    // object is still read, whole, from the copy.
    cluster.kill_store(2);
    for i in 0..OBJECTS {
        let key = format!("t57/{i}");
        let got =
            wait_until(&format!("{key} read with store node 2 down"), T, || async { client.get(&key).await.ok() })
                .await;
        assert_eq!(got, value(i), "object {i}");
    }
    client.close().await;
}

/// Why: with two store nodes (one per zone, say) a lost node leaves its
/// objects nowhere to go; when a node joins again (the dead one restarted,
/// or a replacement), the operator expects them whole again without
/// putting them anew.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn objects_with_nowhere_to_go_are_repaired_once_a_node_joins() {
    let mut cluster = Cluster::builder()
        .masters(1)
        .stores(2)
        .segment_size("64MiB")
        .arg(format!("--client_ttl={}", CLIENT_TTL.as_secs()))
        .binary(BIN)
        .start();
    cluster.wait_for_segments(2, T).await;
    let client = Client::connect(ClientConfig::new(cluster.addrs())).await.expect("client");
    let two = PutOptions { replicas: 2, min_replicas: 2, ..Default::default() };
    const FEW: u8 = 10;
    for i in 0..FEW {
        client.put(&format!("t57n/{i}"), &value(i), &two).await.expect("put");
    }
    let master = client.master();
    let (leader, _) = cluster.wait_for_leader(T).await;
    cluster.kill_store(1);
    wait_until("the dead node expired and every object waiting for a segment to go to", T, || async {
        let info = cluster.info(leader).await?;
        (info.segment_count == 1 && info.repairs_pending == u64::from(FEW)).then_some(())
    })
    .await;
    let objects = master.list_objects("t57n/", 1000).await.expect("list");
    assert!(objects.iter().all(|o| o.replicas.len() == 1), "one replica each while nowhere to go: {objects:?}");

    let joined = cluster.inner.add_store().expect("a new store node");
    let started = Instant::now();
    let new_client = cluster.inner.store_client_id(joined);
    wait_until("every object to have a replica on the new node", T, || async {
        let info = cluster.info(leader).await?;
        let fresh: BTreeSet<u64> = info
            .segments
            .iter()
            .filter(|u| u.owner_client_id == new_client)
            .filter_map(|u| u.segment.as_ref())
            .map(|g| g.id)
            .collect();
        let objects = master.list_objects("t57n/", 1000).await.ok()?;
        let whole = objects.len() == usize::from(FEW)
            && objects
                .iter()
                .all(|o| o.replicas.len() == 2 && o.replicas.iter().any(|r| fresh.contains(&r.segment_id)));
        whole.then_some(())
    })
    .await;
    eprintln!("{FEW} objects whole again {:?} after the new node started", started.elapsed());
    assert_eq!(cluster.info(leader).await.expect("cluster info").repairs_pending, 0, "the backlog is done");
    // The copies are real: with the original node gone too, every object
    // is read, whole, from the new node.
    cluster.kill_store(2);
    for i in 0..FEW {
        let key = format!("t57n/{i}");
        let got =
            wait_until(&format!("{key} read with store node 2 down"), T, || async { client.get(&key).await.ok() })
                .await;
        assert_eq!(got, value(i), "object {i}");
    }
    client.close().await;
}
