//! The replicated state machine's semantics, driven through its public API:
//! every command and error code, placement, the no-shared-bytes invariant,
//! mount/unmount/remount, client expiry, abandoned puts, refused commands
//! changing nothing, time, determinism across replicas and snapshot images,
//! and batches.

mod common;

use std::collections::BTreeSet;

use common::Rng;
use common::*;

use mooncake_raft_store::codec;
use mooncake_raft_store::state::{KEY_MAX_BYTES, ObjectStatus, REPLICA_NUM_MAX};
use mooncake_raft_store::{
    Command, MetaError, MetaState, ObjectVersion, Pin, PutStart, RemoveReason, ReplicaPlacement, Request, Response,
    SegmentSpec, VersionedKey,
};
use mooncake_segment::{ALLOC_ALIGN_BYTES, ClientId, Range, SegmentId};
use proptest::prelude::*;

// ---------------------------------------------------------------- builders

/// The PutStart parameters of `key` (no preferred segments, unpinned).
fn put_spec(client: ClientId, key: &str, size: u64, replicas: u32) -> PutStart {
    PutStart {
        client,
        key: key.to_string(),
        size_bytes: size,
        replica_num: replicas,
        preferred: Vec::new(),
        pin: Pin::None,
    }
}

/// A PutStart command.
fn put(client: ClientId, key: &str, size: u64, replicas: u32) -> Command {
    Command::PutStart(put_spec(client, key, size, replicas))
}

/// A PutStart command that names preferred segments.
fn put_preferring(client: ClientId, key: &str, size: u64, replicas: u32, preferred: &[u64]) -> Command {
    let mut p = put_spec(client, key, size, replicas);
    p.preferred = preferred.iter().map(|id| SegmentId(*id)).collect();
    Command::PutStart(p)
}

fn put_end(client: ClientId, key: &str, checksum: u32) -> Command {
    Command::PutEnd { client, key: key.to_string(), checksum }
}

/// Applies a PutStart and returns its placement.
fn placed(state: &mut MetaState, cmd: Command) -> (ObjectVersion, Vec<ReplicaPlacement>) {
    let shown = format!("{cmd:?}");
    match apply(state, cmd) {
        Response::Placed { version, replicas } => (version, replicas),
        other => panic!("{shown} was not placed: {other:?}"),
    }
}

/// PutStart then PutEnd: a complete object.
fn put_complete(state: &mut MetaState, client: ClientId, key: &str, size: u64, replicas: u32) -> ObjectVersion {
    let (version, _) = placed(state, put(client, key, size, replicas));
    ok(state, put_end(client, key, 0xC0FFEE));
    version
}

// ---------------------------------------------------------------- random commands

/// A random (often valid, sometimes refused) command, aimed at what exists in
/// `state` so that ends, removes and discards mostly hit real objects.
fn random_command(rng: &mut Rng, state: &MetaState) -> Command {
    let objects: Vec<_> = state.objects().collect();
    let discarded: Vec<_> = state.discarded().map(|d| d.version).collect();
    let client = ClientId(1 + rng.below(4));
    match rng.below(100) {
        0..=5 => {
            let id = 1 + rng.below(8);
            let owner = if rng.below(6) == 0 { client } else { ClientId(1 + id % 4) };
            let size = [4096, 8192, 16384][rng.below(3) as usize];
            mount_cmd(owner, seg(id, size, &format!("host-{}", id % 3)))
        }
        6..=8 => Command::UnmountSegment { client, segment: SegmentId(1 + rng.below(8)) },
        9..=10 => {
            let ids: BTreeSet<u64> = (0..rng.below(3)).map(|_| 1 + rng.below(8)).collect();
            let segments = ids.iter().map(|id| seg(*id, 8192, &format!("host-{}", id % 3))).collect();
            Command::RemountSegments { client, segments }
        }
        11..=44 => {
            let key = format!("k{}", rng.below(40));
            let size = 1 + rng.below(3000);
            let replicas = 1 + rng.below(3) as u32;
            if rng.below(5) == 0 {
                put_preferring(client, &key, size, replicas, &[1 + rng.below(8)])
            } else {
                put(client, &key, size, replicas)
            }
        }
        45..=64 => match rng.pick(&objects) {
            Some(o) => {
                let writer = if rng.below(10) == 0 { client } else { o.writer };
                put_end(writer, &o.key, rng.below(3) as u32)
            }
            None => put_end(client, "nothing", 1),
        },
        65..=70 => match rng.pick(&objects) {
            Some(o) => Command::PutRevoke { client: o.writer, key: o.key.clone() },
            None => Command::PutRevoke { client, key: "nothing".into() },
        },
        71..=76 => match rng.pick(&objects) {
            // Sometimes a stale (wrong) version.
            Some(o) => Command::RemoveVersion {
                key: o.key.clone(),
                version: ObjectVersion(o.version.0 + u64::from(rng.below(4) == 0)),
            },
            None => Command::RemoveVersion { key: "nothing".into(), version: ObjectVersion(1) },
        },
        77..=80 => match rng.pick(&objects) {
            Some(o) => Command::Remove { key: o.key.clone() },
            None => Command::Remove { key: "nothing".into() },
        },
        81..=84 => {
            let mut victims = Vec::new();
            for _ in 0..rng.below(4) {
                if let Some(o) = rng.pick(&objects) {
                    // Sometimes a stale (wrong) version.
                    let version = ObjectVersion(o.version.0 + u64::from(rng.below(4) == 0));
                    victims.push(VersionedKey { key: o.key.clone(), version });
                }
            }
            Command::RemoveObjects { victims, reason: RemoveReason::Evict }
        }
        85..=88 => {
            let mut victims = Vec::new();
            for _ in 0..rng.below(3) {
                if let Some(o) = rng.pick(&objects) {
                    victims.push(VersionedKey { key: o.key.clone(), version: o.version });
                }
            }
            Command::DiscardPuts { victims }
        }
        89..=91 => {
            let mut versions = Vec::new();
            for _ in 0..rng.below(3) {
                versions.extend(rng.pick(&discarded).copied());
            }
            Command::ReleaseDiscarded { versions }
        }
        92 => Command::ExpireClient { client },
        93..=96 => {
            let n = 2 + rng.below(3);
            let cmds = (0..n)
                .map(|_| match random_command(rng, state) {
                    Command::Batch(_) => Command::Noop,
                    c => c,
                })
                .collect();
            Command::Batch(cmds)
        }
        _ => put(client, "", 0, 0),
    }
}

// ================================================================ put lifecycle

#[test]
fn put_start_records_a_processing_object_with_one_range_per_replica() {
    let mut s = three_node_cluster(1 << 20);
    let (version, replicas) = placed(&mut s, put(W1, "k", 1000, 2));
    assert_eq!(replicas.len(), 2);
    for r in &replicas {
        assert_eq!(r.range.len, aligned(1000));
        assert_eq!(r.range.offset % ALLOC_ALIGN_BYTES, 0);
    }
    let o = s.object("k").expect("object recorded");
    assert_eq!(o.status, ObjectStatus::Processing);
    assert_eq!(o.version, version);
    assert_eq!(o.writer, W1);
    assert_eq!(o.size_bytes, 1000);
    assert_eq!(o.checksum, None);
    assert_eq!(o.completed_ms, None);
    assert_eq!(o.created_ms, s.now_ms());
    assert_eq!(o.replicas, replicas);
    assert_eq!(s.used_bytes(), 2 * aligned(1000));
    assert_no_shared_bytes(&s);
}

#[test]
fn put_end_by_the_writer_completes_the_object_with_its_checksum() {
    let mut s = three_node_cluster(1 << 20);
    let (_, replicas) = placed(&mut s, put(W1, "k", 1000, 2));
    ok(&mut s, put_end(W1, "k", 0xDEAD_BEEF));
    let o = s.object("k").unwrap();
    assert_eq!(o.status, ObjectStatus::Complete);
    assert_eq!(o.checksum, Some(0xDEAD_BEEF));
    assert_eq!(o.completed_ms, Some(s.now_ms()));
    assert_eq!(o.replicas, replicas, "completion does not move the bytes");
    assert_eq!(s.used_bytes(), 2 * aligned(1000));
}

