//! The state audit ends a master whose state diverged: masters compare the
//! hashes of their applied state at fixed log indices, and the one whose
//! hash differs from a majority's exits (status 70) with a line that says
//! so, while the others keep serving. The divergence is planted
//! (`--dev-unsafe-diverge-node 3`: master 3 reports altered hashes, as a
//! master that applied an entry the others did not would); the two honest
//! masters, which agree, must not exit.
//! Needs the `planted-bugs` feature (the test command turns it on).
#![cfg(feature = "planted-bugs")]
// Test support: a failed unwrap or expect is the test failing (the
// workspace denies them in library code: Cargo.toml [workspace.lints]).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use mooncake_proto::master::Segment;
use mooncake_testkit::{Cluster, Role, wait_until};

const BIN: &str = env!("CARGO_BIN_EXE_mooncake-master");
/// Checkpoints every 8 entries, so a few dozen make several.
const EVERY: u64 = 8;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_whose_state_diverged_exits_and_the_others_serve() {
    let mut cluster = Cluster::builder()
        .masters(3)
        .master_bin(BIN)
        .arg(format!("--state-audit-every={EVERY}"))
        .arg("--dev-unsafe-diverge-node=3")
        .start();
    cluster.wait_for_leader(Duration::from_secs(20)).await;
    let client = cluster.client();
    // Phase 1: entries for several checkpoints (each remount is one).
    let seg =
        Segment { id: 1, size: 1 << 20, endpoint: "127.0.0.1:1".into(), host_id: "h1".into(), ..Default::default() };
    for _ in 0..(4 * EVERY) {
        client.remount_segments(7, vec![seg.clone()]).await.expect("remount");
    }
    // Phase 2: the audit (every 5 s) finds master 3 outvoted and it ends.
    let deadline = std::time::Instant::now() + Duration::from_secs(40);
    let status = loop {
        if let Some(status) = cluster.master_exit_status(3) {
            break status;
        }
        assert!(std::time::Instant::now() < deadline, "the diverged master did not exit within 40 s");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(status.code(), Some(70), "{status:?}");
    let log = std::fs::read_to_string(&cluster.inner.node(Role::Master, 3).unwrap().log).unwrap_or_default();
    assert!(log.contains("diverged from the other masters"), "the exit says why: {log}");
    // Phase 3: the two that agree keep serving (and neither exited).
    client.remount_segments(7, vec![seg]).await.expect("the others still commit");
    assert!(cluster.master_exit_status(1).is_none() && cluster.master_exit_status(2).is_none());
}

/// The audit's rounds show in the leader's duty records: successes while
/// every peer answers, and, once a peer is gone, an error that names it (an
/// audit that compares with nobody is no longer checking anything).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_audit_names_a_peer_that_gives_no_checkpoints_in_its_duty_record() {
    let mut cluster = Cluster::builder().masters(3).master_bin(BIN).arg(format!("--state-audit-every={EVERY}")).start();
    let (leader, _) = cluster.wait_for_leader(Duration::from_secs(20)).await;
    let client = cluster.client();
    let seg =
        Segment { id: 1, size: 1 << 20, endpoint: "127.0.0.1:1".into(), host_id: "h1".into(), ..Default::default() };
    for _ in 0..(2 * EVERY) {
        client.remount_segments(7, vec![seg.clone()]).await.expect("remount");
    }
    let ok = wait_until("an audit round with every peer answering", Duration::from_secs(20), || async {
        duty(&cluster, leader, "state_audit").await.filter(|d| d.last_success_ms_ago.is_some())
    })
    .await;
    assert_eq!((ok.tick_ms, ok.errors), (5_000, 0), "{ok:?}");
    let disk = duty(&cluster, leader, "disk_watch").await.expect("the disk watch is a duty");
    assert!(disk.runs >= 1 && disk.errors == 0 && disk.last_success_ms_ago.is_some(), "{disk:?}");
    assert!(duty(&cluster, leader, "elections").await.is_some(), "the election driver is a duty");
    let gone = if leader == 3 { 2 } else { 3 };
    cluster.kill(gone);
    let failed = wait_until("the audit to report the killed peer", Duration::from_secs(20), || async {
        duty(&cluster, leader, "state_audit").await.filter(|d| d.errors > 0)
    })
    .await;
    assert!(failed.last_error.contains(&format!("no state checkpoints from master {gone}")), "{failed:?}");
    assert!(cluster.master_exit_status(leader).is_none(), "a missing peer is no divergence");
}

/// The record of the duty `name` on master `id`.
async fn duty(cluster: &Cluster, id: u64, name: &str) -> Option<mooncake_proto::master::DutyStatus> {
    cluster.info(id).await?.duties.into_iter().find(|d| d.name == name)
}
