//! A retried remove must not take effect twice: `Command::Once` applies its
//! command at most once per request id (within the dedup window), returns
//! the first answer to retries, and survives snapshots like all other state.
//! The window runs on the request clock, which a leader's clock jump can
//! neither fast-forward (ids dropped early, retries applied twice) nor stop
//! (ids kept forever).
// Test support: a failed unwrap or expect is the test failing (the
// workspace denies them in library code: Cargo.toml [workspace.lints]).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use mooncake_raft_store::state::{
    REQUEST_CLOCK_REORDER_MAX_MS, REQUEST_CLOCK_STEP_MAX_MS, REQUEST_DEDUP_WINDOW_MS, RequestClock,
};
use mooncake_raft_store::testing::{SegmentSpecExt, segment};
use mooncake_raft_store::*;
use mooncake_segment::ClientId;
use proptest::prelude::*;

const DAY_MS: u64 = 86_400_000;
/// A plausible leader wall clock (ms since the epoch).
const T0: u64 = 1_700_000_000_000;

fn apply(s: &mut MetaState, ts_ms: u64, cmd: Command) -> Response {
    s.apply(&Request { ts_ms, cmd })
}

fn setup() -> MetaState {
    let mut s = MetaState::default();
    let seg = segment(1, 1 << 20, "h").endpoint("e:1").zone("");
    assert_eq!(apply(&mut s, 1, Command::MountSegment { client: ClientId(1), segment: seg }), Response::Ok);
    s
}

fn put(s: &mut MetaState, ts: u64, key: &str) {
    let p = PutStart {
        client: ClientId(1),
        key: key.into(),
        size_bytes: 100,
        replica_num: 1,
        preferred: vec![],
        pin: Pin::None,
    };
    assert!(matches!(apply(s, ts, Command::PutStart(p)), Response::Placed { .. }));
    assert_eq!(apply(s, ts, Command::PutEnd { client: ClientId(1), key: key.into(), checksum: 1 }), Response::Ok);
}

fn remove_once(id: u64, key: &str) -> Command {
    Command::Once { request_id: id, cmd: Box::new(Command::Remove { key: key.into() }) }
}

#[test]
fn a_retried_remove_does_not_remove_an_object_put_in_between() {
    let mut s = setup();
    put(&mut s, 10, "k");
    assert_eq!(apply(&mut s, 20, remove_once(77, "k")), Response::Ok);
    put(&mut s, 30, "k");
    // The retry (same id) answers like the first attempt and changes nothing.
    let before = s.state_hash();
    assert_eq!(apply(&mut s, 40, remove_once(77, "k")), Response::Ok);
    assert!(s.object("k").is_some(), "the retry removed the newer object");
    assert_eq!(s.state_hash(), before);
    // Another request id is another remove.
    assert_eq!(apply(&mut s, 50, remove_once(78, "k")), Response::Ok);
    assert!(s.object("k").is_none());
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
    let first = apply(&mut s, 10, remove_once(5, "ghost"));
    assert!(matches!(first, Response::Err(MetaError::ObjectNotFound(_))));
    put(&mut s, 20, "ghost");
    assert_eq!(apply(&mut s, 30, remove_once(5, "ghost")), first, "the first answer is returned");
    assert!(s.object("ghost").is_some());
    // After the window of steady time the id is forgotten (pruned when
    // another id is recorded) and the same id is a new request.
    let later = tick(&mut s, 30, REQUEST_DEDUP_WINDOW_MS / 500 + 1, 500);
    apply(&mut s, later, remove_once(6, "nothing"));
    assert_eq!(apply(&mut s, later, remove_once(5, "ghost")), Response::Ok);
    assert!(s.object("ghost").is_none());
}

#[test]
fn steady_leader_time_expires_ids_after_the_window_and_not_before() {
    let mut s = setup();
    apply(&mut s, T0, remove_once(5, "ghost"));
    // Entries every 400 ms: the request clock follows the leader's time.
    let almost = tick(&mut s, T0, (REQUEST_DEDUP_WINDOW_MS - 1_000) / 400, 400);
    assert!(remembered_after_pruning(&mut s, almost, 5), "id dropped before the window ended");
    let past = tick(&mut s, almost, 2_000 / 400, 400);
    assert!(!remembered_after_pruning(&mut s, past, 5), "id kept past the window of steady time");
}