#[test]
fn a_retried_put_end_with_the_same_checksum_is_ok_and_changes_nothing() {
    let mut s = three_node_cluster(1 << 20);
    placed(&mut s, put(W1, "k", 1000, 1));
    ok(&mut s, put_end(W1, "k", 7));
    let completed = s.object("k").unwrap().completed_ms;
    let mut control = s.clone();
    let ts = s.now_ms() + 10;
    control.apply(&Request { ts_ms: ts, cmd: Command::Noop });
    assert_eq!(s.apply(&Request { ts_ms: ts, cmd: put_end(W1, "k", 7) }), Response::Ok);
    assert_eq!(s.object("k").unwrap().completed_ms, completed, "a retry does not restamp completion");
    assert_eq!(s.state_hash(), control.state_hash());
}

#[test]
fn put_end_with_a_different_checksum_after_completion_is_object_already_exists() {
    let mut s = three_node_cluster(1 << 20);
    placed(&mut s, put(W1, "k", 1000, 1));
    ok(&mut s, put_end(W1, "k", 7));
    let e = refused(&mut s, put_end(W1, "k", 8));
    assert_eq!(e, MetaError::ObjectAlreadyExists("k".into()));
    assert_eq!(s.object("k").unwrap().checksum, Some(7));
}

#[test]
fn put_end_by_another_client_is_illegal_client_and_leaves_the_object_processing() {
    let mut s = three_node_cluster(1 << 20);
    placed(&mut s, put(W1, "k", 1000, 1));
    let e = refused(&mut s, put_end(W2, "k", 7));
    assert!(matches!(e, MetaError::IllegalClient(_)), "{e:?}");
    assert_eq!(s.object("k").unwrap().status, ObjectStatus::Processing);
    // And after completion too: the other client cannot "retry" the writer's PutEnd.
    ok(&mut s, put_end(W1, "k", 7));
    let e = refused(&mut s, put_end(W2, "k", 7));
    assert!(matches!(e, MetaError::IllegalClient(_)), "{e:?}");
}

#[test]
fn put_end_of_an_unknown_key_is_object_not_found() {
    let mut s = three_node_cluster(1 << 20);
    let e = refused(&mut s, put_end(W1, "ghost", 1));
    assert_eq!(e, MetaError::ObjectNotFound("ghost".into()));
}

#[test]
fn put_start_on_a_complete_key_is_object_already_exists() {
    let mut s = three_node_cluster(1 << 20);
    put_complete(&mut s, W1, "k", 1000, 1);
    assert_eq!(refused(&mut s, put(W1, "k", 1000, 1)), MetaError::ObjectAlreadyExists("k".into()));
    assert_eq!(refused(&mut s, put(W2, "k", 500, 2)), MetaError::ObjectAlreadyExists("k".into()));
}

#[test]
fn a_retried_put_start_by_the_same_writer_returns_the_same_placement_and_allocates_nothing() {
    let mut s = three_node_cluster(1 << 20);
    let first = placed(&mut s, put(W1, "k", 1000, 2));
    let used = s.used_bytes();
    let mut control = s.clone();
    let ts = s.now_ms() + 3;
    control.apply(&Request { ts_ms: ts, cmd: Command::Noop });
    let again = s.apply(&Request { ts_ms: ts, cmd: put(W1, "k", 1000, 2) });
    assert_eq!(again, Response::Placed { version: first.0, replicas: first.1.clone() });
    assert_eq!(s.used_bytes(), used);
    assert_eq!(s.state_hash(), control.state_hash(), "a retried PutStart changed the state");
}

#[test]
fn put_start_on_a_key_being_written_by_another_client_or_with_another_size_is_refused() {
    let mut s = three_node_cluster(1 << 20);
    placed(&mut s, put(W1, "k", 1000, 1));
    assert_eq!(refused(&mut s, put(W2, "k", 1000, 1)), MetaError::ObjectAlreadyExists("k".into()));
    assert_eq!(refused(&mut s, put(W1, "k", 2000, 1)), MetaError::ObjectAlreadyExists("k".into()));
}

#[test]
fn put_revoke_frees_the_space_and_the_key() {
    let mut s = three_node_cluster(1 << 20);
    let (v1, _) = placed(&mut s, put(W1, "k", 1000, 3));
    assert_eq!(s.used_bytes(), 3 * aligned(1000));
    ok(&mut s, Command::PutRevoke { client: W1, key: "k".into() });
    assert!(s.object("k").is_none());
    assert_eq!(s.used_bytes(), 0);
    assert!(s.segments().all(|seg| seg.free_bytes() == seg.capacity_bytes()));
    let (v2, _) = placed(&mut s, put(W2, "k", 1000, 1));
    assert!(v2 > v1, "a new incarnation of a key gets a newer version");
}

#[test]
fn put_revoke_of_a_complete_object_is_invalid_params() {
    let mut s = three_node_cluster(1 << 20);
    put_complete(&mut s, W1, "k", 1000, 1);
    let e = refused(&mut s, Command::PutRevoke { client: W1, key: "k".into() });
    assert!(is_invalid(&e), "{e:?}");
    assert!(s.object("k").is_some());
}

#[test]
fn put_revoke_by_another_client_or_of_an_unknown_key_is_refused() {
    let mut s = three_node_cluster(1 << 20);
    placed(&mut s, put(W1, "k", 1000, 1));
    let e = refused(&mut s, Command::PutRevoke { client: W2, key: "k".into() });
    assert!(matches!(e, MetaError::IllegalClient(_)), "{e:?}");
    let e = refused(&mut s, Command::PutRevoke { client: W1, key: "ghost".into() });
    assert_eq!(e, MetaError::ObjectNotFound("ghost".into()));
}

#[test]
fn remove_of_a_processing_object_is_replica_not_ready() {
    let mut s = three_node_cluster(1 << 20);
    placed(&mut s, put(W1, "k", 1000, 1));
    assert_eq!(refused(&mut s, Command::Remove { key: "k".into() }), MetaError::ReplicaNotReady("k".into()));
}

#[test]
fn remove_of_a_complete_object_frees_its_space() {
    let mut s = three_node_cluster(1 << 20);
    put_complete(&mut s, W1, "keep", 3000, 1);
    let used_by_keep = s.used_bytes();
    put_complete(&mut s, W1, "k", 1000, 2);
    assert_eq!(s.used_bytes(), used_by_keep + 2 * aligned(1000));
    ok(&mut s, Command::Remove { key: "k".into() });
    assert!(s.object("k").is_none());
    assert!(s.object("keep").is_some());
    assert_eq!(s.used_bytes(), used_by_keep);
    assert_no_shared_bytes(&s);
}

#[test]
fn remove_of_an_unknown_key_is_object_not_found() {
    let mut s = three_node_cluster(1 << 20);
    assert_eq!(refused(&mut s, Command::Remove { key: "ghost".into() }), MetaError::ObjectNotFound("ghost".into()));
}

#[test]
fn remove_version_frees_only_the_incarnation_it_names() {
    let mut s = three_node_cluster(1 << 20);
    let v1 = put_complete(&mut s, W1, "k", 1000, 1);
    ok(&mut s, Command::RemoveVersion { key: "k".into(), version: v1 });
    assert!(s.object("k").is_none());
    // The key is put again: a removal decided for the old incarnation (its
    // lease checked on the old one) must not remove the new one.
    let v2 = put_complete(&mut s, W1, "k", 1000, 1);
    assert_ne!(v1, v2);
    let e = refused(&mut s, Command::RemoveVersion { key: "k".into(), version: v1 });
    assert_eq!(e, MetaError::ObjectNotFound("k".into()));
    assert_eq!(s.object("k").map(|o| o.version), Some(v2));
    let e = refused(&mut s, Command::RemoveVersion { key: "ghost".into(), version: v2 });
    assert_eq!(e, MetaError::ObjectNotFound("ghost".into()));
    ok(&mut s, Command::RemoveVersion { key: "k".into(), version: v2 });
    assert_eq!(s.used_bytes(), 0);
    assert_no_shared_bytes(&s);
}

