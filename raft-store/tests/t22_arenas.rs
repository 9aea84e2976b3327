//! The one-commit put in the state machine: arenas granted, trimmed and
//! returned through the log; `PutCommit` accepting an object only inside a
//! live arena it names, on free bytes, once; upserts retiring the old bytes
//! until released; snapshot images carrying it all.

mod common;

use common::*;
use mooncake_raft_store::{
    Arena, ArenaId, Command, MetaError, MetaState, NewObject, ObjectVersion, PlacedReplica, Response, decode_image,
    encode_image,
};
use mooncake_segment::{Range, SegmentId};

const UNIT: u64 = 4096;

/// Grants an arena for objects of up to one unit (must succeed).
fn grant(s: &mut MetaState, segment: u64, len: u64, term: u64) -> Arena {
    grant_pieces(s, segment, len, UNIT, term)
}

fn grant_cmd(segment: u64, len: u64) -> Command {
    Command::ArenaGrant { segment: SegmentId(segment), len_bytes: len, unit_bytes: len.min(UNIT), term: 1 }
}

fn two_nodes() -> MetaState {
    let mut s = MetaState::default();
    mount(&mut s, NODE_A, segment(1, 64 * UNIT, "host-a"));
    mount(&mut s, NODE_B, segment(2, 64 * UNIT, "host-b"));
    s
}

// ================================================================ arenas

#[test]
fn an_arena_is_granted_on_free_bytes_outside_other_arenas_best_fit() {
    let mut s = two_nodes();
    let a = grant(&mut s, 1, 8 * UNIT, 3);
    assert_eq!((a.segment, a.extents.clone(), a.term), (SegmentId(1), vec![Range::new(0, 8 * UNIT)], 3));
    let b = grant(&mut s, 1, 8 * UNIT, 3);
    assert_eq!(b.extents, vec![Range::new(8 * UNIT, 8 * UNIT)], "never over another arena");
    assert_ne!(a.id, b.id);
    // Free a hole that exactly fits: best fit takes it over the big tail.
    return_arena(&mut s, &a);
    let c = grant(&mut s, 1, 8 * UNIT, 4);
    assert_eq!(c.extents, vec![Range::new(0, 8 * UNIT)]);
    assert!(c.id.0 > b.id.0, "arena ids are never reused");
    assert_eq!(s.used_bytes(), 0, "arenas are not used bytes");
}

#[test]
fn an_arena_never_covers_an_object_and_a_full_segment_grants_none() {
    let mut s = two_nodes();
    let a = grant(&mut s, 1, 16 * UNIT, 1);
    commit(&mut s, new_object(W1, "k", 4 * UNIT, &[(&a, 0)]));
    return_arena(&mut s, &a);
    // The object stays where it was; a new arena goes around it.
    assert!(s.object("k").is_some());
    let b = grant(&mut s, 1, 60 * UNIT, 1);
    assert_eq!(b.extents, vec![Range::new(4 * UNIT, 60 * UNIT)]);
    let e = refused(&mut s, grant_cmd(1, UNIT));
    assert!(matches!(e, MetaError::NoAvailableHandle(_)), "{e}");
    let e = refused(&mut s, grant_cmd(9, UNIT));
    assert!(matches!(e, MetaError::SegmentNotFound(_)), "{e}");
    let e = refused(&mut s, grant_cmd(2, 65 * UNIT));
    assert!(is_invalid(&e), "larger than the segment: {e}");
    let e = refused(&mut s, grant_cmd(2, 0));
    assert!(is_invalid(&e), "{e}");
    let e =
        refused(&mut s, Command::ArenaGrant { segment: SegmentId(2), len_bytes: UNIT, unit_bytes: 2 * UNIT, term: 1 });
    assert!(is_invalid(&e), "a piece larger than the arena: {e}");
}

