//! The data path with real processes: three masters and two store nodes
//! started from the one `mooncake` binary, and this test's own in-process
//! `Client` as the workload (TCP transfers). Each test is one story: bytes
//! land on two segments and come back equal, a dead node's replica is skipped,
//! a dead client's segment and its only-copy objects are dropped after the
//! client TTL, a corrupt replica is never served, a restarted node replaces
//! its stale segment at once, and leases guard removes.
// Test support: a failed unwrap or expect is the test failing (the
// workspace denies them in library code: Cargo.toml [workspace.lints]).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::future::Future;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::PathBuf;
use std::sync::{Mutex, Once, PoisonError};
use std::time::{Duration, Instant};

use mooncake_client::{Client, ClientConfig, ClientError, PutOptions, PutOutcome, remote};
use mooncake_local_cluster::Role;
use mooncake_proto::ErrorCode;
use mooncake_proto::master::{GetClusterInfoResponse, ObjectInfo, Replica, ReplicaStatus, Segment};
use mooncake_testkit::{Cluster, wait_until};
use mooncake_transfer::{Protocol, TcpConfig, TransferEngine};

const SEGMENT_SIZE: &str = "64MiB";
const SEGMENT_BYTES: u64 = 64 << 20;
/// Bound on one waited-for event (leader, segments, expiry).
const WAIT: Duration = Duration::from_secs(15);
/// Bound on a whole story; a hang fails the test with the logs.
const STORY_LIMIT: Duration = Duration::from_secs(60);

// ---------------------------------------------------------------- harness

/// A cluster for one story. On drop it SIGKILLs the store nodes and deletes
/// the `/dev/shm` files of every segment the story saw or a store node
/// logged (a killed node cannot unlink its own); when dropped by a panic it
/// first prints the processes' logs and the client warnings.
struct Story {
    cluster: Cluster,
    shm_files: BTreeSet<PathBuf>,
}

impl Story {
    fn start(stores: u64, master_args: &[&str]) -> Story {
        capture_client_warnings();
        let mut b = Cluster::builder()
            .masters(3)
            .stores(stores)
            .segment_size(SEGMENT_SIZE)
            .binary(env!("CARGO_BIN_EXE_mooncake"));
        for a in master_args {
            b = b.arg(*a);
        }
        Story { cluster: b.start(), shm_files: BTreeSet::new() }
    }

    /// Waits for a leader and `n` mounted segments; returns the leader's view.
    async fn ready(&mut self, n: u64) -> GetClusterInfoResponse {
        self.cluster.wait_for_segments(n, WAIT).await;
        self.info().await
    }

    /// The leader's view of the cluster (remembering every segment's shm file).
    async fn info(&mut self) -> GetClusterInfoResponse {
        let (leader, _) = self.cluster.wait_for_leader(WAIT).await;
        let info = self.cluster.info(leader).await.unwrap_or_else(|| panic!("leader {leader} did not answer"));
        for s in info.segments.iter().filter_map(|u| u.segment.as_ref()) {
            if !s.shm_path.is_empty() {
                self.shm_files.insert(PathBuf::from(&s.shm_path));
            }
        }
        info
    }

    /// A workload client of this cluster: contributes no memory, moves bytes over TCP.
    async fn client(&self) -> Client {
        let mut cfg = ClientConfig::new(self.cluster.addrs());
        cfg.protocol = Protocol::Tcp;
        Client::connect(cfg).await.unwrap_or_else(|e| panic!("connecting a workload client: {e}"))
    }

    /// A workload client acting as admin (it may force removals).
    async fn admin_client(&self) -> Client {
        let mut cfg = ClientConfig::new(self.cluster.addrs());
        cfg.protocol = Protocol::Tcp;
        cfg.admin_token = Some(self.cluster.inner.admin_token().clone());
        Client::connect(cfg).await.unwrap_or_else(|e| panic!("connecting an admin client: {e}"))
    }

    fn store_addr(&self, id: u64) -> String {
        self.cluster.inner.node(Role::Store, id).expect("store node").addr.clone()
    }
}

impl Drop for Story {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.cluster.dump_logs();
            eprintln!("---- client warnings ----\n{}", captured_warnings());
        }
        for id in self.cluster.inner.store_ids() {
            self.cluster.kill_store(id);
            // Every start of a store node logs its shm file: this also finds
            // segments of a story that failed before it saw them.
            let log = self.cluster.inner.node(Role::Store, id).map(|n| n.log.clone());
            let text = log.and_then(|l| std::fs::read_to_string(l).ok()).unwrap_or_default();
            for line in text.lines() {
                if let Some(path) = line.split("(shm ").nth(1).and_then(|rest| rest.strip_suffix(')')) {
                    self.shm_files.insert(PathBuf::from(path));
                }
            }
        }
        for f in self.shm_files.iter().filter(|f| f.starts_with("/dev/shm")) {
            let _ = std::fs::remove_file(f);
        }
    }
}

/// Runs a story with a deadline (a hang becomes a failure with the logs).
async fn within<T>(what: &str, story: impl Future<Output = T>) -> T {
    match tokio::time::timeout(STORY_LIMIT, story).await {
        Ok(v) => v,
        Err(_) => panic!("{what}: not done within {STORY_LIMIT:?}"),
    }
}

/// The one segment store node `id` contributes, as the leader sees it.
fn segment_of(story: &Story, info: &GetClusterInfoResponse, id: u64) -> Segment {
    let owned = segments_owned_by(info, story.cluster.inner.store_client_id(id));
    assert_eq!(owned.len(), 1, "store node {id} should own exactly one segment: {owned:?}");
    owned.into_iter().next().expect("one segment")
}