#[test]
fn remove_version_of_a_processing_object_changes_nothing() {
    let mut s = three_node_cluster(1 << 20);
    let (v, _) = placed(&mut s, put(W1, "k", 1000, 1));
    let e = refused(&mut s, Command::RemoveVersion { key: "k".into(), version: v });
    assert_eq!(e, MetaError::ObjectNotFound("k".into()));
    assert_eq!(s.object("k").map(|o| o.status), Some(ObjectStatus::Processing));
}

#[test]
fn versions_increase_with_every_new_object() {
    let mut s = three_node_cluster(1 << 20);
    let mut last = None;
    for i in 0..20 {
        let (v, _) = placed(&mut s, put(W1, &format!("k{i}"), 100, 1));
        assert!(last.is_none_or(|l| v > l), "{v:?} after {last:?}");
        last = Some(v);
    }
}

// ================================================================ placement

#[test]
fn replicas_always_land_on_distinct_segments() {
    let mut s = MetaState::default();
    for id in 1..=5 {
        mount(&mut s, NODE_A, seg(id, 1 << 20, &format!("host-{id}")));
    }
    for (i, r) in [1u32, 2, 3, 4, 5].into_iter().enumerate() {
        let (_, replicas) = placed(&mut s, put(W1, &format!("k{i}"), 10_000, r));
        assert_eq!(replicas.len(), r as usize);
        let distinct: BTreeSet<_> = replicas.iter().map(|p| p.segment).collect();
        assert_eq!(distinct.len(), replicas.len(), "{replicas:?}");
    }
    assert_no_shared_bytes(&s);
}

#[test]
fn with_fewer_segments_than_replicas_placement_is_best_effort() {
    let mut s = MetaState::default();
    mount(&mut s, NODE_A, seg(1, 1 << 20, "host-a"));
    mount(&mut s, NODE_B, seg(2, 1 << 20, "host-b"));
    let (_, replicas) = placed(&mut s, put(W1, "k", 1000, 3));
    let segs: BTreeSet<_> = replicas.iter().map(|r| r.segment).collect();
    assert_eq!(segs, BTreeSet::from([SegmentId(1), SegmentId(2)]));
}

#[test]
fn best_effort_placement_skips_segments_without_room() {
    let mut s = MetaState::default();
    mount(&mut s, NODE_A, seg(1, 4096, "host-a"));
    mount(&mut s, NODE_B, seg(2, 1 << 20, "host-b"));
    let (_, replicas) = placed(&mut s, put(W1, "k", 8192, 2));
    assert_eq!(replicas.len(), 1);
    assert_eq!(replicas[0].segment, SegmentId(2));
}

#[test]
fn put_start_with_no_segment_mounted_is_no_available_handle() {
    let mut s = MetaState::default();
    let e = refused(&mut s, put(W1, "k", 1000, 1));
    assert!(matches!(e, MetaError::NoAvailableHandle(_)), "{e:?}");
}

#[test]
fn put_start_when_every_segment_is_full_is_no_available_handle_and_changes_nothing() {
    let mut s = MetaState::default();
    mount(&mut s, NODE_A, seg(1, 4096, "host-a"));
    mount(&mut s, NODE_B, seg(2, 4096, "host-b"));
    put_complete(&mut s, W1, "a", 4096, 2);
    assert_eq!(s.used_bytes(), s.capacity_bytes());
    let e = refused(&mut s, put(W1, "b", 64, 1));
    assert!(matches!(e, MetaError::NoAvailableHandle(_)), "{e:?}");
    // Room exists in total but not contiguously in any one segment.
    ok(&mut s, Command::Remove { key: "a".into() });
    put_complete(&mut s, W1, "x", 2048, 1);
    put_complete(&mut s, W1, "y", 2048, 1);
    assert_eq!(s.used_bytes(), 4096, "one segment holds x, the other y");
    let e = refused(&mut s, put(W1, "big", 2049, 1));
    assert!(matches!(e, MetaError::NoAvailableHandle(_)), "{e:?}");
}

#[test]
fn the_preferred_segments_are_used_first_in_the_order_given() {
    let mut s = MetaState::default();
    mount(&mut s, NODE_A, seg(1, 1 << 20, "host-a"));
    mount(&mut s, NODE_B, seg(2, 1 << 16, "host-b"));
    mount(&mut s, NODE_C, seg(3, 1 << 16, "host-c"));
    // Without a preference the emptiest segment wins.
    let (_, replicas) = placed(&mut s, put(W1, "plain", 1000, 1));
    assert_eq!(replicas[0].segment, SegmentId(1));
    let (_, replicas) = placed(&mut s, put_preferring(W1, "pref", 1000, 1, &[3]));
    assert_eq!(replicas[0].segment, SegmentId(3));
    let (_, replicas) = placed(&mut s, put_preferring(W1, "two", 1000, 2, &[2, 3]));
    let segs: Vec<_> = replicas.iter().map(|r| r.segment).collect();
    assert_eq!(segs, vec![SegmentId(2), SegmentId(3)]);
    // More replicas than preferences: the preferred first, then the rest.
    let (_, replicas) = placed(&mut s, put_preferring(W1, "three", 1000, 3, &[3]));
    assert_eq!(replicas[0].segment, SegmentId(3));
    assert_eq!(replicas.len(), 3);
}

#[test]
fn a_full_preferred_segment_falls_back_to_another() {
    let mut s = MetaState::default();
    mount(&mut s, NODE_A, seg(1, 4096, "host-a"));
    mount(&mut s, NODE_B, seg(2, 1 << 20, "host-b"));
    put_complete(&mut s, W1, "fill", 4096, 1);
    assert_eq!(s.segment(SegmentId(2)).unwrap().used_bytes(), 4096, "the emptiest took it");
    let mut s = MetaState::default();
    mount(&mut s, NODE_A, seg(1, 4096, "host-a"));
    mount(&mut s, NODE_B, seg(2, 1 << 20, "host-b"));
    placed(&mut s, put_preferring(W1, "fill", 4096, 1, &[1]));
    assert_eq!(s.segment(SegmentId(1)).unwrap().free_bytes(), 0);
    let (_, replicas) = placed(&mut s, put_preferring(W1, "k", 1000, 1, &[1]));
    assert_eq!(replicas[0].segment, SegmentId(2));
}

#[test]
fn an_unknown_preferred_segment_is_invalid_params_and_changes_nothing() {
    let mut s = three_node_cluster(1 << 20);
    let e = refused(&mut s, put_preferring(W1, "k", 1000, 1, &[99]));
    assert!(is_invalid(&e), "{e:?}");
    let e = refused(&mut s, put_preferring(W1, "k", 1000, 2, &[1, 99]));
    assert!(is_invalid(&e), "{e:?}");
    assert!(s.object("k").is_none());
}

#[test]
fn replicas_spread_across_hosts_before_a_host_gets_a_second() {
    let mut s = MetaState::default();
    // host-a has the two emptiest segments; host-b's is smaller.
    mount(&mut s, NODE_A, seg(1, 1 << 20, "host-a"));
    mount(&mut s, NODE_A, seg(2, 1 << 20, "host-a"));
    mount(&mut s, NODE_B, seg(3, 1 << 16, "host-b"));
    let (_, replicas) = placed(&mut s, put(W1, "two", 1000, 2));
    let hosts: BTreeSet<_> = replicas.iter().map(|r| s.segment(r.segment).unwrap().spec.host_id.clone()).collect();
    assert_eq!(hosts.len(), 2, "two replicas on one host while another host had room: {replicas:?}");
    // When there are more replicas than hosts, a host takes a second one.
    let (_, replicas) = placed(&mut s, put(W1, "three", 1000, 3));
    assert_eq!(replicas.len(), 3);
    assert_no_shared_bytes(&s);
}

