//! A failover in one process (testkit's `InProcessCluster`: three real
//! `MasterNode`s on loopback sharing a Raft partition the test cuts): the
//! leader isolated from its peers, another takes over, nothing acknowledged
//! is lost, the isolated one refuses writes it cannot commit, and after the
//! links heal it follows the new leader; a put started on the old leader
//! ends on the new one; a KV lease outlives the election; a removed leader
//! steps down. What t30 shows with processes and SIGKILL, here in about a
//! second each.
// Test support: a failed unwrap or expect is the test failing (the
// workspace denies them in library code: Cargo.toml [workspace.lints]).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use mooncake_client::MasterClient;
use mooncake_proto::master::{PutEndRequest, PutStartRequest, Segment};
use mooncake_testkit::in_process::InProcessCluster;

const T: Duration = Duration::from_secs(10);

async fn mount_segments(client: &MasterClient) {
    for s in 0..2u64 {
        let seg = Segment {
            id: 77 + s,
            size: 1 << 30,
            endpoint: format!("127.0.0.1:{}", 9000 + s),
            host_id: format!("host-{s}"),
            ..Default::default()
        };
        client.mount_segment(500 + s, seg).await.expect("mount segment");
    }
}

/// The masters of `cluster` other than `old`.
fn all_but(cluster: &InProcessCluster, old: u64) -> Vec<u64> {
    cluster.ids().into_iter().filter(|id| *id != old).collect()
}

