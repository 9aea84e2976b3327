//! Builders and checks shared by the state-machine tests: segments, puts
//! made the way the master makes them (an arena, a `PutCommit`, the arena
//! returned), applying commands at a steady clock, refusals that must
//! change nothing, and the no-shared-bytes invariant. The seeded PRNG and
//! the random command generator are the crate's (`testing`).
// Test support: a failed unwrap or expect is the test failing (the
// workspace denies them in library code: Cargo.toml [workspace.lints]).
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(dead_code)] // each test file uses its own subset

use std::collections::{BTreeMap, BTreeSet};

use mooncake_raft_store::codec;
#[allow(unused_imports)] // as `dead_code` above: each test file uses its own subset
pub use mooncake_raft_store::testing::{
    Rng, SegmentSpecExt, credential_of, mount_cmd, put_object, random_command, remount_cmd, segment, unmount_cmd,
};
use mooncake_raft_store::{
    Arena, Command, MetaError, MetaState, NewObject, ObjectVersion, Pin, PlacedReplica, Request, Response, SegmentSpec,
};
use mooncake_segment::{ALLOC_ALIGN_BYTES, ClientId, Range, SegmentId};

/// Writers (inference servers) and store nodes.
pub const W1: ClientId = ClientId(1);
pub const W2: ClientId = ClientId(2);
pub const NODE_A: ClientId = ClientId(101);
pub const NODE_B: ClientId = ClientId(102);
pub const NODE_C: ClientId = ClientId(103);

/// Applies `cmd` one millisecond after the state's current time.
pub fn apply(state: &mut MetaState, cmd: Command) -> Response {
    let ts_ms = state.now_ms() + 1;
    state.apply(&Request { ts_ms, cmd })
}

/// Applies `cmd` and asserts it answered `Ok`.
pub fn ok(state: &mut MetaState, cmd: Command) {
    let shown = format!("{cmd:?}");
    let resp = apply(state, cmd);
    assert_eq!(resp, Response::Ok, "{shown}");
}

/// Mounts `spec` for `client`, asserting success.
pub fn mount(state: &mut MetaState, client: ClientId, spec: SegmentSpec) {
    ok(state, mount_cmd(client, spec));
}

/// `n` rounded up to the allocation alignment: what a replica really holds.
pub fn aligned(n: u64) -> u64 {
    n.next_multiple_of(ALLOC_ALIGN_BYTES)
}

/// The snapshot bytes of a state.
pub fn image_bytes(state: &MetaState) -> Vec<u8> {
    codec::encode("state image", &state.to_image()).expect("encode image")
}

/// Three segments of `size` bytes on three hosts, owned by three store nodes.
pub fn three_node_cluster(size: u64) -> MetaState {
    let mut s = MetaState::default();
    mount(&mut s, NODE_A, segment(1, size, "host-a"));
    mount(&mut s, NODE_B, segment(2, size, "host-b"));
    mount(&mut s, NODE_C, segment(3, size, "host-c"));
    s
}

/// Asserts `cmd` is refused and changes nothing. Checked twice: at the
/// state's own time the state hash and image are unchanged; at a later time
/// the result is byte-identical to a `Noop` at that time (only the clock moved).
pub fn refused(state: &mut MetaState, cmd: Command) -> MetaError {
    let before_hash = state.state_hash();
    let before_image = image_bytes(state);
    let mut same_time = state.clone();
    let first = same_time.apply(&Request { ts_ms: state.now_ms(), cmd: cmd.clone() });
    assert!(first.err().is_some(), "{cmd:?} was not refused: {first:?}");
    assert_eq!(same_time.state_hash(), before_hash, "refused {cmd:?} changed the state hash");
    assert_eq!(image_bytes(&same_time), before_image, "refused {cmd:?} changed the state image");

    let later = state.now_ms() + 5;
    let mut control = state.clone();
    control.apply(&Request { ts_ms: later, cmd: Command::Noop });
    let resp = state.apply(&Request { ts_ms: later, cmd: cmd.clone() });
    assert_eq!(resp, first, "the same refusal at another time answered differently");
    assert_eq!(state.state_hash(), before_hash, "refused {cmd:?} changed the state hash");
    assert_eq!(state.state_hash(), control.state_hash(), "refused {cmd:?} changed more than the clock");
    assert_eq!(image_bytes(state), image_bytes(&control));
    match resp {
        Response::Err(e) => e,
        other => panic!("{cmd:?} was not refused: {other:?}"),
    }
}

pub fn is_invalid(e: &MetaError) -> bool {
    matches!(e, MetaError::InvalidParams(_))
}

