//! State-machine apply of one log entry holding a `Command::Batch` of 1, 32 or 1024 commands.
//!
//! The state has 4 mounted 64 GiB segments on 2 hosts; objects are 1 MiB with 1 replica and
//! ~75-byte keys. Throughput is per command.
//!
//! - `apply/put_start/N`: a batch of N PutStart on a warm state. Each timed apply is followed by
//!   an untimed PutRevoke batch, which puts the allocators and the object map back in the same
//!   shape, so every iteration does the same work.
//! - `apply/put_end/N`: the matching batch of N PutEnd on the state right after the PutStart
//!   batch; undone (untimed) by a Remove batch and the PutStart batch again.
//! - `apply/put_start_fresh_clone/N`: the PutStart batch on a fresh clone of the state made
//!   before timing (`iter_batched`): the same work with the state's memory out of cache.

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{BatchSize, BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use mooncake_raft_store::testing::{SegmentSpecExt, segment};
use mooncake_raft_store::{Command, MetaState, Pin, PutStart, Request, Response};
use mooncake_segment::ClientId;

const TS_MS: u64 = 1_750_000_000_000;
const WRITER: ClientId = ClientId(7);
const OBJECT_BYTES: u64 = 1 << 20;

fn apply_ok(state: &mut MetaState, cmd: Command) {
    let resp = state.apply(&Request { ts_ms: TS_MS, cmd });
    assert!(resp.err().is_none(), "setup command refused: {resp:?}");
}

/// 4 segments of 64 GiB, two per host, owned by two store clients.
fn mounted_state() -> MetaState {
    let mut state = MetaState::default();
    for i in 0..4u64 {
        let host = i % 2;
        let spec = segment(0x5e60_0000 + i, 64 << 30, &format!("store-{host}"))
            .endpoint(format!("10.0.0.{}:7400", host + 1))
            .zone("zone-a");
        apply_ok(&mut state, Command::MountSegment { client: ClientId(100 + host), segment: spec });
    }
    state
}

fn key(i: usize) -> String {
    format!("model-llama-70b/layer-all/prefix-{i:016x}-0123456789abcdef0123456789abcdef")
}

fn put_starts(n: usize) -> Request {
    let cmds = (0..n)
        .map(|i| {
            Command::PutStart(PutStart {
                client: WRITER,
                key: key(i),
                size_bytes: OBJECT_BYTES,
                replica_num: 1,
                preferred: Vec::new(),
                pin: Pin::None,
            })
        })
        .collect();
    Request { ts_ms: TS_MS, cmd: Command::Batch(cmds) }
}

fn put_ends(n: usize) -> Request {
    let cmds = (0..n).map(|i| Command::PutEnd { client: WRITER, key: key(i), checksum: i as u32 }).collect();
    Request { ts_ms: TS_MS + 1, cmd: Command::Batch(cmds) }
}

fn put_revokes(n: usize) -> Request {
    let cmds = (0..n).map(|i| Command::PutRevoke { client: WRITER, key: key(i) }).collect();
    Request { ts_ms: TS_MS + 2, cmd: Command::Batch(cmds) }
}

fn removes(n: usize) -> Request {
    let cmds = (0..n).map(|i| Command::Remove { key: key(i) }).collect();
    Request { ts_ms: TS_MS + 2, cmd: Command::Batch(cmds) }
}

/// Checks that every command of a batch was accepted, so the bench measures the real path.
fn assert_all_ok(resp: &Response) {
    let Response::Batch(items) = resp else { panic!("not a batch response: {resp:?}") };
    assert!(items.iter().all(|r| r.err().is_none()), "a command of the batch was refused");
}

fn bench_apply(c: &mut Criterion) {
    let base = mounted_state();
    let mut g = c.benchmark_group("apply");
    for n in [1usize, 32, 1024] {
        let starts = put_starts(n);
        let ends = put_ends(n);
        let revokes = put_revokes(n);
        let removes = removes(n);
        let mut started = base.clone();
        assert_all_ok(&started.apply(&starts));
        assert_all_ok(&started.clone().apply(&ends));

        g.throughput(Throughput::Elements(n as u64));
        // Warm state: one state, each timed apply followed by an untimed undo (PutRevoke), which
        // brings the allocators and the object map back to the same shape.
        g.bench_with_input(BenchmarkId::new("put_start", n), &starts, |b, req| {
            b.iter_custom(|iters| {
                let mut state = base.clone();
                timed_with_undo(iters, &mut state, req, &[&revokes])
            })
        });
        // Undo of a PutEnd batch: Remove the objects, then PutStart them again.
        g.bench_with_input(BenchmarkId::new("put_end", n), &ends, |b, req| {
            b.iter_custom(|iters| {
                let mut state = started.clone();
                timed_with_undo(iters, &mut state, req, &[&removes, &starts])
            })
        });
        // Cold state: each iteration applies to a fresh clone built before timing (its memory is
        // out of cache, as after the master has done other work between entries). Clones and
        // results are dropped after timing.
        g.bench_with_input(BenchmarkId::new("put_start_fresh_clone", n), &starts, |b, req| {
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

/// Applies `req` `iters` times to `state`, timing only those applies; after each, applies the
/// `undo` requests (untimed) so that the next iteration does the same work.
fn timed_with_undo(iters: u64, state: &mut MetaState, req: &Request, undo: &[&Request]) -> Duration {
    let mut total = Duration::ZERO;
    for _ in 0..iters {
        let t = Instant::now();
        let resp = state.apply(black_box(req));
        total += t.elapsed();
        drop(black_box(resp));
        for u in undo {
            assert_all_ok(&state.apply(u));
        }
    }
    total
}

criterion_group!(benches, bench_apply);
criterion_main!(benches);