fn segments_owned_by(info: &GetClusterInfoResponse, client_id: u64) -> Vec<Segment> {
    info.segments.iter().filter(|u| u.owner_client_id == client_id).filter_map(|u| u.segment.clone()).collect()
}

/// Deterministic, seed-dependent bytes (xorshift), so objects differ from each other.
fn payload(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

fn replicas(n: u32, preferred: &[&Segment]) -> PutOptions {
    PutOptions {
        replicas: n,
        preferred_segments: preferred.iter().map(|s| mooncake_segment::SegmentId(s.id)).collect(),
        ..Default::default()
    }
}

async fn put(client: &Client, key: &str, data: &[u8], opts: &PutOptions) {
    if let Err(e) = client.put(key, data, opts).await {
        panic!("put {key:?} ({} bytes): {e}", data.len());
    }
}

/// Gets `key` and checks the bytes (without printing megabytes on a mismatch).
async fn assert_get(client: &Client, key: &str, want: &[u8]) {
    let got = client.get(key).await.unwrap_or_else(|e| panic!("get {key:?}: {e}"));
    assert_eq!(got.len(), want.len(), "get {key:?}: length");
    assert!(got == want, "get {key:?}: bytes differ from what was put");
}

/// The replica list a reader gets (this grants it a KV lease).
async fn replica_list(client: &Client, key: &str) -> Vec<Replica> {
    let list = client.master().get_replica_list(client.client_id(), key).await;
    list.unwrap_or_else(|e| panic!("replica list of {key:?}: {e}")).replicas
}

/// The object's metadata, as ListObjects reports it.
async fn object_info(client: &Client, key: &str) -> ObjectInfo {
    let found = client.master().list_objects(key, 1).await.unwrap_or_else(|e| panic!("list {key:?}: {e}"));
    found.into_iter().find(|o| o.key == key).unwrap_or_else(|| panic!("{key:?} is not listed"))
}

/// The segments of `replicas`, in the order the master lists them (the
/// order a reader tries them in: all replicas are on this host).
fn segment_ids(replicas: &[Replica]) -> Vec<u64> {
    replicas.iter().map(|r| r.segment_id).collect()
}

fn assert_not_found<T: std::fmt::Debug>(what: &str, r: Result<T, ClientError>) {
    match r {
        Err(ClientError::NotFound(_)) => {}
        other => panic!("{what}: want NotFound, got {other:?}"),
    }
}

/// Flips bytes of one replica of an object of `size` bytes in its store
/// node's `/dev/shm` file: the first, middle and last byte, behind the node's back.
fn corrupt(r: &Replica, size: u64) {
    assert!(!r.shm_path.is_empty(), "replica on segment {:x} has no shm file", r.segment_id);
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&r.shm_path)
        .unwrap_or_else(|e| panic!("opening {}: {e}", r.shm_path));
    for at in [0, size / 2, size - 1] {
        let mut b = [0u8; 1];
        f.seek(SeekFrom::Start(r.offset + at)).expect("seek");
        f.read_exact(&mut b).expect("read shm byte");
        b[0] ^= 0x5A;
        f.seek(SeekFrom::Start(r.offset + at)).expect("seek");
        f.write_all(&b).expect("write shm byte");
    }
    f.flush().expect("flush shm file");
}

// ------------------------------------------------- client warning capture

static WARNINGS: Mutex<Vec<u8>> = Mutex::new(Vec::new());

struct WarningSink;

impl Write for WarningSink {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        WARNINGS.lock().unwrap_or_else(PoisonError::into_inner).extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Records the client library's warnings (one process-wide subscriber; the
/// stories use distinct keys, so they can tell their warnings apart).
fn capture_client_warnings() {
    static INIT: Once = Once::new();
    INIT.call_once(|| {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new("mooncake_client=warn,mooncake_transfer=warn"))
            .with_ansi(false)
            .with_writer(|| WarningSink)
            .try_init();
    });
}

fn captured_warnings() -> String {
    String::from_utf8_lossy(&WARNINGS.lock().unwrap_or_else(PoisonError::into_inner)).into_owned()
}

/// Warnings that mention `what` about object `key`.
fn warnings_about(key: &str, what: &str) -> usize {
    let field = format!("key={key:?}");
    captured_warnings().lines().filter(|l| l.contains(what) && l.contains(&field)).count()
}

// ---------------------------------------------------------------- stories

/// Why: replication is only worth its memory if every replica is a full,
/// independent copy on a different node, for every object size.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_land_on_two_nodes_and_read_back_equal() {
    let mut story = Story::start(2, &[]);
    within("replicas story", replicas_story(&mut story)).await;
}