async fn put(client: &MasterClient, key: &str) -> Result<(), String> {
    let req = PutStartRequest { client_id: 1000, key: key.into(), size: 4096, replica_num: 1, ..Default::default() };
    client.put_start(req).await.map_err(|e| e.to_string())?;
    client.put_end(1000, key, 7).await.map_err(|e| e.to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_isolated_leader_is_replaced_and_nothing_acknowledged_is_lost() {
    let cluster = InProcessCluster::start(3, &[]).await;
    let client = cluster.client();
    mount_segments(&client).await;
    let acked: Vec<String> = (0..20).map(|i| format!("k{i}")).collect();
    for key in &acked {
        put(&client, key).await.expect("put before the failover");
    }
    let old = cluster.wait_for_leader(&[], T).await;

    let cut = Instant::now();
    cluster.isolate(old);
    let new = cluster.wait_for_leader(&[old], T).await;
    eprintln!("master {new} leads {:?} after master {old} was cut off", cut.elapsed());
    assert_ne!(new, old);

    // Everything acknowledged before is there, and the new leader takes puts.
    let others = all_but(&cluster, old);
    let majority = cluster.client_of(&others);
    for key in &acked {
        assert!(majority.exist_key(key).await.expect("exist"), "{key} was lost in the failover");
    }
    put(&majority, "after").await.expect("a put on the new leader");

    // The cut-off master cannot commit: a put sent only to it is never
    // acknowledged (the client keeps asking; it is given up on here).
    let alone = cluster.client_of(&[old]);
    let answer = tokio::time::timeout(Duration::from_secs(2), put(&alone, "on-the-minority")).await;
    assert!(!matches!(answer, Ok(Ok(()))), "the isolated master acknowledged a put it could not commit");

    // Healed, it follows the new leader and holds what was written meanwhile.
    cluster.heal();
    let deadline = Instant::now() + T;
    while cluster.wait_for_leader(&[], T).await != new || cluster.thinks_it_leads(old) {
        assert!(Instant::now() < deadline, "master {old} never followed master {new}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(majority.exist_key("after").await.unwrap());
    assert!(!majority.exist_key("on-the-minority").await.unwrap(), "a refused put took effect");
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_isolated_follower_costs_the_leader_nothing() {
    let cluster = InProcessCluster::start(3, &[]).await;
    let leader = cluster.wait_for_leader(&[], T).await;
    let follower = cluster.ids().into_iter().find(|id| *id != leader).unwrap();
    cluster.isolate(follower);
    let client = cluster.client();
    mount_segments(&client).await;
    for i in 0..10 {
        put(&client, &format!("f{i}")).await.expect("a put with one follower cut off");
    }
    assert_eq!(cluster.wait_for_leader(&[follower], T).await, leader, "the leader changed");
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kv_lease_granted_by_the_old_leader_holds_on_the_new_one() {
    // KV leases of 3 s: an election (~0.4 s here) fits well inside one.
    let cluster = InProcessCluster::start(3, &["--default_kv_lease_ttl=3000"]).await;
    let client = cluster.client();
    mount_segments(&client).await;
    put(&client, "leased").await.expect("put");
    let old = cluster.wait_for_leader(&[], T).await;
    // A reader's replica list carries a KV lease: the bytes stay while it reads.
    client.get_replica_list(1000, "leased").await.expect("a read's replica list");
    let granted = Instant::now();
    cluster.isolate(old);
    let new = cluster.wait_for_leader(&[old], T).await;
    let others = all_but(&cluster, old);
    let majority = cluster.client_of(&others);
    // The new leader does not know the lease, so it keeps every object for a
    // lease's time after taking over: a removal inside it is refused...
    let refused = majority.remove("leased", false).await;
    assert!(granted.elapsed() < Duration::from_millis(3_000), "the election outlasted the lease: nothing was checked");
    let e = refused.expect_err("the new leader removed an object a reader of the old one may still be reading");
    assert!(e.to_string().contains("lease"), "{e}");
    // ... and allowed once the lease has run out.
    let deadline = Instant::now() + T;
    while majority.remove("leased", false).await.is_err() {
        assert!(Instant::now() < deadline, "the object stayed leased on master {new}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(granted.elapsed() >= Duration::from_millis(3_000), "removed inside the lease");
    assert!(!majority.exist_key("leased").await.unwrap());
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_removed_from_the_membership_steps_down_and_says_so() {
    let cluster = InProcessCluster::start(3, &[]).await;
    let client = cluster.client();
    mount_segments(&client).await;
    let old = cluster.wait_for_leader(&[], T).await;
    let others = all_but(&cluster, old);
    // The removed master is told (its process would now exit, status 0):
    // it watches from before the change, as `mooncake-master` does from its
    // start (a membership it never saw itself in does not count).
    let (removed, changed) = tokio::join!(
        tokio::time::timeout(T, cluster.node(old).removed()),
        client.change_membership(others.clone(), false)
    );
    changed.expect("remove the leader");
    let at = removed.expect("the removed master was told");
    eprintln!("master {old} removed at log {at}");
    let new = cluster.wait_for_leader(&[old], T).await;
    assert!(others.contains(&new));
    put(&cluster.client_of(&others), "after-removal").await.expect("a put on the remaining voters");
    cluster.shutdown().await;
}

/// A put whose PutStart the old leader answered is ended on the new one:
/// the writer echoes the ranges (and their WRITE grants) it was given, and
/// the new leader, which holds no reservation for them, records the object
/// because they lie on free bytes of a live arena it did not grant (what
/// the client library does after a failover: `put_end::plan_unknown_end`).
/// A PutEnd that echoes nothing cannot be recorded and says to put again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_put_started_on_the_old_leader_ends_on_the_new_one() {
    let cluster = InProcessCluster::start(3, &[]).await;
    let client = cluster.client();
    mount_segments(&client).await;
    let old = cluster.wait_for_leader(&[], T).await;
    let start = |key: &str| PutStartRequest {
        client_id: 1000,
        key: key.into(),
        size: 4096,
        replica_num: 2,
        ..Default::default()
    };
    let echoed = client.put_start(start("across")).await.expect("PutStart on the old leader");
    let bare = client.put_start(start("bare")).await.expect("PutStart on the old leader");
    assert_eq!((echoed.len(), bare.len()), (2, 2), "two replicas each");

    let cut = Instant::now();
    cluster.isolate(old);
    let new = cluster.wait_for_leader(&[old], T).await;
    let others = all_but(&cluster, old);
    let majority = cluster.client_of(&others);
    let end = PutEndRequest {
        client_id: 1000,
        key: "across".into(),
        size: 4096,
        checksum: 7,
        replicas: echoed.clone(),
        ..Default::default()
    };
    majority.put_end_with(end).await.expect("the new leader records the put the old one started");
    eprintln!("master {new} recorded it {:?} after master {old} was cut off", cut.elapsed());
    let listed = majority.get_replica_list(1000, "across").await.expect("read it back");
    let ranges = |r: &[mooncake_proto::master::Replica]| {
        let mut v: Vec<(u64, u64, u64)> = r.iter().map(|r| (r.segment_id, r.offset, r.len)).collect();
        v.sort_unstable();
        v
    };
    assert_eq!(ranges(&listed.replicas), ranges(&echoed), "recorded where the old leader placed it");

    let refused = majority.put_end(1000, "bare", 7).await.expect_err("a PutEnd echoing nothing");
    assert!(refused.to_string().contains("put expired"), "told to put again: {refused}");
    assert!(!majority.exist_key("bare").await.unwrap(), "an unknown put was recorded without its ranges");
    cluster.shutdown().await;
}
