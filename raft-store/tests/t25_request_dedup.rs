//! A retried request must not take effect twice: `Command::Once` applies
//! its command at most once per request id (within the dedup window) and
//! returns the first answer to retries, so a retried put cannot bring back
//! an object removed in between, and a retried remove gets its `Ok` back
//! (not `OBJECT_NOT_FOUND`). The remembered answers survive snapshots like
//! all other state. The window runs on the request clock, which a leader's
//! clock jump can neither fast-forward (ids dropped early, retries applied
//! twice) nor stop (ids kept forever).
// Test support: a failed unwrap or expect is the test failing (the
// workspace denies them in library code: Cargo.toml [workspace.lints]).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use mooncake_raft_store::state::{
    REQUEST_CLOCK_REORDER_MAX_MS, REQUEST_CLOCK_STEP_MAX_MS, REQUEST_DEDUP_WINDOW_MS, RequestClock,
};
use mooncake_raft_store::testing::{SegmentSpecExt, mount_cmd, segment};
use mooncake_raft_store::*;
use mooncake_segment::{ALLOC_ALIGN_BYTES, ClientId, Range, SegmentId};
use proptest::prelude::*;

const DAY_MS: u64 = 86_400_000;
/// A plausible leader wall clock (ms since the epoch).
const T0: u64 = 1_700_000_000_000;
/// The writer, also the owner of the one segment.
const WRITER: ClientId = ClientId(1);
/// The size of every object put here.
const SIZE: u64 = 100;

fn apply(s: &mut MetaState, ts_ms: u64, cmd: Command) -> Response {
    s.apply(&Request { ts_ms, cmd })
}

fn setup() -> MetaState {
    let mut s = MetaState::default();
    let seg = segment(1, 1 << 20, "h").endpoint("e:1").zone("");
    assert_eq!(apply(&mut s, 1, mount_cmd(WRITER, seg)), Response::Ok);
    s
}

/// An arena of 64 KiB on the segment, granted at `ts`.
fn grant(s: &mut MetaState, ts: u64) -> Arena {
    let cmd = Command::ArenaGrant { segment: SegmentId(1), len_bytes: 1 << 16, unit_bytes: 1 << 16, term: 1 };
    match apply(s, ts, cmd) {
        Response::ArenaGranted(a) => a,
        other => panic!("no arena: {other:?}"),
    }
}

/// `key` written by [`WRITER`] in the `slot`-th object-sized range of `arena`.
fn new_object(arena: &Arena, key: &str, slot: u64) -> NewObject {
    let len = SIZE.next_multiple_of(ALLOC_ALIGN_BYTES);
    let range = Range::new(arena.extents[0].offset + slot * len, len);
    NewObject {
        client: WRITER,
        key: key.into(),
        size_bytes: SIZE,
        checksum: 1,
        pin: Pin::None,
        replicas: vec![PlacedReplica { segment: arena.segment, arena: arena.id, range }],
        upsert: false,
    }
}

/// Puts `key` at `ts` as the master does (an arena, the commit, the arena
/// returned); answers its version.
fn put(s: &mut MetaState, ts: u64, key: &str) -> ObjectVersion {
    let arena = grant(s, ts);
    let Response::Committed { version } = apply(s, ts, Command::PutCommit(new_object(&arena, key, 0))) else {
        panic!("{key:?} not committed")
    };
    assert_eq!(apply(s, ts, Command::ArenaReturn { arenas: vec![arena.id] }), Response::Removed { count: 1 });
    version
}

/// Removes the current incarnation of `key` at `ts` (not deduplicated).
fn remove(s: &mut MetaState, ts: u64, key: &str) {
    let version = s.object(key).expect("the object to remove").version;
    assert_eq!(apply(s, ts, Command::RemoveVersion { key: key.into(), version }), Response::Ok);
}

fn put_once(id: u64, new: &NewObject) -> Command {
    Command::Once { request_id: id, cmd: Box::new(Command::PutCommit(new.clone())) }
}