#[test]
fn on_a_fragmented_segment_an_arena_gathers_the_largest_holes_that_fit_a_piece() {
    let mut s = two_nodes();
    // Fill segment 1 with 16 objects of 4 units, then free every other one:
    // eight holes of 4 units, none of 8.
    let a = grant(&mut s, 1, 64 * UNIT, 1);
    for i in 0..16 {
        commit(&mut s, new_object(W1, &format!("o{i}"), 4 * UNIT, &[(&a, i * 4 * UNIT)]));
    }
    return_arena(&mut s, &a);
    for i in (0..16).step_by(2) {
        let v = s.object(&format!("o{i}")).unwrap().version;
        ok(&mut s, Command::RemoveVersion { key: format!("o{i}"), version: v });
    }
    // Holes smaller than a piece are never taken; a piece may not exceed the arena.
    let e = refused(
        &mut s,
        Command::ArenaGrant { segment: SegmentId(1), len_bytes: 8 * UNIT, unit_bytes: 5 * UNIT, term: 2 },
    );
    assert!(matches!(e, MetaError::NoAvailableHandle(_)), "{e}");
    let b = grant_pieces(&mut s, 1, 10 * UNIT, 4 * UNIT, 2);
    assert_eq!(
        b.extents,
        vec![Range::new(0, 4 * UNIT), Range::new(8 * UNIT, 4 * UNIT), Range::new(16 * UNIT, 2 * UNIT)],
        "the largest holes, lowest offsets first, the last one cut to the length asked"
    );
    assert_eq!(b.len_bytes(), 10 * UNIT);
    // Objects land in any of its holes, never across two.
    commit(
        &mut s,
        NewObject {
            replicas: vec![PlacedReplica { segment: SegmentId(1), arena: b.id, range: Range::new(8 * UNIT, 4 * UNIT) }],
            ..new_object(W1, "in-hole", 4 * UNIT, &[(&b, 0)])
        },
    );
    let across = NewObject {
        replicas: vec![PlacedReplica { segment: SegmentId(1), arena: b.id, range: Range::new(2 * UNIT, 4 * UNIT) }],
        ..new_object(W1, "across", 4 * UNIT, &[(&b, 0)])
    };
    assert!(is_invalid(&refused(&mut s, Command::PutCommit(across))));
    // Trimming counts across the extents in order.
    ok(&mut s, Command::ArenaTrim { arena: b.id, keep_bytes: 6 * UNIT });
    assert_eq!(s.arena(b.id).unwrap().extents, vec![Range::new(0, 4 * UNIT), Range::new(8 * UNIT, 2 * UNIT)]);
    // The cut piece at 16 rejoins its hole (16..20), which best fit now takes.
    let c = grant_pieces(&mut s, 1, 2 * UNIT, 2 * UNIT, 2);
    assert_eq!(c.extents, vec![Range::new(16 * UNIT, 2 * UNIT)], "the trimmed part is grantable again");
    assert_no_shared_bytes(&s);
}

#[test]
fn trimming_an_arena_gives_its_tail_back_and_zero_ends_it() {
    let mut s = two_nodes();
    let a = grant(&mut s, 1, 64 * UNIT, 1);
    assert!(matches!(apply(&mut s, grant_cmd(1, UNIT)), Response::Err(MetaError::NoAvailableHandle(_))));
    ok(&mut s, Command::ArenaTrim { arena: a.id, keep_bytes: 10 * UNIT });
    assert_eq!(s.arena(a.id).map(|x| x.extents.clone()), Some(vec![Range::new(0, 10 * UNIT)]));
    let b = grant(&mut s, 1, 54 * UNIT, 1);
    assert_eq!(b.extents[0].offset, 10 * UNIT);
    ok(&mut s, Command::ArenaTrim { arena: a.id, keep_bytes: 0 });
    assert!(s.arena(a.id).is_none());
    ok(&mut s, Command::ArenaTrim { arena: a.id, keep_bytes: 5 }); // a retried trim of a gone arena
}

#[test]
fn a_segment_that_goes_takes_its_arenas_with_it() {
    let mut s = two_nodes();
    let a = grant(&mut s, 1, 8 * UNIT, 1);
    let b = grant(&mut s, 2, 8 * UNIT, 1);
    ok(&mut s, unmount_cmd(NODE_A, SegmentId(1)));
    assert!(s.arena(a.id).is_none());
    assert!(s.arena(b.id).is_some());
    let late = new_object(W1, "late", UNIT, &[(&a, 0)]);
    let e = refused(&mut s, Command::PutCommit(late));
    assert!(matches!(e, MetaError::PutExpired(_)), "{e}");
}