async fn replicas_story(story: &mut Story) {
    // Phase 1: both store nodes mount their segments.
    let info = story.ready(2).await;
    let (seg1, seg2) = (segment_of(story, &info, 1), segment_of(story, &info, 2));
    assert_eq!(info.capacity_bytes, 2 * SEGMENT_BYTES);
    assert_eq!(seg1.endpoint, story.store_addr(1));
    assert_eq!(seg2.endpoint, story.store_addr(2));
    let client = story.client().await;
    // Reads each replica on its own, bypassing the client's replica choice.
    let direct = TransferEngine::new("127.0.0.1".into(), Protocol::Tcp, TcpConfig::default()).expect("engine");

    // Phase 2: objects of 1 B, 64 KiB and 4 MiB + 13 with two replicas each.
    let sizes = [1usize, 64 << 10, (4 << 20) + 13];
    let mut objects = Vec::new();
    for (i, size) in sizes.into_iter().enumerate() {
        let key = format!("t40-replicas/{size}B");
        let data = payload(i as u64 + 1, size);
        put(&client, &key, &data, &replicas(2, &[])).await;

        let obj = object_info(&client, &key).await;
        assert_eq!(obj.size, size as u64);
        assert_eq!(obj.checksum, crc32c::crc32c(&data));
        assert_eq!(obj.status, ReplicaStatus::Complete as i32);
        assert_eq!(obj.replicas.len(), 2, "{key}: {:?}", obj.replicas);
        let segs: BTreeSet<u64> = obj.replicas.iter().map(|r| r.segment_id).collect();
        assert_eq!(segs, BTreeSet::from([seg1.id, seg2.id]), "{key}: replicas on distinct segments of both nodes");

        // Phase 3: every replica holds the same bytes, and the client's get
        // returns them. (Read under the capabilities GetReplicaList grants:
        // the listing's replicas carry none.)
        for r in &replica_list(&client, &key).await {
            // The range is the allocation (rounded up to the allocator's alignment).
            assert!(r.len >= size as u64, "{key}: range of {} bytes", r.len);
            assert!(r.endpoint == seg1.endpoint || r.endpoint == seg2.endpoint, "{r:?}");
            let mut buf = vec![0u8; size];
            direct.read(&remote(r), r.offset, &mut buf).await.unwrap_or_else(|e| panic!("{key}: read {r:?}: {e}"));
            assert!(buf == data, "{key}: the replica on segment {:x} differs from what was put", r.segment_id);
        }
        assert_get(&client, &key, &data).await;
        objects.push((key, data, obj));
    }

    // Phase 4: get_into fills an exact or larger buffer and reports the size.
    let (key, data, before) = objects.last().expect("objects");
    let mut exact = vec![0u8; data.len()];
    assert_eq!(client.get_into(key, &mut exact).await.expect("get_into exact"), data.len());
    assert!(exact == *data, "get_into into an exact buffer");
    let mut larger = vec![0xEEu8; data.len() + 100];
    assert_eq!(client.get_into(key, &mut larger).await.expect("get_into larger"), data.len());
    assert!(larger[..data.len()] == data[..], "get_into into a larger buffer");
    assert!(larger[data.len()..].iter().all(|b| *b == 0xEE), "get_into wrote past the object");

    // Phase 5: a too-small buffer is refused with its size, and nothing changes.
    let mut small = vec![0xA5u8; data.len() - 1];
    match client.get_into(key, &mut small).await {
        Err(ClientError::BufferTooSmall { key: k, size, buf }) => {
            assert_eq!((k.as_str(), size, buf), (key.as_str(), data.len() as u64, data.len() - 1));
        }
        other => panic!("get_into a too-small buffer: want BufferTooSmall, got {other:?}"),
    }
    assert!(small.iter().all(|b| *b == 0xA5), "a refused get_into wrote into the buffer");
    assert_eq!(object_info(&client, key).await, *before, "a refused get_into changed the object");
    for (key, data, _) in &objects {
        assert_get(&client, key, data).await;
    }
}

/// Why: a store node can die at any moment; a reader must not lose an
/// object that still has a live replica, nor hang on the dead one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gets_fall_back_to_the_surviving_replica_of_a_killed_node() {
    let mut story = Story::start(2, &[]);
    within("killed node story", killed_node_story(&mut story)).await;
}

async fn killed_node_story(story: &mut Story) {
    // Phase 1: objects with two replicas, the first (tried first) on node 2.
    let info = story.ready(2).await;
    let (survivor, victim) = (segment_of(story, &info, 1), segment_of(story, &info, 2));
    let client = story.client().await;
    let mut objects = Vec::new();
    for i in 0..6u64 {
        let key = format!("t40-fallback/{i}");
        let data = payload(100 + i, 1000 + (i as usize) * 150_000);
        put(&client, &key, &data, &replicas(2, &[&victim, &survivor])).await;
        let list = replica_list(&client, &key).await;
        let segs = segment_ids(&list);
        assert_eq!(segs, vec![victim.id, survivor.id], "{key}: preferred placement order");
        // Reading once leaves pooled TCP connections to node 2 for the kill to break.
        assert_get(&client, &key, &data).await;
        objects.push((key, data));
    }

    // Phase 2: node 2 is SIGKILLed (no unmount, no goodbye).
    story.cluster.kill_store(2);

    // Phase 3: every get returns identical bytes from node 1, promptly. The
    // master still lists the dead replica (the client TTL has not passed);
    // reads take turns over the two equally near replicas, so of two reads
    // one really went to node 2 first and fell back.
    let started = Instant::now();
    for (key, data) in &objects {
        let segs = segment_ids(&replica_list(&client, key).await);
        assert_eq!(segs, vec![victim.id, survivor.id], "{key}: the dead replica is still listed");
        assert_get(&client, key, data).await;
        assert_get(&client, key, data).await;
        assert!(warnings_about(key, "replica read failed") >= 1, "{key}: no warning about the dead replica");
    }
    let took = started.elapsed();
    eprintln!("{} gets fell back to the surviving replica in {took:?}", objects.len());
    assert!(took < Duration::from_secs(5), "falling back took {took:?}");
}

/// Why: a crashed client must not keep its memory, or objects that can no
/// longer be read, in the pool forever; objects with a copy elsewhere stay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_clients_segment_is_unmounted_after_client_ttl() {
    let mut story = Story::start(2, &["--client_ttl=2"]);
    within("client ttl story", client_ttl_story(&mut story)).await;
}

