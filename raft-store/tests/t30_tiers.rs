//! Tiers in the state machine (docs/TIERS.md): puts land in memory only;
//! store nodes add copies (`AddReplica`) on disk in whole blocks; memory
//! replicas are dropped once a readable disk copy exists; an expired store
//! node's disk segment stays detached with its objects until the same
//! process identity mounts it again or the grace ends it; corrupt disk
//! ranges drop the replicas on them.
// Test support: a failed unwrap or expect is the test failing (the
// workspace denies them in library code: Cargo.toml [workspace.lints]).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use mooncake_raft_store::{
    Arena, Command, CredentialHash, DISK_ALIGN_BYTES, MetaError, MetaState, ObjectVersion, PlacedReplica, Response,
    SegmentSpec, Tier, VersionedKey, decode_image, encode_image,
};
use mooncake_segment::{ClientId, Range, SegmentId};

const OWNER: CredentialHash = CredentialHash([1; 32]);
const INTRUDER: CredentialHash = CredentialHash([2; 32]);
const MEM: u64 = 1;
const DISK: u64 = 9;
const MIB: u64 = 1 << 20;

fn mount_as(s: &mut MetaState, client: ClientId, credential: CredentialHash, spec: SegmentSpec) -> Response {
    apply(s, Command::MountSegment { client, credential, segment: spec })
}

/// An arena of `len` bytes on `segment`, in one piece.
fn grant(s: &mut MetaState, segment: u64, len: u64) -> Arena {
    grant_pieces(s, segment, len, len, 1)
}

/// `key` of `size` bytes, committed by `W1` at `offset` in `arena`.
fn put(s: &mut MetaState, key: &str, size: u64, arena: &Arena, offset: u64) -> ObjectVersion {
    commit(s, new_object(W1, key, size, &[(arena, offset)]))
}

fn add_cmd(key: &str, version: ObjectVersion, arena: &Arena, offset: u64, len: u64) -> Command {
    let range = Range::new(arena.extents[0].offset + offset, len);
    Command::AddReplica {
        key: key.into(),
        version,
        replica: PlacedReplica { segment: arena.segment, arena: arena.id, range },
    }
}

fn vkey(key: &str, version: ObjectVersion) -> VersionedKey {
    VersionedKey { key: key.into(), version }
}

fn tiers_of(s: &MetaState, key: &str) -> Vec<Tier> {
    let o = s.object(key).unwrap_or_else(|| panic!("{key} is gone"));
    o.replicas.iter().map(|r| s.replica_tier(r).expect("known segment")).collect()
}

/// A store node with a memory and a disk segment on one host, and one
/// object of 100 bytes in memory.
fn node_with_object() -> (MetaState, ObjectVersion) {
    let mut s = MetaState::default();
    assert_eq!(mount_as(&mut s, NODE_A, OWNER, segment(MEM, MIB, "host-a")), Response::Ok);
    assert_eq!(mount_as(&mut s, NODE_A, OWNER, segment(DISK, MIB, "host-a").ssd()), Response::Ok);
    let arena = grant(&mut s, MEM, 64 * 1024);
    let v = put(&mut s, "k", 100, &arena, 0);
    (s, v)
}

#[test]
fn a_disk_copy_is_added_in_whole_blocks_and_puts_never_land_on_disk() {
    let (mut s, v) = node_with_object();
    let disk_arena = grant(&mut s, DISK, 5_000);
    assert_eq!(disk_arena.len_bytes(), 2 * DISK_ALIGN_BYTES, "a disk arena is whole blocks");

    // Not a whole block, not the object's size, another version: refused.
    assert!(is_invalid(&refused(&mut s, add_cmd("k", v, &disk_arena, 0, aligned(100)))));
    assert!(is_invalid(&refused(&mut s, add_cmd("k", v, &disk_arena, 64, DISK_ALIGN_BYTES))));
    let stale = ObjectVersion(v.0 + 100);
    assert!(matches!(refused(&mut s, add_cmd("k", stale, &disk_arena, 0, 4096)), MetaError::ObjectNotFound(_)));
    assert!(matches!(refused(&mut s, add_cmd("gone", v, &disk_arena, 0, 4096)), MetaError::ObjectNotFound(_)));

    ok(&mut s, add_cmd("k", v, &disk_arena, 0, DISK_ALIGN_BYTES));
    assert_eq!(tiers_of(&s, "k"), vec![Tier::Dram, Tier::Ssd]);
    assert_eq!(s.tier_used_bytes(Tier::Ssd), DISK_ALIGN_BYTES);
    // A second copy on the same segment, or on bytes now taken: refused.
    assert!(matches!(refused(&mut s, add_cmd("k", v, &disk_arena, 4096, 4096)), MetaError::ObjectAlreadyExists(_)));
    s.check_invariants().expect("invariants hold");

    // A put naming the disk arena is refused.
    let on_disk = new_object(W1, "d", 4096, &[(&disk_arena, 4096)]);
    let e = refused(&mut s, Command::PutCommit(on_disk));
    assert!(is_invalid(&e) && e.to_string().contains("puts are placed in memory"), "{e}");
    assert!(s.object("d").is_none());
}