/// After a failover the new leader cuts the bytes of objects it evicted
/// from an earlier term's arena out of it: a new arena can take them at
/// once, and the earlier term can no longer commit there.
#[test]
fn cutting_freed_bytes_out_of_an_arena_lets_a_new_arena_take_them() {
    let mut s = two_nodes();
    let old = grant(&mut s, 1, 64 * UNIT, 1);
    let a = commit(&mut s, new_object(W1, "a", 4 * UNIT, &[(&old, 0)]));
    let b = commit(&mut s, new_object(W1, "b", 4 * UNIT, &[(&old, 4 * UNIT)]));
    let c = commit(&mut s, new_object(W1, "c", 4 * UNIT, &[(&old, 8 * UNIT)]));
    assert!(matches!(apply(&mut s, grant_cmd(1, UNIT)), Response::Err(MetaError::NoAvailableHandle(_))));
    ok(&mut s, Command::RemoveVersion { key: "b".into(), version: b });
    let freed = Range::new(4 * UNIT, 4 * UNIT);
    let cut = Command::ArenaCut { arena: old.id, ranges: vec![freed] };
    assert_eq!(apply(&mut s, cut.clone()), Response::Removed { count: 1 });
    let left = s.arena(old.id).map(|a| a.extents.clone());
    assert_eq!(left, Some(vec![Range::new(0, 4 * UNIT), Range::new(8 * UNIT, 56 * UNIT)]));
    assert_eq!(s.arena_holding(SegmentId(1), Range::new(8 * UNIT, UNIT)).map(|a| a.id), Some(old.id));
    assert!(s.arena_holding(SegmentId(1), freed).is_none());
    assert_eq!(apply(&mut s, cut), Response::Removed { count: 0 }, "a retried cut changes nothing");
    // The earlier term's late commit of those bytes is refused.
    let e = refused(&mut s, Command::PutCommit(new_object(W1, "late", 4 * UNIT, &[(&old, 4 * UNIT)])));
    assert!(is_invalid(&e), "{e}");
    let new = grant_pieces(&mut s, 1, 4 * UNIT, 4 * UNIT, 2);
    assert_eq!(new.extents, vec![freed], "the cut bytes are grantable");
    commit(&mut s, new_object(W1, "d", 4 * UNIT, &[(&new, 0)]));
    assert_no_shared_bytes(&s);
    // Cutting everything left ends the arena.
    ok(&mut s, Command::RemoveVersion { key: "a".into(), version: a });
    let rest = vec![Range::new(0, 4 * UNIT), Range::new(12 * UNIT, 52 * UNIT)];
    ok(&mut s, Command::RemoveVersion { key: "c".into(), version: c });
    let all = vec![rest[0], Range::new(8 * UNIT, 4 * UNIT), rest[1]];
    assert_eq!(apply(&mut s, Command::ArenaCut { arena: old.id, ranges: all }), Response::Removed { count: 3 });
    assert!(s.arena(old.id).is_none());
    assert_eq!(apply(&mut s, Command::ArenaCut { arena: old.id, ranges: rest }), Response::Removed { count: 0 });
}

#[test]
fn a_cut_of_an_objects_bytes_or_across_an_edge_is_refused_and_changes_nothing() {
    let mut s = two_nodes();
    let a = grant(&mut s, 1, 16 * UNIT, 1);
    let _other = grant(&mut s, 1, 16 * UNIT, 1);
    commit(&mut s, new_object(W1, "k", 2 * UNIT, &[(&a, 0)]));
    let before = s.arena(a.id).cloned();
    let cases = [
        (vec![Range::new(0, UNIT)], "holds an object"),
        (vec![Range::new(15 * UNIT, 2 * UNIT)], "crosses"),
        (vec![Range::new(4 * UNIT, 2 * UNIT), Range::new(5 * UNIT, 2 * UNIT)], "overlaps"),
        (vec![Range::new(4 * UNIT, 0)], "empty"),
        (vec![Range::new(4 * UNIT + 1, UNIT)], "unaligned"),
        (vec![Range::new(u64::MAX - UNIT + 1, UNIT)], "overflowing"),
        (Vec::new(), "give 1..="),
        // A good range with a bad one: nothing is cut.
        (vec![Range::new(8 * UNIT, UNIT), Range::new(UNIT, UNIT)], "holds an object"),
    ];
    for (ranges, why) in cases {
        let e = refused(&mut s, Command::ArenaCut { arena: a.id, ranges: ranges.clone() });
        assert!(is_invalid(&e) && e.to_string().contains(why), "{ranges:?}: {e}");
        assert_eq!(s.arena(a.id).cloned(), before, "{ranges:?} changed the arena");
    }
    assert_no_shared_bytes(&s);
}

