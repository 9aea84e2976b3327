//! The invariant checks, each shown catching the state it exists for.
//! States are broken by hand (these tests sit inside the state module and
//! reach its fields): no valid command stream leads there, which is the
//! point of the checks.
//!
//! Release checks are driven through `apply_cmd`, the per-command path
//! without the full scan that `apply` adds in debug builds, and show the
//! violation it returns (the process-ending `apply` is shown once, in a
//! child process).

use mooncake_segment::{ClientId, Range, RangeAllocator, SegmentId};

use super::super::MetaState;
use super::{HeldBy, InvariantViolation as V, Record};
use crate::command::*;
use crate::testing::{Rng, mount_cmd, random_command, segment};

const SIZE: u64 = 8192;
const NODE_A: ClientId = ClientId(101);
const NODE_B: ClientId = ClientId(102);
const WRITER: ClientId = ClientId(1);
const S1: SegmentId = SegmentId(1);
const S2: SegmentId = SegmentId(2);

/// Applies `cmd` one ms after the state's time (debug builds: then the full scan).
fn apply(s: &mut MetaState, cmd: Command) -> Response {
    let ts_ms = s.now_ms + 1;
    s.apply(&Request { ts_ms, cmd })
}

/// `key` of 64 bytes by `WRITER`, one replica per (arena, offset in it).
fn commit(s: &mut MetaState, key: &str, at: &[(ArenaId, u64)], upsert: bool) -> ObjectVersion {
    let replicas = at
        .iter()
        .map(|(id, offset)| {
            let segment = s.arena(*id).unwrap().segment;
            PlacedReplica { segment, arena: *id, range: Range::new(*offset, 64) }
        })
        .collect();
    let new =
        NewObject { client: WRITER, key: key.into(), size_bytes: 64, checksum: 7, pin: Pin::None, replicas, upsert };
    match apply(s, Command::PutCommit(new)) {
        Response::Committed { version } => version,
        other => panic!("{key} not committed: {other:?}"),
    }
}

/// Two segments on two hosts; an arena on each at offset 0 (`arena-0` on
/// segment 1, `arena-1` on segment 2); object "a" (64 bytes) on both at
/// offset 0; and the bytes [64, 128) of segment 1 held by a retired object
/// ("r", replaced by an upsert that was then removed).
fn base() -> MetaState {
    let mut s = MetaState::default();
    assert_eq!(apply(&mut s, mount_cmd(NODE_A, segment(S1.0, SIZE, "host-a"))), Response::Ok);
    assert_eq!(apply(&mut s, mount_cmd(NODE_B, segment(S2.0, SIZE, "host-b"))), Response::Ok);
    for segment in [S1, S2] {
        let grant = Command::ArenaGrant { segment, len_bytes: 1024, unit_bytes: 64, term: 1 };
        assert!(matches!(apply(&mut s, grant), Response::ArenaGranted(_)));
    }
    commit(&mut s, "a", &[(ArenaId(0), 0), (ArenaId(1), 0)], false);
    commit(&mut s, "r", &[(ArenaId(0), 64)], false);
    let upserted = commit(&mut s, "r", &[(ArenaId(0), 128)], true);
    assert_eq!(apply(&mut s, Command::RemoveVersion { key: "r".into(), version: upserted }), Response::Ok);
    assert_eq!(s.retired.len(), 1);
    assert_eq!(s.check_invariants(), Ok(()));
    s
}

/// Stores `key` as a copy of object "a" (new version), sharing its bytes.
fn copy_of_a(s: &mut MetaState, key: &str) {
    let mut copy = s.object("a").unwrap().clone();
    copy.key = key.into();
    copy.version = ObjectVersion(s.next_version);
    s.next_version += 1;
    s.objects.insert(copy);
}

fn a_range(s: &MetaState, segment: SegmentId) -> Range {
    s.object("a").unwrap().replicas.iter().find(|r| r.segment == segment).unwrap().range
}

fn remove_version(s: &MetaState, key: &str) -> Command {
    Command::RemoveVersion { key: key.into(), version: s.object(key).unwrap().version }
}

// ================================================================ release: per command

#[test]
fn a_double_free_is_detected() {
    let mut s = base();
    copy_of_a(&mut s, "b");
    assert_eq!(s.apply_cmd(&remove_version(&s, "a")), Ok(Response::Ok), "the first free is fine");
    let second = remove_version(&s, "b");
    let range = a_range(&base(), S1);
    assert_eq!(s.apply_cmd(&second), Err(V::DoubleFree { holder: Record::Object("b".into()), segment: S1, range }));
}

