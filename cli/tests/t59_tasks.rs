//! Users' copy and move tasks and prefetches (upstream 0.3.14's
//! `create_copy_task`, `create_move_task`, `query_task` and
//! `ExistOptions.prefetch_to_memory`; docs/TIERS.md, "Copy and move
//! tasks") with real store nodes moving the bytes: a copy gives the object
//! a replica on the named segment, a move leaves it on the target only,
//! both read back equal; every refusal carries upstream's code (as ours);
//! a prefetched disk-only object comes back to memory.
// Test support: a failed unwrap or expect is the test failing (the
// workspace denies them in library code: Cargo.toml [workspace.lints]).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use mooncake_client::{Client, ClientConfig, MasterClient, PutOptions};
use mooncake_proto::ErrorCode;
use mooncake_proto::master::{TaskId, TaskStatus, TaskType, Tier};
use mooncake_testkit::{Cluster, wait_until};

const BIN: &str = env!("CARGO_BIN_EXE_mooncake");
const T: Duration = Duration::from_secs(30);

fn value(n: usize, seed: u8) -> Vec<u8> {
    (0..n).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect()
}

/// Each store node's memory segment endpoint, and the printed id of a
/// disk segment (`seg-…`).
async fn segments(cluster: &Cluster) -> (Vec<String>, String) {
    let (leader, _) = cluster.wait_for_leader(T).await;
    let info = cluster.info(leader).await.expect("cluster info");
    let mut memory: Vec<String> = info
        .segments
        .iter()
        .filter_map(|u| u.segment.as_ref())
        .filter(|s| s.tier == Tier::Dram as i32)
        .map(|s| s.endpoint.clone())
        .collect();
    memory.sort();
    let disk = info
        .segments
        .iter()
        .filter_map(|u| u.segment.as_ref())
        .find(|s| s.tier == Tier::Ssd as i32)
        .map(|s| format!("seg-{:016x}", s.id))
        .expect("a disk segment");
    (memory, disk)
}

/// The endpoints of `key`'s replicas, sorted.
async fn endpoints(master: &MasterClient, key: &str) -> Vec<String> {
    let listed = master.list_objects(key, 4).await.expect("list");
    let mut e: Vec<String> =
        listed.into_iter().filter(|o| o.key == key).flat_map(|o| o.replicas).map(|r| r.endpoint).collect();
    e.sort();
    e
}

/// Polls task `id` every 0.1 s until it is finished (as upstream's
/// `query_task_until_complete`); its final status and message.
async fn finished(master: &MasterClient, id: TaskId) -> (TaskStatus, String) {
    wait_until("the task to finish", T, || async {
        let r = master.query_task(id).await.expect("query_task");
        let status = TaskStatus::try_from(r.task_status).ok()?;
        matches!(status, TaskStatus::Success | TaskStatus::Failed).then_some((status, r.message))
    })
    .await
}

fn code<T: std::fmt::Debug>(r: Result<T, mooncake_client::MasterError>) -> Option<ErrorCode> {
    r.expect_err("refused").code()
}