#[test]
fn an_object_larger_than_the_largest_segment_is_invalid_params_but_one_larger_than_free_space_is_no_handle() {
    let mut s = MetaState::default();
    mount(&mut s, NODE_A, seg(1, 8192, "host-a"));
    mount(&mut s, NODE_B, seg(2, 4096, "host-b"));
    let e = refused(&mut s, put(W1, "huge", 8193, 1));
    assert!(is_invalid(&e), "{e:?}");
    let e = refused(&mut s, put(W1, "huge", u64::MAX, 1));
    assert!(is_invalid(&e), "{e:?}");
    // Exactly the largest segment fits.
    put_complete(&mut s, W1, "exact", 8192, 1);
    let e = refused(&mut s, put(W1, "more", 8192, 1));
    assert!(matches!(e, MetaError::NoAvailableHandle(_)), "{e:?}");
}

// ================================================================ no shared bytes

/// Applies `ops` (each one seeds a random command) and checks the invariant
/// after every step.
fn run_random_ops(ops: &[u64]) -> MetaState {
    let mut s = MetaState::default();
    for (i, id) in (1..=4).enumerate() {
        mount(&mut s, ClientId(1 + i as u64), seg(id, 16384, &format!("host-{}", id % 3)));
    }
    for op in ops {
        let cmd = random_command(&mut Rng(*op), &s);
        apply(&mut s, cmd);
        assert_no_shared_bytes(&s);
    }
    s
}

#[test]
fn thousands_of_random_commands_never_let_two_objects_share_a_byte() {
    for seed in 0..8u64 {
        let mut rng = Rng(seed);
        let ops: Vec<u64> = (0..1500).map(|_| rng.next()).collect();
        run_random_ops(&ops);
    }
}

#[test]
fn random_runs_exercise_puts_removes_and_discards() {
    // Guards the generator: the invariant test above is only as good as the
    // states it reaches.
    let mut rng = Rng(42);
    let mut s = MetaState::default();
    for id in 1..=4 {
        mount(&mut s, ClientId(id), seg(id, 16384, &format!("host-{}", id % 3)));
    }
    let (mut placed_n, mut removed_n, mut full_n, mut max_used) = (0, 0, 0, 0);
    for _ in 0..3000 {
        let cmd = random_command(&mut rng, &s);
        match apply(&mut s, cmd) {
            Response::Placed { .. } => placed_n += 1,
            Response::Removed { count } => removed_n += count,
            Response::Err(MetaError::NoAvailableHandle(_)) => full_n += 1,
            _ => {}
        }
        max_used = max_used.max(s.used_bytes());
    }
    assert!(placed_n > 300, "placed {placed_n}");
    assert!(removed_n > 10, "bulk-removed {removed_n}");
    assert!(full_n > 0, "never ran out of space");
    assert!(max_used > 16384, "max used {max_used}");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn no_sequence_of_commands_lets_two_objects_share_a_byte(ops in proptest::collection::vec(any::<u64>(), 1..250)) {
        run_random_ops(&ops);
    }
}

// ================================================================ mount / unmount

#[test]
fn mounting_the_same_segment_twice_is_ok_and_keeps_one_segment_with_its_objects() {
    let mut s = MetaState::default();
    mount(&mut s, NODE_A, seg(1, 1 << 20, "host-a"));
    put_complete(&mut s, W1, "k", 1000, 1);
    let used = s.used_bytes();
    mount(&mut s, NODE_A, seg(1, 1 << 20, "host-a"));
    assert_eq!(s.segments().count(), 1);
    assert_eq!(s.capacity_bytes(), 1 << 20);
    assert_eq!(s.used_bytes(), used);
    assert!(s.object("k").is_some(), "a retried mount must not wipe the segment");
    assert!(s.client(NODE_A).is_some());
}

#[test]
fn mounting_a_taken_segment_id_by_another_client_or_with_another_size_is_segment_already_exists() {
    let mut s = MetaState::default();
    mount(&mut s, NODE_A, seg(1, 1 << 20, "host-a"));
    let e = refused(&mut s, mount_cmd(NODE_B, seg(1, 1 << 20, "host-b")));
    assert!(matches!(e, MetaError::SegmentAlreadyExists(_)), "{e:?}");
    assert!(s.client(NODE_B).is_none(), "a refused mount registers nobody");
    let e = refused(&mut s, mount_cmd(NODE_A, seg(1, 1 << 21, "host-a")));
    assert!(matches!(e, MetaError::SegmentAlreadyExists(_)), "{e:?}");
    assert_eq!(s.segment(SegmentId(1)).unwrap().owner, NODE_A);
}

#[test]
fn a_segment_with_id_zero_or_a_size_that_is_not_whole_pages_is_invalid_params() {
    let mut s = MetaState::default();
    let e = refused(&mut s, mount_cmd(NODE_A, seg(0, 1 << 20, "host-a")));
    assert!(is_invalid(&e) && e.to_string().contains("id 0"), "{e}");
    let e = refused(&mut s, mount_cmd(NODE_A, seg(1, (1 << 20) + 64, "host-a")));
    assert!(is_invalid(&e) && e.to_string().contains("multiple of 4096"), "{e}");
    assert!(e.to_string().contains(&(1u64 << 20).to_string()), "names the size to use: {e}");
    let e = refused(&mut s, mount_cmd(NODE_A, seg(1, 2048, "host-a")));
    assert!(is_invalid(&e), "{e}");
    let e = refused(&mut s, Command::RemountSegments { client: NODE_A, segments: vec![seg(1, 6000, "host-a")] });
    assert!(is_invalid(&e), "{e}");
    assert_eq!(s.segments().count(), 0);
}

/// A segment backed by the shared-memory file `path` on `host`.
fn shm_seg(id: u64, host: &str, path: &str) -> SegmentSpec {
    SegmentSpec { shm_path: path.to_string(), ..seg(id, 1 << 20, host) }
}

#[test]
fn two_segment_ids_over_the_same_shared_memory_are_refused() {
    let mut s = MetaState::default();
    mount(&mut s, NODE_A, shm_seg(1, "host-a", "/dev/shm/seg-a"));
    let e = refused(&mut s, mount_cmd(NODE_B, shm_seg(2, "host-a", "/dev/shm/seg-a")));
    assert!(matches!(e, MetaError::SegmentAlreadyExists(_)) && e.to_string().contains("/dev/shm/seg-a"), "{e}");
    let e = refused(&mut s, mount_cmd(NODE_A, shm_seg(2, "host-a", "/dev/shm/seg-a")));
    assert!(matches!(e, MetaError::SegmentAlreadyExists(_)), "same owner, still one memory: {e}");
    // The same path on another host is other memory; a retried mount is fine.
    mount(&mut s, NODE_B, shm_seg(2, "host-b", "/dev/shm/seg-a"));
    mount(&mut s, NODE_A, shm_seg(1, "host-a", "/dev/shm/seg-a"));
    // A remount listing the same memory twice is refused as a whole.
    let twice = vec![shm_seg(3, "host-c", "/dev/shm/x"), shm_seg(4, "host-c", "/dev/shm/x")];
    let e = refused(&mut s, Command::RemountSegments { client: NODE_C, segments: twice });
    assert!(is_invalid(&e), "{e}");
    // A remount that replaces the client's own segment over the same file
    // (a restarted store node with a new segment id) is accepted.
    ok(&mut s, Command::RemountSegments { client: NODE_A, segments: vec![shm_seg(5, "host-a", "/dev/shm/seg-a")] });
    assert!(s.segment(SegmentId(1)).is_none());
    assert_eq!(s.segment(SegmentId(5)).map(|g| g.owner), Some(NODE_A));
    // ...but not over another client's.
    let e = refused(
        &mut s,
        Command::RemountSegments { client: NODE_C, segments: vec![shm_seg(6, "host-b", "/dev/shm/seg-a")] },
    );
    assert!(matches!(e, MetaError::SegmentAlreadyExists(_)), "{e}");
}

#[test]
fn mount_registers_the_client() {
    let mut s = MetaState::default();
    mount(&mut s, NODE_A, seg(1, 1 << 20, "host-a"));
    let c = s.client(NODE_A).expect("registered");
    assert_eq!(c.registered_ms, s.now_ms());
    assert_eq!(s.clients().count(), 1);
}

