//! Segments and clients in the state machine: mount, unmount and remount
//! (retries, owners, shared memory, replicas dropped with their segment),
//! client expiry, and malformed segment declarations.

mod common;

use std::collections::BTreeSet;

use common::*;

use mooncake_raft_store::{Arena, Command, MetaError, MetaState, ObjectVersion, Request};
use mooncake_segment::{ALLOC_ALIGN_BYTES, ClientId, SegmentId};

/// `key` committed with one replica at the start of a fresh arena on each of
/// `segments` (the arenas returned after), as a master placing it there.
fn put_on(s: &mut MetaState, client: ClientId, key: &str, size: u64, segments: &[u64]) -> ObjectVersion {
    let len = aligned(size);
    let arenas: Vec<Arena> = segments.iter().map(|id| grant_pieces(s, *id, len, len, 1)).collect();
    let at: Vec<(&Arena, u64)> = arenas.iter().map(|a| (a, 0)).collect();
    let version = commit(s, new_object(client, key, size, &at));
    for a in &arenas {
        return_arena(s, a);
    }
    version
}

// ================================================================ mount / unmount

#[test]
fn mounting_the_same_segment_twice_is_ok_and_keeps_one_segment_with_its_objects() {
    let mut s = MetaState::default();
    mount(&mut s, NODE_A, segment(1, 1 << 20, "host-a"));
    put_complete(&mut s, W1, "k", 1000, 1);
    let used = s.used_bytes();
    mount(&mut s, NODE_A, segment(1, 1 << 20, "host-a"));
    assert_eq!(s.segments().count(), 1);
    assert_eq!(s.capacity_bytes(), 1 << 20);
    assert_eq!(s.used_bytes(), used);
    assert!(s.object("k").is_some(), "a retried mount must not wipe the segment");
    assert!(s.client(NODE_A).is_some());
}

#[test]
fn mounting_a_taken_segment_id_by_another_client_or_with_another_size_is_segment_already_exists() {
    let mut s = MetaState::default();
    mount(&mut s, NODE_A, segment(1, 1 << 20, "host-a"));
    let e = refused(&mut s, mount_cmd(NODE_B, segment(1, 1 << 20, "host-b")));
    assert!(matches!(e, MetaError::SegmentAlreadyExists(_)), "{e:?}");
    assert!(s.client(NODE_B).is_none(), "a refused mount registers nobody");
    let e = refused(&mut s, mount_cmd(NODE_A, segment(1, 1 << 21, "host-a")));
    assert!(matches!(e, MetaError::SegmentAlreadyExists(_)), "{e:?}");
    assert_eq!(s.segment(SegmentId(1)).unwrap().owner, NODE_A);
}

#[test]
fn a_segment_with_id_zero_or_a_size_that_is_not_whole_pages_is_invalid_params() {
    let mut s = MetaState::default();
    let e = refused(&mut s, mount_cmd(NODE_A, segment(0, 1 << 20, "host-a")));
    assert!(is_invalid(&e) && e.to_string().contains("id 0"), "{e}");
    let e = refused(&mut s, mount_cmd(NODE_A, segment(1, (1 << 20) + 64, "host-a")));
    assert!(is_invalid(&e) && e.to_string().contains("multiple of 4096"), "{e}");
    assert!(e.to_string().contains(&(1u64 << 20).to_string()), "names the size to use: {e}");
    let e = refused(&mut s, mount_cmd(NODE_A, segment(1, 2048, "host-a")));
    assert!(is_invalid(&e), "{e}");
    let e = refused(&mut s, remount_cmd(NODE_A, vec![segment(1, 6000, "host-a")]));
    assert!(is_invalid(&e), "{e}");
    assert_eq!(s.segments().count(), 0);
}

