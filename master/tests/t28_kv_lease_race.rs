//! KV leases against concurrent removals, on three real masters: readers
//! (GetReplicaList, ExistKey), removers (Remove), RemoveAll and eviction all
//! hit the same keys at once, round after round. The promise under test: no
//! read answered OK (with a KV lease) is followed, inside its lease, by the
//! removal of that object.
//!
//! Every key is put exactly once, so a read answered OK saw *the* object and
//! every later absence is its removal. Two violations are counted:
//! - a read answered OK and a Remove answered OK on the same key, the remove
//!   finished before the lease (counted from the read's start) could expire;
//! - a read answered OK, then a later read finding nothing, inside the lease
//!   (what RemoveAll or eviction breaking the lease looks like).
//!
//! The same workload against `--dev-unsafe-unfenced-removals` (removals
//! check leases before proposing but fence no reader: the race this build
//! fixed) must find violations, so the test is known to be able to fail.
//! Every operation has a deadline: a lock-order deadlock between RPCs, the
//! leader's duties and apply shows up as a hung operation, not a hung test.
// Test support: a failed unwrap or expect is the test failing (the
// workspace denies them in library code: Cargo.toml [workspace.lints]).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mooncake_client::MasterClient;
use mooncake_proto::ErrorCode;
use mooncake_proto::master::{PutEndRequest, PutStartRequest, Segment};
use mooncake_testkit::Cluster;
use tokio::sync::Mutex;

const BIN: &str = env!("CARGO_BIN_EXE_mooncake-master");
const WRITER: u64 = 1;
const STORE: u64 = 2;
/// Short enough that waiting out a new leader's grace (one TTL after its
/// election, every object counts as leased) costs little.
const KV_LEASE_TTL: Duration = Duration::from_secs(3);
/// Keys raced on per round, and never-read filler objects per round (they
/// keep usage above the watermark, so eviction runs the whole time).
const KEYS_PER_ROUND: usize = 60;
const FILLERS_PER_ROUND: usize = 60;
const OBJECT_BYTES: u64 = 16 << 10;
/// 1024 objects of 16 KiB; the watermark (0.5) is passed after ~4 rounds.
const SEGMENT_BYTES: u64 = 16 << 20;
/// An operation that takes longer than this is hung (a deadlock).
const OP_DEADLINE: Duration = Duration::from_secs(20);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    /// GetReplicaList answered OK, or ExistKey answered true.
    ReadFound,
    /// GetReplicaList answered OBJECT_NOT_FOUND, or ExistKey false.
    ReadMissing,
    RemoveOk,
    RemoveHasLease,
    /// Anything else (not found, refused otherwise): no claim either way.
    Other,
    Hung,
}

#[derive(Clone, Copy, Debug)]
struct Event {
    op: Op,
    invoke: Instant,
    complete: Instant,
}

type History = Arc<Mutex<BTreeMap<String, Vec<Event>>>>;

/// A small seeded generator (xorshift): the seed is printed, runs replay.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

async fn record(history: &History, key: &str, op: Op, invoke: Instant) {
    let e = Event { op, invoke, complete: Instant::now() };
    history.lock().await.entry(key.to_string()).or_default().push(e);
}

/// Runs `f` with the deadline; `None` when it hung.
async fn timed<T>(f: impl std::future::Future<Output = T>) -> Option<T> {
    tokio::time::timeout(OP_DEADLINE, f).await.ok()
}

async fn read_replicas(client: Arc<MasterClient>, key: String, delay: Duration, history: History) {
    tokio::time::sleep(delay).await;
    let invoke = Instant::now();
    let op = match timed(client.get_replica_list(WRITER, &key)).await {
        None => Op::Hung,
        Some(Ok(_)) => Op::ReadFound,
        Some(Err(e)) if e.code() == Some(ErrorCode::ObjectNotFound) => Op::ReadMissing,
        Some(Err(_)) => Op::Other,
    };
    record(&history, &key, op, invoke).await;
}

async fn read_exists(client: Arc<MasterClient>, key: String, delay: Duration, history: History) {
    tokio::time::sleep(delay).await;
    let invoke = Instant::now();
    let op = match timed(client.exist_key(&key)).await {
        None => Op::Hung,
        Some(Ok(true)) => Op::ReadFound,
        Some(Ok(false)) => Op::ReadMissing,
        Some(Err(_)) => Op::Other,
    };
    record(&history, &key, op, invoke).await;
}

