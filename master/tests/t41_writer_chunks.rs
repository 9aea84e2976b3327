//! Writer chunks on real masters (metadata only: no bytes move here). A
//! writer reserves a chunk once; each put placed in it is then one PutEnd
//! and one log entry, with no PutStart. Ranges outside the chunk, another
//! writer's chunk, a key that exists, a returned or expired chunk are all
//! refused without recording anything; a PutEnd into a deposed leader's
//! chunk is recorded by the new leader; malformed asks are refused.
// Test support: a failed unwrap or expect is the test failing (the
// workspace denies them in library code: Cargo.toml [workspace.lints]).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use mooncake_client::MasterClient;
use mooncake_proto::ErrorCode;
use mooncake_proto::master::{PutEndRequest, Replica, ReserveChunkResponse, Segment};
use mooncake_testkit::{Cluster, wait_until};

const BIN: &str = env!("CARGO_BIN_EXE_mooncake-master");
const STORE: u64 = 100;
const WRITER: u64 = 7;
const OTHER: u64 = 8;
const CHUNK: u64 = 1 << 20;
const OBJ: u64 = 4096;

fn segment(id: u64, size: u64) -> Segment {
    Segment {
        id,
        size,
        endpoint: format!("127.0.0.1:{}", 9000 + id),
        host_id: format!("host-{id}"),
        ..Default::default()
    }
}

/// The ranges of slot `i` (of `OBJ` bytes) in `chunk`.
fn slot(chunk: &ReserveChunkResponse, i: u64) -> Vec<Replica> {
    chunk.replicas.iter().map(|r| Replica { offset: r.offset + i * OBJ, len: OBJ, ..r.clone() }).collect()
}

/// The PutEnd of `key` placed in `replicas` of chunk `chunk_id`.
fn end(writer: u64, key: &str, chunk_id: u64, replicas: Vec<Replica>) -> PutEndRequest {
    let replicas_at = replicas.first().map_or(0, |r| r.offset);
    PutEndRequest {
        client_id: writer,
        key: key.into(),
        checksum: 0xAB,
        size: OBJ,
        replicas,
        chunk_id,
        request_id: request_id(key, writer, replicas_at),
        ..Default::default()
    }
}

/// A request id per (key, writer, place): a PutEnd sent again is a retry
/// (its first answer comes back), another put of the key is not.
fn request_id(key: &str, writer: u64, at: u64) -> u64 {
    let seed = (writer ^ at).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    key.bytes().fold(seed, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01B3)) | 1
}

async fn last_log_index(cluster: &Cluster, leader: u64) -> u64 {
    cluster.info(leader).await.expect("leader info").last_log_index
}