fn remove_once(id: u64, key: &str, version: ObjectVersion) -> Command {
    Command::Once { request_id: id, cmd: Box::new(Command::RemoveVersion { key: key.into(), version }) }
}

#[test]
fn a_retried_put_does_not_bring_back_an_object_removed_in_between() {
    let mut s = setup();
    let arena = grant(&mut s, 10);
    let new = new_object(&arena, "k", 0);
    let first = apply(&mut s, 20, put_once(77, &new));
    let Response::Committed { version } = first else { panic!("{first:?}") };
    remove(&mut s, 30, "k");
    // The retry (same id) answers like the first attempt and changes nothing,
    // though its arena lives and its range is free again.
    let before = s.state_hash();
    assert_eq!(apply(&mut s, 40, put_once(77, &new)), first);
    assert!(s.object("k").is_none(), "the retry put the removed object back");
    assert_eq!(s.state_hash(), before);
    // Another request id is another put.
    let again = apply(&mut s, 50, put_once(78, &new));
    assert!(matches!(again, Response::Committed { version: v } if v != version), "{again:?}");
    assert!(s.object("k").is_some());
}

#[test]
fn a_retried_remove_gets_its_first_answer_and_leaves_an_object_put_in_between() {
    let mut s = setup();
    let v1 = put(&mut s, 10, "k");
    assert_eq!(apply(&mut s, 20, remove_once(77, "k", v1)), Response::Ok);
    let v2 = put(&mut s, 30, "k");
    let before = s.state_hash();
    assert_eq!(apply(&mut s, 40, remove_once(77, "k", v1)), Response::Ok, "not the first answer");
    assert_eq!(s.object("k").map(|o| o.version), Some(v2), "the retry removed the newer object");
    assert_eq!(s.state_hash(), before);
    // Another request id is another remove: that version is gone.
    let e = apply(&mut s, 50, remove_once(78, "k", v1));
    assert_eq!(e, Response::Err(MetaError::ObjectNotFound("k".into())));
}

/// Applies `count` no-ops, `step_ms` apart after `ts`; returns the last stamp.
fn tick(s: &mut MetaState, mut ts: u64, count: u64, step_ms: u64) -> u64 {
    for _ in 0..count {
        ts += step_ms;
        apply(s, ts, Command::Noop);
    }
    ts
}

/// Whether `id` is still remembered at `ts`: recording a new id (one per
/// stamp) first prunes the expired ones, as any `Once` does.
fn remembered_after_pruning(s: &mut MetaState, ts: u64, id: u64) -> bool {
    let fresh = ts | 1 << 63;
    assert!(s.request_answer(fresh).is_none(), "pruning needs a new id");
    apply(s, ts, Command::Once { request_id: fresh, cmd: Box::new(Command::Noop) });
    s.request_answer(id).is_some()
}

#[test]
fn a_refusal_is_remembered_too_and_ids_expire_after_the_window() {
    let mut s = setup();
    let arena = grant(&mut s, 10);
    assert!(matches!(
        apply(&mut s, 10, Command::PutCommit(new_object(&arena, "ghost", 0))),
        Response::Committed { .. }
    ));
    // A put of a key that exists is refused; the key is then freed.
    let new = new_object(&arena, "ghost", 1);
    let first = apply(&mut s, 20, put_once(5, &new));
    assert!(matches!(first, Response::Err(MetaError::ObjectAlreadyExists(_))), "{first:?}");
    remove(&mut s, 25, "ghost");
    assert_eq!(apply(&mut s, 30, put_once(5, &new)), first, "the first answer is returned");
    assert!(s.object("ghost").is_none());
    // After the window of steady time the id is forgotten (pruned when
    // another id is recorded) and the same id is a new request.
    let later = tick(&mut s, 30, REQUEST_DEDUP_WINDOW_MS / 500 + 1, 500);
    apply(&mut s, later, remove_once(6, "nothing", ObjectVersion(1)));
    assert!(matches!(apply(&mut s, later, put_once(5, &new)), Response::Committed { .. }));
    assert!(s.object("ghost").is_some());
}

