//! Time and determinism in the state machine: `now_ms` never moves back;
//! the same log gives identical state and snapshots on every replica; the
//! state hash tells states apart; a state rebuilt from its image hashes and
//! answers the same; malformed images are refused. The logs come from the
//! crate's random command generator (`testing::random_command`), which is
//! checked here to emit every command variant.

mod common;

use common::*;

use mooncake_raft_store::codec;
use mooncake_raft_store::testing::{COMMAND_VARIANTS, command_variant};
use mooncake_raft_store::{Command, MetaState, ObjectVersion, RemoveReason, Request, Response, VersionedKey};
use mooncake_segment::{ClientId, Range, SegmentId};

// ================================================================ time

#[test]
fn now_ms_is_the_largest_timestamp_seen_and_never_moves_back() {
    let mut s = MetaState::default();
    assert_eq!(s.now_ms(), 0);
    s.apply(&Request { ts_ms: 1_000, cmd: Command::Noop });
    assert_eq!(s.now_ms(), 1_000);
    s.apply(&Request { ts_ms: 500, cmd: mount_cmd(NODE_A, segment(1, 1 << 20, "host-a")) });
    assert_eq!(s.now_ms(), 1_000, "a skewed leader cannot move time back");
    assert_eq!(s.client(NODE_A).unwrap().registered_ms, 1_000, "entries are stamped with state time");
    let grant = Command::ArenaGrant { segment: SegmentId(1), len_bytes: 4096, unit_bytes: 64, term: 1 };
    let Response::ArenaGranted(arena) = s.apply(&Request { ts_ms: 700, cmd: grant }) else { panic!("no arena") };
    let first = new_object(W1, "k", 10, &[(&arena, 0)]);
    assert!(matches!(s.apply(&Request { ts_ms: 700, cmd: Command::PutCommit(first) }), Response::Committed { .. }));
    assert_eq!(s.object("k").unwrap().committed_ms, 1_000);
    let second = new_object(W1, "k2", 10, &[(&arena, 64)]);
    assert!(matches!(s.apply(&Request { ts_ms: 2_000, cmd: Command::PutCommit(second) }), Response::Committed { .. }));
    assert_eq!(s.now_ms(), 2_000);
    assert_eq!(s.object("k2").unwrap().committed_ms, 2_000);
    // Even a refused command carries time forward.
    let ghost = Command::RemoveVersion { key: "ghost".into(), version: ObjectVersion(1) };
    assert!(s.apply(&Request { ts_ms: 3_000, cmd: ghost }).err().is_some());
    assert_eq!(s.now_ms(), 3_000);
}

// ================================================================ determinism

/// A log of `n` random requests generated against a reference replica;
/// timestamps mostly rise but sometimes jump back (a skewed new leader).
fn random_log(seed: u64, n: usize) -> Vec<Request> {
    let mut rng = Rng(seed);
    let mut reference = MetaState::default();
    let mut ts = 1_700_000_000_000u64;
    let mut log = Vec::with_capacity(n);
    for _ in 0..n {
        ts += rng.below(20);
        let ts_ms = if rng.below(10) == 0 { ts.saturating_sub(rng.below(500)) } else { ts };
        let req = Request { ts_ms, cmd: random_command(&mut rng, &reference) };
        reference.apply(&req);
        log.push(req);
    }
    log
}

/// How many commands of `log` (those inside batches and `Once` too) did
/// what `counted` looks for, replayed on an empty state.
fn count_in(log: &[Request], counted: impl Fn(&Command, &Response) -> bool) -> usize {
    let mut s = MetaState::default();
    let mut n = 0;
    for req in log {
        let (_, ran) = apply_traced(&mut s, req);
        n += ran.iter().filter(|(c, a)| counted(c, a)).count();
    }
    n
}

#[test]
fn the_same_log_on_three_replicas_gives_identical_state_and_snapshots() {
    for seed in [4u64, 6, 7, 8] {
        let log = random_log(seed, 400);
        let mut replicas = [MetaState::default(), MetaState::default(), MetaState::default()];
        let mut answers: [Vec<Response>; 3] = Default::default();
        for (replica, answer) in replicas.iter_mut().zip(answers.iter_mut()) {
            for req in &log {
                answer.push(replica.apply(req));
            }
        }
        assert_eq!(answers[0], answers[1]);
        assert_eq!(answers[0], answers[2]);
        let hashes: Vec<u64> = replicas.iter().map(MetaState::state_hash).collect();
        assert!(hashes.iter().all(|h| *h == hashes[0]), "{hashes:?}");
        let images: Vec<Vec<u8>> = replicas.iter().map(image_bytes).collect();
        assert!(images.iter().all(|i| *i == images[0]), "snapshots differ");
        // The log did real work, so equality is not trivially the empty state.
        let commits = count_in(&log, |_, a| matches!(a, Response::Committed { .. }));
        assert!(commits > 30, "seed {seed}: only {commits} commits");
        assert!(replicas[0].object_count() > 0, "seed {seed}");
        assert_no_shared_bytes(&replicas[0]);
    }
}