async fn client_ttl_story(story: &mut Story) {
    // Phase 1: objects only on node 2, only on node 1, and on both.
    let info = story.ready(2).await;
    let (survivor, victim) = (segment_of(story, &info, 1), segment_of(story, &info, 2));
    let clients_before = info.client_count;
    let client = story.client().await;
    let mut only_victim = Vec::new();
    for i in 0..3u64 {
        let key = format!("t40-ttl/only-on-node2/{i}");
        put(&client, &key, &payload(200 + i, 30_000), &replicas(1, &[&victim])).await;
        let segs = segment_ids(&object_info(&client, &key).await.replicas);
        assert_eq!(segs, vec![victim.id], "{key}: placed on node 2 only");
        only_victim.push(key);
    }
    let only_survivor = ("t40-ttl/only-on-node1".to_string(), payload(210, 20_000));
    put(&client, &only_survivor.0, &only_survivor.1, &replicas(1, &[&survivor])).await;
    let mut both = Vec::new();
    for i in 0..2u64 {
        let key = format!("t40-ttl/on-both/{i}");
        let data = payload(220 + i, 500_000);
        put(&client, &key, &data, &replicas(2, &[])).await;
        assert_eq!(object_info(&client, &key).await.replicas.len(), 2);
        both.push((key, data));
    }

    // Phase 2: node 2 is SIGKILLed; after the client TTL (2 s) without a
    // heartbeat the leader expires it and unmounts its segment.
    story.cluster.kill_store(2);
    let killed_at = Instant::now();
    let info = wait_until("node 2's segment to be unmounted", WAIT, || async {
        let info = story.cluster.info(story.cluster.wait_for_leader(WAIT).await.0).await?;
        (info.segment_count == 1).then_some(info)
    })
    .await;
    let after = killed_at.elapsed();
    eprintln!("node 2's segment was unmounted {after:?} after the kill (client_ttl 2 s)");
    // The last heartbeat was at most one interval (1 s, give or take a
    // ping's latency) before the kill, so the TTL cannot pass much sooner.
    assert!(after >= Duration::from_millis(900), "unmounted after {after:?}: before the client TTL could pass");
    assert!(segments_owned_by(&info, story.cluster.inner.store_client_id(2)).is_empty());
    assert_eq!(segment_of(story, &info, 1).id, survivor.id);
    assert_eq!(info.capacity_bytes, SEGMENT_BYTES);
    assert_eq!(info.client_count, clients_before, "node 2 expired; this test's client registered");

    // Phase 3: objects whose only replica was on node 2 are gone.
    for key in &only_victim {
        assert_not_found(&format!("get {key}"), client.get(key).await);
        assert!(!client.exists(key).await.expect("exists"), "{key} still exists");
        assert_not_found(&format!("get_size {key}"), client.get_size(key).await);
        let err = client.master().get_replica_list(client.client_id(), key).await.expect_err("replica list");
        assert_eq!(err.code(), Some(ErrorCode::ObjectNotFound), "{key}: {err}");
    }

    // Phase 4: objects with a replica on node 1 survive, listed on node 1 only.
    assert_get(&client, &only_survivor.0, &only_survivor.1).await;
    for (key, data) in &both {
        let segs = segment_ids(&replica_list(&client, key).await);
        assert_eq!(segs, vec![survivor.id], "{key}: the dead segment is no longer named");
        assert_get(&client, key, data).await;
    }
    let objects = client.master().list_objects("t40-ttl/", 100).await.expect("list");
    let keys: BTreeSet<&str> = objects.iter().map(|o| o.key.as_str()).collect();
    let want: BTreeSet<&str> = both.iter().map(|(k, _)| k.as_str()).chain([only_survivor.0.as_str()]).collect();
    assert_eq!(keys, want);

    // Phase 5: the pool still takes puts; two replicas wanted, one placed.
    let data = payload(230, 10_000);
    put(&client, "t40-ttl/after", &data, &replicas(2, &[])).await;
    let segs = segment_ids(&object_info(&client, "t40-ttl/after").await.replicas);
    assert_eq!(segs, vec![survivor.id]);
    assert_get(&client, "t40-ttl/after", &data).await;
}

/// Why: a checksum is only worth having if a flipped bit in memory is caught
/// on read: a get serves another replica or fails, and never wrong bytes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupt_replica_is_never_served() {
    let mut story = Story::start(2, &[]);
    within("corrupt replica story", corrupt_replica_story(&mut story)).await;
}

async fn corrupt_replica_story(story: &mut Story) {
    // Phase 1: an object with two replicas, the first on node 1.
    let info = story.ready(2).await;
    let (seg1, seg2) = (segment_of(story, &info, 1), segment_of(story, &info, 2));
    let client = story.client().await;
    let key = "t40-corrupt/obj";
    let data = payload(300, (256 << 10) + 5);
    put(&client, key, &data, &replicas(2, &[&seg1, &seg2])).await;
    let list = replica_list(&client, key).await;
    assert_eq!(segment_ids(&list), vec![seg1.id, seg2.id]);
    assert_eq!(list[0].shm_path, seg1.shm_path);
    assert!(list[0].shm_path.starts_with("/dev/shm/mooncake-"), "{}", list[0].shm_path);
    assert_get(&client, key, &data).await;
    assert_eq!(warnings_about(key, "corrupt replica"), 0);

    // Phase 2: bytes of the first replica flip in node 1's /dev/shm file; the
    // checksum catches it and the second replica is served. Reads take turns
    // over the two equally near replicas: of two, one tries node 1 first.
    corrupt(&list[0], data.len() as u64);
    assert_get(&client, key, &data).await;
    assert_get(&client, key, &data).await;
    assert!(warnings_about(key, "corrupt replica") >= 1, "the checksum mismatch was not reported");
    let mut buf = vec![0u8; data.len()];
    assert_eq!(client.get_into(key, &mut buf).await.expect("get_into"), data.len());
    assert!(buf == data, "get_into served corrupt bytes");
    // A batch reads the nearest replica pipelined, then falls back per item.
    let batch = client.get_batch(&[key, key]).await;
    assert!(batch.iter().all(|r| r.as_ref().is_ok_and(|got| *got == data)), "get_batch served corrupt bytes");

    // Phase 3: the second replica is corrupted too: every read fails, none
    // returns bytes.
    corrupt(&list[1], data.len() as u64);
    for _ in 0..2 {
        match client.get(key).await {
            Err(ClientError::AllReplicasFailed { key: k, tried, last }) => {
                assert_eq!((k.as_str(), tried), (key, 2));
                assert!(last.contains("checksum mismatch"), "{last}");
            }
            Ok(_) => panic!("get returned bytes although both replicas are corrupt"),
            Err(e) => panic!("want AllReplicasFailed, got {e}"),
        }
    }
    let mut buf = vec![0u8; data.len()];
    match client.get_into(key, &mut buf).await {
        Err(ClientError::AllReplicasFailed { tried: 2, .. }) => {}
        other => panic!("get_into: want AllReplicasFailed, got {other:?}"),
    }
    match &client.get_batch(&[key]).await[..] {
        [Err(ClientError::AllReplicasFailed { tried: 2, .. })] => {}
        other => panic!("get_batch: want AllReplicasFailed, got {other:?}"),
    }
}

