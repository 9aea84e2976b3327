//! The one-commit put on real masters (metadata only: no bytes move here).
//! A put is one Raft entry (PutStart is answered from the leader's arenas);
//! arenas are granted, sealed and returned; a stalled put expires and frees
//! its key; a PutEnd that reaches a new leader is still recorded from the
//! ranges it echoes back, and a deposed leader's arenas are returned only
//! after the release timeout; a full segment still takes a put that fits.
// Test support: a failed unwrap or expect is the test failing (the
// workspace denies them in library code: Cargo.toml [workspace.lints]).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use mooncake_client::{MasterClient, MasterError};
use mooncake_proto::ErrorCode;
use mooncake_proto::master::{PutEndRequest, PutStartRequest, Replica, Segment};
use mooncake_testkit::{Cluster, wait_until};

const BIN: &str = env!("CARGO_BIN_EXE_mooncake-master");
const STORE: u64 = 100;
const WRITER: u64 = 7;

fn segment(id: u64, size: u64) -> Segment {
    Segment {
        id,
        size,
        endpoint: format!("127.0.0.1:{}", 9000 + id),
        host_id: format!("host-{id}"),
        ..Default::default()
    }
}

fn ask(key: &str, size: u64, pin: i32) -> PutStartRequest {
    PutStartRequest { client_id: WRITER, key: key.into(), size, replica_num: 1, pin, ..Default::default() }
}

/// The PutEnd the client library sends: PutStart's answer echoed back.
fn end(key: &str, size: u64, replicas: &[Replica]) -> PutEndRequest {
    PutEndRequest {
        client_id: WRITER,
        key: key.into(),
        checksum: 0xAB,
        size,
        replicas: replicas.to_vec(),
        ..Default::default()
    }
}

/// A whole put (no bytes): PutStart, then PutEnd with its answer.
async fn put(client: &MasterClient, key: &str, size: u64) -> Result<(), MasterError> {
    let replicas = client.put_start(ask(key, size, 0)).await?;
    client.put_end_with(end(key, size, &replicas)).await
}