#[test]
fn a_double_free_inside_a_batch_stops_the_batch() {
    let mut s = base();
    copy_of_a(&mut s, "b");
    let batch = Command::Batch(vec![remove_version(&s, "a"), remove_version(&s, "b"), Command::Noop]);
    assert!(matches!(s.apply_cmd(&batch), Err(V::DoubleFree { .. })));
}

#[test]
fn freeing_more_than_the_segment_has_in_use_is_detected() {
    let mut s = base();
    // Segment 2 has 64 bytes in use ("a"); "a" now claims 128 there.
    s.objects.update("a", |o| o.replicas.iter_mut().filter(|r| r.segment == S2).for_each(|r| r.range.len = 128));
    let range = Range::new(0, 128);
    let err = s.apply_cmd(&remove_version(&s, "a"));
    let holder = Record::Object("a".into());
    assert_eq!(err, Err(V::FreedMoreThanUsed { holder, segment: S2, range, used_bytes: 64 }));
}

#[test]
fn releasing_a_retired_object_freed_behind_its_back_is_a_double_free() {
    let mut s = base();
    let r = *s.retired.keys().next().unwrap();
    let held = s.retired[&r].replicas[0].clone();
    // Its bytes freed behind its back: releasing it frees them again.
    s.segments.get_mut(&held.segment).unwrap().alloc.free(held.range).unwrap();
    let err = s.apply_cmd(&Command::ReleaseRetired { versions: vec![r] });
    let want = V::DoubleFree { holder: Record::Retired(r), segment: held.segment, range: held.range };
    assert_eq!(err, Err(want));
}

#[test]
fn a_free_on_a_segment_that_is_gone_is_detected() {
    let mut s = base();
    // Dropping a segment drops its replicas; here only the segment went.
    s.segments.remove(&S1);
    let range = a_range(&s, S1);
    let err = s.apply_cmd(&remove_version(&s, "a"));
    assert_eq!(err, Err(V::UnknownSegment { holder: Record::Object("a".into()), segment: S1, range }));
}

#[test]
fn a_free_beyond_the_segment_is_detected() {
    let mut s = base();
    s.objects.update("a", |o| o.replicas[0].range.offset = SIZE);
    let range = Range::new(SIZE, 64);
    let err = s.apply_cmd(&remove_version(&s, "a"));
    let holder = Record::Object("a".into());
    assert_eq!(err, Err(V::BeyondSegment { holder, segment: S1, range, size_bytes: SIZE }));
}

/// Segment 1's allocator believes it has twice its size, and all of the
/// real size is in use: the next allocation lands past the end.
fn allocator_past_the_end(s: &mut MetaState) {
    let seg = s.segments.get_mut(&S1).unwrap();
    seg.alloc = RangeAllocator::with_allocated(2 * SIZE, [Range::new(0, SIZE)]).unwrap();
}

#[test]
fn an_arena_beyond_the_segment_is_detected() {
    let mut s = base();
    allocator_past_the_end(&mut s);
    let id = ArenaId(s.next_arena);
    let err = s.apply_cmd(&Command::ArenaGrant { segment: S1, len_bytes: 4096, unit_bytes: 64, term: 2 });
    let range = Range::new(SIZE, 4096);
    assert_eq!(err, Err(V::BeyondSegment { holder: Record::Arena(id), segment: S1, range, size_bytes: SIZE }));
}

#[test]
fn committing_beyond_the_segment_is_detected() {
    let mut s = base();
    allocator_past_the_end(&mut s);
    // An arena past the end, as a broken grant would have left it.
    let arena = Arena { id: ArenaId(s.next_arena), segment: S1, extents: vec![Range::new(SIZE, 4096)], term: 2 };
    s.next_arena += 1;
    s.arenas_by_offset.insert((S1, SIZE), arena.id);
    s.arenas.insert(arena.id, arena.clone());
    let range = Range::new(SIZE, 64);
    let new = NewObject {
        client: WRITER,
        key: "k".into(),
        size_bytes: 64,
        checksum: 1,
        pin: Pin::None,
        replicas: vec![PlacedReplica { segment: S1, arena: arena.id, range }],
        upsert: false,
    };
    let err = s.apply_cmd(&Command::PutCommit(new));
    let holder = Record::Object("k".into());
    assert_eq!(err, Err(V::BeyondSegment { holder, segment: S1, range, size_bytes: SIZE }));
}

