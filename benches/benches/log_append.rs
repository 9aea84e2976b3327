//! Durable Raft log append on the real store: `open_store` (sled + fdatasync, group-commit
//! flusher thread) and `RaftLogStorage::append` through openraft's `blocking_append`, which
//! returns only once the store's flush callback reports the batch durable.
//!
//! - `log_append/entries/N`: one append of N small entries (a `PutCommit` of one replica, ~120 bytes
//!   encoded) and its sync; throughput is per entry.
//! - `log_append/raw_4KiB_write_fdatasync`: the same-run baseline, a 4 KiB `pwrite` +
//!   `fdatasync` on a preallocated (zero-filled, synced) file in the same temp dir.
//!
//! The temp dir is created under `$MOONCAKE_BENCH_DIR` when set, else the system temp dir:
//! it must be on a real disk (not tmpfs) for the numbers to mean anything.
// Test support: a failed unwrap or expect is the test failing (the
// workspace denies them in library code: Cargo.toml [workspace.lints]).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::Path;

use criterion::{BatchSize, BenchmarkId, Criterion, SamplingMode, Throughput, criterion_group, criterion_main};
use mooncake_raft_store::{
    ArenaId, Command, Entry, LogId, NewObject, Pin, PlacedReplica, Request, StoreOptions, open_store,
};
use mooncake_segment::{ClientId, Range, SegmentId};
use openraft::storage::RaftLogStorageExt;
use openraft::{CommittedLeaderId, EntryPayload};

const PREALLOC_BYTES: u64 = 64 << 20;
const BLOCK: usize = 4096;

fn entry(index: u64) -> Entry {
    Entry {
        log_id: LogId::new(CommittedLeaderId::new(1, 1), index),
        payload: EntryPayload::Normal(Request {
            ts_ms: 1_750_000_000_000 + index,
            cmd: Command::PutCommit(NewObject {
                client: ClientId(7),
                key: format!("model-llama-70b/layer-all/prefix-{index:016x}-0123456789abcdef0123456789abcdef"),
                size_bytes: 1 << 20,
                checksum: index as u32,
                pin: Pin::None,
                replicas: vec![PlacedReplica {
                    segment: SegmentId(0x5e60_0000),
                    arena: ArenaId(3),
                    range: Range::new(index << 20, 1 << 20),
                }],
                upsert: false,
            }),
        }),
    }
}

fn temp_dir() -> tempfile::TempDir {
    match std::env::var_os("MOONCAKE_BENCH_DIR") {
        Some(dir) => tempfile::tempdir_in(dir),
        None => tempfile::tempdir(),
    }
    .expect("create a temp dir for the bench")
}

/// A zero-filled, synced file of `PREALLOC_BYTES`: later overwrites allocate no blocks.
fn preallocated(path: &Path) -> File {
    let mut file =
        OpenOptions::new().create(true).truncate(true).read(true).write(true).open(path).expect("create file");
    let chunk = vec![0u8; 1 << 20];
    for _ in 0..PREALLOC_BYTES / chunk.len() as u64 {
        file.write_all(&chunk).expect("fill file");
    }
    file.sync_all().expect("sync file");
    file
}

fn bench_log_append(c: &mut Criterion) {
    let dir = temp_dir();
    let rt = tokio::runtime::Builder::new_current_thread().build().expect("tokio runtime");
    let (mut log, _sm) = open_store(&StoreOptions::new(dir.path().join("store"))).expect("open store");
    let mut next_index = 1u64;

    let mut g = c.benchmark_group("log_append");
    g.sampling_mode(SamplingMode::Flat);
    g.sample_size(30);
    for n in [1u64, 16, 256] {
        g.throughput(Throughput::Elements(n));
        g.bench_function(BenchmarkId::new("entries", n), |b| {
            b.iter_batched(
                || {
                    let batch: Vec<Entry> = (next_index..next_index + n).map(entry).collect();
                    next_index += n;
                    batch
                },
                |batch| rt.block_on(log.blocking_append(batch)).expect("durable append"),
                BatchSize::PerIteration,
            )
        });
    }

    let raw = preallocated(&dir.path().join("prealloc"));
    let block = vec![0x5au8; BLOCK];
    let blocks = PREALLOC_BYTES / BLOCK as u64;
    let mut i = 0u64;
    g.throughput(Throughput::Elements(1));
    g.bench_function("raw_4KiB_write_fdatasync", |b| {
        b.iter(|| {
            raw.write_all_at(&block, (i % blocks) * BLOCK as u64).expect("pwrite");
            raw.sync_data().expect("fdatasync");
            i += 1;
        })
    });
    g.finish();
}

criterion_group!(benches, bench_log_append);
criterion_main!(benches);
