//! Builders and checks shared by the state-machine tests: segments, legacy
//! puts, applying commands at a steady clock, refusals that must change
//! nothing, the no-shared-bytes invariant, a seeded PRNG and random commands.
// Test support: a failed unwrap or expect is the test failing (the
// workspace denies them in library code: Cargo.toml [workspace.lints]).
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(dead_code)] // each test file uses its own subset

use std::collections::{BTreeMap, BTreeSet};

use mooncake_raft_store::codec;
use mooncake_raft_store::state::ObjectStatus;
#[allow(unused_imports)] // as `dead_code` above: each test file uses its own subset
pub use mooncake_raft_store::testing::{SegmentSpecExt, segment};
use mooncake_raft_store::{
    Command, MetaError, MetaState, ObjectVersion, Pin, PutStart, RemoveReason, ReplicaPlacement, Request, Response,
    SegmentSpec, VersionedKey,
};
use mooncake_segment::{ALLOC_ALIGN_BYTES, ClientId, Range, SegmentId};

/// Writers (inference servers) and store nodes.
pub const W1: ClientId = ClientId(1);
pub const W2: ClientId = ClientId(2);
pub const NODE_A: ClientId = ClientId(101);
pub const NODE_B: ClientId = ClientId(102);
pub const NODE_C: ClientId = ClientId(103);