#[test]
fn reserving_bytes_in_use_is_detected() {
    // PutCommit checks the bytes are free before it reserves them, so only
    // an allocator that disagrees with itself gets here: shown on the
    // detecting function.
    let mut s = base();
    let range = a_range(&s, S1);
    let seg = s.segments.get_mut(&S1).unwrap();
    let err = seg.reserve(HeldBy::Object("k"), range);
    assert_eq!(err, Err(V::ReservedTwice { holder: Record::Object("k".into()), segment: S1, range }));
    assert_eq!(seg.used_bytes(), 128, "a refused reservation changes nothing (\"a\" and the retired \"r\" are there)");
}

#[test]
fn a_request_id_remembered_after_the_request_clock_is_detected() {
    let mut s = base();
    let now = s.requests.clock().now_ms;
    s.requests.insert_raw(9, now + 1, true);
    let once = Command::Once { request_id: 10, cmd: Box::new(Command::Noop) };
    assert!(matches!(s.apply_cmd(&once), Err(V::Malformed { record: Record::Requests, .. })));
}

#[test]
fn valid_commands_answer_as_before() {
    // The checks sit on the paths of these commands; on a consistent state
    // they answer exactly what the commands always answered.
    let mut s = base();
    let r = *s.retired.keys().next().unwrap();
    let remove_a = remove_version(&s, "a");
    assert_eq!(apply(&mut s, remove_a), Response::Ok);
    assert_eq!(apply(&mut s, Command::ReleaseRetired { versions: vec![r] }), Response::Removed { count: 1 });
    assert_eq!(s.used_bytes(), 0);
    assert_eq!(apply(&mut s, Command::ArenaTrim { arena: ArenaId(0), keep_bytes: u64::MAX }), Response::Ok);
    assert_eq!(s.arena(ArenaId(0)).map(|a| a.len_bytes()), Some(1024), "a trim to more than all keeps all");
    let huge = Command::ArenaGrant { segment: S1, len_bytes: u64::MAX, unit_bytes: 64, term: 1 };
    assert!(matches!(apply(&mut s, huge), Response::Err(crate::MetaError::InvalidParams(_))));
}

/// On valid streams (the crate's random generator, every command variant,
/// starting from [`base`]) the per-command checks never report a violation
/// and the full scan finds none after any entry: the checks fire on broken
/// states only. Driven as the release build applies (`apply_cmd`, no scan
/// inside), with the scan run here.
#[test]
fn random_streams_trip_no_per_command_check_and_pass_the_full_scan() {
    let mut committed = 0;
    for seed in 0..4 {
        let mut rng = Rng(seed);
        let mut s = base();
        for step in 0..500 {
            let cmd = random_command(&mut rng, &s);
            // What `try_apply` does before `apply_cmd`.
            s.now_ms += 1;
            s.requests.tick(s.now_ms);
            match s.apply_cmd(&cmd) {
                Ok(Response::Committed { .. }) => committed += 1,
                Ok(_) => {}
                Err(v) => panic!("seed {seed} step {step}: {v}\n{cmd:?}"),
            }
            if let Err(v) = s.check_invariants() {
                panic!("seed {seed} step {step}: the scan found {v}\n{cmd:?}");
            }
        }
    }
    assert!(committed > 150, "only {committed} top-level commits: the streams did little");
}

/// `apply` itself ends the process on a violation, with one line and
/// status 70. Shown in a child process (this test binary, re-run on just
/// this test).
#[test]
fn a_broken_invariant_ends_the_process_with_one_line() {
    const CHILD: &str = "MOONCAKE_TEST_INVARIANT_CHILD";
    if std::env::var_os(CHILD).is_some() {
        let mut s = base();
        copy_of_a(&mut s, "b");
        s.last_applied = Some(openraft::LogId::new(openraft::CommittedLeaderId::new(1, 1), 42));
        // The first free through the per-command path alone (in a debug
        // build `apply` would stop at the full scan's finding instead).
        s.apply_cmd(&remove_version(&s, "a")).unwrap();
        s.apply(&Request { ts_ms: 100, cmd: remove_version(&s, "b") });
        unreachable!("the double free must end the process");
    }
    let exe = std::env::current_exe().unwrap();
    let test = "state::invariants::tests::a_broken_invariant_ends_the_process_with_one_line";
    let out = std::process::Command::new(exe)
        .args(["--exact", test, "--nocapture", "--test-threads=1"])
        .env(CHILD, "1")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(crate::fatal::EXIT_INVARIANT_BROKEN), "{stderr}");
    let line = crate::fatal::invariant_broken_line(
        "freeing [0, 64) (64 bytes) of object \"b\" on seg-0000000000000001, which is already (partly) free: \
         a double free (applying log index 42)",
    );
    assert!(stderr.lines().any(|l| l == line), "no line {line:?} in:\n{stderr}");
}

