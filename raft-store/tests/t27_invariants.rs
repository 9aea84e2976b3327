//! The state's invariants (`MetaState::check_invariants`) hold under every
//! command stream, and the checks on the apply path never change an
//! answer: random streams mixing both put protocols, arenas, upserts,
//! mounts, remounts, client expiry, deduplicated retries and batches are
//! applied with `try_apply` (which reports a broken invariant instead of
//! ending the process), and the whole state is scanned after every entry.
//! The scan is explicit here, so it also runs in release test builds,
//! where `apply` leaves it out.

mod common;

use common::*;
use mooncake_raft_store::{
    Arena, ArenaId, Command, CredentialHash, MetaState, NewObject, ObjectVersion, Pin, PlacedReplica, PutStart,
    RemoveReason, Request, Response, VersionedKey,
};
use mooncake_segment::{ClientId, Range, SegmentId};

const UNIT: u64 = 4096;
/// Steps of one random run, and runs (seeds) per test.
const STEPS: u64 = 600;
const SEEDS: u64 = 24;

/// Arenas granted so far and still live.
fn live_arenas(s: &MetaState) -> Vec<Arena> {
    s.arenas().cloned().collect()
}

/// A mount, unmount or remount as it is, or (half the time) sent with one
/// of two credentials: a process's own, or another's that is refused.
fn with_credential(rng: &mut Rng, cmd: Command) -> Command {
    if rng.below(2) == 0 {
        return cmd;
    }
    let credential = CredentialHash([1 + rng.below(2) as u8; 32]);
    match cmd {
        Command::MountSegment { client, segment } => Command::MountSegmentAs { client, credential, segment },
        Command::UnmountSegment { client, segment } => Command::UnmountSegmentAs { client, credential, segment },
        Command::RemountSegments { client, segments } => Command::RemountSegmentsAs { client, credential, segments },
        other => other,
    }
}

/// A random command aimed at what exists in `s`; valid more often than not.
fn random_command(rng: &mut Rng, s: &MetaState, salt: u64) -> Command {
    let client = ClientId(1 + rng.below(3));
    let objects: Vec<(String, ObjectVersion, ClientId)> =
        s.objects().map(|o| (o.key.clone(), o.version, o.writer)).collect();
    let arenas = live_arenas(s);
    let key = format!("k{}", rng.below(24));
    match rng.below(100) {
        0..=4 => {
            let id = 1 + rng.below(4);
            with_credential(rng, mount_cmd(ClientId(100 + id % 3), segment(id, 16 * UNIT, &format!("host-{}", id % 3))))
        }
        5..=6 => {
            let unmount =
                Command::UnmountSegment { client: ClientId(100 + rng.below(3)), segment: SegmentId(1 + rng.below(4)) };
            with_credential(rng, unmount)
        }
        7 => {
            let owner = 100 + rng.below(3);
            let ids = (1..=4).filter(|id| id % 3 == owner % 100 && rng.below(2) == 0);
            let segments = ids.map(|id| segment(id, 16 * UNIT, &format!("host-{}", id % 3))).collect();
            with_credential(rng, Command::RemountSegments { client: ClientId(owner), segments })
        }
        8 => Command::ExpireClient {
            client: ClientId(if rng.below(2) == 0 { 1 + rng.below(3) } else { 100 + rng.below(3) }),
        },
        9..=22 => Command::PutStart(PutStart {
            client,
            key,
            size_bytes: 1 + rng.below(2 * UNIT),
            replica_num: 1 + rng.below(2) as u32,
            preferred: Vec::new(),
            pin: Pin::None,
        }),
        23..=30 => match rng.pick(&objects) {
            Some((key, _, writer)) => Command::PutEnd { client: *writer, key: key.clone(), checksum: 9 },
            None => Command::Noop,
        },
        31..=33 => match rng.pick(&objects) {
            Some((key, _, writer)) => Command::PutRevoke { client: *writer, key: key.clone() },
            None => Command::Noop,
        },
        34..=37 => {
            let victims = objects.iter().filter(|_| rng.below(4) == 0);
            let victims =
                victims.map(|(key, version, _)| VersionedKey { key: key.clone(), version: *version }).collect();
            Command::DiscardPuts { victims }
        }
        38..=41 => Command::ReleaseDiscarded {
            versions: s.discarded().map(|d| d.version).filter(|_| rng.below(2) == 0).collect(),
        },
        42..=48 => match rng.pick(&objects) {
            Some((key, version, _)) => Command::RemoveVersion { key: key.clone(), version: *version },
            None => Command::Noop,
        },
        49..=51 => {
            let victims = objects.iter().filter(|_| rng.below(3) == 0);
            let victims =
                victims.map(|(key, version, _)| VersionedKey { key: key.clone(), version: *version }).collect();
            Command::RemoveObjects { victims, reason: RemoveReason::Evict }
        }
        52..=57 => Command::ArenaGrant {
            segment: SegmentId(1 + rng.below(4)),
            len_bytes: (1 + rng.below(4)) * UNIT,
            unit_bytes: UNIT / (1 + rng.below(2)),
            term: 1 + rng.below(3),
        },
        58..=60 => match rng.pick(&arenas) {
            Some(a) => Command::ArenaTrim { arena: a.id, keep_bytes: rng.below(a.len_bytes() + 1) },
            None => Command::Noop,
        },
        61..=63 => Command::ArenaReturn { arenas: vec![ArenaId(rng.below(s.arenas().count() as u64 + 2))] },
        64..=79 => commit_in_arena(rng, &arenas, key, client, salt),
        80..=83 => {
            Command::ReleaseRetired { versions: s.retired().map(|r| r.version).filter(|_| rng.below(2) == 0).collect() }
        }
        84..=91 => {
            // A retried request: ids from a small pool, so some repeat.
            let inner = match random_command(rng, s, salt) {
                Command::Batch(_) | Command::Once { .. } => Command::Noop,
                c => c,
            };
            Command::Once { request_id: rng.below(16), cmd: Box::new(inner) }
        }
        92..=96 => {
            let cmds = (0..2 + rng.below(4))
                .map(|i| match random_command(rng, s, salt * 8 + i) {
                    Command::Batch(_) => Command::Noop,
                    c => c,
                })
                .collect();
            Command::Batch(cmds)
        }
        97..=99 => match rng.pick(&arenas) {
            // A piece of one extent (free or not), sometimes two.
            Some(a) => {
                let e = a.extents[rng.below(a.extents.len() as u64) as usize];
                let units = e.len / UNIT;
                let first = rng.below(units.max(1));
                let piece = |at: u64| Range::new(e.offset + at * UNIT, UNIT.min(e.len));
                let mut ranges = vec![piece(first)];
                if units > first + 1 && rng.below(2) == 0 {
                    ranges.push(piece(first + 1 + rng.below(units - first - 1)));
                }
                Command::ArenaCut { arena: a.id, ranges }
            }
            None => Command::Noop,
        },
        _ => Command::Noop,
    }
}