/// Why: a store node restarted under the same identity must never count
/// twice (the pool would fill the ghost until the client TTL passes: the
/// "false full" trap), and it keeps its cache: it re-attaches its segment,
/// with its objects, at once (issue 39; docs/OPERATIONS.md).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_node_reattaches_its_segment_at_once() {
    // A client TTL far longer than the story: expiry cannot be what cleans up.
    let mut story = Story::start(2, &["--client_ttl=60"]);
    within("restart story", restart_story(&mut story)).await;
}

async fn restart_story(story: &mut Story) {
    // Phase 1: one object on each node.
    let info = story.ready(2).await;
    let (seg1, old) = (segment_of(story, &info, 1), segment_of(story, &info, 2));
    let node2 = story.cluster.inner.store_client_id(2);
    let client = story.client().await;
    let on_node1 = payload(400, 70_000);
    let on_node2 = payload(401, 70_000);
    put(&client, "t40-restart/on-node1", &on_node1, &replicas(1, &[&seg1])).await;
    put(&client, "t40-restart/on-node2", &on_node2, &replicas(1, &[&old])).await;

    // Phase 2: node 2 is SIGKILLed and restarted with the same --client-id.
    story.cluster.kill_store(2);
    let killed_at = Instant::now();
    story.cluster.inner.restart(Role::Store, 2).unwrap_or_else(|e| panic!("restart store 2: {e}"));

    // Phase 3: long before the client TTL, node 2 serves its segment again
    // (the object on it readable): never two segments for node 2.
    let cluster = &story.cluster;
    wait_until("node 2's object to be readable again", WAIT, || async {
        let info = cluster.info(cluster.wait_for_leader(WAIT).await.0).await?;
        let owned = segments_owned_by(&info, node2);
        assert!(owned.len() <= 1, "node 2 owns {} segments at once: {owned:?}", owned.len());
        (client.get("t40-restart/on-node2").await.ok()? == on_node2).then_some(())
    })
    .await;
    let after = killed_at.elapsed();
    eprintln!("node 2's segment was re-attached {after:?} after the kill (client_ttl 60 s)");
    assert!(after < Duration::from_secs(10), "re-attaching took {after:?}");
    let info = story.info().await;
    assert_eq!(segments_owned_by(&info, node2), vec![old.clone()], "exactly node 2's segment, re-attached");
    assert_eq!(info.segment_count, 2);
    assert_eq!(info.capacity_bytes, 2 * SEGMENT_BYTES, "capacity counted once per node");

    // Phase 4: both objects survive; the segment serves puts and gets
    // (through the client's TCP lanes, whose old connections the kill broke).
    assert_get(&client, "t40-restart/on-node1", &on_node1).await;
    let data = payload(402, (1 << 20) + 3);
    put(&client, "t40-restart/after", &data, &replicas(1, &[&old])).await;
    let segs = segment_ids(&object_info(&client, "t40-restart/after").await.replicas);
    assert_eq!(segs, vec![old.id]);
    assert_get(&client, "t40-restart/after", &data).await;
}

/// Why: removing an object a reader may be copying would let its range be
/// reused under the reader; a lease blocks that unless the caller forces it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remove_respects_kv_leases_unless_forced() {
    let mut story = Story::start(2, &[]);
    within("remove and lease story", remove_story(&mut story)).await;
}