async fn listed(client: &MasterClient, prefix: &str) -> usize {
    client.list_objects(prefix, 1000).await.expect("list").len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn puts_in_a_chunk_are_one_put_end_and_one_log_entry_each_and_stay_inside_it() {
    let cluster = Cluster::builder().masters(3).master_bin(BIN).start();
    let (leader, _) = cluster.wait_for_leader(Duration::from_secs(10)).await;
    let client = cluster.client();
    client.remount_segments(STORE, vec![segment(1, 1 << 30), segment(2, 1 << 30)]).await.expect("mount");
    client.remount_segments(WRITER, vec![]).await.expect("register");

    let chunk = client.reserve_chunk(WRITER, 2, CHUNK, OBJ).await.expect("a chunk of two replicas");
    assert_eq!(chunk.replicas.len(), 2);
    assert_ne!(chunk.replicas[0].segment_id, chunk.replicas[1].segment_id, "replicas on distinct segments");
    assert!(chunk.replicas.iter().all(|r| r.len == CHUNK && !r.capability.is_empty()), "{:?}", chunk.replicas);
    assert!(chunk.valid_ms > 0);

    // Each put: its PutEnd only, one log entry.
    let before = last_log_index(&cluster, leader).await;
    for i in 0..100 {
        client.put_end_with(end(WRITER, &format!("k{i}"), chunk.chunk_id, slot(&chunk, i))).await.expect("put end");
    }
    let entries = last_log_index(&cluster, leader).await - before;
    assert!((100..=101).contains(&entries), "100 puts took {entries} log entries");
    let o = client.get_replica_list(WRITER, "k7").await.expect("readable");
    let mut offsets: Vec<(u64, u64)> = o.replicas.iter().map(|r| (r.segment_id, r.offset)).collect();
    offsets.sort_unstable();
    let mut want: Vec<(u64, u64)> = slot(&chunk, 7).iter().map(|r| (r.segment_id, r.offset)).collect();
    want.sort_unstable();
    assert_eq!(offsets, want, "recorded where the writer placed it");

    // A key that exists is kept, without a log entry; a retry of a PutEnd
    // that committed gets its answer again.
    let before = last_log_index(&cluster, leader).await;
    let e = client.put_end_with(end(WRITER, "k3", chunk.chunk_id, slot(&chunk, 200))).await.expect_err("exists");
    assert_eq!(e.code(), Some(ErrorCode::ObjectAlreadyExists), "{e}");
    client.put_end_with(end(WRITER, "k4", chunk.chunk_id, slot(&chunk, 4))).await.expect("a retry answers OK");
    assert_eq!(last_log_index(&cluster, leader).await, before, "refusals and retries proposed an entry");

    // Ranges past the chunk's end, another writer naming the chunk, fewer
    // replicas than the chunk has: refused, nothing recorded.
    let past = slot(&chunk, CHUNK / OBJ);
    let e = client.put_end_with(end(WRITER, "past", chunk.chunk_id, past)).await.expect_err("outside the chunk");
    assert_eq!(e.code(), Some(ErrorCode::InvalidParams), "{e}");
    assert!(e.to_string().contains("not inside chunk"), "{e}");
    client.remount_segments(OTHER, vec![]).await.expect("register another writer");
    let e =
        client.put_end_with(end(OTHER, "thief", chunk.chunk_id, slot(&chunk, 300))).await.expect_err("not its chunk");
    assert_eq!(e.code(), Some(ErrorCode::InvalidParams), "{e}");
    let one = slot(&chunk, 301)[..1].to_vec();
    let e = client.put_end_with(end(WRITER, "one", chunk.chunk_id, one)).await.expect_err("one of two replicas");
    assert_eq!(e.code(), Some(ErrorCode::InvalidParams), "{e}");
    for key in ["past", "thief", "one"] {
        assert_eq!(listed(&client, key).await, 0, "{key} was recorded");
    }

    // Returned: its space is never handed out again, and a late PutEnd into
    // it is told the put expired (the writer puts the usual way).
    client.return_chunk(WRITER, chunk.chunk_id).await.expect("return");
    let e = client.put_end_with(end(WRITER, "late", chunk.chunk_id, slot(&chunk, 400))).await.expect_err("returned");
    assert_eq!(e.code(), Some(ErrorCode::ObjectNotFound), "{e}");
    assert!(e.to_string().contains("put expired"), "{e}");
    let e = client.return_chunk(WRITER, chunk.chunk_id).await.expect_err("returned twice");
    assert_eq!(e.code(), Some(ErrorCode::InvalidParams), "{e}");
    let next = client.reserve_chunk(WRITER, 2, CHUNK, OBJ).await.expect("another chunk");
    for (a, b) in next.replicas.iter().zip(&chunk.replicas) {
        let overlaps = |x: &Replica, y: &Replica| {
            x.segment_id == y.segment_id && x.offset < y.offset + y.len && y.offset < x.offset + x.len
        };
        assert!(!next.replicas.iter().any(|n| overlaps(n, b)), "{a:?} overlaps the returned chunk");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_asks_are_refused_and_a_full_cluster_refuses_chunks_without_evicting() {
    let cluster = Cluster::builder().masters(1).master_bin(BIN).start();
    cluster.wait_for_leader(Duration::from_secs(10)).await;
    let client = cluster.client();
    let e = client.reserve_chunk(WRITER, 1, CHUNK, OBJ).await.expect_err("no segment mounted");
    assert_eq!(e.code(), Some(ErrorCode::NoAvailableHandle), "{e}");
    client.remount_segments(STORE, vec![segment(1, 64 << 20)]).await.expect("mount");
    for (replicas, len, min_len, why) in [
        (1, 0, 0, "len 0"),
        (1, OBJ, OBJ + 1, "min_len above len"),
        (1, 65 << 20, OBJ, "len above the largest chunk"),
        (17, CHUNK, OBJ, "17 replicas"),
    ] {
        let e = client.reserve_chunk(WRITER, replicas, len, min_len).await.expect_err(why);
        assert_eq!(e.code(), Some(ErrorCode::InvalidParams), "{why}: {e}");
    }
    // Two replicas on one segment cannot be placed: the writer is told to
    // put the usual way.
    let e = client.reserve_chunk(WRITER, 2, CHUNK, OBJ).await.expect_err("one segment");
    assert_eq!(e.code(), Some(ErrorCode::NoAvailableHandle), "{e}");
    assert!(e.to_string().contains("put the usual way"), "{e}");
    // A chunk is capped at an arena of the segment (1/64 of 64 MiB).
    let capped = client.reserve_chunk(WRITER, 1, 8 << 20, OBJ).await.expect("a capped chunk");
    assert_eq!(capped.replicas[0].len, 1 << 20);
    let e = client.reserve_chunk(WRITER, 1, 8 << 20, 2 << 20).await.expect_err("more than an arena");
    assert_eq!(e.code(), Some(ErrorCode::NoAvailableHandle), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_chunk_refuses_late_put_ends_and_a_new_leader_records_a_deposed_leaders() {
    let mut cluster = Cluster::builder()
        .masters(3)
        .master_bin(BIN)
        .arg("--put_start_discard_timeout_sec=2")
        .arg("--put_start_release_timeout_sec=4")
        .start();
    let (old, _) = cluster.wait_for_leader(Duration::from_secs(10)).await;
    let client = cluster.client();
    client.remount_segments(STORE, vec![segment(1, 64 << 20)]).await.expect("mount");
    client.remount_segments(WRITER, vec![]).await.expect("register");

    // Expired on its own leader: a late PutEnd is refused as expired.
    let stale = client.reserve_chunk(WRITER, 1, CHUNK, OBJ).await.expect("chunk");
    assert_eq!(stale.valid_ms, 1_000, "half the discard timeout");
    client.put_end_with(end(WRITER, "in-time", stale.chunk_id, slot(&stale, 0))).await.expect("in time");
    assert_eq!(cluster.metric(old, "mooncake_writer_chunks"), 1.0);
    wait_until("the chunk to expire", Duration::from_secs(10), || async {
        (cluster.metric(old, "mooncake_writer_chunks") == 0.0).then_some(())
    })
    .await;
    let e = client.put_end_with(end(WRITER, "late", stale.chunk_id, slot(&stale, 1))).await.expect_err("expired");
    assert_eq!(e.code(), Some(ErrorCode::ObjectNotFound), "{e}");
    assert!(e.to_string().contains("put expired"), "{e}");
    assert_eq!(listed(&client, "late").await, 0);

    // A deposed leader's chunk: the new leader records PutEnds into it
    // (the ranges are free in a live arena it did not grant).
    let chunk = client.reserve_chunk(WRITER, 1, CHUNK, OBJ).await.expect("chunk");
    client.put_end_with(end(WRITER, "before", chunk.chunk_id, slot(&chunk, 0))).await.expect("before the kill");
    cluster.kill(old);
    let (new, _) = cluster.wait_for_leader(Duration::from_secs(10)).await;
    assert_ne!(new, old);
    client.put_end_with(end(WRITER, "after", chunk.chunk_id, slot(&chunk, 1))).await.expect("on the new leader");
    let o = client.get_replica_list(WRITER, "after").await.expect("readable");
    assert_eq!(o.replicas[0].offset, slot(&chunk, 1)[0].offset);
    // A slot already holding an object is refused, not overwritten.
    let e = client.put_end_with(end(WRITER, "again", chunk.chunk_id, slot(&chunk, 1))).await.expect_err("taken");
    assert_eq!(e.code(), Some(ErrorCode::ObjectNotFound), "{e}");
    assert_eq!(listed(&client, "again").await, 0);
}