#[test]
fn two_segment_ids_over_the_same_shared_memory_are_refused() {
    let mut s = MetaState::default();
    mount(&mut s, NODE_A, segment(1, 1 << 20, "host-a").shm("/dev/shm/seg-a"));
    let e = refused(&mut s, mount_cmd(NODE_B, segment(2, 1 << 20, "host-a").shm("/dev/shm/seg-a")));
    assert!(matches!(e, MetaError::SegmentAlreadyExists(_)) && e.to_string().contains("/dev/shm/seg-a"), "{e}");
    let e = refused(&mut s, mount_cmd(NODE_A, segment(2, 1 << 20, "host-a").shm("/dev/shm/seg-a")));
    assert!(matches!(e, MetaError::SegmentAlreadyExists(_)), "same owner, still one memory: {e}");
    // The same path on another host is other memory; a retried mount is fine.
    mount(&mut s, NODE_B, segment(2, 1 << 20, "host-b").shm("/dev/shm/seg-a"));
    mount(&mut s, NODE_A, segment(1, 1 << 20, "host-a").shm("/dev/shm/seg-a"));
    // A remount listing the same memory twice is refused as a whole.
    let twice = vec![segment(3, 1 << 20, "host-c").shm("/dev/shm/x"), segment(4, 1 << 20, "host-c").shm("/dev/shm/x")];
    let e = refused(&mut s, remount_cmd(NODE_C, twice));
    assert!(is_invalid(&e), "{e}");
    // A remount that replaces the client's own segment over the same file
    // (a restarted store node with a new segment id) is accepted.
    ok(&mut s, remount_cmd(NODE_A, vec![segment(5, 1 << 20, "host-a").shm("/dev/shm/seg-a")]));
    assert!(s.segment(SegmentId(1)).is_none());
    assert_eq!(s.segment(SegmentId(5)).map(|g| g.owner), Some(NODE_A));
    // ...but not over another client's.
    let e = refused(&mut s, remount_cmd(NODE_C, vec![segment(6, 1 << 20, "host-b").shm("/dev/shm/seg-a")]));
    assert!(matches!(e, MetaError::SegmentAlreadyExists(_)), "{e}");
}

#[test]
fn mount_registers_the_client() {
    let mut s = MetaState::default();
    mount(&mut s, NODE_A, segment(1, 1 << 20, "host-a"));
    let c = s.client(NODE_A).expect("registered");
    assert_eq!(c.registered_ms, s.now_ms());
    assert_eq!(c.credential, credential_of(NODE_A), "under the credential it mounted with");
    assert_eq!(s.clients().count(), 1);
}

#[test]
fn unmount_by_a_client_that_does_not_own_the_segment_is_illegal_client() {
    let mut s = three_node_cluster(1 << 20);
    let e = refused(&mut s, unmount_cmd(NODE_B, SegmentId(1)));
    assert!(matches!(e, MetaError::IllegalClient(_)), "{e:?}");
    assert!(s.segment(SegmentId(1)).is_some());
}

#[test]
fn unmount_is_idempotent_an_unknown_or_already_unmounted_segment_is_ok_and_changes_nothing() {
    let mut s = three_node_cluster(1 << 20);
    let before = s.state_hash();
    ok(&mut s, unmount_cmd(NODE_A, SegmentId(99)));
    assert_eq!(s.state_hash(), before, "unmounting an unknown segment changed the state");
    ok(&mut s, unmount_cmd(NODE_A, SegmentId(1)));
    let after_first = s.state_hash();
    ok(&mut s, unmount_cmd(NODE_A, SegmentId(1)));
    assert_eq!(s.state_hash(), after_first, "a second unmount changed the state");
    assert!(s.segment(SegmentId(1)).is_none());
}

#[test]
fn unmount_drops_the_replicas_on_that_segment_and_objects_left_with_none() {
    let mut s = MetaState::default();
    mount(&mut s, NODE_A, segment(1, 1 << 20, "host-a"));
    mount(&mut s, NODE_B, segment(2, 1 << 16, "host-b"));
    put_complete(&mut s, W1, "both", 1000, 2);
    put_on(&mut s, W1, "only-a", 2000, &[1]);
    put_on(&mut s, W1, "only-b", 3000, &[2]);
    ok(&mut s, unmount_cmd(NODE_A, SegmentId(1)));
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
    mount(&mut s, NODE_A, segment(1, 1 << 20, "host-a"));
    put_complete(&mut s, W1, "k", 1000, 1);
    ok(&mut s, unmount_cmd(NODE_A, SegmentId(1)));
    mount(&mut s, NODE_B, segment(1, 1 << 20, "host-b"));
    assert_eq!(s.used_bytes(), 0);
    assert_eq!(s.object_count(), 0);
    assert_eq!(s.segment(SegmentId(1)).unwrap().owner, NODE_B);
}

