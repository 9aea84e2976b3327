//! `RangeAllocator` (the master's per-segment offset allocator) under fragmentation.
//!
//! - `alloc_free_1MiB/empty_1GiB`: allocate + free of 1 MiB in an empty 1 GiB segment (the baseline).
//! - `alloc_free_1MiB/fragmented_1GiB`: the same in a 1 GiB segment filled with random-size
//!   allocations of 4 KiB–4 MiB of which every other one was freed.
//! - `alloc_free_4KiB/fragmented_100k_extents`: allocate + free of 4 KiB when the free set is
//!   100,000 extents of 4–64 KiB separated by used 4 KiB blocks.
//!
//! Each iteration frees what it allocated; the free set is canonical, so the allocator is back in
//! the same state and every iteration measures the same work.
// Test support: a failed unwrap or expect is the test failing (the
// workspace denies them in library code: Cargo.toml [workspace.lints]).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use mooncake_segment::{Range, RangeAllocator};

const KIB: u64 = 1 << 10;
const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

/// splitmix64: a tiny deterministic generator, so every run fragments the same way.
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A multiple of `step` in `[lo, hi]`.
    fn size(&mut self, lo: u64, hi: u64, step: u64) -> u64 {
        lo + (self.next() % ((hi - lo) / step + 1)) * step
    }
}

/// A 1 GiB segment filled with 4 KiB–4 MiB allocations, every other one freed.
fn fragmented_1gib() -> RangeAllocator {
    let mut rng = SplitMix(0x6d6f_6f6e);
    let mut alloc = RangeAllocator::new(GIB);
    let mut placed = Vec::new();
    while let Some(r) = alloc.allocate(rng.size(4 * KIB, 4 * MIB, 4 * KIB)) {
        placed.push(r);
    }
    // Fill the tail left by the last refused size, so the segment is full.
    while let Some(r) = alloc.allocate(alloc.largest_free_bytes()) {
        placed.push(r);
    }
    for r in placed.iter().step_by(2) {
        alloc.free(*r).expect("free of an allocated range");
    }
    alloc
}

/// 100,000 free extents of 4–64 KiB, each followed by a used 4 KiB block.
fn fragmented_100k_extents() -> RangeAllocator {
    let mut rng = SplitMix(0x6361_6b65);
    let mut used = Vec::with_capacity(100_000);
    let mut at = 0;
    for _ in 0..100_000 {
        at += rng.size(4 * KIB, 64 * KIB, 4 * KIB);
        used.push(Range::new(at, 4 * KIB));
        at += 4 * KIB;
    }
    RangeAllocator::with_allocated(at, used).expect("disjoint ranges")
}

fn alloc_free(alloc: &mut RangeAllocator, len: u64) {
    let r = alloc.allocate(black_box(len)).expect("room for the allocation");
    alloc.free(black_box(r)).expect("free of the range just allocated");
}

fn bench_allocator(c: &mut Criterion) {
    let mut empty = RangeAllocator::new(GIB);
    let mut frag = fragmented_1gib();
    let mut many = fragmented_100k_extents();
    eprintln!(
        "allocator setup: fragmented_1GiB has {} free extents ({} MiB free, largest {} KiB); \
         fragmented_100k_extents has {} free extents",
        frag.free_extent_count(),
        frag.free_bytes() / MIB,
        frag.largest_free_bytes() / KIB,
        many.free_extent_count()
    );

    let mut g = c.benchmark_group("alloc_free_1MiB");
    g.bench_function("empty_1GiB", |b| b.iter(|| alloc_free(&mut empty, MIB)));
    g.bench_function("fragmented_1GiB", |b| b.iter(|| alloc_free(&mut frag, MIB)));
    g.finish();

    let mut g = c.benchmark_group("alloc_free_4KiB");
    g.bench_function("fragmented_100k_extents", |b| b.iter(|| alloc_free(&mut many, 4 * KIB)));
    g.finish();
}

criterion_group!(benches, bench_allocator);
criterion_main!(benches);
