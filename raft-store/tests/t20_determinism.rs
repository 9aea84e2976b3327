//! Time and determinism in the state machine: `now_ms` never moves back;
//! the same log gives identical state and snapshots on every replica; the
//! state hash tells states apart; a state rebuilt from its image hashes and
//! answers the same; malformed images are refused.

mod common;

use common::*;

use mooncake_raft_store::codec;
use mooncake_raft_store::state::ObjectStatus;
use mooncake_raft_store::{Command, MetaState, RemoveReason, Request, Response, VersionedKey};
use mooncake_segment::{ALLOC_ALIGN_BYTES, ClientId, Range};

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
    s.apply(&Request { ts_ms: 700, cmd: put(W1, "k", 10, 1) });
    assert_eq!(s.object("k").unwrap().created_ms, 1_000);
    s.apply(&Request { ts_ms: 2_000, cmd: put_end(W1, "k", 1) });
    assert_eq!(s.now_ms(), 2_000);
    assert_eq!(s.object("k").unwrap().completed_ms, Some(2_000));
    // Even a refused command carries time forward.
    s.apply(&Request { ts_ms: 3_000, cmd: Command::Remove { key: "ghost".into() } });
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

#[test]
fn the_same_log_on_three_replicas_gives_identical_state_and_snapshots() {
    for seed in [1u64, 2, 3] {
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
        assert!(answers[0].iter().filter(|r| matches!(r, Response::Placed { .. })).count() > 50);
        assert!(replicas[0].object_count() > 0, "seed {seed}");
        assert_no_shared_bytes(&replicas[0]);
    }
}

#[test]
fn the_state_hash_tells_different_states_apart() {
    let log = random_log(9, 200);
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
    let status = a.object(&key).unwrap().status;
    let cmd = match status {
        ObjectStatus::Complete => Command::RemoveObjects { victims: vec![victim], reason: RemoveReason::Evict },
        ObjectStatus::Processing => Command::DiscardPuts { victims: vec![victim] },
    };
    removed.apply(&Request { ts_ms: 0, cmd });
    assert!(removed.object(&key).is_none());
    assert_ne!(a.state_hash(), removed.state_hash());
    let mut spent = a.clone();
    let ts = spent.now_ms();
    assert!(spent.segments().any(|s| s.free_bytes() >= ALLOC_ALIGN_BYTES), "the log left some room");
    assert!(matches!(spent.apply(&Request { ts_ms: ts, cmd: put(W1, "fresh", 1, 1) }), Response::Placed { .. }));
    spent.apply(&Request { ts_ms: ts, cmd: Command::PutRevoke { client: W1, key: "fresh".into() } });
    assert_ne!(a.state_hash(), spent.state_hash(), "the version counter is replicated state");
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
    for seed in [11u64, 12, 13] {
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
        // The allocators were rebuilt canonically: the very next placements match.
        let mut ts = original.now_ms();
        for i in 0..40 {
            ts += 1;
            let req = Request { ts_ms: ts, cmd: put(W1, &format!("next-{i}"), 64 * (1 + i % 7), 1 + (i % 3) as u32) };
            assert_eq!(original.apply(&req), rebuilt.apply(&req), "seed {seed}, put {i}");
        }
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
fn a_fragmented_segment_rebuilt_from_its_image_places_the_next_put_in_the_same_hole() {
    let mut s = MetaState::default();
    mount(&mut s, NODE_A, segment(1, 8192, "host-a"));
    for i in 0..10 {
        put_complete(&mut s, W1, &format!("k{i}"), 64 * (1 + i % 4), 1);
    }
    for i in [1, 4, 6] {
        ok(&mut s, Command::Remove { key: format!("k{i}") });
    }
    let mut rebuilt = MetaState::from_image(s.to_image()).expect("rebuild");
    let a = placed(&mut s, put(W1, "hole", 64, 1));
    let b = placed(&mut rebuilt, put(W1, "hole", 64, 1));
    assert_eq!(a, b);
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
