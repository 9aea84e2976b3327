//! The masters' side of the SSD tier on a real master (metadata only: no
//! bytes move here; the store node is played by RPCs). With offload on, a
//! complete object is handed to its store node as a copy task in a Ping
//! answer, or at once to its waiting TakeCopies call; the reported copy is
//! recorded as a disk replica, listed after the memory one; only the
//! executor may report it. A read of a disk-only object
//! makes a promotion task. An expired store node's disk stays known
//! (unreadable) until the same process comes back, which makes its objects
//! readable again; past the grace they are gone. A corrupt range reported by
//! the owner drops the replica on it.
// Test support: a failed unwrap or expect is the test failing (the
// workspace denies them in library code: Cargo.toml [workspace.lints]).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use mooncake_auth::Credential;
use mooncake_client::{MasterClient, MasterClientConfig};
use mooncake_proto::ErrorCode;
use mooncake_proto::master::{CopyTask, PutEndRequest, PutStartRequest, Replica, Segment, Tier};
use mooncake_testkit::{Cluster, wait_until};

const BIN: &str = env!("CARGO_BIN_EXE_mooncake-master");
const T: Duration = Duration::from_secs(20);
const NODE: u64 = 0x5a01;
const WRITER: u64 = 7;
const MEM: u64 = 1;
const DISK: u64 = 9;

fn segment(id: u64, tier: Tier, port: u16) -> Segment {
    Segment {
        id,
        size: 1 << 20,
        endpoint: format!("127.0.0.1:{port}"),
        host_id: "host-a".into(),
        tier: tier as i32,
        ..Default::default()
    }
}

/// A process of its own (its own credential).
fn process(cluster: &Cluster, credential: Credential) -> MasterClient {
    MasterClient::new(MasterClientConfig { credential: Some(credential), ..MasterClientConfig::new(cluster.addrs()) })
        .expect("client")
}

async fn put(client: &MasterClient, key: &str, size: u64) {
    let ask = PutStartRequest { client_id: WRITER, key: key.into(), size, replica_num: 1, ..Default::default() };
    let replicas = client.put_start(ask).await.expect("put start");
    let end =
        PutEndRequest { client_id: WRITER, key: key.into(), checksum: 0xAB, size, replicas, ..Default::default() };
    client.put_end_with(end).await.expect("put end");
}

