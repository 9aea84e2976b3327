//! Removing objects and reclaiming space in the state machine: `Remove`
//! and `RemoveVersion` (a newer incarnation is never touched), abandoned
//! puts discarded and released, and bulk removal by exact versions.

mod common;

use common::*;

use mooncake_raft_store::state::ObjectStatus;
use mooncake_raft_store::{Command, MetaError, ObjectVersion, RemoveReason, Response, VersionedKey};
use mooncake_segment::SegmentId;

// ================================================================ remove

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
    mount(&mut s, NODE_A, segment(1, 1 << 20, "host-a"));
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