pub fn mount_cmd(client: ClientId, spec: SegmentSpec) -> Command {
    Command::MountSegment { client, segment: spec }
}

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
/// discarded put lies inside a mounted segment, replicas of one object are on
/// distinct segments, no two ranges on a segment overlap, and each
/// segment's used bytes are exactly the sum of the ranges it holds.
pub fn assert_no_shared_bytes(state: &MetaState) {
    let mut by_seg: BTreeMap<SegmentId, Vec<(Range, String)>> = BTreeMap::new();
    for o in state.objects() {
        assert!(!o.replicas.is_empty(), "object {:?} has no replica", o.key);
        let segs: BTreeSet<SegmentId> = o.replicas.iter().map(|r| r.segment).collect();
        assert_eq!(segs.len(), o.replicas.len(), "replicas of {:?} share a segment: {:?}", o.key, o.replicas);
        assert_eq!(o.status == ObjectStatus::Complete, o.checksum.is_some(), "{o:?}");
        for r in &o.replicas {
            assert!(r.range.len >= o.size_bytes, "replica of {:?} is shorter than the object", o.key);
            by_seg.entry(r.segment).or_default().push((r.range, o.key.clone()));
        }
    }
    for d in state.discarded() {
        assert!(!d.replicas.is_empty(), "discarded put {:?} holds nothing", d.version);
        for r in &d.replicas {
            by_seg.entry(r.segment).or_default().push((r.range, format!("discarded {:?}", d.version)));
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

/// splitmix64: a tiny deterministic PRNG, so a failing run replays exactly.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> Option<&'a T> {
        if items.is_empty() { None } else { Some(&items[self.below(items.len() as u64) as usize]) }
    }
}

// ---------------------------------------------------------------- builders

/// The PutStart parameters of `key` (no preferred segments, unpinned).
pub fn put_spec(client: ClientId, key: &str, size: u64, replicas: u32) -> PutStart {
    PutStart {
        client,
        key: key.to_string(),
        size_bytes: size,
        replica_num: replicas,
        preferred: Vec::new(),
        pin: Pin::None,
    }
}

/// A PutStart command.
pub fn put(client: ClientId, key: &str, size: u64, replicas: u32) -> Command {
    Command::PutStart(put_spec(client, key, size, replicas))
}

/// A PutStart command that names preferred segments.
pub fn put_preferring(client: ClientId, key: &str, size: u64, replicas: u32, preferred: &[u64]) -> Command {
    let mut p = put_spec(client, key, size, replicas);
    p.preferred = preferred.iter().map(|id| SegmentId(*id)).collect();
    Command::PutStart(p)
}

pub fn put_end(client: ClientId, key: &str, checksum: u32) -> Command {
    Command::PutEnd { client, key: key.to_string(), checksum }
}

/// Applies a PutStart and returns its placement.
pub fn placed(state: &mut MetaState, cmd: Command) -> (ObjectVersion, Vec<ReplicaPlacement>) {
    let shown = format!("{cmd:?}");
    match apply(state, cmd) {
        Response::Placed { version, replicas } => (version, replicas),
        other => panic!("{shown} was not placed: {other:?}"),
    }
}

/// PutStart then PutEnd: a complete object.
pub fn put_complete(state: &mut MetaState, client: ClientId, key: &str, size: u64, replicas: u32) -> ObjectVersion {
    let (version, _) = placed(state, put(client, key, size, replicas));
    ok(state, put_end(client, key, 0xC0FFEE));
    version
}

// ---------------------------------------------------------------- random commands

/// A random (often valid, sometimes refused) command, aimed at what exists in
/// `state` so that ends, removes and discards mostly hit real objects.
pub fn random_command(rng: &mut Rng, state: &MetaState) -> Command {
    let objects: Vec<_> = state.objects().collect();
    let discarded: Vec<_> = state.discarded().map(|d| d.version).collect();
    let client = ClientId(1 + rng.below(4));
    match rng.below(100) {
        0..=5 => {
            let id = 1 + rng.below(8);
            let owner = if rng.below(6) == 0 { client } else { ClientId(1 + id % 4) };
            let size = [4096, 8192, 16384][rng.below(3) as usize];
            mount_cmd(owner, segment(id, size, &format!("host-{}", id % 3)))
        }
        6..=8 => Command::UnmountSegment { client, segment: SegmentId(1 + rng.below(8)) },
        9..=10 => {
            let ids: BTreeSet<u64> = (0..rng.below(3)).map(|_| 1 + rng.below(8)).collect();
            let segments = ids.iter().map(|id| segment(*id, 8192, &format!("host-{}", id % 3))).collect();
            Command::RemountSegments { client, segments }
        }
        11..=44 => {
            let key = format!("k{}", rng.below(40));
            let size = 1 + rng.below(3000);
            let replicas = 1 + rng.below(3) as u32;
            if rng.below(5) == 0 {
                put_preferring(client, &key, size, replicas, &[1 + rng.below(8)])
            } else {
                put(client, &key, size, replicas)
            }
        }
        45..=64 => match rng.pick(&objects) {
            Some(o) => {
                let writer = if rng.below(10) == 0 { client } else { o.writer };
                put_end(writer, &o.key, rng.below(3) as u32)
            }
            None => put_end(client, "nothing", 1),
        },
        65..=70 => match rng.pick(&objects) {
            Some(o) => Command::PutRevoke { client: o.writer, key: o.key.clone() },
            None => Command::PutRevoke { client, key: "nothing".into() },
        },
        71..=76 => match rng.pick(&objects) {
            // Sometimes a stale (wrong) version.
            Some(o) => Command::RemoveVersion {
                key: o.key.clone(),
                version: ObjectVersion(o.version.0 + u64::from(rng.below(4) == 0)),
            },
            None => Command::RemoveVersion { key: "nothing".into(), version: ObjectVersion(1) },
        },
        77..=80 => match rng.pick(&objects) {
            Some(o) => Command::Remove { key: o.key.clone() },
            None => Command::Remove { key: "nothing".into() },
        },
        81..=84 => {
            let mut victims = Vec::new();
            for _ in 0..rng.below(4) {
                if let Some(o) = rng.pick(&objects) {
                    // Sometimes a stale (wrong) version.
                    let version = ObjectVersion(o.version.0 + u64::from(rng.below(4) == 0));
                    victims.push(VersionedKey { key: o.key.clone(), version });
                }
            }
            Command::RemoveObjects { victims, reason: RemoveReason::Evict }
        }
        85..=88 => {
            let mut victims = Vec::new();
            for _ in 0..rng.below(3) {
                if let Some(o) = rng.pick(&objects) {
                    victims.push(VersionedKey { key: o.key.clone(), version: o.version });
                }
            }
            Command::DiscardPuts { victims }
        }
        89..=91 => {
            let mut versions = Vec::new();
            for _ in 0..rng.below(3) {
                versions.extend(rng.pick(&discarded).copied());
            }
            Command::ReleaseDiscarded { versions }
        }
        92 => Command::ExpireClient { client },
        93..=96 => {
            let n = 2 + rng.below(3);
            let cmds = (0..n)
                .map(|_| match random_command(rng, state) {
                    Command::Batch(_) => Command::Noop,
                    c => c,
                })
                .collect();
            Command::Batch(cmds)
        }
        _ => put(client, "", 0, 0),
    }
}