// ================================================================ put commit

#[test]
fn a_commit_inside_arenas_records_a_complete_object_with_every_replica() {
    let mut s = two_nodes();
    let a = grant(&mut s, 1, 16 * UNIT, 1);
    let b = grant(&mut s, 2, 16 * UNIT, 1);
    let v = commit(&mut s, new_object(W1, "k", 3000, &[(&a, UNIT), (&b, 0)]));
    let o = s.object("k").expect("committed");
    assert_eq!(o.version, v);
    assert_eq!(o.checksum, CHECKSUM);
    assert_eq!(o.replicas.len(), 2);
    assert_eq!(o.replicas[0].range, Range::new(UNIT, aligned(3000)));
    assert_eq!(s.used_bytes(), 2 * aligned(3000));
    assert_no_shared_bytes(&s);
    // Versions keep increasing with every commit.
    let v2 = commit(&mut s, new_object(W1, "k2", 64, &[(&a, 2 * UNIT)]));
    assert!(v2 > v);
}

#[test]
fn a_retried_commit_answers_the_same_version_and_allocates_nothing() {
    let mut s = two_nodes();
    let a = grant(&mut s, 1, 16 * UNIT, 1);
    let new = new_object(W1, "k", 1000, &[(&a, 0)]);
    let v = commit(&mut s, new.clone());
    let used = s.used_bytes();
    assert_eq!(commit(&mut s, new.clone()), v);
    assert_eq!(s.used_bytes(), used);
    // A different checksum or another writer is another put of an existing key.
    let e = refused(&mut s, Command::PutCommit(NewObject { checksum: 1, ..new.clone() }));
    assert_eq!(e, MetaError::ObjectAlreadyExists("k".into()));
    let e = refused(&mut s, Command::PutCommit(NewObject { client: W2, ..new }));
    assert_eq!(e, MetaError::ObjectAlreadyExists("k".into()));
}

#[test]
fn a_range_is_committed_at_most_once() {
    let mut s = two_nodes();
    let a = grant(&mut s, 1, 16 * UNIT, 1);
    commit(&mut s, new_object(W1, "first", 2 * UNIT, &[(&a, 0)]));
    // Overlapping the first object by one unit: refused, nothing changes.
    let e = refused(&mut s, Command::PutCommit(new_object(W1, "second", 2 * UNIT, &[(&a, UNIT)])));
    assert!(matches!(e, MetaError::PutExpired(_)), "{e}");
    assert!(s.object("second").is_none());
    assert_no_shared_bytes(&s);
}

#[test]
fn a_commit_outside_its_arena_or_in_a_returned_one_is_refused_and_changes_nothing() {
    let mut s = two_nodes();
    let a = grant(&mut s, 1, 4 * UNIT, 1);
    let b = grant(&mut s, 2, 4 * UNIT, 1);
    let e = refused(&mut s, Command::PutCommit(new_object(W1, "past-end", 2 * UNIT, &[(&a, 3 * UNIT)])));
    assert!(is_invalid(&e), "{e}");
    let mut wrong_segment = new_object(W1, "wrong", UNIT, &[(&a, 0)]);
    wrong_segment.replicas[0].segment = SegmentId(2);
    let e = refused(&mut s, Command::PutCommit(wrong_segment));
    assert!(is_invalid(&e), "the arena is on another segment: {e}");
    return_arena(&mut s, &b);
    let e = refused(&mut s, Command::PutCommit(new_object(W1, "late", UNIT, &[(&a, 0), (&b, 0)])));
    assert!(matches!(e, MetaError::PutExpired(_)) && e.to_string().contains("retry"), "{e}");
    assert!(s.object("late").is_none(), "all or nothing: no replica was recorded");
}