#[test]
fn a_remount_makes_the_clients_segments_exactly_the_list() {
    let mut s = MetaState::default();
    mount(&mut s, NODE_A, segment(1, 1 << 20, "host-a"));
    mount(&mut s, NODE_A, segment(2, 1 << 20, "host-a"));
    mount(&mut s, NODE_B, segment(9, 1 << 20, "host-b"));
    put_on(&mut s, W1, "on-1", 1000, &[1]);
    put_on(&mut s, W1, "on-2", 1000, &[2]);
    put_on(&mut s, W1, "on-9", 1000, &[9]);
    let segments = vec![segment(2, 1 << 20, "host-a"), segment(3, 1 << 18, "host-a")];
    ok(&mut s, remount_cmd(NODE_A, segments));
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
    ok(&mut s, remount_cmd(W1, vec![]));
    assert!(s.client(W1).is_some(), "a client with no segments is registered");
    assert_eq!(s.segments().count(), 0);
    mount(&mut s, NODE_A, segment(1, 1 << 20, "host-a"));
    mount(&mut s, NODE_A, segment(2, 1 << 20, "host-a"));
    ok(&mut s, remount_cmd(NODE_A, vec![]));
    assert_eq!(s.segments().count(), 0);
    assert!(s.client(NODE_A).is_some());
}

#[test]
fn a_remount_repeated_is_idempotent() {
    let mut s = MetaState::default();
    let segments = vec![segment(1, 1 << 20, "host-a"), segment(2, 1 << 20, "host-a")];
    ok(&mut s, remount_cmd(NODE_A, segments.clone()));
    put_complete(&mut s, W1, "k", 1000, 2);
    let mut control = s.clone();
    let ts = s.now_ms() + 1;
    control.apply(&Request { ts_ms: ts, cmd: Command::Noop });
    s.apply(&Request { ts_ms: ts, cmd: remount_cmd(NODE_A, segments) });
    assert_eq!(s.state_hash(), control.state_hash());
}

#[test]
fn a_refused_remount_changes_nothing() {
    let mut s = MetaState::default();
    mount(&mut s, NODE_A, segment(1, 1 << 20, "host-a"));
    mount(&mut s, NODE_A, segment(2, 1 << 20, "host-a"));
    mount(&mut s, NODE_B, segment(9, 1 << 20, "host-b"));
    put_complete(&mut s, W1, "k", 1000, 3);

    // A segment listed twice.
    let dup = vec![segment(2, 1 << 20, "host-a"), segment(5, 1 << 20, "host-a"), segment(5, 1 << 20, "host-a")];
    let e = refused(&mut s, remount_cmd(NODE_A, dup));
    assert!(is_invalid(&e), "{e:?}");
    // A segment owned by another client (listed after a valid one).
    let theirs = vec![segment(2, 1 << 20, "host-a"), segment(9, 1 << 20, "host-b")];
    let e = refused(&mut s, remount_cmd(NODE_A, theirs));
    assert!(matches!(e, MetaError::SegmentAlreadyExists(_)), "{e:?}");
    // Its own segment with another size.
    let resized = vec![segment(1, 1 << 21, "host-a")];
    let e = refused(&mut s, remount_cmd(NODE_A, resized));
    assert!(matches!(e, MetaError::SegmentAlreadyExists(_)), "{e:?}");
    // A malformed declaration at the end of the list.
    let bad = vec![segment(2, 1 << 20, "host-a"), segment(6, 0, "host-a")];
    let e = refused(&mut s, remount_cmd(NODE_A, bad));
    assert!(is_invalid(&e), "{e:?}");
    // A new client whose remount is refused is not registered either.
    let e = refused(&mut s, remount_cmd(NODE_C, vec![segment(9, 1 << 20, "host-c")]));
    assert!(matches!(e, MetaError::SegmentAlreadyExists(_)), "{e:?}");
    assert!(s.client(NODE_C).is_none());
    assert_eq!(s.object("k").unwrap().replicas.len(), 3);
}

// ================================================================ client expiry

#[test]
fn expiring_a_client_unmounts_its_segments_and_drops_objects_held_only_there() {
    let mut s = three_node_cluster(1 << 20);
    put_on(&mut s, W1, "only-a", 1000, &[1]);
    put_complete(&mut s, W1, "everywhere", 1000, 3);
    ok(&mut s, Command::ExpireClient { client: NODE_A });
    assert!(s.client(NODE_A).is_none());
    assert!(s.segment(SegmentId(1)).is_none());
    assert_eq!(s.client_segments(NODE_A).count(), 0);
    assert!(s.object("only-a").is_none());
    let kept = s.object("everywhere").expect("other replicas survive");
    let segs: BTreeSet<_> = kept.replicas.iter().map(|r| r.segment).collect();
    assert_eq!(segs, BTreeSet::from([SegmentId(2), SegmentId(3)]));
    assert_eq!(s.used_bytes(), 2 * aligned(1000));
    assert_no_shared_bytes(&s);
}

