//! Masters that fall behind — paused, or down while the log moves on — must
//! neither disturb a healthy leader nor replay a long log: a paused follower
//! that wakes up asks the others first (PreVote) and is told there is a
//! leader, so no term changes; a follower far behind is sent a snapshot.
// Test support: a failed unwrap or expect is the test failing (the
// workspace denies them in library code: Cargo.toml [workspace.lints]).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use mooncake_client::MasterClient;
use mooncake_proto::master::{PutStartRequest, Segment};
use mooncake_testkit::{Cluster, sample_value, wait_until};

const BIN: &str = env!("CARGO_BIN_EXE_mooncake-master");

async fn mount_segment(client: &MasterClient) {
    let seg = Segment {
        id: 91,
        size: 1 << 40,
        endpoint: "127.0.0.1:9091".into(),
        host_id: "host-91".into(),
        ..Default::default()
    };
    client.mount_segment(900, seg).await.expect("mount segment");
}

/// Keeps client 900 (the segment's owner) alive, as a store node's
/// heartbeat does: without it the master expires the client after the
/// client TTL, unmounts its segment, and the puts stop (on a loaded machine
/// a test outlives 10 s). Aborted at the end of the test.
async fn heartbeat(client: Arc<MasterClient>) {
    loop {
        let _ = client.ping(900).await;
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Puts small objects until `stop`; counts the acknowledged ones.
async fn writer(client: Arc<MasterClient>, w: u64, stop: Arc<AtomicBool>, acked: Arc<AtomicU64>) {
    let mut i = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let key = format!("w{w}-{i}");
        let req =
            PutStartRequest { client_id: 900, key: key.clone(), size: 4096, replica_num: 1, ..Default::default() };
        if client.put_start(req).await.is_ok() && client.put_end(900, &key, 7).await.is_ok() {
            acked.fetch_add(1, Ordering::Relaxed);
        }
        i += 1;
    }
}

/// Elections every master started, by outcome.
fn elections(cluster: &Cluster, outcome: &str) -> f64 {
    cluster
        .ids()
        .iter()
        .map(|&id| {
            sample_value(&cluster.metrics(id), "mooncake_elections_total", &[("outcome", outcome)]).unwrap_or(0.0)
        })
        .sum()
}

async fn wait_caught_up(cluster: &Cluster, follower: u64, leader: u64) {
    wait_until(&format!("master {follower} to catch up with {leader}"), Duration::from_secs(30), || async {
        let l = cluster.info(leader).await?;
        let f = cluster.info(follower).await?;
        (f.leader_id == leader && f.applied_index >= l.applied_index).then_some(())
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_paused_follower_cannot_depose_a_healthy_leader() {
    let cluster = Cluster::builder().masters(3).master_bin(BIN).start();
    let (leader, term) = cluster.wait_for_leader(Duration::from_secs(10)).await;
    let client = Arc::new(cluster.client());
    mount_segment(&client).await;
    let beat = tokio::spawn(heartbeat(client.clone()));
    let started_before = elections(&cluster, "started");
    let (stop, acked) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicU64::new(0)));
    let tasks: Vec<_> = (0..4).map(|w| tokio::spawn(writer(client.clone(), w, stop.clone(), acked.clone()))).collect();
    let follower = cluster.ids().into_iter().find(|&id| id != leader).expect("a follower");

    // Three times: the follower stops for 4x its longest election timeout
    // while the log moves on, then wakes up (its timer long expired).
    for round in 0..3 {
        cluster.pause(follower);
        let before = acked.load(Ordering::Relaxed);
        wait_until("writes while the follower is paused", Duration::from_secs(10), || async {
            (acked.load(Ordering::Relaxed) > before + 200).then_some(())
        })
        .await;
        tokio::time::sleep(Duration::from_millis(2000)).await; // the pause itself is the fault
        cluster.resume(follower);
        wait_caught_up(&cluster, follower, leader).await;
        let info = cluster.info(leader).await.expect("leader answers");
        assert_eq!(
            (info.leader_id, info.term),
            (leader, term),
            "round {round}: the paused follower {follower} changed the leadership"
        );
    }
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.expect("writer");
    }
    for id in cluster.ids() {
        let info = cluster.info(id).await.expect("answers");
        assert_eq!((info.leader_id, info.term), (leader, term), "master {id} saw another leader or term");
    }
    assert_eq!(elections(&cluster, "started"), started_before, "an election started without a fault");
    // The follower did wake up wanting an election (its timer had long
    // expired) and was talked out of it: the pre-vote path ran.
    assert!(elections(&cluster, "refused_by_pre_vote") >= 1.0, "the paused follower never asked for a pre-vote");
    beat.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_follower_far_behind_catches_up_by_snapshot() {
    // Snapshots every 100 entries; the leader keeps 1,000 entries behind its
    // snapshot, so a follower 3,000 entries behind cannot be sent the log.
    let mut cluster = Cluster::builder().masters(3).master_bin(BIN).arg("--snapshot-logs=100").start();
    let (leader, _) = cluster.wait_for_leader(Duration::from_secs(10)).await;
    let client = Arc::new(cluster.client());
    mount_segment(&client).await;
    let beat = tokio::spawn(heartbeat(client.clone()));
    let follower = cluster.ids().into_iter().find(|&id| id != leader).expect("a follower");
    cluster.kill(follower);
    let start = cluster.info(leader).await.expect("leader").applied_index;

    let (stop, acked) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicU64::new(0)));
    let tasks: Vec<_> = (0..8).map(|w| tokio::spawn(writer(client.clone(), w, stop.clone(), acked.clone()))).collect();
    wait_until("the log to move 3,000 entries on", Duration::from_secs(60), || async {
        let info = cluster.info(leader).await?;
        (info.applied_index > start + 3000).then_some(())
    })
    .await;
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.expect("writer");
    }

    cluster.restart(follower);
    wait_caught_up(&cluster, follower, leader).await;
    let (l, f) = (cluster.info(leader).await.expect("leader"), cluster.info(follower).await.expect("follower"));
    assert_eq!(f.state_hash, l.state_hash, "the follower's state differs from the leader's");
    let installs = sample_value(&cluster.metrics(follower), "mooncake_snapshot_install_seconds_count", &[]);
    assert!(installs.unwrap_or(0.0) >= 1.0, "master {follower} caught up without a snapshot: {installs:?}");
    beat.abort();
}
