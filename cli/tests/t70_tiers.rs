//! The SSD tier with real processes (docs/TIERS.md): one master and one
//! store node with 16 MiB of memory and a 64 MiB disk segment. Objects put
//! past the memory's size are copied to disk and dropped from memory, and
//! every one reads back equal; a disk-only object read is promoted back to
//! memory; a store node killed with -9 and restarted (also after its
//! registration expired) serves its disk objects again; a block corrupted
//! on disk while the node was down is found by its scrub, and the replica
//! on it is dropped, never served.
// Test support: a failed unwrap or expect is the test failing (the
// workspace denies them in library code: Cargo.toml [workspace.lints]).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{Read, Seek, SeekFrom, Write};
use std::time::Duration;

use mooncake_client::{Client, ClientConfig, PutOptions};
use mooncake_local_cluster::{Role, STORE_DISK_FILE};
use mooncake_proto::ErrorCode;
use mooncake_proto::master::Tier;
use mooncake_testkit::{Cluster, wait_until};

const BIN: &str = env!("CARGO_BIN_EXE_mooncake");
const WAIT: Duration = Duration::from_secs(60);
const OBJECT: usize = 512 << 10;
const DISK_BYTES: u64 = 64 << 20;

fn object(i: usize) -> Vec<u8> {
    (0..OBJECT).map(|b| ((b * 31 + i * 7) % 251) as u8).collect()
}

fn cluster(extra: &[&str]) -> Cluster {
    let mut b = Cluster::builder()
        .masters(1)
        .stores(1)
        .segment_size("16MiB")
        .disk_size("64MiB")
        .arg("--enable_offload")
        // Short KV leases: a new leader counts every object as leased for
        // one lease TTL, and this test needs eviction within seconds.
        .arg("--default_kv_lease_ttl=500")
        // The memory tier's duty evicts down to 90 % by 5 % a round (the
        // defaults run fuller): with 32 objects of room, a quarter of the 40
        // put must leave memory for disk.
        .arg("--eviction_high_watermark_ratio=0.9")
        .arg("--eviction_ratio=0.05")
        .store_arg("--heartbeat-interval-ms=100")
        .binary(BIN);
    for a in extra {
        b = b.arg(*a);
    }
    b.start()
}

/// A client, once the store node has mounted its memory and its disk.
async fn client_of(cluster: &Cluster) -> Client {
    let node = cluster.inner.store_client_id(1);
    wait_until("the store node's memory and disk segments", WAIT, || async {
        let (leader, _) = cluster.wait_for_leader(WAIT).await;
        let info = cluster.info(leader).await?;
        let tiers: Vec<i32> = info
            .segments
            .iter()
            .filter(|u| u.owner_client_id == node)
            .filter_map(|u| u.segment.as_ref().map(|s| s.tier))
            .collect();
        (tiers.contains(&(Tier::Dram as i32)) && tiers.contains(&(Tier::Ssd as i32))).then_some(())
    })
    .await;
    Client::connect(ClientConfig::new(cluster.addrs())).await.expect("client")
}

/// The tiers of `key`'s replicas, memory first, as the leader lists them (ListObjects:
/// no KV lease is taken, so looking does not keep them from eviction).
async fn tiers(cluster: &Cluster, key: &str) -> Result<Vec<i32>, Option<ErrorCode>> {
    match cluster.client().list_objects(key, 16).await {
        Ok(objects) => match objects.into_iter().find(|o| o.key == key) {
            Some(o) => {
                let mut tiers: Vec<i32> = o.replicas.iter().map(|r| r.tier).collect();
                tiers.sort_unstable();
                Ok(tiers)
            }
            None => Err(Some(ErrorCode::ObjectNotFound)),
        },
        Err(e) => Err(e.code()),
    }
}

/// Whether the leader answers a read of `key` (GetReplicaList) with `code`.
async fn read_answers(cluster: &Cluster, key: &str, code: ErrorCode) -> bool {
    match cluster.client().get_replica_list(7, key).await {
        Ok(_) => code == ErrorCode::Ok,
        Err(e) => e.code() == Some(code),
    }
}