/// A PutCommit into up to two live arenas on distinct segments, at a
/// random aligned offset (sometimes on taken bytes, sometimes an upsert).
fn commit_in_arena(rng: &mut Rng, arenas: &[Arena], key: String, client: ClientId, salt: u64) -> Command {
    let size = 1 + rng.below(UNIT);
    let len = aligned(size);
    let mut replicas: Vec<PlacedReplica> = Vec::new();
    for _ in 0..1 + rng.below(2) {
        let Some(a) = rng.pick(arenas) else { break };
        if replicas.iter().any(|r| r.segment == a.segment) {
            continue;
        }
        let extent = a.extents[rng.below(a.extents.len() as u64) as usize];
        if extent.len < len {
            continue;
        }
        let offset = extent.offset + rng.below((extent.len - len) / 64 + 1) * 64;
        replicas.push(PlacedReplica { segment: a.segment, arena: a.id, range: Range::new(offset, len) });
    }
    if replicas.is_empty() {
        return Command::Noop;
    }
    Command::PutCommit(NewObject {
        client,
        key,
        size_bytes: size,
        checksum: salt as u32,
        pin: Pin::None,
        replicas,
        upsert: rng.below(3) == 0,
    })
}

fn start() -> MetaState {
    let mut s = MetaState::default();
    for id in 1..=4 {
        mount(&mut s, ClientId(100 + id % 3), segment(id, 16 * UNIT, &format!("host-{}", id % 3)));
    }
    s
}

#[test]
fn random_streams_keep_every_invariant_and_the_checks_change_no_answer() {
    let mut answered = [0u64; 3]; // ok, refused, other
    for seed in 0..SEEDS {
        let mut rng = Rng(seed);
        let mut s = start();
        for step in 0..STEPS {
            let cmd = random_command(&mut rng, &s, step);
            let req = Request { ts_ms: s.now_ms() + 1 + rng.below(3), cmd };
            let mut unchecked = s.clone();
            let response = match s.try_apply(&req) {
                Ok(r) => r,
                Err(v) => panic!("seed {seed} step {step}: {v}\n{req:?}"),
            };
            if let Err(v) = s.check_invariants() {
                panic!("seed {seed} step {step}: {v}\n{req:?}");
            }
            assert_eq!(unchecked.apply(&req), response, "seed {seed} step {step}: apply and try_apply differ");
            assert_eq!(unchecked.state_hash(), s.state_hash(), "seed {seed} step {step}");
            answered[match response {
                Response::Ok => 0,
                Response::Err(_) => 1,
                _ => 2,
            }] += 1;
            assert_no_shared_bytes(&s);
        }
        let rebuilt = MetaState::from_image(s.to_image()).expect("rebuild");
        assert_eq!(rebuilt.check_invariants(), Ok(()), "seed {seed}: the rebuilt state");
    }
    // Guards the generator: the runs must reach both answers and effects.
    assert!(answered.iter().all(|n| *n > 500), "answers (ok, refused, other): {answered:?}");
}

#[test]
fn the_runs_reach_objects_in_arenas_retired_and_discarded_bytes() {
    // Guards the generator further: the scan is only as good as the states
    // it sees.
    let (mut committed, mut retired, mut discarded, mut fragmented, mut cut) = (0, 0, 0, 0, 0);
    for seed in 0..SEEDS {
        let mut rng = Rng(seed);
        let mut s = start();
        for step in 0..STEPS {
            let cmd = random_command(&mut rng, &s, step);
            let cutting = matches!(cmd, Command::ArenaCut { .. });
            match apply(&mut s, cmd) {
                Response::Committed { .. } => committed += 1,
                Response::Removed { count } if cutting && count > 0 => cut += 1,
                _ => {}
            }
            retired += u64::from(s.retired().next().is_some());
            discarded += u64::from(s.discarded().next().is_some());
            fragmented += u64::from(s.arenas().any(|a| a.extents.len() > 1));
        }
    }
    assert!(committed > 200 && retired > 200 && discarded > 200, "{committed} {retired} {discarded}");
    assert!(fragmented > 0, "no arena of several extents");
    assert!(cut > 50, "only {cut} arena cuts took effect");
}