#[test]
fn expiring_a_writer_keeps_the_objects_it_wrote() {
    let mut s = three_node_cluster(1 << 20);
    ok(&mut s, remount_cmd(W1, vec![]));
    let v = put_complete(&mut s, W1, "written", 2000, 2);
    let object = s.object("written").cloned();
    let used = s.used_bytes();
    ok(&mut s, Command::ExpireClient { client: W1 });
    assert!(s.client(W1).is_none());
    assert_eq!(s.object("written").cloned(), object, "objects outlive their writer, replicas and all");
    assert_eq!(s.object("written").map(|o| o.version), Some(v));
    assert_eq!(s.used_bytes(), used);
    assert_eq!(s.segments().count(), 3, "a writer with no segments unmounts nothing");
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

#[test]
fn malformed_segments_are_invalid_params_and_change_nothing() {
    let mut s = three_node_cluster(1 << 20);
    let mut no_endpoint = segment(7, 1 << 20, "host-x");
    no_endpoint.endpoint.clear();
    let mut long_label = segment(7, 1 << 20, "host-x");
    long_label.zone = "z".repeat(513);
    let cases = vec![
        ("segment size 0", segment(7, 0, "host-x")),
        ("segment smaller than one aligned unit", segment(7, ALLOC_ALIGN_BYTES - 1, "host-x")),
        ("segment over 16 TiB", segment(7, (1 << 44) + 1, "host-x")),
        ("empty endpoint", no_endpoint),
        ("label over 512 bytes", long_label),
        // Validation comes first even for an id that is already mounted by this client.
        ("size 0 on a mounted id", segment(1, 0, "host-a")),
    ];
    for (what, spec) in cases {
        let e = refused(&mut s, mount_cmd(NODE_A, spec.clone()));
        assert!(is_invalid(&e), "mount, {what}: {e:?}");
        let e = refused(&mut s, remount_cmd(NODE_A, vec![spec]));
        assert!(is_invalid(&e), "remount, {what}: {e:?}");
    }
    assert_eq!(s.segments().count(), 3);
}

// ================================================================ re-attach

/// `ReattachSegments` of `specs` by `client`.
fn reattach(client: ClientId, specs: Vec<mooncake_raft_store::SegmentSpec>) -> Command {
    Command::ReattachSegments { client, credential: credential_of(client), segments: specs, tenant: None }
}

#[test]
fn a_restarted_node_reattaches_its_segment_with_its_objects_only_while_the_masters_know_it() {
    use mooncake_raft_store::testing::SegmentSpecExt;
    let mut s = three_node_cluster(1 << 20);
    put_on(&mut s, W1, "kept", 5000, &[1]);
    // The restarted node serves the same memory from another port: the
    // segment keeps its objects and takes the new endpoint.
    let moved = segment(1, 1 << 20, "host-a").endpoint("host-a:9999");
    ok(&mut s, reattach(NODE_A, vec![moved.clone()]));
    assert!(s.object("kept").is_some(), "the re-attach kept the object");
    assert_eq!(s.segment(SegmentId(1)).unwrap().spec.endpoint, "host-a:9999");
    ok(&mut s, reattach(NODE_A, vec![moved.clone()]));
    // Another size, or another owner's segment, is refused as a remount is.
    let e = refused(&mut s, reattach(NODE_A, vec![segment(1, 2 << 20, "host-a")]));
    assert!(matches!(e, MetaError::SegmentAlreadyExists(_)), "{e}");
    let e = refused(&mut s, reattach(NODE_A, vec![segment(2, 1 << 20, "host-a")]));
    assert!(matches!(e, MetaError::SegmentNotFound(_)), "{e}");
    // Once the masters forgot the segment (the node expired), re-attaching
    // it is refused and changes nothing: its bytes are nobody's objects.
    ok(&mut s, Command::ExpireClient { client: NODE_A });
    let e = refused(&mut s, reattach(NODE_A, vec![moved]));
    assert!(matches!(e, MetaError::SegmentNotFound(_)) && e.to_string().contains("new segment"), "{e}");
    assert!(s.segment(SegmentId(1)).is_none() && s.object("kept").is_none());
}