#[test]
fn unmount_by_a_client_that_does_not_own_the_segment_is_illegal_client() {
    let mut s = three_node_cluster(1 << 20);
    let e = refused(&mut s, Command::UnmountSegment { client: NODE_B, segment: SegmentId(1) });
    assert!(matches!(e, MetaError::IllegalClient(_)), "{e:?}");
    assert!(s.segment(SegmentId(1)).is_some());
}

#[test]
fn unmount_is_idempotent_an_unknown_or_already_unmounted_segment_is_ok_and_changes_nothing() {
    let mut s = three_node_cluster(1 << 20);
    let before = s.state_hash();
    ok(&mut s, Command::UnmountSegment { client: NODE_A, segment: SegmentId(99) });
    assert_eq!(s.state_hash(), before, "unmounting an unknown segment changed the state");
    ok(&mut s, Command::UnmountSegment { client: NODE_A, segment: SegmentId(1) });
    let after_first = s.state_hash();
    ok(&mut s, Command::UnmountSegment { client: NODE_A, segment: SegmentId(1) });
    assert_eq!(s.state_hash(), after_first, "a second unmount changed the state");
    assert!(s.segment(SegmentId(1)).is_none());
}

#[test]
fn unmount_drops_the_replicas_on_that_segment_and_objects_left_with_none() {
    let mut s = MetaState::default();
    mount(&mut s, NODE_A, seg(1, 1 << 20, "host-a"));
    mount(&mut s, NODE_B, seg(2, 1 << 16, "host-b"));
    put_complete(&mut s, W1, "both", 1000, 2);
    placed(&mut s, put_preferring(W1, "only-a", 2000, 1, &[1]));
    placed(&mut s, put_preferring(W1, "only-b", 3000, 1, &[2]));
    ok(&mut s, Command::UnmountSegment { client: NODE_A, segment: SegmentId(1) });
    assert!(s.segment(SegmentId(1)).is_none());
    assert_eq!(s.capacity_bytes(), 1 << 16);
    let both = s.object("both").expect("kept its other replica");
    assert_eq!(both.replicas.len(), 1);
    assert_eq!(both.replicas[0].segment, SegmentId(2));
    assert!(s.object("only-a").is_none(), "an object with no replica left is gone");
    assert!(s.object("only-b").is_some());
    assert_eq!(s.used_bytes(), aligned(1000) + aligned(3000));
    assert!(s.client(NODE_A).is_some(), "unmount does not unregister the client");
    assert_no_shared_bytes(&s);
}

#[test]
fn a_segment_mounted_again_after_unmount_starts_empty() {
    let mut s = MetaState::default();
    mount(&mut s, NODE_A, seg(1, 1 << 20, "host-a"));
    put_complete(&mut s, W1, "k", 1000, 1);
    ok(&mut s, Command::UnmountSegment { client: NODE_A, segment: SegmentId(1) });
    mount(&mut s, NODE_B, seg(1, 1 << 20, "host-b"));
    assert_eq!(s.used_bytes(), 0);
    assert_eq!(s.object_count(), 0);
    assert_eq!(s.segment(SegmentId(1)).unwrap().owner, NODE_B);
}

#[test]
fn a_remount_makes_the_clients_segments_exactly_the_list() {
    let mut s = MetaState::default();
    mount(&mut s, NODE_A, seg(1, 1 << 20, "host-a"));
    mount(&mut s, NODE_A, seg(2, 1 << 20, "host-a"));
    mount(&mut s, NODE_B, seg(9, 1 << 20, "host-b"));
    placed(&mut s, put_preferring(W1, "on-1", 1000, 1, &[1]));
    placed(&mut s, put_preferring(W1, "on-2", 1000, 1, &[2]));
    placed(&mut s, put_preferring(W1, "on-9", 1000, 1, &[9]));
    let segments = vec![seg(2, 1 << 20, "host-a"), seg(3, 1 << 18, "host-a")];
    ok(&mut s, Command::RemountSegments { client: NODE_A, segments });
    let mine: BTreeSet<_> = s.client_segments(NODE_A).map(|x| x.spec.id).collect();
    assert_eq!(mine, BTreeSet::from([SegmentId(2), SegmentId(3)]));
    assert!(s.object("on-1").is_none(), "objects only on the dropped segment are gone");
    assert!(s.object("on-2").is_some(), "a listed segment keeps its objects");
    assert!(s.object("on-9").is_some(), "other clients are untouched");
    assert_eq!(s.segment(SegmentId(9)).unwrap().owner, NODE_B);
    assert_eq!(s.segment(SegmentId(3)).unwrap().used_bytes(), 0);
    assert_eq!(s.capacity_bytes(), (1 << 20) + (1 << 18) + (1 << 20));
    assert_no_shared_bytes(&s);
}

#[test]
fn a_remount_with_an_empty_list_registers_the_client_and_unmounts_all_its_segments() {
    let mut s = MetaState::default();
    ok(&mut s, Command::RemountSegments { client: W1, segments: vec![] });
    assert!(s.client(W1).is_some(), "a client with no segments is registered");
    assert_eq!(s.segments().count(), 0);
    mount(&mut s, NODE_A, seg(1, 1 << 20, "host-a"));
    mount(&mut s, NODE_A, seg(2, 1 << 20, "host-a"));
    ok(&mut s, Command::RemountSegments { client: NODE_A, segments: vec![] });
    assert_eq!(s.segments().count(), 0);
    assert!(s.client(NODE_A).is_some());
}

#[test]
fn a_remount_repeated_is_idempotent() {
    let mut s = MetaState::default();
    let segments = vec![seg(1, 1 << 20, "host-a"), seg(2, 1 << 20, "host-a")];
    ok(&mut s, Command::RemountSegments { client: NODE_A, segments: segments.clone() });
    put_complete(&mut s, W1, "k", 1000, 2);
    let mut control = s.clone();
    let ts = s.now_ms() + 1;
    control.apply(&Request { ts_ms: ts, cmd: Command::Noop });
    s.apply(&Request { ts_ms: ts, cmd: Command::RemountSegments { client: NODE_A, segments } });
    assert_eq!(s.state_hash(), control.state_hash());
}

#[test]
fn a_refused_remount_changes_nothing() {
    let mut s = MetaState::default();
    mount(&mut s, NODE_A, seg(1, 1 << 20, "host-a"));
    mount(&mut s, NODE_A, seg(2, 1 << 20, "host-a"));
    mount(&mut s, NODE_B, seg(9, 1 << 20, "host-b"));
    put_complete(&mut s, W1, "k", 1000, 3);

    // A segment listed twice.
    let dup = vec![seg(2, 1 << 20, "host-a"), seg(5, 1 << 20, "host-a"), seg(5, 1 << 20, "host-a")];
    let e = refused(&mut s, Command::RemountSegments { client: NODE_A, segments: dup });
    assert!(is_invalid(&e), "{e:?}");
    // A segment owned by another client (listed after a valid one).
    let theirs = vec![seg(2, 1 << 20, "host-a"), seg(9, 1 << 20, "host-b")];
    let e = refused(&mut s, Command::RemountSegments { client: NODE_A, segments: theirs });
    assert!(matches!(e, MetaError::SegmentAlreadyExists(_)), "{e:?}");
    // Its own segment with another size.
    let resized = vec![seg(1, 1 << 21, "host-a")];
    let e = refused(&mut s, Command::RemountSegments { client: NODE_A, segments: resized });
    assert!(matches!(e, MetaError::SegmentAlreadyExists(_)), "{e:?}");
    // A malformed declaration at the end of the list.
    let bad = vec![seg(2, 1 << 20, "host-a"), seg(6, 0, "host-a")];
    let e = refused(&mut s, Command::RemountSegments { client: NODE_A, segments: bad });
    assert!(is_invalid(&e), "{e:?}");
    // A new client whose remount is refused is not registered either.
    let e = refused(&mut s, Command::RemountSegments { client: NODE_C, segments: vec![seg(9, 1 << 20, "host-c")] });
    assert!(matches!(e, MetaError::SegmentAlreadyExists(_)), "{e:?}");
    assert!(s.client(NODE_C).is_none());
    assert_eq!(s.object("k").unwrap().replicas.len(), 3);
}