/// Checks invariant 4 and the accounting: every replica of every object and
/// retired object lies inside a mounted segment, replicas of one object are on
/// distinct segments, no two ranges on a segment overlap, and each
/// segment's used bytes are exactly the sum of the ranges it holds.
pub fn assert_no_shared_bytes(state: &MetaState) {
    let mut by_seg: BTreeMap<SegmentId, Vec<(Range, String)>> = BTreeMap::new();
    for o in state.objects() {
        assert!(!o.replicas.is_empty(), "object {:?} has no replica", o.key);
        let segs: BTreeSet<SegmentId> = o.replicas.iter().map(|r| r.segment).collect();
        assert_eq!(segs.len(), o.replicas.len(), "replicas of {:?} share a segment: {:?}", o.key, o.replicas);
        for r in &o.replicas {
            assert!(r.range.len >= o.size_bytes, "replica of {:?} is shorter than the object", o.key);
            by_seg.entry(r.segment).or_default().push((r.range, o.key.clone()));
        }
    }
    for d in state.retired() {
        for r in &d.replicas {
            by_seg.entry(r.segment).or_default().push((r.range, format!("retired {:?}", d.version)));
        }
    }
    let mut total = 0;
    for s in state.segments() {
        let mut ranges = by_seg.remove(&s.spec.id).unwrap_or_default();
        ranges.sort();
        for w in ranges.windows(2) {
            assert!(
                w[0].0.end() <= w[1].0.offset,
                "{} and {} share bytes on {}: {} / {}",
                w[0].1,
                w[1].1,
                s.spec.id,
                w[0].0,
                w[1].0
            );
        }
        if let Some((last, _)) = ranges.last() {
            assert!(last.end() <= s.capacity_bytes(), "{last} lies past the end of {}", s.spec.id);
        }
        let sum: u64 = ranges.iter().map(|(r, _)| r.len).sum();
        assert_eq!(s.used_bytes(), sum, "used bytes of {} differ from the ranges it holds", s.spec.id);
        assert_eq!(s.used_bytes() + s.free_bytes(), s.capacity_bytes());
        total += sum;
    }
    assert!(by_seg.is_empty(), "replicas on segments that are not mounted: {:?}", by_seg.keys().collect::<Vec<_>>());
    assert_eq!(state.used_bytes(), total);
}

// ---------------------------------------------------------------- puts

/// The checksum the builders record.
pub const CHECKSUM: u32 = 0xC0FFEE;

/// Grants an arena of `len` bytes on `segment` for `term`, in pieces of at
/// least `unit` bytes (must succeed).
pub fn grant_pieces(s: &mut MetaState, segment: u64, len: u64, unit: u64, term: u64) -> Arena {
    let cmd = Command::ArenaGrant { segment: SegmentId(segment), len_bytes: len, unit_bytes: unit, term };
    match apply(s, cmd) {
        Response::ArenaGranted(a) => a,
        other => panic!("arena of {len} on segment {segment} not granted: {other:?}"),
    }
}

/// A new object of `size` bytes written by `client`, one replica per
/// (arena, offset into its first extent).
pub fn new_object(client: ClientId, key: &str, size: u64, at: &[(&Arena, u64)]) -> NewObject {
    NewObject {
        client,
        key: key.to_string(),
        size_bytes: size,
        checksum: CHECKSUM,
        pin: Pin::None,
        replicas: at
            .iter()
            .map(|(a, off)| PlacedReplica {
                segment: a.segment,
                arena: a.id,
                range: Range::new(a.extents[0].offset + off, aligned(size)),
            })
            .collect(),
        upsert: false,
    }
}

/// Applies a `PutCommit` (must commit) and returns the version.
pub fn commit(s: &mut MetaState, new: NewObject) -> ObjectVersion {
    let shown = format!("{new:?}");
    match apply(s, Command::PutCommit(new)) {
        Response::Committed { version } => version,
        other => panic!("{shown} not committed: {other:?}"),
    }
}

/// Returns an arena (must exist).
pub fn return_arena(s: &mut MetaState, a: &Arena) {
    assert_eq!(apply(s, Command::ArenaReturn { arenas: vec![a.id] }), Response::Removed { count: 1 });
}

/// `key` put the way the master puts it (`testing::put_object`): an arena
/// of the object's size on each of up to `replicas` segments, the emptiest
/// first, one `PutCommit`, and the arenas returned.
pub fn put_complete(state: &mut MetaState, client: ClientId, key: &str, size: u64, replicas: u32) -> ObjectVersion {
    put_object(state, client, key, size, replicas, Pin::None, false)
}

// ---------------------------------------------------------------- what ran
// (t20_determinism.rs, t20_no_shared_bytes.rs, t27_invariants.rs)

/// Applies `req` and returns its answer, with each command that ran and
/// what it answered: the commands of a `Batch` one by one, and the command
/// inside a `Once` unless its request id was answered before (a retry runs
/// nothing; it is left out).
pub fn apply_traced(state: &mut MetaState, req: &Request) -> (Response, Vec<(Command, Response)>) {
    fn walk(
        before: &MetaState,
        seen: &mut BTreeSet<u64>,
        cmd: &Command,
        answer: &Response,
        out: &mut Vec<(Command, Response)>,
    ) {
        match (cmd, answer) {
            (Command::Batch(cmds), Response::Batch(answers)) => {
                assert_eq!(cmds.len(), answers.len(), "a batch answers each of its commands");
                for (c, a) in cmds.iter().zip(answers) {
                    walk(before, seen, c, a, out);
                }
            }
            (Command::Once { request_id, cmd }, a) => {
                if before.request_answer(*request_id).is_none() && seen.insert(*request_id) {
                    walk(before, seen, cmd, a, out);
                }
            }
            (c, a) => out.push((c.clone(), a.clone())),
        }
    }
    let before = state.clone();
    let answer = state.apply(req);
    let mut ran = Vec::new();
    walk(&before, &mut BTreeSet::new(), &req.cmd, &answer, &mut ran);
    (answer, ran)
}

/// Whether `answer` says its command changed the state: a commit, a grant,
/// `Ok`, or something removed. (A few `Ok`s change nothing: an unmount of a
/// segment that is not mounted, a trim of a returned arena.)
pub fn took_effect(answer: &Response) -> bool {
    match answer {
        Response::Ok | Response::Committed { .. } | Response::ArenaGranted(_) => true,
        Response::Removed { count } => *count > 0,
        _ => false,
    }
}