/// Pings as the node until the leader hands it a copy of `key` (the
/// masters' logs are printed if it never comes).
async fn copy_task(cluster: &Cluster, node: &MasterClient, key: &str) -> CopyTask {
    let wait = tokio::time::timeout(T, async {
        loop {
            if let Ok(answer) = node.ping_for_copies(NODE).await
                && let Some(task) = answer.copy_tasks.into_iter().find(|t| t.key == key)
            {
                return task;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
    match wait.await {
        Ok(task) => task,
        Err(_) => {
            cluster.dump_logs();
            panic!("no copy task for {key} within {T:?}");
        }
    }
}

fn tiers(replicas: &[Replica]) -> Vec<i32> {
    replicas.iter().map(|r| r.tier).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn objects_are_offloaded_promoted_and_outlive_their_store_nodes_restart_on_disk() {
    let cluster = Cluster::builder()
        .masters(1)
        .master_bin(BIN)
        .arg("--enable_offload")
        .arg("--promotion_on_hit")
        .arg("--promotion_admission_threshold=1")
        .arg("--client_ttl=2")
        .arg("--disk_replica_grace_sec=3")
        .start();
    cluster.wait_for_leader(T).await;
    let credential = Credential::random().expect("randomness");
    let node = process(&cluster, credential.clone());
    let writer = cluster.client();
    node.remount_segments(NODE, vec![segment(MEM, Tier::Dram, 9001), segment(DISK, Tier::Ssd, 9001)])
        .await
        .expect("the store node mounts memory and disk");

    // Offload: the object's store node is asked to copy it to its disk.
    put(&writer, "k", 100).await;
    let task = copy_task(&cluster, &node, "k").await;
    assert_eq!((task.size, task.checksum), (100, 0xAB));
    let target = task.target.clone().expect("a target");
    assert_eq!((target.segment_id, target.tier, target.len), (DISK, Tier::Ssd as i32, 4096), "whole disk blocks");
    assert!(target.offset.is_multiple_of(4096) && !target.capability.is_empty());
    assert_eq!(task.sources.iter().map(|s| s.segment_id).collect::<Vec<_>>(), vec![MEM]);
    assert!(!task.sources[0].capability.is_empty(), "the source is readable with the capability given");

    // Only the node the copy was handed to may report it.
    let intruder = process(&cluster, Credential::random().expect("randomness"));
    let e = intruder.report_copy(NODE, task.task_id, "").await.expect_err("another process's report");
    assert_eq!(e.code(), Some(ErrorCode::PermissionDenied), "{e}");
    node.report_copy(NODE, task.task_id, "").await.expect("the copy is recorded");
    let e = node.report_copy(NODE, task.task_id, "").await.expect_err("reported twice");
    assert_eq!(e.code(), Some(ErrorCode::ObjectNotFound), "{e}");
    let list = writer.get_replica_list(WRITER, "k").await.expect("listed");
    assert_eq!(tiers(&list.replicas), vec![Tier::Dram as i32, Tier::Ssd as i32], "memory first, then disk");

    // A second object whose copy fails: nothing is recorded; it is asked again.
    put(&writer, "f", 5000).await;
    let failed = copy_task(&cluster, &node, "f").await;
    node.report_copy(NODE, failed.task_id, "disk full").await.expect("a failure is taken");
    let list = writer.get_replica_list(WRITER, "f").await.expect("listed");
    assert_eq!(tiers(&list.replicas), vec![Tier::Dram as i32]);
    let again = copy_task(&cluster, &node, "f").await;
    assert_ne!(again.task_id, failed.task_id);
    assert_eq!(again.target.as_ref().map(|t| t.len), Some(8192));
    node.report_copy(NODE, again.task_id, "").await.expect("recorded");

    // The node stops pinging and expires: its memory is gone, its disk kept
    // but unreadable.
    wait_until("the node expires", T, || async {
        let clients = writer.list_clients().await.ok()?;
        clients.iter().all(|c| c.id != NODE).then_some(())
    })
    .await;
    let e = writer.get_replica_list(WRITER, "k").await.expect_err("only on a detached disk");
    assert_eq!(e.code(), Some(ErrorCode::ReplicaIsNotReady), "{e}");
    assert!(e.to_string().contains("down"), "the message says why: {e}");
    // Another process cannot claim the node's disk.
    let e =
        intruder.remount_segments(NODE, vec![segment(DISK, Tier::Ssd, 9002)]).await.expect_err("another credential");
    assert_eq!(e.code(), Some(ErrorCode::PermissionDenied), "{e}");

    // The node restarts (same id and credential, new memory segment, new
    // port): its disk objects are readable again, from the new endpoint.
    let node = process(&cluster, credential.clone());
    node.remount_segments(NODE, vec![segment(MEM + 1, Tier::Dram, 9003), segment(DISK, Tier::Ssd, 9003)])
        .await
        .expect("the restarted node mounts its disk again");
    let list = writer.get_replica_list(WRITER, "k").await.expect("readable again");
    assert_eq!(tiers(&list.replicas), vec![Tier::Ssd as i32]);
    assert_eq!(list.replicas[0].endpoint, "127.0.0.1:9003");

    // Read once (threshold 1): promoted back to memory by the node.
    let promote = copy_task(&cluster, &node, "k").await;
    assert_eq!(promote.target.as_ref().map(|t| (t.segment_id, t.tier)), Some((MEM + 1, Tier::Dram as i32)));
    assert_eq!(promote.sources.iter().map(|s| s.tier).collect::<Vec<_>>(), vec![Tier::Ssd as i32]);
    node.report_copy(NODE, promote.task_id, "").await.expect("promotion recorded");
    let list = writer.get_replica_list(WRITER, "k").await.expect("listed");
    assert_eq!(tiers(&list.replicas), vec![Tier::Dram as i32, Tier::Ssd as i32]);

    // A corrupt disk range drops the replica on it (owner only).
    let disk = list.replicas[1].clone();
    let e = intruder.report_corrupt(NODE, DISK, vec![(disk.offset, 4096)]).await.expect_err("not the owner");
    assert_eq!(e.code(), Some(ErrorCode::PermissionDenied), "{e}");
    assert_eq!(node.report_corrupt(NODE, DISK, vec![(disk.offset, 4096)]).await.expect("reported"), 1);
    let list = writer.get_replica_list(WRITER, "k").await.expect("still in memory");
    assert_eq!(tiers(&list.replicas), vec![Tier::Dram as i32]);

    // Expired again and not back within the grace: the disk-only object is gone.
    drop(node);
    wait_until("the disk-only object is dropped after the grace", T, || async {
        match writer.get_replica_list(WRITER, "f").await {
            Err(e) if e.code() == Some(ErrorCode::ObjectNotFound) => Some(()),
            _ => None,
        }
    })
    .await;
}

/// Lists the tiers of `key`'s replicas without taking a KV lease, memory first.
async fn listed_tiers(client: &MasterClient, key: &str) -> Vec<i32> {
    let objects = client.list_objects(key, 8).await.expect("list");
    let mut tiers: Vec<i32> =
        objects.iter().find(|o| o.key == key).map(|o| o.replicas.iter().map(|r| r.tier).collect()).unwrap_or_default();
    tiers.sort_unstable();
    tiers
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_evicts_its_oldest_copies_and_keeps_objects_that_are_also_in_memory() {
    let cluster = Cluster::builder()
        .masters(1)
        .master_bin(BIN)
        .arg("--enable_offload")
        .arg("--default_kv_lease_ttl=300")
        .arg("--disk_eviction_high_watermark_ratio=0.8")
        .start();
    cluster.wait_for_leader(T).await;
    let node = process(&cluster, Credential::random().expect("randomness"));
    let writer = cluster.client();
    // A disk of 8 blocks: 5 objects of one block each fill it past 80 %.
    let mut disk = segment(DISK, Tier::Ssd, 9001);
    disk.size = 8 * 4096;
    node.remount_segments(NODE, vec![segment(MEM, Tier::Dram, 9001), disk]).await.expect("mount");
    let keys: Vec<String> = (0..7).map(|i| format!("d{i}")).collect();
    for key in &keys {
        put(&writer, key, 1000).await;
        let task = copy_task(&cluster, &node, key).await;
        node.report_copy(NODE, task.task_id, "").await.expect("copied");
    }
    // Disk eviction drops disk copies (oldest first) until the disk is back
    // under its watermark; every object keeps its memory copy.
    wait_until("the disk back under its watermark", T, || async {
        let mut on_disk = 0;
        for key in &keys {
            let tiers = listed_tiers(&writer, key).await;
            if tiers.is_empty() || tiers[0] != Tier::Dram as i32 {
                return None; // an object lost its memory copy
            }
            on_disk += usize::from(tiers.contains(&(Tier::Ssd as i32)));
        }
        (on_disk * 4096 <= 8 * 4096 * 8 / 10).then_some(on_disk)
    })
    .await;
    assert_eq!(listed_tiers(&writer, "d0").await, vec![Tier::Dram as i32], "the oldest copy went first");
    assert!(listed_tiers(&writer, "d6").await.contains(&(Tier::Ssd as i32)), "the newest copy stays");
    // An object evicted from disk is not offloaded again (it would push
    // another copy out, and back, for ever): over 8 copy-duty ticks (250 ms
    // each) the node is asked for no copy of it.
    for _ in 0..8 {
        let answer = node.ping_for_copies(NODE).await.expect("ping");
        assert!(answer.copy_tasks.iter().all(|t| t.key != "d0"), "d0 was offloaded again");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn take_copies_is_held_until_a_copy_is_planned_and_only_for_its_node() {
    let cluster = Cluster::builder().masters(1).master_bin(BIN).arg("--enable_offload").start();
    cluster.wait_for_leader(T).await;
    let node = process(&cluster, Credential::random().expect("randomness"));
    let writer = cluster.client();
    node.remount_segments(NODE, vec![segment(MEM, Tier::Dram, 9001), segment(DISK, Tier::Ssd, 9001)])
        .await
        .expect("the store node mounts memory and disk");

    // Why: with nothing to copy the leader holds the call (a store node
    // waiting for copies does not poll), and answers with none at the end.
    let wait = Duration::from_millis(600);
    let asked = std::time::Instant::now();
    let none = node.take_copies(NODE, wait).await.expect("an idle TakeCopies");
    assert!(none.is_empty(), "{none:?}");
    assert!(asked.elapsed() >= wait, "answered after {:?}, before the wait of {wait:?} ended", asked.elapsed());

    // Why: copies carry capabilities; another process asking as this
    // node's client id gets nothing.
    let intruder = process(&cluster, Credential::random().expect("randomness"));
    let e = intruder.take_copies(NODE, wait).await.expect_err("another process's TakeCopies");
    assert_eq!(e.code(), Some(ErrorCode::PermissionDenied), "{e}");

    // Why: a put's copy reaches the node by TakeCopies alone, no Ping.
    put(&writer, "t", 100).await;
    let task = tokio::time::timeout(T, async {
        loop {
            let tasks = node.take_copies(NODE, Duration::from_secs(1)).await.expect("TakeCopies");
            if let Some(task) = tasks.into_iter().find(|t| t.key == "t") {
                return task;
            }
        }
    })
    .await
    .expect("the copy of the put within the deadline");
    assert_eq!(task.target.map(|t| t.segment_id), Some(DISK));
    node.report_copy(NODE, task.task_id, "").await.expect("the copy is recorded");
}