async fn remove_story(story: &mut Story) {
    let info = story.ready(2).await;
    assert_eq!(info.used_bytes, 0);
    let writer = story.client().await;
    let reader = story.client().await;

    // Phase 1: exists / get_size / get round trip.
    let key = "t40-remove/leased";
    let data = payload(500, 100_000);
    put(&writer, key, &data, &replicas(1, &[])).await;
    assert!(writer.exists(key).await.expect("exists"));
    assert_eq!(writer.get_size(key).await.expect("get_size"), data.len() as u64);
    assert_get(&writer, key, &data).await;
    // Putting the key again succeeds and keeps the first object (Mooncake's
    // put: the first writer wins; upsert replaces).
    let again = writer.put(key, &payload(499, 77), &replicas(1, &[])).await.expect("put of an existing key");
    assert_eq!(again, PutOutcome::KeptExisting);
    assert_get(&writer, key, &data).await;
    let unread = "t40-remove/unread";
    put(&writer, unread, &payload(501, 5_000), &replicas(2, &[])).await;
    let missing = "t40-remove/never-put";
    assert!(!writer.exists(missing).await.expect("exists"));
    assert_not_found("get_size of a missing key", writer.get_size(missing).await);
    assert_not_found("get of a missing key", writer.get(missing).await);

    // Phase 2: another client reads the object (a KV lease); a plain remove
    // is refused with OBJECT_HAS_LEASE and changes nothing.
    assert_get(&reader, key, &data).await;
    let err = writer.remove(key, false).await.expect_err("remove of a leased object");
    assert_eq!(err.code(), Some(ErrorCode::ObjectHasLease), "{err}");
    assert!(writer.exists(key).await.expect("exists"));
    assert_eq!(writer.get_size(key).await.expect("get_size"), data.len() as u64);
    assert_get(&reader, key, &data).await;

    // Phase 3: forcing is an admin's: the writer is refused, the admin's
    // forced remove succeeds; the key is gone everywhere.
    let err = writer.remove(key, true).await.expect_err("a client's forced remove");
    assert_eq!(err.code(), Some(ErrorCode::PermissionDenied), "{err}");
    assert!(writer.exists(key).await.expect("exists"));
    let admin = story.admin_client().await;
    admin.remove(key, true).await.expect("forced remove");
    assert!(!writer.exists(key).await.expect("exists"));
    assert_not_found("get_size after remove", writer.get_size(key).await);
    assert_not_found("get after remove", reader.get(key).await);
    let err = admin.remove(key, true).await.expect_err("second remove");
    assert_eq!(err.code(), Some(ErrorCode::ObjectNotFound), "{err}");

    // Phase 4: an object nobody read is removed without force once no lease
    // can cover it (a new leader treats everything as leased for one TTL).
    wait_until("a plain remove of an unread object to succeed", WAIT, || async {
        match writer.remove(unread, false).await {
            Ok(()) => Some(()),
            Err(e) if e.code() == Some(ErrorCode::ObjectHasLease) => None,
            Err(e) => panic!("plain remove of {unread:?}: {e}"),
        }
    })
    .await;
    assert!(!writer.exists(unread).await.expect("exists"));
    assert_eq!(story.info().await.used_bytes, 0, "removed objects give their space back");
}

/// Why: an inference server replaces a cached block in place; a reader
/// copying the old one must get the old bytes whole, and a reader after
/// must get the new ones, never a mix.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upsert_replaces_a_value_and_readers_see_the_old_or_the_new_never_a_mix() {
    let mut story = Story::start(2, &[]);
    within("upsert story", upsert_story(&mut story)).await;
}

async fn upsert_story(story: &mut Story) {
    story.ready(2).await;
    let writer = story.client().await;
    let reader = story.client().await;
    let key = "t40-upsert/block";
    let old = payload(700, 300_000);
    put(&writer, key, &old, &replicas(2, &[])).await;

    // Phase 1: a reader holds the old replica list (a KV lease) while the
    // value is replaced; its ranges still hold the old bytes afterwards.
    let held = replica_list(&reader, key).await;
    let new = payload(701, 300_000);
    writer.upsert(key, &new, &replicas(2, &[])).await.expect("upsert");
    assert_get(&reader, key, &new).await;
    for r in &held {
        let mut buf = vec![0u8; old.len()];
        reader.engine().read(&remote(r), r.offset, &mut buf).await.expect("read the old ranges");
        assert!(buf == old, "the old ranges were reused while a reader held them");
    }
    let info = story.info().await;
    assert!(info.used_bytes >= 4 * 300_000, "the old bytes are held (used {} bytes)", info.used_bytes);

    // Phase 2: readers racing with a stream of upserts only ever see a
    // whole value (every byte of one payload).
    let values: Vec<Vec<u8>> = (0..12).map(|i| payload(800 + i, 200_000)).collect();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reads = {
        let (stop, values, reader) = (stop.clone(), values.clone(), reader);
        tokio::spawn(async move {
            let mut seen = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let got = reader.get(key).await.expect("get during upserts");
                assert!(got == new || values.contains(&got), "a get returned a mix of values");
                seen += 1;
            }
            seen
        })
    };
    for v in &values {
        writer.upsert(key, v, &replicas(1, &[])).await.expect("upsert");
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    assert!(reads.await.expect("reader") > 0);
    assert_get(&writer, key, values.last().expect("values")).await;
    // A plain put of the key now keeps the latest value.
    let kept = writer.put(key, &old, &replicas(1, &[])).await.expect("put of an existing key");
    assert_eq!(kept, PutOutcome::KeptExisting);
    assert_get(&writer, key, values.last().expect("values")).await;
}

/// Why: a put in flight when the leader dies must end as one stored object
/// or one clear error, never a half-written or doubled object.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn puts_across_a_leader_kill_are_stored_once_with_their_bytes() {
    let mut story = Story::start(2, &[]);
    within("leader-kill put story", leader_kill_put_story(&mut story)).await;
}