/// Waits until `key` has replicas on exactly `want` (the cluster's logs are
/// printed if it never does).
async fn wait_for_tiers(cluster: &Cluster, key: &str, want: &[Tier], what: &str) {
    let want: Vec<i32> = want.iter().map(|t| *t as i32).collect();
    let waited = tokio::time::timeout(WAIT, async {
        while tiers(cluster, key).await.ok() != Some(want.clone()) {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
    if waited.await.is_err() {
        cluster.dump_logs();
        panic!("timed out after {WAIT:?} waiting for {what}: {key} is on {:?}", tiers(cluster, key).await);
    }
}

/// Puts 40 objects of 512 KiB (20 MiB) through 16 MiB of memory, each one
/// after the previous one is copied to disk.
async fn fill_past_memory(cluster: &Cluster, client: &Client) -> usize {
    let n = 40;
    for i in 0..n {
        let key = format!("t70/{i}");
        client.put(&key, &object(i), &PutOptions::default()).await.unwrap_or_else(|e| panic!("put {key}: {e}"));
        wait_until(&format!("{key} copied to disk"), WAIT, || async {
            tiers(cluster, &key).await.ok()?.contains(&(Tier::Ssd as i32)).then_some(())
        })
        .await;
    }
    n
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn objects_past_memory_are_kept_on_disk_and_read_back_equal_and_hot_ones_return_to_memory() {
    let cluster = cluster(&["--promotion_on_hit", "--promotion_admission_threshold=1"]);
    let client = client_of(&cluster).await;
    let n = fill_past_memory(&cluster, &client).await;
    // Memory is past its high watermark now; its eviction duty drops the
    // memory copies of objects kept on disk (copies are made as fast as the
    // puts, so some of that may still be to come when the fill ends).
    let disk_only = wait_until(&format!("{} of {n} objects on disk only", n / 4), WAIT, || async {
        let mut disk_only = Vec::new();
        for i in 0..n {
            if tiers(&cluster, &format!("t70/{i}")).await == Ok(vec![Tier::Ssd as i32]) {
                disk_only.push(i);
            }
        }
        (disk_only.len() >= n / 4).then_some(disk_only)
    })
    .await;
    assert!(disk_only.len() >= n / 4, "only {} of {n} objects left memory for disk", disk_only.len());

    // Room below memory's high watermark: the newest objects are removed.
    let removed = 4;
    for i in n - removed..n {
        client.remove(&format!("t70/{i}"), false).await.expect("remove");
    }
    // One disk-only object is read (threshold 1): it comes back to memory,
    // its disk copy kept.
    let hot = disk_only[0];
    let key = format!("t70/{hot}");
    assert_eq!(client.get(&key).await.expect("get from disk"), object(hot), "{key} read from disk");
    wait_for_tiers(&cluster, &key, &[Tier::Dram, Tier::Ssd], "a read disk-only object promoted to memory").await;
    assert_eq!(client.get(&key).await.expect("get the promoted object"), object(hot));

    // Every object reads back equal, from memory or from disk.
    for i in 0..n - removed {
        let key = format!("t70/{i}");
        assert_eq!(client.get(&key).await.unwrap_or_else(|e| panic!("get {key}: {e}")), object(i), "{key}");
    }
    client.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_store_node_serves_its_disk_objects_again_and_drops_what_its_scrub_finds_corrupt() {
    let mut cluster = cluster(&["--client_ttl=2", "--disk_replica_grace_sec=600"]);
    let client = client_of(&cluster).await;
    let n = fill_past_memory(&cluster, &client).await;

    // SIGKILL and restart at once: the node comes back within its TTL.
    cluster.kill_store(1);
    cluster.inner.restart(Role::Store, 1).unwrap_or_else(|e| panic!("restart: {e}"));
    for i in 0..n {
        let key = format!("t70/{i}");
        wait_until(&format!("{key} readable after the restart"), WAIT, || async {
            (client.get(&key).await.ok()? == object(i)).then_some(())
        })
        .await;
    }

    // SIGKILL, stay down past the TTL: the disk is kept (detached), its
    // objects unreadable, not lost. Meanwhile one block of a disk-only
    // object rots.
    let victim = format!("t70/{}", n - 1);
    let listed = cluster.client().list_objects(&victim, 16).await.expect("the victim is listed");
    let on_disk = listed
        .iter()
        .find(|o| o.key == victim)
        .and_then(|o| o.replicas.iter().find(|r| r.tier == Tier::Ssd as i32))
        .expect("a disk replica")
        .clone();
    cluster.kill_store(1);
    let node = cluster.inner.store_client_id(1);
    wait_until("the killed node to expire", WAIT, || async {
        let clients = cluster.client().list_clients().await.ok()?;
        clients.iter().all(|c| c.id != node).then_some(())
    })
    .await;
    assert!(read_answers(&cluster, "t70/0", ErrorCode::ReplicaIsNotReady).await, "unreadable while the node is down");
    let file = cluster.inner.dir().join(format!("store-{}", 1)).join(STORE_DISK_FILE);
    let at = mooncake_segment::disk::file_offset_of(DISK_BYTES, on_disk.offset).expect("inside the file");
    let mut f = std::fs::OpenOptions::new().read(true).write(true).open(&file).expect("open the disk file");
    let mut byte = [0u8; 1];
    f.seek(SeekFrom::Start(at + 100)).and_then(|_| f.read_exact(&mut byte)).expect("read a byte");
    f.seek(SeekFrom::Start(at + 100)).and_then(|_| f.write_all(&[byte[0] ^ 0xff])).expect("flip it");
    f.sync_all().expect("sync");
    drop(f);

    // The node restarts after the TTL: its disk is attached again; its
    // scrub finds the rotten block; that replica is dropped.
    cluster.inner.restart(Role::Store, 1).unwrap_or_else(|e| panic!("restart: {e}"));
    for i in 0..n - 1 {
        let key = format!("t70/{i}");
        wait_until(&format!("{key} readable after the node came back"), WAIT, || async {
            (client.get(&key).await.ok()? == object(i)).then_some(())
        })
        .await;
    }
    wait_until("the corrupt replica dropped", WAIT, || async {
        match tiers(&cluster, &victim).await {
            Err(Some(ErrorCode::ObjectNotFound)) => Some(()),
            Ok(t) if !t.contains(&(Tier::Ssd as i32)) => Some(()),
            _ => None,
        }
    })
    .await;
    if let Ok(bytes) = client.get(&victim).await {
        assert_eq!(bytes, object(n - 1), "a corrupt replica was served");
    }
    client.close().await;
}