// ================================================================ client expiry

#[test]
fn expiring_a_client_unmounts_its_segments_and_drops_objects_held_only_there() {
    let mut s = three_node_cluster(1 << 20);
    placed(&mut s, put_preferring(W1, "only-a", 1000, 1, &[1]));
    ok(&mut s, put_end(W1, "only-a", 1));
    put_complete(&mut s, W1, "everywhere", 1000, 3);
    ok(&mut s, Command::ExpireClient { client: NODE_A });
    assert!(s.client(NODE_A).is_none());
    assert!(s.segment(SegmentId(1)).is_none());
    assert_eq!(s.client_segments(NODE_A).count(), 0);
    assert!(s.object("only-a").is_none());
    let kept = s.object("everywhere").expect("other replicas survive");
    let segs: BTreeSet<_> = kept.replicas.iter().map(|r| r.segment).collect();
    assert_eq!(segs, BTreeSet::from([SegmentId(2), SegmentId(3)]));
    assert_eq!(kept.status, ObjectStatus::Complete);
    assert_eq!(s.used_bytes(), 2 * aligned(1000));
    assert_no_shared_bytes(&s);
}

#[test]
fn expiring_a_writer_moves_its_processing_puts_to_discarded_and_keeps_their_ranges() {
    let mut s = three_node_cluster(1 << 20);
    ok(&mut s, Command::RemountSegments { client: W1, segments: vec![] });
    let (v, replicas) = placed(&mut s, put(W1, "unfinished", 1000, 2));
    put_complete(&mut s, W1, "finished", 2000, 1);
    placed(&mut s, put(W2, "someone-else", 500, 1));
    let used = s.used_bytes();
    ok(&mut s, Command::ExpireClient { client: W1 });
    assert!(s.client(W1).is_none());
    assert!(s.object("unfinished").is_none(), "the key is free again");
    assert!(s.object("finished").is_some(), "complete objects outlive their writer");
    assert_eq!(s.object("someone-else").unwrap().status, ObjectStatus::Processing);
    let d: Vec<_> = s.discarded().collect();
    assert_eq!(d.len(), 1);
    assert_eq!(d[0].version, v);
    assert_eq!(d[0].key, "unfinished");
    assert_eq!(d[0].replicas, replicas);
    assert_eq!(d[0].discarded_ms, s.now_ms());
    assert_eq!(s.used_bytes(), used, "the writer may still be writing: its ranges stay held");
    // A new put of the key never lands on the held ranges.
    placed(&mut s, put(W2, "unfinished", 1000, 3));
    assert_no_shared_bytes(&s);
}

#[test]
fn expiring_an_unknown_client_is_illegal_client() {
    let mut s = three_node_cluster(1 << 20);
    let e = refused(&mut s, Command::ExpireClient { client: ClientId(4242) });
    assert!(matches!(e, MetaError::IllegalClient(_)), "{e:?}");
    ok(&mut s, Command::ExpireClient { client: NODE_A });
    let e = refused(&mut s, Command::ExpireClient { client: NODE_A });
    assert!(matches!(e, MetaError::IllegalClient(_)), "a second expiry finds nobody: {e:?}");
}

// ================================================================ discard / release / bulk remove

#[test]
fn discard_puts_discards_only_matching_versions_of_processing_objects() {
    let mut s = three_node_cluster(1 << 20);
    let (v_proc, _) = placed(&mut s, put(W1, "proc", 1000, 1));
    let (v_other, _) = placed(&mut s, put(W1, "other", 1000, 1));
    let v_done = put_complete(&mut s, W1, "done", 1000, 1);
    let used = s.used_bytes();
    let victims = vec![
        VersionedKey { key: "proc".into(), version: v_proc },
        VersionedKey { key: "other".into(), version: ObjectVersion(v_other.0 + 100) },
        VersionedKey { key: "done".into(), version: v_done },
        VersionedKey { key: "ghost".into(), version: v_proc },
    ];
    assert_eq!(apply(&mut s, Command::DiscardPuts { victims }), Response::Removed { count: 1 });
    assert!(s.object("proc").is_none());
    assert!(s.object("other").is_some(), "a stale version must not hit the current object");
    assert!(s.object("done").is_some(), "complete objects are never discarded");
    assert_eq!(s.discarded().map(|d| d.version).collect::<Vec<_>>(), vec![v_proc]);
    assert_eq!(s.used_bytes(), used, "discarded ranges stay held");
    assert_no_shared_bytes(&s);
}

#[test]
fn a_discard_of_a_key_already_put_again_does_not_hit_the_new_object() {
    let mut s = three_node_cluster(1 << 20);
    let (v1, _) = placed(&mut s, put(W1, "k", 1000, 1));
    ok(&mut s, Command::PutRevoke { client: W1, key: "k".into() });
    placed(&mut s, put(W1, "k", 1000, 1));
    let resp = apply(&mut s, Command::DiscardPuts { victims: vec![VersionedKey { key: "k".into(), version: v1 }] });
    assert_eq!(resp, Response::Removed { count: 0 });
    assert!(s.object("k").is_some());
}

#[test]
fn release_discarded_gives_the_space_back_once() {
    let mut s = three_node_cluster(1 << 20);
    put_complete(&mut s, W1, "keep", 1000, 1);
    let base = s.used_bytes();
    let (v, _) = placed(&mut s, put(W1, "k", 5000, 2));
    apply(&mut s, Command::DiscardPuts { victims: vec![VersionedKey { key: "k".into(), version: v }] });
    assert_eq!(s.used_bytes(), base + 2 * aligned(5000));
    let resp = apply(&mut s, Command::ReleaseDiscarded { versions: vec![v, ObjectVersion(777)] });
    assert_eq!(resp, Response::Removed { count: 1 });
    assert_eq!(s.used_bytes(), base);
    assert_eq!(s.discarded().count(), 0);
    assert_eq!(apply(&mut s, Command::ReleaseDiscarded { versions: vec![v] }), Response::Removed { count: 0 });
    assert_eq!(s.used_bytes(), base);
    assert_no_shared_bytes(&s);
}

#[test]
fn unmounting_a_segment_forgets_the_discarded_ranges_it_held() {
    let mut s = three_node_cluster(1 << 20);
    let (v, _) = placed(&mut s, put_preferring(W1, "k", 1000, 2, &[1, 2]));
    apply(&mut s, Command::DiscardPuts { victims: vec![VersionedKey { key: "k".into(), version: v }] });
    ok(&mut s, Command::UnmountSegment { client: NODE_A, segment: SegmentId(1) });
    let d: Vec<_> = s.discarded().collect();
    assert_eq!(d.len(), 1);
    assert_eq!(d[0].replicas.len(), 1);
    assert_eq!(d[0].replicas[0].segment, SegmentId(2));
    ok(&mut s, Command::UnmountSegment { client: NODE_B, segment: SegmentId(2) });
    assert_eq!(s.discarded().count(), 0, "a discarded put that holds nothing is forgotten");
    // Remounting the ids gives fresh, empty segments; nothing stale is released into them.
    mount(&mut s, NODE_A, seg(1, 1 << 20, "host-a"));
    assert_eq!(apply(&mut s, Command::ReleaseDiscarded { versions: vec![v] }), Response::Removed { count: 0 });
    assert_no_shared_bytes(&s);
}

#[test]
fn remove_objects_removes_only_matching_versions_of_complete_objects_and_counts_them() {
    let mut s = three_node_cluster(1 << 20);
    let va = put_complete(&mut s, W1, "a", 1000, 1);
    let vb = put_complete(&mut s, W1, "b", 1000, 2);
    let vc = put_complete(&mut s, W1, "c", 1000, 1);
    let (vp, _) = placed(&mut s, put(W1, "p", 1000, 1));
    let used_by_c_and_p = 2 * aligned(1000);
    let victims = vec![
        VersionedKey { key: "a".into(), version: va },
        VersionedKey { key: "b".into(), version: vb },
        VersionedKey { key: "c".into(), version: ObjectVersion(vc.0 + 1) },
        VersionedKey { key: "p".into(), version: vp },
        VersionedKey { key: "ghost".into(), version: va },
        VersionedKey { key: "a".into(), version: va },
    ];
    let resp = apply(&mut s, Command::RemoveObjects { victims, reason: RemoveReason::RemoveAll });
    assert_eq!(resp, Response::Removed { count: 2 });
    assert!(s.object("a").is_none() && s.object("b").is_none());
    assert!(s.object("c").is_some(), "a stale version must not remove the current object");
    assert!(s.object("p").is_some(), "processing objects are not removed in bulk");
    assert_eq!(s.used_bytes(), used_by_c_and_p);
    assert_no_shared_bytes(&s);
}