#[test]
fn the_state_hash_tells_different_states_apart() {
    let log = random_log(10, 200);
    let mut a = MetaState::default();
    for req in &log {
        a.apply(req);
    }
    assert!(a.object_count() > 0);
    let mut b = a.clone();
    assert_eq!(a.state_hash(), b.state_hash());
    // A new segment, a removed object, or only a spent version number changes it.
    mount(&mut b, ClientId(77), segment(77, 1 << 20, "host-z"));
    assert_ne!(a.state_hash(), b.state_hash());
    let mut removed = a.clone();
    let key = a.objects().next().unwrap().key.clone();
    removed.apply(&Request { ts_ms: 0, cmd: Command::RemoveObjects { victims: vec![], reason: RemoveReason::Evict } });
    assert_eq!(a.state_hash(), removed.state_hash(), "an empty removal changes nothing");
    let victim = VersionedKey { key: key.clone(), version: a.object(&key).unwrap().version };
    let cmd = Command::RemoveObjects { victims: vec![victim], reason: RemoveReason::Evict };
    assert_eq!(removed.apply(&Request { ts_ms: 0, cmd }), Response::Removed { count: 1 });
    assert!(removed.object(&key).is_none());
    assert_ne!(a.state_hash(), removed.state_hash());
    // A put committed and removed again leaves only the version counter moved.
    let mut base = b.clone();
    let arena = grant_pieces(&mut base, 77, 4096, 64, 1);
    let mut spent = base.clone();
    let ts = spent.now_ms();
    let put = Command::PutCommit(new_object(W1, "fresh", 1, &[(&arena, 0)]));
    let Response::Committed { version } = spent.apply(&Request { ts_ms: ts, cmd: put }) else {
        panic!("not committed")
    };
    let remove = Command::RemoveVersion { key: "fresh".into(), version };
    assert_eq!(spent.apply(&Request { ts_ms: ts, cmd: remove }), Response::Ok);
    let (base_image, spent_image) = (base.to_image(), spent.to_image());
    assert_eq!(base_image.objects, spent_image.objects);
    assert_eq!(base_image.arenas, spent_image.arenas);
    assert_eq!(base.segment(SegmentId(77)).unwrap().free_bytes(), spent.segment(SegmentId(77)).unwrap().free_bytes());
    assert_eq!(spent_image.next_version, base_image.next_version + 1);
    assert_ne!(base.state_hash(), spent.state_hash(), "the version counter is replicated state");
    // The clock alone is not part of it (every entry, refused ones too,
    // moves it), but the snapshot keeps it.
    let mut c = a.clone();
    c.apply(&Request { ts_ms: c.now_ms() + 1, cmd: Command::Noop });
    assert_eq!(a.state_hash(), c.state_hash());
    assert_ne!(image_bytes(&a), image_bytes(&c));
    // Nor is Raft bookkeeping.
    let mut d = a.clone();
    d.last_applied = Some(openraft::LogId::new(openraft::CommittedLeaderId::new(3, 1), 42));
    assert_eq!(a.state_hash(), d.state_hash());
}

#[test]
fn a_state_rebuilt_from_its_image_hashes_the_same_and_answers_the_next_commands_identically() {
    for seed in [11u64, 14, 15] {
        let log = random_log(seed, 300);
        let mut original = MetaState::default();
        for req in &log {
            original.apply(req);
        }
        let bytes = image_bytes(&original);
        let decoded = codec::decode("state image", &bytes).expect("decode image");
        let mut rebuilt = MetaState::from_image(decoded).expect("rebuild");
        assert_eq!(rebuilt.state_hash(), original.state_hash());
        assert_eq!(image_bytes(&rebuilt), bytes);
        for (seg_o, seg_r) in original.segments().zip(rebuilt.segments()) {
            assert_eq!(seg_o.spec, seg_r.spec);
            assert_eq!(seg_o.free_bytes(), seg_r.free_bytes());
        }
        // The allocators were rebuilt canonically: the very next grants
        // land on the same bytes.
        let mut ts = original.now_ms();
        let mut granted = 0;
        for i in 0..40u64 {
            ts += 1;
            let len = 64 * (1 + i % 7);
            let cmd = Command::ArenaGrant { segment: SegmentId(1 + i % 6), len_bytes: len, unit_bytes: 64, term: 9 };
            let req = Request { ts_ms: ts, cmd };
            let answer = original.apply(&req);
            granted += usize::from(matches!(answer, Response::ArenaGranted(_)));
            assert_eq!(answer, rebuilt.apply(&req), "seed {seed}, grant {i}");
        }
        assert!(granted > 10, "seed {seed}: only {granted} of the grants were granted");
        let mut rng = Rng(seed ^ 0xFFFF);
        for _ in 0..200 {
            ts += 1;
            let req = Request { ts_ms: ts, cmd: random_command(&mut rng, &original) };
            assert_eq!(original.apply(&req), rebuilt.apply(&req));
        }
        assert_eq!(original.state_hash(), rebuilt.state_hash());
    }
}

