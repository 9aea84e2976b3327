//! Removing objects in the state machine: `RemoveVersion` (a newer
//! incarnation is never touched) and bulk removal by exact versions
//! (`RemoveObjects`), each freeing the removed objects' space.

mod common;

use common::*;

use mooncake_raft_store::{Command, MetaError, ObjectVersion, RemoveReason, Response, VersionedKey};

// ================================================================ remove

#[test]
fn remove_version_of_an_object_frees_its_space() {
    let mut s = three_node_cluster(1 << 20);
    put_complete(&mut s, W1, "keep", 3000, 1);
    let used_by_keep = s.used_bytes();
    let v = put_complete(&mut s, W1, "k", 1000, 2);
    assert_eq!(s.used_bytes(), used_by_keep + 2 * aligned(1000));
    ok(&mut s, Command::RemoveVersion { key: "k".into(), version: v });
    assert!(s.object("k").is_none());
    assert!(s.object("keep").is_some());
    assert_eq!(s.used_bytes(), used_by_keep);
    assert_no_shared_bytes(&s);
}

#[test]
fn remove_version_of_an_unknown_key_is_object_not_found() {
    let mut s = three_node_cluster(1 << 20);
    let e = refused(&mut s, Command::RemoveVersion { key: "ghost".into(), version: ObjectVersion(1) });
    assert_eq!(e, MetaError::ObjectNotFound("ghost".into()));
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

// ================================================================ bulk remove

#[test]
fn remove_objects_removes_only_matching_versions_and_counts_them() {
    let mut s = three_node_cluster(1 << 20);
    let va = put_complete(&mut s, W1, "a", 1000, 1);
    let vb = put_complete(&mut s, W1, "b", 1000, 2);
    let vc = put_complete(&mut s, W1, "c", 1000, 1);
    let vd = put_complete(&mut s, W1, "d", 1000, 1);
    let used_by_c_and_d = 2 * aligned(1000);
    let victims = vec![
        VersionedKey { key: "a".into(), version: va },
        VersionedKey { key: "b".into(), version: vb },
        VersionedKey { key: "c".into(), version: ObjectVersion(vc.0 + 100) },
        VersionedKey { key: "d".into(), version: va },
        VersionedKey { key: "ghost".into(), version: vd },
        VersionedKey { key: "a".into(), version: va },
    ];
    let resp = apply(&mut s, Command::RemoveObjects { victims, reason: RemoveReason::RemoveAll });
    assert_eq!(resp, Response::Removed { count: 2 });
    assert!(s.object("a").is_none() && s.object("b").is_none());
    assert_eq!(s.object("c").map(|o| o.version), Some(vc), "a stale version must not remove the current object");
    assert_eq!(s.object("d").map(|o| o.version), Some(vd), "another key's version must not remove it");
    assert_eq!(s.used_bytes(), used_by_c_and_d);
    assert_no_shared_bytes(&s);
}

#[test]
fn remove_objects_repeated_skips_what_is_gone_and_counts_nothing() {
    let mut s = three_node_cluster(1 << 20);
    let va = put_complete(&mut s, W1, "a", 1000, 1);
    put_complete(&mut s, W1, "b", 1000, 1);
    let victims = vec![VersionedKey { key: "a".into(), version: va }];
    let cmd = Command::RemoveObjects { victims, reason: RemoveReason::Evict };
    assert_eq!(apply(&mut s, cmd.clone()), Response::Removed { count: 1 });
    let used = s.used_bytes();
    assert_eq!(apply(&mut s, cmd.clone()), Response::Removed { count: 0 });
    // The key put again is a newer incarnation: the repeat does not hit it.
    let va2 = put_complete(&mut s, W1, "a", 1000, 1);
    assert_eq!(apply(&mut s, cmd), Response::Removed { count: 0 });
    assert_eq!(s.object("a").map(|o| o.version), Some(va2));
    assert_eq!(s.used_bytes(), used + aligned(1000));
    assert_no_shared_bytes(&s);
}