// ================================================================ the whole state

type Breaker = fn(&mut MetaState);
type Expected = fn(&V) -> bool;

fn case(what: &'static str, break_it: Breaker, expected: Expected) -> (&'static str, Breaker, Expected) {
    (what, break_it, expected)
}

/// Each kind of violation the full scan reports, on a state broken for it.
#[test]
fn check_invariants_catches_each_kind_of_violation() {
    let cases = [
        case("two objects share bytes", |s| copy_of_a(s, "b"), |v| matches!(v, V::SharedBytes { segment: S1, .. })),
        case(
            "used + free is not the capacity",
            |s| s.segments.get_mut(&S2).unwrap().alloc = RangeAllocator::new(2 * SIZE),
            |v| matches!(v, V::Accounting { segment: S2, capacity_bytes, .. } if *capacity_bytes == 2 * SIZE),
        ),
        case(
            "bytes in use that nothing holds",
            |s| s.segments.get_mut(&S1).unwrap().alloc.reserve(Range::new(4096, 64)).unwrap(),
            |v| matches!(v, V::HeldBytes { segment: S1, used_bytes: 192, held_bytes: 128 }),
        ),
        case(
            "a held range free in the allocator",
            |s| {
                let range = a_range(s, S1);
                s.segments.get_mut(&S1).unwrap().alloc.free(range).unwrap();
            },
            |v| matches!(v, V::HeldRangeFree { segment: S1, holder: Record::Object(k), .. } if k == "a"),
        ),
        case(
            "a replica on a segment that is not mounted",
            |s| s.objects.update("a", |o| o.replicas[0].segment = SegmentId(9)).unwrap(),
            |v| matches!(v, V::UnknownSegment { segment: SegmentId(9), .. }),
        ),
        case(
            "a replica beyond its segment",
            |s| s.objects.update("a", |o| o.replicas[0].range.offset = SIZE - 32).unwrap(),
            |v| matches!(v, V::BeyondSegment { segment: S1, .. }),
        ),
        case(
            "a retired object's replica on a segment that is not mounted",
            |s| s.retired.values_mut().next().unwrap().replicas[0].segment = SegmentId(9),
            |v| matches!(v, V::UnknownSegment { holder: Record::Retired(_), .. }),
        ),
        case(
            "an arena on a segment that is not mounted",
            |s| s.arenas.get_mut(&ArenaId(1)).unwrap().segment = SegmentId(9),
            |v| matches!(v, V::UnknownSegment { holder: Record::Arena(ArenaId(1)), .. }),
        ),
        case(
            "an arena beyond its segment",
            |s| move_arena(s, ArenaId(0), Range::new(SIZE - 64, 128)),
            |v| matches!(v, V::BeyondSegment { holder: Record::Arena(ArenaId(0)), .. }),
        ),
        case(
            "two arenas overlap",
            |s| {
                let start = s.arenas[&ArenaId(1)].extents[0].offset;
                let arena = Arena {
                    id: ArenaId(s.next_arena),
                    segment: S2,
                    extents: vec![Range::new(start + 64, 64)],
                    term: 2,
                };
                s.next_arena += 1;
                s.arenas_by_offset.insert((S2, start + 64), arena.id);
                s.arenas.insert(arena.id, arena);
            },
            |v| matches!(v, V::ArenasOverlap { segment: S2, first: ArenaId(1), second: ArenaId(2), .. }),
        ),
        case(
            "an arena extent missing from the index",
            |s| {
                let start = s.arenas[&ArenaId(0)].extents[0].offset;
                s.arenas_by_offset.remove(&(S1, start));
            },
            |v| matches!(v, V::ArenaIndex { segment: S1, .. }),
        ),
        case(
            "an index entry naming no extent",
            |s| {
                s.arenas_by_offset.insert((S1, 4096), ArenaId(0));
            },
            |v| matches!(v, V::ArenaIndex { segment: S1, offset: 4096, .. }),
        ),
        case(
            "an object without replicas",
            |s| s.objects.update("a", |o| o.replicas.clear()).unwrap(),
            |v| malformed_object(v, "0 replicas"),
        ),
        case(
            "two replicas of one object on one segment",
            |s| s.objects.update("a", |o| o.replicas[1].segment = S1).unwrap(),
            |v| malformed_object(v, "two replicas on one segment"),
        ),
        case(
            "a replica shorter than its object",
            |s| s.objects.update("a", |o| o.size_bytes = 65).unwrap(),
            |v| malformed_object(v, "is not 128 bytes"),
        ),
        case(
            "committed after the state's time",
            |s| s.objects.update("a", |o| o.committed_ms = 1_000_000).unwrap(),
            |v| malformed_object(v, "committed at 1000000 ms"),
        ),
        case(
            "a version not below the counter",
            |s| s.next_version = 1,
            |v| matches!(v, V::Malformed { problem, .. } if problem.contains("not below the counter 1")),
        ),
        case(
            "a version used twice",
            |s| {
                let a = s.object("a").unwrap().version;
                let mut r = s.retired.pop_first().unwrap().1;
                r.version = a;
                s.retired.insert(a, r);
            },
            |v| matches!(v, V::Malformed { record: Record::Retired(_), problem } if problem.contains("used twice")),
        ),
        case(
            "a retired object stored under another version",
            |s| s.retired.values_mut().next().unwrap().version = ObjectVersion(0),
            |v| matches!(v, V::Malformed { record: Record::Retired(_), problem } if problem.contains("stored under")),
        ),
        case(
            "a retired object held since after the state's time",
            |s| s.retired.values_mut().next().unwrap().retired_ms = 1_000_000,
            |v| matches!(v, V::Malformed { record: Record::Retired(_), problem } if problem.contains("held since at 1000000 ms")),
        ),
        case(
            "a segment whose owner is not registered",
            |s| {
                s.clients.remove(&NODE_B);
            },
            |v| matches!(v, V::Malformed { record: Record::Segment(S2), problem } if problem.contains("not registered")),
        ),
        case(
            "a client registered in the future",
            |s| s.clients.get_mut(&NODE_A).unwrap().registered_ms = u64::MAX,
            |v| matches!(v, V::Malformed { record: Record::Client(NODE_A), .. }),
        ),
        case(
            "an arena id not below the counter",
            |s| s.next_arena = 1,
            |v| matches!(v, V::Malformed { record: Record::Arena(ArenaId(1)), .. }),
        ),
        case(
            "a request id after the request clock",
            |s| {
                let now = s.requests.clock().now_ms;
                s.requests.insert_raw(5, now + 1, true);
            },
            |v| matches!(v, V::Malformed { record: Record::Requests, problem } if problem.contains("after the request clock")),
        ),
        case(
            "a request id missing from the time index",
            |s| s.requests.insert_raw(5, 0, false),
            |v| matches!(v, V::Malformed { record: Record::Requests, problem } if problem.contains("1 answers but 0")),
        ),
    ];
    for (what, break_it, expected) in cases {
        let mut s = base();
        break_it(&mut s);
        match s.check_invariants() {
            Err(v) if expected(&v) => {}
            other => panic!("{what}: got {other:?}"),
        }
    }
}

