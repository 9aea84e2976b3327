//! State-machine apply of one log entry holding a `Command::Batch` of 1, 32 or 1024 commands.
//!
//! The state has 4 mounted 64 GiB segments on 2 hosts, each with one live leader arena of
//! 1 GiB; objects are 1 MiB with 1 replica and ~75-byte keys. Throughput is per command.
//!
//! - `apply/put_commit/N`: a batch of N `PutCommit` (the one command of a put) on a warm state.
//!   Each timed apply is followed by an untimed `RemoveObjects` of the versions it answered,
//!   which puts the allocators and the object map back in the same shape, so every iteration
//!   does the same work.
//! - `apply/put_commit_fresh_clone/N`: the same batch on a fresh clone of the state made
//!   before timing (`iter_batched`): the same work with the state's memory out of cache.
//! - `apply/put_commit_with_events/N`: `put_commit` with object events recorded and taken
//!   after each apply, as the masters' state machine does (docs/EVENTS.md): what the event
//!   feed costs apply.

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{BatchSize, BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use mooncake_raft_store::testing::{SegmentSpecExt, mount_cmd, segment};
use mooncake_raft_store::{
    Arena, Command, MetaState, NewObject, Pin, PlacedReplica, RemoveReason, Request, Response, VersionedKey,
};
use mooncake_segment::{ClientId, Range};

const TS_MS: u64 = 1_750_000_000_000;
const WRITER: ClientId = ClientId(7);
const OBJECT_BYTES: u64 = 1 << 20;
const ARENA_BYTES: u64 = 1 << 30;

fn apply_ok(state: &mut MetaState, cmd: Command) -> Response {
    let resp = state.apply(&Request { ts_ms: TS_MS, cmd });
    assert!(resp.err().is_none(), "setup command refused: {resp:?}");
    resp
}

/// 4 segments of 64 GiB, two per host, owned by two store clients, each with one arena of
/// 1 GiB granted to the leader of term 1.
fn mounted_state() -> (MetaState, Vec<Arena>) {
    let mut state = MetaState::default();
    let mut arenas = Vec::new();
    for i in 0..4u64 {
        let host = i % 2;
        let spec = segment(0x5e60_0000 + i, 64 << 30, &format!("store-{host}"))
            .endpoint(format!("10.0.0.{}:7400", host + 1))
            .zone("zone-a");
        let id = spec.id;
        apply_ok(&mut state, mount_cmd(ClientId(100 + host), spec));
        let grant = Command::ArenaGrant { segment: id, len_bytes: ARENA_BYTES, unit_bytes: OBJECT_BYTES, term: 1 };
        match apply_ok(&mut state, grant) {
            Response::ArenaGranted(a) => arenas.push(a),
            other => panic!("no arena: {other:?}"),
        }
    }
    (state, arenas)
}

fn key(i: usize) -> String {
    format!("model-llama-70b/layer-all/prefix-{i:016x}-0123456789abcdef0123456789abcdef")
}

/// N commits, spread over the arenas, each object at its own offset.
fn put_commits(n: usize, arenas: &[Arena]) -> Request {
    let cmds = (0..n)
        .map(|i| {
            let a = &arenas[i % arenas.len()];
            let offset = a.extents[0].offset + (i / arenas.len()) as u64 * OBJECT_BYTES;
            Command::PutCommit(NewObject {
                client: WRITER,
                key: key(i),
                size_bytes: OBJECT_BYTES,
                checksum: i as u32,
                pin: Pin::None,
                replicas: vec![PlacedReplica {
                    segment: a.segment,
                    arena: a.id,
                    range: Range::new(offset, OBJECT_BYTES),
                }],
                upsert: false,
            })
        })
        .collect();
    Request { ts_ms: TS_MS + 1, cmd: Command::Batch(cmds) }
}

/// The removal of what a batch of commits answered: every object, by the version it got.
fn undo_of(resp: &Response) -> Request {
    let Response::Batch(items) = resp else { panic!("not a batch response: {resp:?}") };
    let victims = items
        .iter()
        .enumerate()
        .map(|(i, r)| match r {
            Response::Committed { version } => VersionedKey { key: key(i), version: *version },
            other => panic!("a commit of the batch was refused: {other:?}"),
        })
        .collect();
    Request { ts_ms: TS_MS + 2, cmd: Command::RemoveObjects { victims, reason: RemoveReason::Evict } }
}

fn bench_apply(c: &mut Criterion) {
    let (base, arenas) = mounted_state();
    let mut g = c.benchmark_group("apply");
    for n in [1usize, 32, 1024] {
        let commits = put_commits(n, &arenas);
        // The commits apply, and their undo removes every object again.
        let mut probe = base.clone();
        let undo = undo_of(&probe.apply(&commits));
        assert!(matches!(probe.apply(&undo), Response::Removed { count } if count == n as u64));

        g.throughput(Throughput::Elements(n as u64));
        // Warm state: one state, each timed apply followed by an untimed undo (RemoveObjects),
        // which brings the allocators and the object map back to the same shape.
        g.bench_with_input(BenchmarkId::new("put_commit", n), &commits, |b, req| {
            b.iter_custom(|iters| {
                let mut state = base.clone();
                timed_with_undo(iters, &mut state, req)
            })
        });
        g.bench_with_input(BenchmarkId::new("put_commit_with_events", n), &commits, |b, req| {
            b.iter_custom(|iters| {
                let mut state = base.clone();
                state.record_events(true);
                timed_with_undo(iters, &mut state, req)
            })
        });
        // Cold state: each iteration applies to a fresh clone built before timing (its memory is
        // out of cache, as after the master has done other work between entries). Clones and
        // results are dropped after timing.
        g.bench_with_input(BenchmarkId::new("put_commit_fresh_clone", n), &commits, |b, req| {
            b.iter_batched(
                || base.clone(),
                |mut state| {
                    let resp = state.apply(black_box(req));
                    (state, resp)
                },
                BatchSize::SmallInput,
            )
        });
    }
    g.finish();
}

/// Applies `req` `iters` times to `state`, timing only those applies; after each, removes
/// (untimed) what it committed, so that the next iteration does the same work.
fn timed_with_undo(iters: u64, state: &mut MetaState, req: &Request) -> Duration {
    let mut total = Duration::ZERO;
    for _ in 0..iters {
        let t = Instant::now();
        let resp = state.apply(black_box(req));
        // Empty unless the state records events (as the masters' does).
        let events = state.take_events();
        total += t.elapsed();
        drop(black_box(events));
        let undo = undo_of(&resp);
        drop(black_box(resp));
        assert!(matches!(state.apply(&undo), Response::Removed { .. }));
        drop(state.take_events());
    }
    total
}

criterion_group!(benches, bench_apply);
criterion_main!(benches);