#[test]
fn a_fragmented_segment_rebuilt_from_its_image_grants_the_next_arena_in_the_same_hole() {
    let mut s = MetaState::default();
    mount(&mut s, NODE_A, segment(1, 8192, "host-a"));
    for i in 0..10 {
        put_complete(&mut s, W1, &format!("k{i}"), 64 * (1 + i % 4), 1);
    }
    // Holes of 128 (k1), 64 (k4) and 192 (k6) bytes; the tail is larger.
    let hole = s.object("k4").unwrap().replicas[0].range;
    for i in [1, 4, 6] {
        let key = format!("k{i}");
        let version = s.object(&key).unwrap().version;
        ok(&mut s, Command::RemoveVersion { key, version });
    }
    let mut rebuilt = MetaState::from_image(s.to_image()).expect("rebuild");
    let a = grant_pieces(&mut s, 1, 64, 64, 2);
    let b = grant_pieces(&mut rebuilt, 1, 64, 64, 2);
    assert_eq!(a, b);
    assert_eq!(a.extents, vec![hole], "best fit: the 64-byte hole");
}

#[test]
fn an_image_with_overlapping_or_orphan_ranges_is_refused() {
    let mut s = three_node_cluster(1 << 20);
    put_complete(&mut s, W1, "a", 1000, 1);
    put_complete(&mut s, W1, "b", 1000, 1);
    let mut overlapping = s.to_image();
    let first = overlapping.objects[0].replicas.clone();
    overlapping.objects[1].replicas = first;
    assert!(MetaState::from_image(overlapping).is_err(), "two objects on the same bytes");
    let mut orphan = s.to_image();
    orphan.segments.clear();
    assert!(MetaState::from_image(orphan).is_err(), "replicas on a segment that is not mounted");
    let mut outside = s.to_image();
    outside.objects[0].replicas[0].range = Range::new(1 << 20, 1024);
    assert!(MetaState::from_image(outside).is_err(), "a range past the end of its segment");
    assert!(MetaState::from_image(s.to_image()).is_ok());
}

// ================================================================ the generator

/// Counts the variant of `cmd` and of every command nested in it.
fn count_variants(cmd: &Command, seen: &mut [usize; COMMAND_VARIANTS]) {
    seen[command_variant(cmd)] += 1;
    match cmd {
        Command::Batch(cmds) => cmds.iter().for_each(|c| count_variants(c, seen)),
        Command::Once { cmd, .. } => count_variants(cmd, seen),
        _ => {}
    }
}

/// The determinism and invariant tests are only as good as the commands
/// they are fed: every variant of `Command` must come out of the generator
/// (a new variant fails to compile in `command_variant` until it is
/// numbered, and fails here until the generator emits it).
#[test]
fn the_generator_emits_every_command_variant() {
    // 1000 commands drawn from `seed`, each applied before the next is drawn.
    let draws = |seed: u64| -> Vec<Command> {
        let mut rng = Rng(seed);
        let mut s = MetaState::default();
        let mut cmds = Vec::new();
        for _ in 0..1000 {
            let cmd = random_command(&mut rng, &s);
            apply(&mut s, cmd.clone());
            cmds.push(cmd);
        }
        cmds
    };
    let mut seen = [0usize; COMMAND_VARIANTS];
    for seed in 0..4u64 {
        draws(seed).iter().for_each(|c| count_variants(c, &mut seen));
    }
    assert!(draws(7) == draws(7), "the generator is deterministic: a seed replays the same commands");
    let names = [
        "MountSegment",
        "UnmountSegment",
        "RemountSegments",
        "RemoveObjects",
        "ExpireClient",
        "Batch",
        "Once",
        "Noop",
        "RemoveVersion",
        "ArenaGrant",
        "ArenaTrim",
        "ArenaReturn",
        "PutCommit",
        "ReleaseRetired",
        "AddReplica",
        "DropTierReplicas",
        "ExpireClientKeepDisk",
        "DropDetached",
        "DropCorrupt",
        "ArenaCut",
        "SetTenantQuota",
        "PutCommitInQuota",
        "MountTenantSegment",
        "RemountTenantSegments",
        "ReattachSegments",
    ];
    let missing: Vec<String> = (0..COMMAND_VARIANTS)
        .filter(|v| seen[*v] == 0)
        .map(|v| format!("{v} ({})", names.get(v).unwrap_or(&"unnamed")))
        .collect();
    assert!(missing.is_empty(), "the generator never emitted variants {missing:?} in 4000 draws; counts {seen:?}");
}