async fn leader_kill_put_story(story: &mut Story) {
    story.ready(2).await;
    let writer = std::sync::Arc::new(story.client().await);
    let done = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let putter = {
        let (writer, done) = (writer.clone(), done.clone());
        tokio::spawn(async move {
            let mut stored = Vec::new();
            for i in 0..300u64 {
                let key = format!("t40-kill/{i}");
                let data = payload(900 + i, 50_000 + i as usize);
                match writer.put(&key, &data, &replicas(2, &[])).await {
                    Ok(PutOutcome::Stored) => stored.push((key, data)),
                    Ok(PutOutcome::KeptExisting) => panic!("{key} was stored twice"),
                    Err(e) => eprintln!("put {key} failed across the kill: {e}"),
                }
                done.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            stored
        })
    };
    wait_until("puts to be under way", WAIT, || async {
        (done.load(std::sync::atomic::Ordering::Relaxed) >= 60).then_some(())
    })
    .await;
    let (leader, _) = story.cluster.wait_for_leader(WAIT).await;
    story.cluster.kill(leader);
    let stored = putter.await.expect("putter");
    assert!(stored.len() >= 250, "only {} of 300 puts were stored across one leader kill", stored.len());
    for (key, data) in &stored {
        assert_get(&writer, key, data).await;
    }
    // A put that reported an error may still have taken effect (its answer
    // lost in the failover); then its object is whole: every object listed
    // reads back with exactly its put's bytes.
    let listed = writer.master().list_objects("t40-kill/", 1000).await.expect("list");
    assert!(listed.len() >= stored.len());
    for o in &listed {
        let i: u64 = o.key.trim_start_matches("t40-kill/").parse().expect("a key of this story");
        assert_get(&writer, &o.key, &payload(900 + i, 50_000 + i as usize)).await;
    }
}

/// Why: a store node must serve only what the masters granted. The probe of
/// issue 14, on real processes: a peer that reaches the transfer port
/// without a capability, with one for another range, or with a READ grant
/// used to WRITE, neither reads nor overwrites the object.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_node_serves_only_what_the_masters_granted() {
    let mut story = Story::start(1, &[]);
    within("capability story", capability_story(&mut story)).await;
}

async fn capability_story(story: &mut Story) {
    use mooncake_transfer::frame::Status;
    use mooncake_transfer::{TcpTransport, TransferError, Transport};

    story.ready(1).await;
    let client = story.client().await;
    let key = "t40-capability/object";
    let data = payload(1100, 100_000);
    put(&client, key, &data, &replicas(1, &[])).await;

    // Phase 1: the replica as GetReplicaList hands it out reads back.
    let replica = replica_list(&client, key).await.remove(0);
    let target = remote(&replica);
    assert!(target.capability.is_some(), "GetReplicaList grants a capability: {replica:?}");
    let tcp = TcpTransport::new(TcpConfig::default()).expect("transport");
    let mut buf = vec![0u8; data.len()];
    tcp.read(&target, replica.offset, &mut buf).await.expect("read under the granted capability");
    assert!(buf == data);

    // Phase 2: everything else is refused UNAUTHORIZED, and nothing is served.
    let (endpoint, segment, read) = (&replica.endpoint, target.id, target.capability.as_ref());
    let unauthorized = |what: &str, r: Result<(), TransferError>| match r {
        Err(TransferError::Remote { status: Status::Unauthorized, .. }) => {}
        other => panic!("{what}: expected UNAUTHORIZED, got {other:?}"),
    };
    let mut stolen = vec![0u8; 4096];
    unauthorized("a read without a capability", tcp.read_from(endpoint, segment, None, 0, &mut stolen).await);
    let past = replica.offset + replica.len;
    unauthorized("a read past the granted range", tcp.read_from(endpoint, segment, read, past, &mut stolen).await);
    let junk = vec![0xEE; data.len()];
    unauthorized("a write without a capability", tcp.write_to(endpoint, segment, None, replica.offset, &junk).await);
    unauthorized("a write under a READ grant", tcp.write_to(endpoint, segment, read, replica.offset, &junk).await);
    assert!(stolen.iter().all(|b| *b == 0), "a refused read returned bytes");
    assert_get(&client, key, &data).await;
}

/// Issue 23, case 4: a WRITE grant outlived its range. A writer kept the
/// grant of an object it removed; within a second its range went to
/// another writer's object, and the old grant overwrote that object (with
/// a forged checksum, invisibly). Now the grant names its arena, and the
/// store node stops honouring it before the masters hand the range out
/// again: the old grant is refused UNAUTHORIZED and the new object reads
/// back whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_grant_dies_with_its_arena() {
    let mut story = Story::start(1, &[]);
    within("write grant story", write_grant_story(&mut story)).await;
}

async fn write_grant_story(story: &mut Story) {
    use mooncake_proto::master::PutStartRequest;
    use mooncake_transfer::frame::Status;
    use mooncake_transfer::{TcpTransport, TransferError, Transport};

    story.ready(1).await;
    let attacker = story.client().await;
    let victim = story.client().await;
    const SIZE: usize = 8 << 20;

    // The attacker puts its own object by hand, keeping the WRITE grant.
    let key = "t40-grant/attacker";
    let mine = payload(2300, SIZE);
    let start = PutStartRequest {
        client_id: attacker.client_id(),
        key: key.into(),
        size: SIZE as u64,
        replica_num: 1,
        ..Default::default()
    };
    let granted = attacker.master().put_start(start).await.expect("PutStart").remove(0);
    let target = remote(&granted);
    let tcp = TcpTransport::new(TcpConfig::default()).expect("transport");
    tcp.write(&target, granted.offset, &mine).await.expect("a write under a fresh grant");
    attacker.master().put_end(attacker.client_id(), key, crc32c::crc32c(&mine)).await.expect("PutEnd");
    // (A new leader counts every object as leased for one KV lease TTL.)
    wait_until("the attacker to remove its own object", WAIT, || async {
        attacker.master().remove(key, false).await.ok()
    })
    .await;
    let stolen = (granted.offset, granted.offset + granted.len);

    // The victim writes until one of its objects lands on the freed range
    // (the cache fills, evicts, and reuses the space in newer arenas).
    let mut landed = None;
    for i in 0..64u64 {
        let key = format!("t40-grant/victim-{i}");
        let data = payload(2400 + i, SIZE);
        put(&victim, &key, &data, &replicas(1, &[])).await;
        let info = object_info(&victim, &key).await;
        let r = &info.replicas[0];
        if r.offset < stolen.1 && stolen.0 < r.offset + r.len {
            landed = Some((key, data, r.offset));
            break;
        }
    }
    let (key, data, offset) = landed.expect("no victim object reused the attacker's freed range in 64 puts");

    // The old grant still verifies (its TTL is 60 s) but its arena is gone.
    let junk = payload(2500, SIZE);
    let write = tcp.write(&target, granted.offset, &junk).await;
    assert!(
        matches!(write, Err(TransferError::Remote { status: Status::Unauthorized, .. })),
        "a WRITE under a returned arena's grant (victim at {offset}, grant at {}): {write:?}",
        granted.offset
    );
    assert_get(&victim, &key, &data).await;
}