#[test]
fn steady_leader_time_expires_ids_after_the_window_and_not_before() {
    let mut s = setup();
    apply(&mut s, T0, remove_once(5, "ghost", ObjectVersion(1)));
    // Entries every 400 ms: the request clock follows the leader's time.
    let almost = tick(&mut s, T0, (REQUEST_DEDUP_WINDOW_MS - 1_000) / 400, 400);
    assert!(remembered_after_pruning(&mut s, almost, 5), "id dropped before the window ended");
    let past = tick(&mut s, almost, 2_000 / 400, 400);
    assert!(!remembered_after_pruning(&mut s, past, 5), "id kept past the window of steady time");
}

#[test]
fn a_leader_clock_jump_of_a_day_does_not_expire_ids_remembered_a_moment_before() {
    let mut s = setup();
    let arena = grant(&mut s, T0);
    let new = new_object(&arena, "k", 0);
    let first = apply(&mut s, T0 + 10, put_once(7, &new));
    assert!(matches!(first, Response::Committed { .. }), "{first:?}");
    remove(&mut s, T0 + 20, "k");
    // The leader's clock jumps a day ahead; it records another request.
    let jumped = T0 + 20 + DAY_MS;
    assert!(remembered_after_pruning(&mut s, jumped, 7), "one clock jump aged the id by a day");
    // The retry still gets the first answer and puts nothing back.
    assert_eq!(apply(&mut s, jumped + 5, put_once(7, &new)), first);
    assert!(s.object("k").is_none(), "the retry ran again after a clock jump");
    // The window keeps running on the new clock (nothing stays forever).
    let past = tick(&mut s, jumped + 5, REQUEST_DEDUP_WINDOW_MS / 1_000 + 1, 1_000);
    assert!(!remembered_after_pruning(&mut s, past, 7));
}

#[test]
fn a_leader_clock_jump_back_does_not_keep_ids_forever() {
    let mut s = setup();
    apply(&mut s, T0, remove_once(5, "ghost", ObjectVersion(1)));
    // The clock steps back a day (a new leader, or NTP correcting a leader
    // that ran ahead) and runs normally from there: the state's own time
    // (the largest stamp) is stuck a day ahead, the request clock is not.
    let back = tick(&mut s, T0 - DAY_MS, REQUEST_DEDUP_WINDOW_MS / 1_000 + 2, 1_000);
    assert!(back < T0 && s.now_ms() == T0);
    assert!(!remembered_after_pruning(&mut s, back, 5), "a clock stepped back kept the id past the window");
}

#[test]
fn repeated_jumps_age_ids_by_one_step_each_at_most() {
    let mut s = setup();
    apply(&mut s, T0, remove_once(5, "ghost", ObjectVersion(1)));
    let before = s.request_clock().now_ms;
    // A leader flapping between a day ahead and the right time.
    for i in 1..=20 {
        apply(&mut s, T0 + DAY_MS + i, Command::Noop);
        apply(&mut s, T0 + i, Command::Noop);
    }
    assert!(s.request_clock().now_ms - before <= 20 * REQUEST_CLOCK_STEP_MAX_MS);
    assert!(remembered_after_pruning(&mut s, T0 + 21, 5));
}