#[test]
fn a_leader_clock_jump_of_a_day_does_not_expire_ids_remembered_a_moment_before() {
    let mut s = setup();
    put(&mut s, T0, "k");
    assert_eq!(apply(&mut s, T0 + 10, remove_once(7, "k")), Response::Ok);
    put(&mut s, T0 + 20, "k");
    // The leader's clock jumps a day ahead; it records another request.
    let jumped = T0 + 20 + DAY_MS;
    assert!(remembered_after_pruning(&mut s, jumped, 7), "one clock jump aged the id by a day");
    // The retry still gets the first answer and leaves the newer object.
    assert_eq!(apply(&mut s, jumped + 5, remove_once(7, "k")), Response::Ok);
    assert!(s.object("k").is_some(), "the retry ran again after a clock jump");
    // The window keeps running on the new clock (nothing stays forever).
    let past = tick(&mut s, jumped + 5, REQUEST_DEDUP_WINDOW_MS / 1_000 + 1, 1_000);
    assert!(!remembered_after_pruning(&mut s, past, 7));
}

#[test]
fn a_leader_clock_jump_back_does_not_keep_ids_forever() {
    let mut s = setup();
    apply(&mut s, T0, remove_once(5, "ghost"));
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
    apply(&mut s, T0, remove_once(5, "ghost"));
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
    apply(&mut s, T0, remove_once(5, "ghost"));
    tick(&mut s, T0, 30, 1_000);
    apply(&mut s, T0 - DAY_MS, remove_once(6, "ghost")); // re-anchored a day back
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

/// A version-2 image (request ids stamped with the largest timestamp)
/// holding only `requests`, at state time `now_ms`.
fn v2_state(now_ms: u64, requests: Vec<(u64, u64, Response)>) -> MetaState {
    let v2 = mooncake_raft_store::state::StateImageV2 {
        last_applied: None,
        last_membership: Default::default(),
        now_ms,
        next_version: 0,
        segments: vec![],
        objects: vec![],
        clients: vec![],
        discarded: vec![],
        requests,
        arenas: vec![],
        next_arena: 0,
        retired: vec![],
    };
    let mut data = 2u32.to_le_bytes().to_vec();
    data.extend(codec::encode("v2 image", &v2).expect("encode"));
    decode_image(&data).expect("a version-2 image is read")
}

#[test]
fn replicas_upgraded_from_version_2_at_different_indexes_converge_after_the_window() {
    let noop_once = |id| Command::Once { request_id: id, cmd: Box::new(Command::Noop) };
    // Replica A upgrades at the first entry, then applies two requests
    // after an idle gap of 30 s; replica B applied them with the old binary
    // (stamped with the largest timestamp) and upgrades after them.
    let mut a = v2_state(T0, vec![(1, T0 - 10_000, Response::Ok)]);
    apply(&mut a, T0 + 30_000, noop_once(2));
    apply(&mut a, T0 + 31_000, noop_once(3));
    let stamped = vec![(1, T0 - 10_000, Response::Ok), (2, T0 + 30_000, Response::Ok), (3, T0 + 31_000, Response::Ok)];
    let mut b = v2_state(T0 + 31_000, stamped);
    assert_ne!(common_bytes(&a), common_bytes(&b), "the idle gap aged id 1 differently");
    // The same log from here on: once the ids of the transition expire, the
    // replicas hold the same image and hash again.
    let mut ts = T0 + 31_000;
    for i in 0..REQUEST_DEDUP_WINDOW_MS / 1_000 + 45 {
        ts += 1_000;
        let cmd = if i % 10 == 0 { noop_once(100 + i) } else { Command::Noop };
        assert_eq!(apply(&mut a, ts, cmd.clone()), apply(&mut b, ts, cmd));
    }
    assert_eq!(common_bytes(&a), common_bytes(&b));
    assert_eq!(a.state_hash(), b.state_hash());
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
    put(&mut s, 10, "k");
    apply(&mut s, 20, remove_once(9, "k"));
    let mut restored = MetaState::from_image(s.to_image()).expect("image");
    assert_eq!(restored.state_hash(), s.state_hash());
    put(&mut restored, 30, "k");
    assert_eq!(apply(&mut restored, 40, remove_once(9, "k")), Response::Ok);
    assert!(restored.object("k").is_some(), "dedup state lost in the snapshot");
}

#[test]
fn once_wraps_single_commands_only() {
    let mut s = setup();
    let nested = Command::Once { request_id: 1, cmd: Box::new(Command::Batch(vec![])) };
    assert!(matches!(apply(&mut s, 10, nested), Response::Err(MetaError::InvalidParams(_))));
}