// ================================================================ malformed requests

#[test]
fn malformed_put_starts_are_invalid_params_and_change_nothing() {
    let mut s = three_node_cluster(1 << 20);
    put_complete(&mut s, W1, "existing", 1000, 2);
    let mut too_many_preferred = put_spec(W1, "k", 100, 1);
    too_many_preferred.preferred = (0..=REPLICA_NUM_MAX as u64).map(|_| SegmentId(1)).collect();
    let cases: Vec<(&str, Command)> = vec![
        ("size 0", put(W1, "k", 0, 1)),
        ("replica_num 0", put(W1, "k", 100, 0)),
        ("replica_num 17", put(W1, "k", 100, REPLICA_NUM_MAX + 1)),
        ("empty key", put(W1, "", 100, 1)),
        ("key of 4097 bytes", put(W1, &"x".repeat(KEY_MAX_BYTES + 1), 100, 1)),
        ("oversize", put(W1, "k", (1 << 20) + 1, 1)),
        ("unknown preferred segment", put_preferring(W1, "k", 100, 1, &[404])),
        ("17 preferred segments", Command::PutStart(too_many_preferred)),
        // Shape is checked before existence: a bad request on an existing key is still invalid.
        ("size 0 on an existing key", put(W1, "existing", 0, 1)),
    ];
    for (what, cmd) in cases {
        let e = refused(&mut s, cmd);
        assert!(is_invalid(&e), "{what}: {e:?}");
    }
    assert_eq!(s.object_count(), 1);
}

#[test]
fn the_limits_themselves_are_accepted() {
    let mut s = MetaState::default();
    for id in 1..=REPLICA_NUM_MAX as u64 {
        mount(&mut s, NODE_A, seg(id, 1 << 16, &format!("host-{id}")));
    }
    let key = "k".repeat(KEY_MAX_BYTES);
    let (_, replicas) = placed(&mut s, put(W1, &key, 1, REPLICA_NUM_MAX));
    assert_eq!(replicas.len(), REPLICA_NUM_MAX as usize);
    assert!(replicas.iter().all(|r| r.range.len == ALLOC_ALIGN_BYTES), "a 1-byte object takes one aligned unit");
    mount(&mut s, NODE_B, seg(99, 1 << 16, "host-99"));
    let (_, replicas) = placed(&mut s, put(W1, "whole-segment", 1 << 16, 1));
    assert_eq!(replicas[0].segment, SegmentId(99));
    assert_eq!(replicas[0].range, Range::new(0, 1 << 16));
}

#[test]
fn malformed_segments_are_invalid_params_and_change_nothing() {
    let mut s = three_node_cluster(1 << 20);
    let mut no_endpoint = seg(7, 1 << 20, "host-x");
    no_endpoint.endpoint.clear();
    let mut long_label = seg(7, 1 << 20, "host-x");
    long_label.zone = "z".repeat(513);
    let cases = vec![
        ("segment size 0", seg(7, 0, "host-x")),
        ("segment smaller than one aligned unit", seg(7, ALLOC_ALIGN_BYTES - 1, "host-x")),
        ("segment over 16 TiB", seg(7, (1 << 44) + 1, "host-x")),
        ("empty endpoint", no_endpoint),
        ("label over 512 bytes", long_label),
        // Validation comes first even for an id that is already mounted by this client.
        ("size 0 on a mounted id", seg(1, 0, "host-a")),
    ];
    for (what, spec) in cases {
        let e = refused(&mut s, mount_cmd(NODE_A, spec.clone()));
        assert!(is_invalid(&e), "mount, {what}: {e:?}");
        let e = refused(&mut s, Command::RemountSegments { client: NODE_A, segments: vec![spec] });
        assert!(is_invalid(&e), "remount, {what}: {e:?}");
    }
    assert_eq!(s.segments().count(), 3);
}

// ================================================================ time

#[test]
fn now_ms_is_the_largest_timestamp_seen_and_never_moves_back() {
    let mut s = MetaState::default();
    assert_eq!(s.now_ms(), 0);
    s.apply(&Request { ts_ms: 1_000, cmd: Command::Noop });
    assert_eq!(s.now_ms(), 1_000);
    s.apply(&Request { ts_ms: 500, cmd: mount_cmd(NODE_A, seg(1, 1 << 20, "host-a")) });
    assert_eq!(s.now_ms(), 1_000, "a skewed leader cannot move time back");
    assert_eq!(s.client(NODE_A).unwrap().registered_ms, 1_000, "entries are stamped with state time");
    s.apply(&Request { ts_ms: 700, cmd: put(W1, "k", 10, 1) });
    assert_eq!(s.object("k").unwrap().created_ms, 1_000);
    s.apply(&Request { ts_ms: 2_000, cmd: put_end(W1, "k", 1) });
    assert_eq!(s.now_ms(), 2_000);
    assert_eq!(s.object("k").unwrap().completed_ms, Some(2_000));
    // Even a refused command carries time forward.
    s.apply(&Request { ts_ms: 3_000, cmd: Command::Remove { key: "ghost".into() } });
    assert_eq!(s.now_ms(), 3_000);
}

// ================================================================ determinism

/// A log of `n` random requests generated against a reference replica;
/// timestamps mostly rise but sometimes jump back (a skewed new leader).
fn random_log(seed: u64, n: usize) -> Vec<Request> {
    let mut rng = Rng(seed);
    let mut reference = MetaState::default();
    let mut ts = 1_700_000_000_000u64;
    let mut log = Vec::with_capacity(n);
    for _ in 0..n {
        ts += rng.below(20);
        let ts_ms = if rng.below(10) == 0 { ts.saturating_sub(rng.below(500)) } else { ts };
        let req = Request { ts_ms, cmd: random_command(&mut rng, &reference) };
        reference.apply(&req);
        log.push(req);
    }
    log
}

#[test]
fn the_same_log_on_three_replicas_gives_identical_state_and_snapshots() {
    for seed in [1u64, 2, 3] {
        let log = random_log(seed, 400);
        let mut replicas = [MetaState::default(), MetaState::default(), MetaState::default()];
        let mut answers: [Vec<Response>; 3] = Default::default();
        for (replica, answer) in replicas.iter_mut().zip(answers.iter_mut()) {
            for req in &log {
                answer.push(replica.apply(req));
            }
        }
        assert_eq!(answers[0], answers[1]);
        assert_eq!(answers[0], answers[2]);
        let hashes: Vec<u64> = replicas.iter().map(MetaState::state_hash).collect();
        assert!(hashes.iter().all(|h| *h == hashes[0]), "{hashes:?}");
        let images: Vec<Vec<u8>> = replicas.iter().map(image_bytes).collect();
        assert!(images.iter().all(|i| *i == images[0]), "snapshots differ");
        // The log did real work, so equality is not trivially the empty state.
        assert!(answers[0].iter().filter(|r| matches!(r, Response::Placed { .. })).count() > 50);
        assert!(replicas[0].object_count() > 0, "seed {seed}");
        assert_no_shared_bytes(&replicas[0]);
    }
}