async fn last_log_index(cluster: &Cluster, leader: u64) -> u64 {
    cluster.info(leader).await.expect("leader info").last_log_index
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_put_is_one_log_entry_and_its_puts_start_without_a_raft_round() {
    let cluster = Cluster::builder().masters(3).master_bin(BIN).start();
    let (leader, _) = cluster.wait_for_leader(Duration::from_secs(10)).await;
    let client = cluster.client();
    client.remount_segments(STORE, vec![segment(1, 1 << 30)]).await.expect("mount");
    client.remount_segments(WRITER, vec![]).await.expect("register");
    put(&client, "warm-up", 4096).await.expect("first put (grants an arena)");

    // Sequential puts: one entry each, the arena's grant amortised.
    let before = last_log_index(&cluster, leader).await;
    for i in 0..200 {
        put(&client, &format!("k{i}"), 4096).await.expect("put");
    }
    let entries = last_log_index(&cluster, leader).await - before;
    assert!((200..=202).contains(&entries), "200 puts took {entries} log entries");

    // PutStarts alone write nothing to the log.
    let before = last_log_index(&cluster, leader).await;
    for i in 0..50 {
        client.put_start(ask(&format!("started{i}"), 4096, 0)).await.expect("put start");
    }
    assert_eq!(last_log_index(&cluster, leader).await, before, "a PutStart proposed an entry");
    let listed = client.list_objects("started", 100).await.expect("list");
    assert!(listed.is_empty(), "a reservation is not an object: {listed:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_in_flight_is_taken_and_a_stalled_put_expires_and_frees_it() {
    let cluster = Cluster::builder()
        .masters(1)
        .master_bin(BIN)
        .arg("--put_start_discard_timeout_sec=1")
        .arg("--put_start_release_timeout_sec=2")
        .start();
    cluster.wait_for_leader(Duration::from_secs(10)).await;
    let client = cluster.client();
    client.remount_segments(STORE, vec![segment(1, 64 << 20)]).await.expect("mount");
    let stalled = client.put_start(ask("k", 4096, 0)).await.expect("put start");
    // A preferred segment is a hint, as upstream's: one not mounted is passed over.
    let hinted = PutStartRequest { preferred_segments: vec![999], ..ask("hinted", 4096, 0) };
    let placed = client.put_start(hinted).await.expect("a put preferring a segment that is not mounted");
    assert_eq!(placed.iter().map(|r| r.segment_id).collect::<Vec<_>>(), vec![1], "placed on the mounted one");
    // A put in flight is not ready, as upstream answers, not missing.
    let e = client.get_replica_list(WRITER, "k").await.expect_err("a get of a key in flight");
    assert_eq!(e.code(), Some(ErrorCode::ReplicaIsNotReady), "{e}");
    let e = client.remove("k", false).await.expect_err("a remove of a key in flight");
    assert_eq!(e.code(), Some(ErrorCode::ReplicaIsNotReady), "{e}");
    // Another writer finds the key taken; the same writer asking again gets the same ranges.
    let other = PutStartRequest { client_id: WRITER + 1, ..ask("k", 4096, 0) };
    let e = client.put_start(other.clone()).await.expect_err("a key in flight");
    assert_eq!(e.code(), Some(ErrorCode::ObjectAlreadyExists));
    // (Each answer carries a fresh capability: compare the placements.)
    let placed =
        |replicas: &[Replica]| replicas.iter().map(|r| (r.segment_id, r.offset, r.len, r.arena_id)).collect::<Vec<_>>();
    assert_eq!(placed(&client.put_start(ask("k", 4096, 0)).await.expect("same ask")), placed(&stalled));
    // After the discard timeout the key is free again; the stalled writer's
    // PutEnd, with another writer's put of the key in flight, is another
    // client's PutEnd of that put: ILLEGAL_CLIENT, as upstream answers.
    let replicas = wait_until("the stalled put to be discarded", Duration::from_secs(10), || async {
        client.put_start(other.clone()).await.ok()
    })
    .await;
    assert_ne!(replicas[0].offset, stalled[0].offset, "the stalled writer's range is never handed out again");
    let e = client.put_end_with(end("k", 4096, &stalled)).await.expect_err("late PutEnd");
    assert_eq!(e.code(), Some(ErrorCode::IllegalClient), "{e}");
    assert!(e.to_string().contains("only its writer may end it"), "{e}");
    // Revoke frees a key at once; a revoke of nothing says so.
    client.put_revoke(WRITER + 1, "k").await.expect("revoke");
    let mine = client.put_start(ask("k", 4096, 0)).await.expect("the key is free after the revoke");
    // Another client's PutEnd of this put in flight changes nothing.
    let intruder = PutEndRequest { client_id: WRITER + 1, ..end("k", 4096, &mine) };
    let e = client.put_end_with(intruder).await.expect_err("another client's PutEnd");
    assert_eq!(e.code(), Some(ErrorCode::IllegalClient), "{e}");
    assert!(client.list_objects("k", 10).await.expect("list").is_empty(), "nothing was committed");
    let e = client.put_revoke(WRITER + 1, "k").await.expect_err("not that writer's put any more");
    assert_eq!(e.code(), Some(ErrorCode::IllegalClient), "another client's put in flight: {e}");
    client.put_revoke(WRITER, "k").await.expect("its writer revokes it");
    let e = client.put_revoke(WRITER, "k").await.expect_err("nothing in flight");
    assert_eq!(e.code(), Some(ErrorCode::ObjectNotFound));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_put_end_reaching_a_new_leader_is_recorded_and_old_arenas_wait_for_the_release_timeout() {
    let mut cluster = Cluster::builder()
        .masters(3)
        .master_bin(BIN)
        .arg("--put_start_discard_timeout_sec=3")
        .arg("--put_start_release_timeout_sec=6")
        .start();
    let (old, _) = cluster.wait_for_leader(Duration::from_secs(10)).await;
    let client = cluster.client();
    client.remount_segments(STORE, vec![segment(1, 64 << 20)]).await.expect("mount");
    client.remount_segments(WRITER, vec![]).await.expect("register");
    let early = client.put_start(ask("early", 4096, 0)).await.expect("put start on the old leader");
    let abandoned = client.put_start(ask("abandoned", 4096, 0)).await.expect("put start");
    cluster.kill(old);
    let (new, _) = cluster.wait_for_leader(Duration::from_secs(10)).await;
    assert_ne!(new, old);
    // The new leader never saw the reservation; the echoed ranges lie free
    // in an arena of the older term: recorded.
    client.put_end_with(end("early", 4096, &early)).await.expect("PutEnd on the new leader");
    let listed = client.list_objects("early", 10).await.expect("list");
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].replicas[0].offset, early[0].offset);
    // A PutEnd naming no ranges cannot be recorded by a leader that does not know the put.
    let e = client.put_end(WRITER, "abandoned", 1).await.expect_err("nothing to record");
    assert_eq!(e.code(), Some(ErrorCode::ObjectNotFound));
    // New puts land in the new leader's own arena, never in the old one.
    let fresh = client.put_start(ask("fresh", 4096, 0)).await.expect("put start on the new leader");
    assert_ne!(fresh[0].arena_id, early[0].arena_id);
    client.put_end_with(end("fresh", 4096, &fresh)).await.expect("the new leader's own put");
    // The old arena is returned only after the release timeout: until then
    // the abandoned writer may still be writing into it.
    let arenas = |c: &Cluster| c.metric(new, "mooncake_arenas");
    let with_old = arenas(&cluster);
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(arenas(&cluster), with_old, "an old arena was returned before the release timeout");
    client.put_end_with(end("abandoned", 4096, &abandoned)).await.expect("a late writer within the timeout");
    wait_until("the old term's arena to be returned", Duration::from_secs(15), || async {
        (arenas(&cluster) < with_old).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_segment_still_takes_a_put_that_fits_and_batches_commit_once() {
    let cluster = Cluster::builder().masters(1).master_bin(BIN).start();
    let (leader, _) = cluster.wait_for_leader(Duration::from_secs(10)).await;
    let client = std::sync::Arc::new(cluster.client());
    // 4 MiB: arenas of at most 512 KiB. Fill it with hard-pinned 64 KiB
    // objects (never evicted) until no more fit.
    client.remount_segments(STORE, vec![segment(1, 4 << 20)]).await.expect("mount");
    // The segment's owner lets go of arenas the leader takes back, as a
    // store node does: freed space is reused at once.
    let _owner = mooncake_testkit::acknowledge_fences(client.clone(), STORE);
    client.remount_segments(WRITER, vec![]).await.expect("register");
    let mut stored = 0;
    for i in 0..64 {
        let replicas = client.put_start(ask(&format!("fill{i}"), 64 << 10, 2)).await.expect("room for 64 objects");
        client.put_end_with(end(&format!("fill{i}"), 64 << 10, &replicas)).await.expect("put end");
        stored += 1;
    }
    assert_eq!(stored, 64);
    let e = client.put_start(ask("one-too-many", 64 << 10, 2)).await.expect_err("the segment is full");
    assert_eq!(e.code(), Some(ErrorCode::NoAvailableHandle), "{e}");
    // Free two objects anywhere: a put that fits in the freed bytes succeeds,
    // whatever the arenas held.
    for key in ["fill10", "fill40"] {
        client.remove(key, true).await.expect("remove");
    }
    put(&client, "fits", 64 << 10).await.expect("a put that fits the free space");
    put(&client, "fits-too", 64 << 10).await.expect("and another");

    // A batch of puts: one batch PutStart (no entry), one batch PutEnd (one entry).
    client.remove_all(true).await.expect("clear");
    let reqs: Vec<PutStartRequest> = (0..32).map(|i| ask(&format!("b{i}"), 4096, 0)).collect();
    let started = client.batch_put_start(reqs).await.expect("batch put start");
    let before = last_log_index(&cluster, leader).await;
    let ends: Vec<PutEndRequest> =
        started.reply.iter().enumerate().map(|(i, r)| end(&format!("b{i}"), 4096, &r.replicas)).collect();
    let ended = client.batch_put_end(ends).await.expect("batch put end");
    assert!(ended.reply.iter().all(|r| r.status.as_ref().is_none_or(|s| s.code == 0)), "{:?}", ended.reply);
    let entries = last_log_index(&cluster, leader).await - before;
    assert_eq!(entries, 1, "a batch of 32 puts took {entries} entries");
    assert_eq!(client.list_objects("b", 100).await.expect("list").len(), 32);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_put_end_gets_its_first_answer_and_never_undoes_a_remove() {
    let cluster = Cluster::builder().masters(1).master_bin(BIN).start();
    cluster.wait_for_leader(Duration::from_secs(10)).await;
    let client = cluster.client();
    client.remount_segments(STORE, vec![segment(1, 64 << 20)]).await.expect("mount");
    client.remount_segments(WRITER, vec![]).await.expect("register");
    let replicas = client.put_start(ask("k", 4096, 0)).await.expect("put start");
    let first = PutEndRequest { request_id: 42, ..end("k", 4096, &replicas) };
    client.put_end_with(first.clone()).await.expect("put end");
    // The answer was lost (as under packet loss); meanwhile someone removed
    // the object. The retry must not store it again.
    client.remove("k", true).await.expect("remove");
    client.put_end_with(first.clone()).await.expect("the retry gets the first answer");
    assert!(
        client.list_objects("k", 10).await.expect("list").is_empty(),
        "a retried PutEnd resurrected a removed object"
    );
    // Without a request id the same late PutEnd is refused as expired, not recorded.
    let e = client.put_end_with(PutEndRequest { request_id: 0, ..first }).await.expect_err("an expired put");
    assert_eq!(e.code(), Some(ErrorCode::ObjectNotFound));
    assert!(client.list_objects("k", 10).await.expect("list").is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_put_end_after_the_leader_restarted_in_its_own_term_is_still_recorded() {
    let mut cluster = Cluster::builder().masters(1).master_bin(BIN).start();
    let (leader, _) = cluster.wait_for_leader(Duration::from_secs(10)).await;
    let client = cluster.client();
    client.remount_segments(STORE, vec![segment(1, 64 << 20)]).await.expect("mount");
    client.remount_segments(WRITER, vec![]).await.expect("register");
    let reserved = client.put_start(ask("k", 4096, 0)).await.expect("put start");
    // The process restarts (a one-master cluster elects itself again, in a
    // new term): its reservations are gone, its arena is not.
    cluster.kill(leader);
    cluster.restart(leader);
    cluster.wait_for_leader(Duration::from_secs(10)).await;
    client.put_end_with(end("k", 4096, &reserved)).await.expect("recorded from the echoed ranges");
    let listed = client.list_objects("k", 10).await.expect("list");
    assert_eq!(listed.len(), 1);
    // A new put on the restarted master never lands on the recorded one.
    let fresh = client.put_start(ask("fresh", 4096, 0)).await.expect("put start");
    assert_ne!(fresh[0].arena_id, reserved[0].arena_id, "the old arena is not reused");
}

/// Issue 38, finding 1: after a leader change, a PutEnd from a client that
/// never registered named free bytes of the deposed leader's arena (another
/// writer's removed object, or a put still being written) and was
/// committed with no WRITE grant; the READ grant that followed returned
/// the removed object's bytes. A new leader now records a PutEnd it holds
/// no reservation for only when every range carries the WRITE capability
/// it was handed out with; the writer's own late PutEnd still is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_put_end_without_the_ranges_write_grant_is_refused_after_a_leader_change() {
    const STRANGER: u64 = 666;
    let mut cluster = Cluster::builder().masters(3).master_bin(BIN).start();
    let (old, _) = cluster.wait_for_leader(Duration::from_secs(10)).await;
    let client = cluster.client();
    client.remount_segments(STORE, vec![segment(1, 64 << 20)]).await.expect("mount");
    client.remount_segments(WRITER, vec![]).await.expect("register");
    let removed = client.put_start(ask("removed", 4096, 0)).await.expect("put start");
    client.put_end_with(end("removed", 4096, &removed)).await.expect("put end");
    client.remove("removed", false).await.expect("remove");
    let writing = client.put_start(ask("writing", 4096, 0)).await.expect("a put in flight across the change");
    cluster.kill(old);
    let (new, _) = cluster.wait_for_leader(Duration::from_secs(10)).await;
    assert_ne!(new, old);
    let stripped = |replicas: &[Replica]| -> Vec<Replica> {
        replicas.iter().map(|r| Replica { capability: Vec::new(), ..r.clone() }).collect()
    };
    let forged = |replicas: &[Replica]| -> Vec<Replica> {
        replicas.iter().map(|r| Replica { capability: vec![1; r.capability.len()], ..r.clone() }).collect()
    };
    for (what, target) in [("the removed object's", &removed), ("the put in flight's", &writing)] {
        for replicas in [stripped(target), forged(target)] {
            let claim = PutEndRequest { client_id: STRANGER, key: "stolen".into(), ..end("stolen", 4096, &replicas) };
            let e = client.put_end_with(claim).await.expect_err("a claim without the grant");
            assert!(matches!(e, MasterError::PutExpired { .. }), "claim of {what} range: {e:?}");
            assert!(e.to_string().contains("capability"), "the refusal says why: {e}");
        }
        // A capability for a neighbouring range does not cover this one.
        let moved: Vec<Replica> = target.iter().map(|r| Replica { offset: r.offset + 4096, ..r.clone() }).collect();
        let claim = PutEndRequest { client_id: STRANGER, key: "stolen".into(), ..end("stolen", 4096, &moved) };
        assert!(client.put_end_with(claim).await.is_err(), "a grant names its range");
    }
    assert!(client.list_objects("stolen", 10).await.expect("list").is_empty(), "nothing was recorded");
    client.put_end_with(end("writing", 4096, &writing)).await.expect("the writer's own late PutEnd");
    assert_eq!(client.list_objects("writing", 10).await.expect("list").len(), 1);
}