async fn remove(client: Arc<MasterClient>, key: String, delay: Duration, history: History) {
    tokio::time::sleep(delay).await;
    let invoke = Instant::now();
    let op = match timed(client.remove(&key, false)).await {
        None => Op::Hung,
        Some(Ok(())) => Op::RemoveOk,
        Some(Err(e)) if e.code() == Some(ErrorCode::ObjectHasLease) => Op::RemoveHasLease,
        Some(Err(_)) => Op::Other,
    };
    record(&history, &key, op, invoke).await;
}

/// Puts `keys` (metadata only: one batch PutStart, one batch PutEnd);
/// returns the keys that were stored.
async fn put_all(client: &MasterClient, keys: &[String]) -> Vec<String> {
    let starts = keys
        .iter()
        .map(|k| PutStartRequest {
            client_id: WRITER,
            key: k.clone(),
            size: OBJECT_BYTES,
            replica_num: 1,
            ..Default::default()
        })
        .collect();
    let started = timed(client.batch_put_start(starts)).await.expect("batch PutStart hung").expect("batch PutStart");
    let placed: Vec<String> = keys
        .iter()
        .zip(&started.reply)
        .filter(|(_, r)| r.status.as_ref().is_none_or(|s| s.error_code() == ErrorCode::Ok))
        .map(|(k, _)| k.clone())
        .collect();
    let ends = placed
        .iter()
        .map(|k| PutEndRequest { client_id: WRITER, key: k.clone(), checksum: 7, ..Default::default() })
        .collect();
    let ended = timed(client.batch_put_end(ends)).await.expect("batch PutEnd hung").expect("batch PutEnd");
    placed
        .into_iter()
        .zip(&ended.reply)
        .filter(|(_, r)| r.status.as_ref().is_none_or(|s| s.error_code() == ErrorCode::Ok))
        .map(|(k, _)| k)
        .collect()
}

/// What one run saw.
#[derive(Default)]
struct Outcome {
    keys_stored: usize,
    reads_found: usize,
    removes_ok: usize,
    removes_refused_for_lease: usize,
    removed_by_remove_all: u64,
    evicted: f64,
    hung: usize,
    removed_inside_lease: Vec<String>,
    vanished_inside_lease: Vec<String>,
}

impl std::fmt::Debug for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "keys stored {}, reads found {}, removes ok {}, removes refused for a lease {}, removed by RemoveAll {}, evicted {}, \
             hung {}; keys removed inside a lease {} (e.g. {:?}), keys freed inside a lease {} (e.g. {:?})",
            self.keys_stored,
            self.reads_found,
            self.removes_ok,
            self.removes_refused_for_lease,
            self.removed_by_remove_all,
            self.evicted,
            self.hung,
            self.removed_inside_lease.len(),
            self.removed_inside_lease.first(),
            self.vanished_inside_lease.len(),
            self.vanished_inside_lease.first(),
        )
    }
}

fn check(history: &BTreeMap<String, Vec<Event>>, out: &mut Outcome) {
    for (key, events) in history {
        let found: Vec<&Event> = events.iter().filter(|e| e.op == Op::ReadFound).collect();
        out.reads_found += found.len();
        out.removes_ok += events.iter().filter(|e| e.op == Op::RemoveOk).count();
        out.removes_refused_for_lease += events.iter().filter(|e| e.op == Op::RemoveHasLease).count();
        out.hung += events.iter().filter(|e| e.op == Op::Hung).count();
        for r in &found {
            let lease_end = r.invoke + KV_LEASE_TTL;
            // One incarnation per key: a remove that succeeded came after
            // every read that found the object.
            if events.iter().any(|e| e.op == Op::RemoveOk && e.complete < lease_end) {
                out.removed_inside_lease.push(key.clone());
                break;
            }
            let vanished =
                events.iter().any(|e| e.op == Op::ReadMissing && e.invoke > r.complete && e.complete < lease_end);
            if vanished {
                out.vanished_inside_lease.push(key.clone());
                break;
            }
        }
    }
}