#[test]
fn the_state_hash_tells_different_states_apart() {
    let log = random_log(9, 200);
    let mut a = MetaState::default();
    for req in &log {
        a.apply(req);
    }
    assert!(a.object_count() > 0);
    let mut b = a.clone();
    assert_eq!(a.state_hash(), b.state_hash());
    // A new segment, a removed object, or only a spent version number changes it.
    mount(&mut b, ClientId(77), seg(77, 1 << 20, "host-z"));
    assert_ne!(a.state_hash(), b.state_hash());
    let mut removed = a.clone();
    let key = a.objects().next().unwrap().key.clone();
    removed.apply(&Request { ts_ms: 0, cmd: Command::RemoveObjects { victims: vec![], reason: RemoveReason::Evict } });
    assert_eq!(a.state_hash(), removed.state_hash(), "an empty removal changes nothing");
    let victim = VersionedKey { key: key.clone(), version: a.object(&key).unwrap().version };
    let status = a.object(&key).unwrap().status;
    let cmd = match status {
        ObjectStatus::Complete => Command::RemoveObjects { victims: vec![victim], reason: RemoveReason::Evict },
        ObjectStatus::Processing => Command::DiscardPuts { victims: vec![victim] },
    };
    removed.apply(&Request { ts_ms: 0, cmd });
    assert!(removed.object(&key).is_none());
    assert_ne!(a.state_hash(), removed.state_hash());
    let mut spent = a.clone();
    let ts = spent.now_ms();
    assert!(spent.segments().any(|s| s.free_bytes() >= ALLOC_ALIGN_BYTES), "the log left some room");
    assert!(matches!(spent.apply(&Request { ts_ms: ts, cmd: put(W1, "fresh", 1, 1) }), Response::Placed { .. }));
    spent.apply(&Request { ts_ms: ts, cmd: Command::PutRevoke { client: W1, key: "fresh".into() } });
    assert_ne!(a.state_hash(), spent.state_hash(), "the version counter is replicated state");
    // The clock alone is not part of it (every entry, refused ones too,
    // moves it), but the snapshot keeps it.
    let mut c = a.clone();
    c.apply(&Request { ts_ms: c.now_ms() + 1, cmd: Command::Noop });
    assert_eq!(a.state_hash(), c.state_hash());
    assert_ne!(image_bytes(&a), image_bytes(&c));
    // Nor is Raft bookkeeping.
    let mut d = a.clone();
    d.last_applied = Some(openraft::LogId::new(openraft::CommittedLeaderId::new(3, 1), 42));
    assert_eq!(a.state_hash(), d.state_hash());
}

#[test]
fn a_state_rebuilt_from_its_image_hashes_the_same_and_answers_the_next_commands_identically() {
    for seed in [11u64, 12, 13] {
        let log = random_log(seed, 300);
        let mut original = MetaState::default();
        for req in &log {
            original.apply(req);
        }
        let bytes = image_bytes(&original);
        let decoded = codec::decode("state image", &bytes).expect("decode image");
        let mut rebuilt = MetaState::from_image(decoded).expect("rebuild");
        assert_eq!(rebuilt.state_hash(), original.state_hash());
        assert_eq!(image_bytes(&rebuilt), bytes);
        for (seg_o, seg_r) in original.segments().zip(rebuilt.segments()) {
            assert_eq!(seg_o.spec, seg_r.spec);
            assert_eq!(seg_o.free_bytes(), seg_r.free_bytes());
        }
        // The allocators were rebuilt canonically: the very next placements match.
        let mut ts = original.now_ms();
        for i in 0..40 {
            ts += 1;
            let req = Request { ts_ms: ts, cmd: put(W1, &format!("next-{i}"), 64 * (1 + i % 7), 1 + (i % 3) as u32) };
            assert_eq!(original.apply(&req), rebuilt.apply(&req), "seed {seed}, put {i}");
        }
        let mut rng = Rng(seed ^ 0xFFFF);
        for _ in 0..200 {
            ts += 1;
            let req = Request { ts_ms: ts, cmd: random_command(&mut rng, &original) };
            assert_eq!(original.apply(&req), rebuilt.apply(&req));
        }
        assert_eq!(original.state_hash(), rebuilt.state_hash());
    }
}

#[test]
fn a_fragmented_segment_rebuilt_from_its_image_places_the_next_put_in_the_same_hole() {
    let mut s = MetaState::default();
    mount(&mut s, NODE_A, seg(1, 8192, "host-a"));
    for i in 0..10 {
        put_complete(&mut s, W1, &format!("k{i}"), 64 * (1 + i % 4), 1);
    }
    for i in [1, 4, 6] {
        ok(&mut s, Command::Remove { key: format!("k{i}") });
    }
    let mut rebuilt = MetaState::from_image(s.to_image()).expect("rebuild");
    let a = placed(&mut s, put(W1, "hole", 64, 1));
    let b = placed(&mut rebuilt, put(W1, "hole", 64, 1));
    assert_eq!(a, b);
}

#[test]
fn an_image_with_overlapping_or_orphan_ranges_is_refused() {
    let mut s = three_node_cluster(1 << 20);
    put_complete(&mut s, W1, "a", 1000, 1);
    put_complete(&mut s, W1, "b", 1000, 1);
    let mut overlapping = s.to_image();
    let first = overlapping.objects[0].replicas.clone();
    overlapping.objects[1].replicas = first;
    assert!(MetaState::from_image(overlapping).is_err(), "two objects on the same bytes");
    let mut orphan = s.to_image();
    orphan.segments.clear();
    assert!(MetaState::from_image(orphan).is_err(), "replicas on a segment that is not mounted");
    let mut outside = s.to_image();
    outside.objects[0].replicas[0].range = Range::new(1 << 20, 1024);
    assert!(MetaState::from_image(outside).is_err(), "a range past the end of its segment");
    assert!(MetaState::from_image(s.to_image()).is_ok());
}

// ================================================================ batch

#[test]
fn a_batch_answers_one_response_per_command_in_order_and_applies_each() {
    let mut s = three_node_cluster(1 << 20);
    let batch = Command::Batch(vec![
        put(W1, "a", 1000, 1),
        put_end(W1, "a", 5),
        Command::Remove { key: "ghost".into() },
        put(W1, "", 1, 1),
        Command::Noop,
        put(W1, "b", 1000, 2),
    ]);
    let Response::Batch(answers) = apply(&mut s, batch) else { panic!("not a batch answer") };
    assert_eq!(answers.len(), 6);
    assert!(matches!(answers[0], Response::Placed { .. }), "{:?}", answers[0]);
    assert_eq!(answers[1], Response::Ok);
    assert_eq!(answers[2], Response::Err(MetaError::ObjectNotFound("ghost".into())));
    assert!(answers[3].err().is_some_and(is_invalid), "{:?}", answers[3]);
    assert_eq!(answers[4], Response::Ok);
    assert!(matches!(&answers[5], Response::Placed { replicas, .. } if replicas.len() == 2));
    assert_eq!(s.object("a").unwrap().status, ObjectStatus::Complete, "later commands see earlier ones");
    assert_eq!(s.object("b").unwrap().status, ObjectStatus::Processing);
    // The same commands one by one reach the same state.
    let mut one_by_one = three_node_cluster(1 << 20);
    let ts = s.now_ms();
    for cmd in [put(W1, "a", 1000, 1), put_end(W1, "a", 5), put(W1, "b", 1000, 2)] {
        one_by_one.apply(&Request { ts_ms: ts, cmd });
    }
    assert_eq!(one_by_one.state_hash(), s.state_hash());
}

#[test]
fn a_nested_batch_is_refused_and_changes_nothing() {
    let mut s = three_node_cluster(1 << 20);
    let nested = Command::Batch(vec![put(W1, "a", 1000, 1), Command::Batch(vec![put(W1, "b", 1000, 1)])]);
    let e = refused(&mut s, nested);
    assert!(is_invalid(&e), "{e:?}");
    assert_eq!(s.object_count(), 0);
}

#[test]
fn a_batch_over_the_limit_is_refused_and_changes_nothing() {
    let mut s = three_node_cluster(1 << 20);
    let cmds: Vec<Command> = (0..=4096).map(|i| put(W1, &format!("k{i}"), 64, 1)).collect();
    let e = refused(&mut s, Command::Batch(cmds));
    assert!(is_invalid(&e), "{e:?}");
    let empty = apply(&mut s, Command::Batch(vec![]));
    assert_eq!(empty, Response::Batch(vec![]));
}