fn malformed_object(v: &V, problem_part: &str) -> bool {
    matches!(v, V::Malformed { record: Record::Object(k), problem } if k == "a" && problem.contains(problem_part))
}

/// Moves `id` (one extent) to `to`, keeping its index right.
fn move_arena(s: &mut MetaState, id: ArenaId, to: Range) {
    let arena = s.arenas.get_mut(&id).unwrap();
    let from = arena.extents[0];
    arena.extents = vec![to];
    let segment = arena.segment;
    s.arenas_by_offset.remove(&(segment, from.offset));
    s.arenas_by_offset.insert((segment, to.offset), id);
}

#[test]
fn a_state_rebuilt_from_its_image_keeps_its_invariants() {
    let s = base();
    let back = MetaState::from_image(s.to_image()).unwrap();
    assert_eq!(back.check_invariants(), Ok(()));
}

#[test]
fn violations_read_as_one_line_naming_what_and_where() {
    let v = V::DoubleFree { holder: Record::Retired(ObjectVersion(3)), segment: S2, range: Range::new(64, 64) };
    assert_eq!(
        v.to_string(),
        "freeing [64, 128) (64 bytes) of retired object v3 on seg-0000000000000002, which is already (partly) free: \
         a double free"
    );
    let v = V::Malformed { record: Record::Object("k".into()), problem: "0 replicas".into() };
    assert_eq!(v.to_string(), "object \"k\": 0 replicas");
}