#[test]
fn a_state_restored_from_its_image_ages_ids_identically() {
    let mut s = setup();
    apply(&mut s, T0, remove_once(5, "ghost", ObjectVersion(1)));
    tick(&mut s, T0, 30, 1_000);
    apply(&mut s, T0 - DAY_MS, remove_once(6, "ghost", ObjectVersion(1))); // re-anchored a day back
    let mut restored = MetaState::from_image(s.to_image()).expect("image");
    assert_eq!(common_bytes(&restored), common_bytes(&s));
    assert_eq!(restored.request_clock().anchor_ts_ms, s.request_clock().anchor_ts_ms);
    // Id 5 expires 90 steady seconds later, id 6 thirty after that, on both.
    for (ticks, five, six) in [(89, true, true), (2, false, true), (30, false, false)] {
        let ts = s.request_clock().anchor_ts_ms;
        let (a, b) = (tick(&mut s, ts, ticks, 1_000), tick(&mut restored, ts, ticks, 1_000));
        assert_eq!(remembered_after_pruning(&mut s, a, 5), five);
        assert_eq!(remembered_after_pruning(&mut restored, b, 5), five, "restored state, id 5 after {ticks} s");
        assert_eq!((s.request_answer(6).is_some(), restored.request_answer(6).is_some()), (six, six));
        assert_eq!(common_bytes(&restored), common_bytes(&s), "images differ after {ticks} s");
        assert_eq!(restored.state_hash(), s.state_hash());
    }
}

/// The encoded state image: equal on replicas that applied the same log,
/// whatever origin their request clocks have.
fn common_bytes(s: &MetaState) -> Vec<u8> {
    codec::encode("state image", &s.to_image()).expect("encode")
}

proptest! {
    /// Whatever leaders stamp, the request clock never moves back and moves
    /// at most one step per entry; stamps that rise steadily (half a step
    /// apart at most, neighbours sometimes committed in swapped order:
    /// reordered proposals) are followed exactly.
    #[test]
    fn the_request_clock_is_monotone_capped_and_follows_steady_time(
        stamps in proptest::collection::vec(0u64..3 * DAY_MS, 1..200),
        steps in proptest::collection::vec(0u64..=REQUEST_CLOCK_STEP_MAX_MS / 2, 1..200),
        swaps in proptest::collection::vec(any::<bool>(), 200),
    ) {
        let mut c = RequestClock::default();
        for ts in &stamps {
            let before = c.now_ms;
            c.tick(*ts);
            prop_assert!(c.now_ms >= before && c.now_ms - before <= REQUEST_CLOCK_STEP_MAX_MS);
        }
        // Steady time, neighbours swapped when close enough to be reordering.
        let mut ts: Vec<u64> = steps.iter().scan(T0, |t, d| { *t += d; Some(*t) }).collect();
        for i in 1..ts.len() {
            let close = ts[i] - ts[i - 1] <= REQUEST_CLOCK_REORDER_MAX_MS && (i < 2 || ts[i - 1] >= ts[i - 2]);
            if swaps[i] && close {
                ts.swap(i - 1, i);
            }
        }
        let mut c = RequestClock { now_ms: 0, anchor_ts_ms: T0 };
        ts.iter().for_each(|t| c.tick(*t));
        prop_assert_eq!(c.now_ms, ts.iter().max().unwrap() - T0);
    }
}

#[test]
fn remembered_requests_survive_a_snapshot_image() {
    let mut s = setup();
    let arena = grant(&mut s, 10);
    let new = new_object(&arena, "k", 0);
    let first = apply(&mut s, 20, put_once(9, &new));
    assert!(matches!(first, Response::Committed { .. }), "{first:?}");
    remove(&mut s, 30, "k");
    let mut restored = MetaState::from_image(s.to_image()).expect("image");
    assert_eq!(restored.state_hash(), s.state_hash());
    assert_eq!(apply(&mut restored, 40, put_once(9, &new)), first);
    assert!(restored.object("k").is_none(), "dedup state lost in the snapshot");
}

#[test]
fn once_wraps_single_commands_only() {
    let mut s = setup();
    let nested = Command::Once { request_id: 1, cmd: Box::new(Command::Batch(vec![])) };
    assert!(matches!(apply(&mut s, 10, nested), Response::Err(MetaError::InvalidParams(_))));
}