/// Why: a prefill node puts thousands of small KV blocks a second; each
/// should cost one master round trip (its PutEnd), and still land whole on
/// every replica, while large puts and puts naming segments go the usual
/// way. A client closed gives its chunks back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn small_puts_take_one_master_round_trip_through_writer_chunks() {
    let mut story = Story::start(2, &[]);
    within("writer chunk story", writer_chunk_story(&mut story)).await;
}

async fn writer_chunk_story(story: &mut Story) {
    let info = story.ready(2).await;
    let (leader, _) = story.cluster.wait_for_leader(WAIT).await;
    let calls = |story: &Story, method: &str| {
        let samples = story.cluster.metrics(leader);
        mooncake_testkit::sample_value(&samples, "mooncake_rpc_requests_total", &[("method", method), ("code", "OK")])
            .unwrap_or(0.0)
    };
    let writer = story.client().await;
    let starts = calls(story, "PutStart");
    let mut stored = Vec::new();
    for i in 0..150u64 {
        let (len, n) = if i % 10 == 0 { (64 << 10, 1) } else { (4096 + i as usize, 2) };
        let (key, data) = (format!("t40-chunks/{i}"), payload(3000 + i, len));
        put(&writer, &key, &data, &replicas(n, &[])).await;
        stored.push((key, data, n));
    }
    assert_eq!(calls(story, "PutStart"), starts, "a small put sent a PutStart");
    let in_chunks = || writer.stats().puts_in_chunks.load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(in_chunks(), 150);
    // Both replicas of a two-replica put were written: read each directly.
    for (key, data, n) in &stored {
        let list = replica_list(&writer, key).await;
        assert_eq!(list.len(), *n as usize, "{key}");
        for r in &list {
            let mut buf = vec![0u8; data.len()];
            writer.engine().read(&remote(r), r.offset, &mut buf).await.expect("read one replica");
            assert!(&buf == data, "{key}: replica on segment {} differs", r.segment_id);
        }
        assert_get(&writer, key, data).await;
    }
    // A key that exists is kept, its bytes untouched.
    let (key, data, _) = &stored[3];
    let kept = writer.put(key, &payload(9, data.len()), &replicas(2, &[])).await.expect("put again");
    assert_eq!(kept, PutOutcome::KeptExisting);
    assert_get(&writer, key, data).await;

    // A batch of small puts: its writes, then one BatchPutEnd.
    let batch: Vec<(String, Vec<u8>)> =
        (0..40u64).map(|i| (format!("t40-chunks/batch-{i}"), payload(3600 + i, 2048))).collect();
    let items: Vec<(&str, &[u8])> = batch.iter().map(|(k, d)| (k.as_str(), d.as_slice())).collect();
    let (batch_starts, batch_ends) = (calls(story, "BatchPutStart"), calls(story, "BatchPutEnd"));
    for r in writer.put_batch(&items, &replicas(2, &[])).await {
        assert_eq!(r.expect("batch item"), PutOutcome::Stored);
    }
    assert_eq!(calls(story, "BatchPutStart"), batch_starts, "a batch of small puts sent a BatchPutStart");
    assert_eq!(calls(story, "BatchPutEnd"), batch_ends + 1.0);
    for (key, data) in &batch {
        assert_get(&writer, key, data).await;
    }

    // Large puts and puts naming a segment go the usual way.
    let big = payload(3500, 1 << 20);
    put(&writer, "t40-chunks/big", &big, &replicas(1, &[])).await;
    let named = segment_of(story, &info, 1);
    put(&writer, "t40-chunks/named", &payload(3501, 4096), &replicas(1, &[&named])).await;
    assert_eq!(calls(story, "PutStart"), starts + 2.0);
    assert_eq!(segment_ids(&replica_list(&writer, "t40-chunks/named").await), vec![named.id]);
    assert_get(&writer, "t40-chunks/big", &big).await;

    // A client configured without chunks never asks for one.
    let mut cfg = ClientConfig::new(story.cluster.addrs());
    cfg.protocol = Protocol::Tcp;
    cfg.put_chunk_bytes = 0;
    let plain = Client::connect(cfg).await.expect("connect");
    put(&plain, "t40-chunks/plain", &payload(3502, 4096), &replicas(1, &[])).await;
    assert_eq!(calls(story, "PutStart"), starts + 3.0);
    assert_eq!(plain.stats().puts_in_chunks.load(std::sync::atomic::Ordering::Relaxed), 0);
    plain.close().await;

    // Closed, the writer gives its chunks back.
    assert!(story.cluster.metric(leader, "mooncake_writer_chunks") >= 2.0, "one chunk per replica count");
    writer.close().await;
    wait_until("the closed writer's chunks to be returned", WAIT, || async {
        (story.cluster.metric(leader, "mooncake_writer_chunks") == 0.0).then_some(())
    })
    .await;
}