/// Why: upstream's `scripts/test_copy_move_api.py` cases, against bytes a
/// store node really copied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copies_and_moves_place_replicas_where_asked_and_refusals_carry_upstreams_codes() {
    let cluster = Cluster::builder()
        .masters(1)
        .stores(2)
        .segment_size("64MiB")
        .disk_size("64MiB")
        .arg("--default_kv_lease_ttl=300")
        .binary(BIN)
        .start();
    cluster.wait_for_segments(4, T).await;
    let (memory, disk) = segments(&cluster).await;
    assert_eq!(memory.len(), 2, "{memory:?}");
    let client = Client::connect(ClientConfig::new(cluster.addrs())).await.expect("client");
    let master = client.master();
    let one = PutOptions { replicas: 1, ..Default::default() };

    // Copy: one replica becomes one on every segment; the bytes are equal.
    let copied = value(300 << 10, 1);
    client.put("t59/copy", &copied, &one).await.expect("put");
    let id = master.create_copy_task("t59/copy", memory.clone()).await.expect("copy task");
    let state = master.query_task(id).await.expect("query");
    assert_eq!(state.r#type, TaskType::ReplicaCopy as i32);
    assert!(state.created_at_ms > 1_600_000_000_000, "ms since the epoch: {}", state.created_at_ms);
    assert_eq!(finished(master, id).await, (TaskStatus::Success, "Task completed successfully".into()));
    assert_eq!(endpoints(master, "t59/copy").await, memory);
    assert_eq!(client.get("t59/copy").await.expect("get"), copied);

    // Copy to segments that hold it already (duplicates too): SUCCESS, unchanged.
    let again = vec![memory[0].clone(), memory[0].clone(), memory[1].clone()];
    let id = master.create_copy_task("t59/copy", again).await.expect("copy to holders");
    assert_eq!(finished(master, id).await.0, TaskStatus::Success);
    assert_eq!(endpoints(master, "t59/copy").await, memory);

    // Move: one replica, on the target only; the bytes are equal.
    let moved = value(200 << 10, 2);
    client.put("t59/move", &moved, &one).await.expect("put");
    let source = endpoints(master, "t59/move").await.pop().expect("a replica");
    let target = memory.iter().find(|e| **e != source).expect("another segment").clone();
    let id = master.create_move_task("t59/move", &source, &target).await.expect("move task");
    assert_eq!(master.query_task(id).await.expect("query").r#type, TaskType::ReplicaMove as i32);
    assert_eq!(finished(master, id).await, (TaskStatus::Success, "Task completed successfully".into()));
    assert_eq!(endpoints(master, "t59/move").await, vec![target.clone()]);
    assert_eq!(client.get("t59/move").await.expect("get after move"), moved);

    // Refusals, in upstream's order and with its codes.
    let none: Vec<String> = Vec::new();
    assert_eq!(code(master.create_copy_task("t59/missing", none).await), Some(ErrorCode::InvalidParams), "empty first");
    let bogus = vec!["bogus:1".to_string()];
    assert_eq!(code(master.create_copy_task("t59/missing", bogus.clone()).await), Some(ErrorCode::ObjectNotFound));
    assert_eq!(code(master.create_copy_task("t59/copy", bogus).await), Some(ErrorCode::InvalidParams));
    let on_disk = vec![disk.clone()];
    let unusable = code(master.create_copy_task("t59/copy", on_disk).await);
    assert_eq!(unusable, Some(ErrorCode::UnavailableInCurrentStatus), "a disk segment takes no user copies");
    assert_eq!(code(master.create_move_task("t59/missing", &source, &target).await), Some(ErrorCode::ObjectNotFound));
    assert_eq!(code(master.create_move_task("t59/move", &target, &target).await), Some(ErrorCode::InvalidParams));
    assert_eq!(code(master.create_move_task("t59/move", &target, "bogus:1").await), Some(ErrorCode::InvalidParams));
    assert_eq!(code(master.create_move_task("t59/move", "bogus:1", &source).await), Some(ErrorCode::InvalidParams));
    let no_replica = master.create_move_task("t59/move", &source, &target).await;
    assert_eq!(code(no_replica), Some(ErrorCode::InvalidParams), "the source holds no replica any more");
    assert_eq!(
        code(master.create_move_task("t59/move", &target, &disk).await),
        Some(ErrorCode::UnavailableInCurrentStatus)
    );
    assert_eq!(code(master.query_task(TaskId { hi: 1, lo: 2 }).await), Some(ErrorCode::TaskNotFound));
    // A refused move left its source as it was.
    assert_eq!(endpoints(master, "t59/move").await, vec![target]);

    // Tasks side by side: a copy and a move of several keys at once.
    let mut ids = Vec::new();
    for i in 0..6 {
        let key = format!("t59/many/{i}");
        client.put(&key, &value(64 << 10, i as u8), &one).await.expect("put");
        let at = endpoints(master, &key).await.pop().expect("a replica");
        let other = memory.iter().find(|e| **e != at).expect("another").clone();
        let id = match i % 2 {
            0 => master.create_copy_task(&key, vec![other]).await,
            _ => master.create_move_task(&key, &at, &other).await,
        };
        ids.push((i, key, id.expect("task")));
    }
    for (i, key, id) in ids {
        assert_eq!(finished(master, id).await.0, TaskStatus::Success, "{key}");
        assert_eq!(endpoints(master, &key).await.len(), if i % 2 == 0 { 2 } else { 1 }, "{key}");
        assert_eq!(client.get(&key).await.expect("get"), value(64 << 10, i as u8), "{key}");
    }
    client.close().await;
}

/// The tiers of `key`'s replicas, sorted (ListObjects: no KV lease).
async fn tiers(master: &MasterClient, key: &str) -> Vec<i32> {
    let listed = master.list_objects(key, 4).await.unwrap_or_default();
    let mut t: Vec<i32> =
        listed.into_iter().filter(|o| o.key == key).flat_map(|o| o.replicas).map(|r| r.tier).collect();
    t.sort_unstable();
    t
}

/// Why: upstream's `test_prefetch_on_exist.py`: with promotion on hit off,
/// a disk-only object asked for (`ExistOptions.prefetch_to_memory`) comes
/// back to memory and reads equal; one not asked for stays on disk.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prefetched_disk_only_object_returns_to_memory_and_one_not_asked_for_stays_on_disk() {
    let cluster = Cluster::builder()
        .masters(1)
        .stores(1)
        .segment_size("16MiB")
        .disk_size("64MiB")
        .arg("--enable_offload")
        .arg("--default_kv_lease_ttl=300")
        .arg("--eviction_high_watermark_ratio=0.9")
        .arg("--eviction_ratio=0.05")
        .store_arg("--heartbeat-interval-ms=100")
        .binary(BIN)
        .start();
    cluster.wait_for_segments(2, T).await;
    let client = Client::connect(ClientConfig::new(cluster.addrs())).await.expect("client");
    let master = client.master();
    let (memory, disk) = (Tier::Dram as i32, Tier::Ssd as i32);
    // 40 objects of 512 KiB through 16 MiB of memory, each copied to disk
    // before the next: the oldest end up on disk only.
    let n = 40;
    for i in 0..n {
        let key = format!("t59/tier/{i}");
        client.put(&key, &value(512 << 10, i as u8), &PutOptions::default()).await.expect("put");
        wait_until(&format!("{key} on disk"), T, || async { tiers(master, &key).await.contains(&disk).then_some(()) })
            .await;
    }
    let disk_only = wait_until("two objects on disk only", T, || async {
        let mut found = Vec::new();
        for i in 0..n {
            if tiers(master, &format!("t59/tier/{i}")).await == vec![disk] {
                found.push(i);
            }
        }
        (found.len() >= 2).then_some(found)
    })
    .await;
    // Room below memory's high watermark for the promotion.
    for i in n - 4..n {
        client.remove(&format!("t59/tier/{i}"), false).await.expect("remove");
    }
    let (asked, control) = (format!("t59/tier/{}", disk_only[0]), format!("t59/tier/{}", disk_only[1]));
    assert_eq!(master.prefetch_to_memory(vec![asked.clone(), "t59/missing".into()]).await.expect("prefetch"), 1);
    wait_until("the prefetched object in memory", T, || async {
        (tiers(master, &asked).await == vec![memory, disk]).then_some(())
    })
    .await;
    assert_eq!(client.get(&asked).await.expect("get"), value(512 << 10, disk_only[0] as u8));
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(tiers(master, &control).await, vec![disk], "an object not prefetched stays on disk");
    assert_eq!(master.prefetch_to_memory(vec![asked]).await.expect("prefetch again"), 0, "in memory already");
    client.close().await;
}