#[test]
fn malformed_commits_are_invalid_params() {
    let mut s = two_nodes();
    let a = grant(&mut s, 1, 16 * UNIT, 1);
    let b = grant(&mut s, 2, 16 * UNIT, 1);
    let good = new_object(W1, "k", 1000, &[(&a, 0), (&b, 0)]);
    let cases = [
        ("size 0", NewObject { size_bytes: 0, ..good.clone() }),
        ("empty key", NewObject { key: String::new(), ..good.clone() }),
        ("no replica", NewObject { replicas: vec![], ..good.clone() }),
        ("range length differs from the size", NewObject { size_bytes: 5000, ..good.clone() }),
        ("two replicas on one segment", new_object(W1, "k", 1000, &[(&a, 0), (&a, UNIT)])),
    ];
    for (what, new) in cases {
        let e = refused(&mut s, Command::PutCommit(new));
        assert!(is_invalid(&e), "{what}: {e}");
    }
    let mut unaligned = good;
    unaligned.replicas[0].range.offset += 1;
    assert!(is_invalid(&refused(&mut s, Command::PutCommit(unaligned))));
}

// ================================================================ upsert

#[test]
fn an_upsert_replaces_the_object_and_holds_the_old_bytes_until_released() {
    let mut s = two_nodes();
    let a = grant(&mut s, 1, 16 * UNIT, 1);
    let v1 = commit(&mut s, new_object(W1, "k", UNIT, &[(&a, 0)]));
    let e = refused(&mut s, Command::PutCommit(new_object(W1, "k", UNIT, &[(&a, UNIT)])));
    assert_eq!(e, MetaError::ObjectAlreadyExists("k".into()), "without upsert the first writer wins");
    let v2 = commit(&mut s, NewObject { upsert: true, checksum: 2, ..new_object(W1, "k", UNIT, &[(&a, UNIT)]) });
    assert!(v2 > v1);
    let o = s.object("k").unwrap();
    assert_eq!((o.version, o.checksum), (v2, 2));
    let retired: Vec<_> = s.retired().map(|r| (r.version, r.key.clone())).collect();
    assert_eq!(retired, vec![(v1, "k".to_string())]);
    assert_eq!(s.used_bytes(), 2 * UNIT, "the old bytes are held: a reader may still copy them");
    assert_no_shared_bytes(&s);
    let released = apply(&mut s, Command::ReleaseRetired { versions: vec![v1, ObjectVersion(999)] });
    assert_eq!(released, Response::Removed { count: 1 });
    assert_eq!(s.used_bytes(), UNIT);
    // An upsert of a key that does not exist is a plain put.
    commit(&mut s, NewObject { upsert: true, ..new_object(W1, "fresh", UNIT, &[(&a, 4 * UNIT)]) });
    assert_eq!(s.retired().count(), 0);
}

#[test]
fn an_upsert_retried_after_it_was_applied_changes_nothing() {
    let mut s = two_nodes();
    let a = grant(&mut s, 1, 16 * UNIT, 1);
    commit(&mut s, new_object(W1, "k", UNIT, &[(&a, 0)]));
    let up = NewObject { upsert: true, checksum: 2, ..new_object(W1, "k", UNIT, &[(&a, UNIT)]) };
    let v2 = commit(&mut s, up.clone());
    let hash = s.state_hash();
    assert_eq!(commit(&mut s, up), v2);
    assert_eq!(s.state_hash(), hash);
}

// ================================================================ images

