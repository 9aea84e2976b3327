//! The legacy two-commit put in the state machine (`PutStart`, `PutEnd`,
//! `PutRevoke`, replayed from older logs): the object's lifecycle, retries,
//! versions, placement across segments and hosts, and malformed puts.

mod common;

use std::collections::BTreeSet;

use common::*;

use mooncake_raft_store::state::{KEY_MAX_BYTES, ObjectStatus, REPLICA_NUM_MAX};
use mooncake_raft_store::{Command, MetaError, MetaState, Request, Response};
use mooncake_segment::{ALLOC_ALIGN_BYTES, Range, SegmentId};

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
        mount(&mut s, NODE_A, segment(id, 1 << 20, &format!("host-{id}")));
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
    mount(&mut s, NODE_A, segment(1, 1 << 20, "host-a"));
    mount(&mut s, NODE_B, segment(2, 1 << 20, "host-b"));
    let (_, replicas) = placed(&mut s, put(W1, "k", 1000, 3));
    let segs: BTreeSet<_> = replicas.iter().map(|r| r.segment).collect();
    assert_eq!(segs, BTreeSet::from([SegmentId(1), SegmentId(2)]));
}

#[test]
fn best_effort_placement_skips_segments_without_room() {
    let mut s = MetaState::default();
    mount(&mut s, NODE_A, segment(1, 4096, "host-a"));
    mount(&mut s, NODE_B, segment(2, 1 << 20, "host-b"));
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
    mount(&mut s, NODE_A, segment(1, 4096, "host-a"));
    mount(&mut s, NODE_B, segment(2, 4096, "host-b"));
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
    mount(&mut s, NODE_A, segment(1, 1 << 20, "host-a"));
    mount(&mut s, NODE_B, segment(2, 1 << 16, "host-b"));
    mount(&mut s, NODE_C, segment(3, 1 << 16, "host-c"));
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
    mount(&mut s, NODE_A, segment(1, 4096, "host-a"));
    mount(&mut s, NODE_B, segment(2, 1 << 20, "host-b"));
    put_complete(&mut s, W1, "fill", 4096, 1);
    assert_eq!(s.segment(SegmentId(2)).unwrap().used_bytes(), 4096, "the emptiest took it");
    let mut s = MetaState::default();
    mount(&mut s, NODE_A, segment(1, 4096, "host-a"));
    mount(&mut s, NODE_B, segment(2, 1 << 20, "host-b"));
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
    mount(&mut s, NODE_A, segment(1, 1 << 20, "host-a"));
    mount(&mut s, NODE_A, segment(2, 1 << 20, "host-a"));
    mount(&mut s, NODE_B, segment(3, 1 << 16, "host-b"));
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
    mount(&mut s, NODE_A, segment(1, 8192, "host-a"));
    mount(&mut s, NODE_B, segment(2, 4096, "host-b"));
    let e = refused(&mut s, put(W1, "huge", 8193, 1));
    assert!(is_invalid(&e), "{e:?}");
    let e = refused(&mut s, put(W1, "huge", u64::MAX, 1));
    assert!(is_invalid(&e), "{e:?}");
    // Exactly the largest segment fits.
    put_complete(&mut s, W1, "exact", 8192, 1);
    let e = refused(&mut s, put(W1, "more", 8192, 1));
    assert!(matches!(e, MetaError::NoAvailableHandle(_)), "{e:?}");
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
        mount(&mut s, NODE_A, segment(id, 1 << 16, &format!("host-{id}")));
    }
    let key = "k".repeat(KEY_MAX_BYTES);
    let (_, replicas) = placed(&mut s, put(W1, &key, 1, REPLICA_NUM_MAX));
    assert_eq!(replicas.len(), REPLICA_NUM_MAX as usize);
    assert!(replicas.iter().all(|r| r.range.len == ALLOC_ALIGN_BYTES), "a 1-byte object takes one aligned unit");
    mount(&mut s, NODE_B, segment(99, 1 << 16, "host-99"));
    let (_, replicas) = placed(&mut s, put(W1, "whole-segment", 1 << 16, 1));
    assert_eq!(replicas[0].segment, SegmentId(99));
    assert_eq!(replicas[0].range, Range::new(0, 1 << 16));
}