/// The workload: `rounds` rounds of fresh keys raced on by readers,
/// removers, RemoveAll and eviction; then the history is checked.
async fn race(extra_flags: &[&str], rounds: usize, seed: u64) -> Outcome {
    let mut builder = Cluster::builder()
        .masters(3)
        .master_bin(BIN)
        .arg("--eviction_high_watermark_ratio=0.5")
        .arg(format!("--default_kv_lease_ttl={}", KV_LEASE_TTL.as_millis()));
    for f in extra_flags {
        builder = builder.arg(*f);
    }
    let cluster = builder.start();
    let (leader, _) = cluster.wait_for_leader(Duration::from_secs(20)).await;
    let client = Arc::new(cluster.client());
    let seg = Segment {
        id: 1,
        size: SEGMENT_BYTES,
        endpoint: "127.0.0.1:1".into(),
        host_id: "h1".into(),
        ..Default::default()
    };
    client.remount_segments(STORE, vec![seg]).await.expect("mount");
    client.remount_segments(WRITER, vec![]).await.expect("register the writer");
    // A new leader counts every object as leased for one TTL (an earlier
    // leader may have leased it): removals would all be refused until then.
    tokio::time::sleep(KV_LEASE_TTL).await;
    let history: History = Arc::default();
    let mut rng = Rng(seed | 1);
    let mut out = Outcome::default();
    let mut earlier: Vec<String> = Vec::new();
    for round in 0..rounds {
        // Heartbeats keep both clients registered (the duty expires silent ones).
        for id in [WRITER, STORE] {
            let _ = client.ping(id).await;
        }
        let keys: Vec<String> = (0..KEYS_PER_ROUND).map(|i| format!("r{round}/k{i}")).collect();
        let fillers: Vec<String> = (0..FILLERS_PER_ROUND).map(|i| format!("r{round}/filler{i}")).collect();
        put_all(&client, &fillers).await;
        let stored = put_all(&client, &keys).await;
        out.keys_stored += stored.len();
        let mut tasks = Vec::new();
        for key in &stored {
            let ms = |rng: &mut Rng| Duration::from_micros(rng.below(6_000));
            let h = history.clone();
            tasks.push(tokio::spawn(read_replicas(client.clone(), key.clone(), ms(&mut rng), h.clone())));
            tasks.push(tokio::spawn(read_exists(client.clone(), key.clone(), ms(&mut rng), h.clone())));
            tasks.push(tokio::spawn(remove(client.clone(), key.clone(), ms(&mut rng), h.clone())));
            tasks.push(tokio::spawn(read_replicas(client.clone(), key.clone(), ms(&mut rng), h)));
        }
        let remove_all = (round % 3 == 2).then(|| {
            let (client, delay) = (client.clone(), Duration::from_micros(rng.below(6_000)));
            tokio::spawn(async move {
                tokio::time::sleep(delay).await;
                timed(client.remove_all(false)).await.expect("RemoveAll hung").expect("RemoveAll")
            })
        });
        for t in tasks {
            t.await.expect("task");
        }
        if let Some(t) = remove_all {
            out.removed_by_remove_all += t.await.expect("task");
        }
        // Reads of the previous rounds' keys: an object read OK must still
        // be there inside its lease, whatever RemoveAll and eviction did.
        let mut late = Vec::new();
        for key in earlier.iter().chain(&stored) {
            late.push(tokio::spawn(read_replicas(client.clone(), key.clone(), Duration::ZERO, history.clone())));
        }
        for t in late {
            t.await.expect("task");
        }
        earlier = stored;
    }
    out.evicted = cluster.metric(leader, "mooncake_evicted_objects_total");
    check(&history.lock().await.clone(), &mut out);
    out
}

fn seed() -> u64 {
    let seed = std::env::var("MOONCAKE_TEST_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64
    });
    eprintln!("seed {seed} (replay with MOONCAKE_TEST_SEED={seed})");
    seed
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn no_read_answered_with_a_kv_lease_is_followed_by_its_removal_inside_the_lease() {
    let out = race(&[], 40, seed()).await;
    eprintln!("{out:?}");
    assert_eq!(out.hung, 0, "operations hung: RPCs, duties and apply deadlocked");
    assert!(out.removed_inside_lease.is_empty(), "removed inside a KV lease: {:?}", out.removed_inside_lease);
    assert!(out.vanished_inside_lease.is_empty(), "freed inside a KV lease: {:?}", out.vanished_inside_lease);
    // The race really ran: both sides won sometimes, and every remover
    // that lost to a reader was told why.
    assert!(out.reads_found > 1000, "too few reads found their object: {}", out.reads_found);
    assert!(out.removes_ok > 50, "too few removes won the race: {}", out.removes_ok);
    assert!(out.removes_refused_for_lease > 50, "too few removes met a lease: {}", out.removes_refused_for_lease);
    assert!(out.evicted > 0.0, "eviction never ran");
    assert!(out.removed_by_remove_all > 0, "RemoveAll never removed anything");
}

#[cfg(feature = "planted-bugs")]
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_planted_check_before_propose_race_is_caught() {
    let out = race(&["--dev-unsafe-unfenced-removals"], 20, seed()).await;
    eprintln!("{out:?}");
    assert_eq!(out.hung, 0);
    assert!(
        !out.removed_inside_lease.is_empty(),
        "the unfenced build removed nothing inside a lease; the test cannot tell a broken build: {out:?}"
    );
}