#[test]
fn memory_replicas_are_dropped_only_where_a_readable_copy_is_left() {
    let (mut s, v) = node_with_object();
    // No disk copy yet: dropping the memory replica would lose the object.
    assert_eq!(
        apply(&mut s, Command::DropTierReplicas { victims: vec![vkey("k", v)], tier: Tier::Dram }),
        Response::Removed { count: 0 }
    );
    assert_eq!(tiers_of(&s, "k"), vec![Tier::Dram]);

    let disk_arena = grant(&mut s, DISK, 4096);
    ok(&mut s, add_cmd("k", v, &disk_arena, 0, 4096));
    let used = s.tier_used_bytes(Tier::Dram);
    assert_eq!(
        apply(&mut s, Command::DropTierReplicas { victims: vec![vkey("k", v)], tier: Tier::Dram }),
        Response::Removed { count: 1 }
    );
    assert_eq!(tiers_of(&s, "k"), vec![Tier::Ssd], "the object lives on, on disk");
    assert_eq!(s.tier_used_bytes(Tier::Dram), used - aligned(100), "its memory is free again");
    // The last replica is never dropped this way.
    assert_eq!(
        apply(&mut s, Command::DropTierReplicas { victims: vec![vkey("k", v)], tier: Tier::Ssd }),
        Response::Removed { count: 0 }
    );
    s.check_invariants().expect("invariants hold");
}

/// Why: a hot key's extra memory replica is dropped when the key cools;
/// the drop must never take the object's last memory replica (a disk copy
/// does not count: reads would slow to disk) nor touch a newer version.
#[test]
fn one_replica_is_dropped_only_while_another_memory_replica_stays() {
    let (mut s, v) = node_with_object();
    const MEM2: u64 = 2;
    assert_eq!(mount_as(&mut s, NODE_B, OWNER, segment(MEM2, MIB, "host-b")), Response::Ok);
    let drop_on = |seg: u64, version| Command::DropReplica { victim: vkey("k", version), segment: SegmentId(seg) };
    let disk_arena = grant(&mut s, DISK, 4096);
    ok(&mut s, add_cmd("k", v, &disk_arena, 0, 4096));
    assert_eq!(apply(&mut s, drop_on(MEM, v)), Response::Removed { count: 0 }, "only a disk copy would stay");
    assert_eq!(tiers_of(&s, "k"), vec![Tier::Dram, Tier::Ssd]);

    let extra = grant(&mut s, MEM2, 64 * 1024);
    ok(&mut s, add_cmd("k", v, &extra, 0, aligned(100)));
    let used = s.tier_used_bytes(Tier::Dram);
    assert_eq!(apply(&mut s, drop_on(MEM2, ObjectVersion(v.0 + 1))), Response::Removed { count: 0 }, "another version");
    assert_eq!(apply(&mut s, drop_on(MEM2, v)), Response::Removed { count: 1 });
    let on: Vec<SegmentId> = s.object("k").expect("kept").replicas.iter().map(|r| r.segment).collect();
    assert_eq!(on, vec![SegmentId(MEM), SegmentId(DISK)], "the first memory replica and the disk copy stay");
    assert_eq!(s.tier_used_bytes(Tier::Dram), used - aligned(100), "its bytes are free again");
    assert_eq!(apply(&mut s, drop_on(MEM2, v)), Response::Removed { count: 0 }, "a repeat finds nothing");
    s.check_invariants().expect("invariants hold");
}