#[test]
fn arenas_and_retired_objects_survive_a_snapshot_image() {
    let mut s = two_nodes();
    let a = grant(&mut s, 1, 16 * UNIT, 7);
    commit(&mut s, new_object(W1, "k", UNIT, &[(&a, 0)]));
    commit(&mut s, NewObject { upsert: true, ..new_object(W1, "k", UNIT, &[(&a, UNIT)]) });
    let data = encode_image(&s).expect("encode");
    let mut back = decode_image(&data).expect("decode");
    assert_eq!(back.state_hash(), s.state_hash());
    assert_eq!(back.arena(a.id), s.arena(a.id));
    // The rebuilt state behaves the same: the next grant and commit match.
    let g1 = apply(&mut s, grant_cmd(1, UNIT));
    let g2 = apply(&mut back, grant_cmd(1, UNIT));
    assert_eq!(g1, g2);
    let e = refused(&mut back, Command::PutCommit(new_object(W1, "x", UNIT, &[(&a, UNIT)])));
    assert!(matches!(e, MetaError::PutExpired(_)), "the retired bytes are still held after a rebuild: {e}");
}

#[test]
fn an_image_of_an_unknown_schema_version_is_refused() {
    let mut s = two_nodes();
    let a = grant(&mut s, 1, 16 * UNIT, 1);
    commit(&mut s, new_object(W1, "k", UNIT, &[(&a, 0)]));
    let mut data = encode_image(&s).expect("encode");
    assert_eq!(decode_image(&data).expect("decode").state_hash(), s.state_hash());
    data[..4].copy_from_slice(&99u32.to_le_bytes());
    let e = decode_image(&data).expect_err("an unknown version is refused");
    assert!(e.to_string().contains("99"), "{e}");
}

// ================================================================ random runs

/// Random grants, commits (good and bad), returns, trims, upserts, removes
/// and releases: two objects never share a byte, accounting stays exact.
#[test]
fn random_arena_runs_never_let_two_objects_share_a_byte() {
    for seed in 1..40u64 {
        let mut rng = Rng(seed);
        let mut s = two_nodes();
        let mut arenas: Vec<Arena> = Vec::new();
        for i in 0..400 {
            let cmd = match rng.below(10) {
                0 => Command::ArenaGrant {
                    segment: SegmentId(1 + rng.below(2)),
                    len_bytes: (1 + rng.below(8)) * UNIT,
                    unit_bytes: (1 + rng.below(2)) * UNIT / 2,
                    term: 1,
                },
                1 => match rng.pick(&arenas) {
                    Some(a) => Command::ArenaReturn { arenas: vec![a.id] },
                    None => Command::Noop,
                },
                2 => match rng.pick(&arenas) {
                    Some(a) => Command::ArenaTrim { arena: a.id, keep_bytes: rng.below(a.len_bytes() + 1) },
                    None => Command::Noop,
                },
                3 => match s.objects().next().map(|o| (o.key.clone(), o.version)) {
                    Some((key, version)) => Command::RemoveVersion { key, version },
                    None => Command::Noop,
                },
                4 => Command::ReleaseRetired { versions: s.retired().map(|r| r.version).collect() },
                _ => match rng.pick(&arenas) {
                    Some(a) => {
                        let size = 1 + rng.below(3 * UNIT);
                        let off = rng.below(a.extents[0].len / 64 + 1) * 64;
                        let key = format!("k{}", rng.below(30));
                        NewObject { upsert: rng.below(3) == 0, ..new_object(W1, &key, size, &[(a, off)]) }
                            .into_commit(i)
                    }
                    None => Command::Noop,
                },
            };
            if let Response::ArenaGranted(a) = apply(&mut s, cmd) {
                arenas.push(a);
            }
            arenas.retain(|a| s.arena(a.id).is_some());
            assert_no_shared_bytes(&s);
        }
        let rebuilt = MetaState::from_image(s.to_image()).expect("rebuild");
        assert_eq!(rebuilt.state_hash(), s.state_hash(), "seed {seed}");
    }
}

trait IntoCommit {
    fn into_commit(self, salt: u64) -> Command;
}

impl IntoCommit for NewObject {
    /// A commit with a checksum that differs per attempt.
    fn into_commit(mut self, salt: u64) -> Command {
        self.checksum = salt as u32;
        Command::PutCommit(self)
    }
}

#[test]
fn arena_ids_display_for_operators() {
    assert_eq!(ArenaId(7).to_string(), "arena-7");
}