#[test]
fn an_expired_store_nodes_disk_stays_detached_until_the_same_identity_mounts_it_again() {
    let (mut s, v) = node_with_object();
    let disk_arena = grant(&mut s, DISK, 4096);
    ok(&mut s, add_cmd("k", v, &disk_arena, 0, 4096));

    ok(&mut s, Command::ExpireClientKeepDisk { client: NODE_A });
    assert!(s.segment(SegmentId(MEM)).is_none(), "its memory segment is gone");
    let detached = s.segment(SegmentId(DISK)).expect("its disk segment is kept");
    assert!(!detached.is_attached());
    assert_eq!(tiers_of(&s, "k"), vec![Tier::Ssd], "the object keeps its disk copy");
    assert!(!s.is_readable(&s.object("k").expect("kept").replicas[0]), "but it cannot be read");
    assert!(s.arenas().all(|a| a.segment != SegmentId(DISK)), "its arenas ended");
    assert_eq!(s.tier_capacity_bytes(Tier::Ssd), 0, "a detached disk is not counted");
    let grant_on_detached =
        Command::ArenaGrant { segment: SegmentId(DISK), len_bytes: 4096, unit_bytes: 4096, term: 2 };
    refused(&mut s, grant_on_detached);
    s.check_invariants().expect("invariants hold while detached");

    // Snapshots carry the detached segment.
    let restored = decode_image(&encode_image(&s).expect("encode")).expect("decode");
    assert_eq!(restored.state_hash(), s.state_hash());
    assert!(!restored.segment(SegmentId(DISK)).expect("kept").is_attached());

    // Another process claiming the id (another credential) cannot take it.
    let moved = segment(DISK, MIB, "host-a").ssd().endpoint("host-a:7100");
    let intruder = Command::MountSegment { client: NODE_A, credential: INTRUDER, segment: moved.clone() };
    assert!(matches!(refused(&mut s, intruder), MetaError::PermissionDenied(_)));
    // The restarted store node (same id and credential) mounts it again, from its new endpoint.
    assert_eq!(mount_as(&mut s, NODE_A, OWNER, moved), Response::Ok);
    let back = s.segment(SegmentId(DISK)).expect("mounted");
    assert!(back.is_attached());
    assert_eq!(back.spec.endpoint, "host-a:7100");
    assert!(s.is_readable(&s.object("k").expect("kept").replicas[0]));
    s.check_invariants().expect("invariants hold");
}

#[test]
fn the_grace_ends_a_detached_disk_and_the_plain_expiry_keeps_nothing() {
    let (mut s, v) = node_with_object();
    let disk_arena = grant(&mut s, DISK, 4096);
    ok(&mut s, add_cmd("k", v, &disk_arena, 0, 4096));
    let mut plain = s.clone();

    // An attached segment is not ended by DropDetached.
    assert_eq!(
        apply(&mut s, Command::DropDetached { segments: vec![SegmentId(DISK)] }),
        Response::Removed { count: 0 }
    );
    ok(&mut s, Command::ExpireClientKeepDisk { client: NODE_A });
    assert_eq!(
        apply(&mut s, Command::DropDetached { segments: vec![SegmentId(DISK)] }),
        Response::Removed { count: 1 }
    );
    assert!(s.segment(SegmentId(DISK)).is_none());
    assert!(s.object("k").is_none(), "its last replica went with it");
    s.check_invariants().expect("invariants hold");

    ok(&mut plain, Command::ExpireClient { client: NODE_A });
    assert_eq!(plain.segments().count(), 0, "ExpireClient drops disk segments too");
    assert!(plain.object("k").is_none());
}

#[test]
fn corrupt_ranges_drop_the_replicas_on_them_for_the_owner_only() {
    let (mut s, v) = node_with_object();
    let mem_arena = grant(&mut s, MEM, 64 * 1024);
    let w = put(&mut s, "only-disk", 5_000, &mem_arena, 0);
    let disk_arena = grant(&mut s, DISK, 4 * 4096);
    ok(&mut s, add_cmd("k", v, &disk_arena, 0, 4096));
    ok(&mut s, add_cmd("only-disk", w, &disk_arena, 4096, 2 * 4096));
    assert_eq!(
        apply(&mut s, Command::DropTierReplicas { victims: vec![vkey("only-disk", w)], tier: Tier::Dram }),
        Response::Removed { count: 1 }
    );
    let base = disk_arena.extents[0].offset;
    let corrupt = |client, credential| Command::DropCorrupt {
        client,
        credential,
        segment: SegmentId(DISK),
        ranges: vec![Range::new(base + 4096 + 4096, 4096), Range::new(base, 4096)],
    };
    assert!(matches!(refused(&mut s, corrupt(NODE_A, INTRUDER)), MetaError::PermissionDenied(_)));
    assert!(matches!(refused(&mut s, corrupt(NODE_B, OWNER)), MetaError::IllegalClient(_)));
    assert_eq!(apply(&mut s, corrupt(NODE_A, OWNER)), Response::Removed { count: 2 });
    assert_eq!(tiers_of(&s, "k"), vec![Tier::Dram], "the memory replica stays");
    assert!(s.object("only-disk").is_none(), "an object whose only replica was corrupt is gone");
    assert_eq!(s.tier_used_bytes(Tier::Ssd), 0);
    s.check_invariants().expect("invariants hold");
}
