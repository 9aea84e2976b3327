//! crc32c (the object checksum of PutEnd) over 4 MiB: ours (`mooncake_segment::checksum`,
//! CLMUL folding) and the `crc32c` crate's (the `crc32` instruction alone), next to a memcpy
//! of 4 MiB into a pre-faulted, reused buffer: the same-run baseline of "touching 4 MiB once".
//! And a same-host (shared-memory) get's copy out of a segment mapping: the copy then a
//! checksum pass over the copy (`read_at` + `crc32c`, the old path) against the fused copy
//! that checksums each 64 KiB piece while it is still in cache (`read_at_checksummed`).

// A bench's set-up failing is a bench that cannot run.
#![allow(clippy::expect_used)]

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};

const LEN: usize = 4 << 20;

fn bench_crc32c(c: &mut Criterion) {
    // Non-trivial contents (a cheap LCG), so nothing can be special-cased.
    let mut x: u32 = 0x1234_5678;
    let src: Vec<u8> = (0..LEN)
        .map(|_| {
            x = x.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            (x >> 24) as u8
        })
        .collect();
    // Written once before timing: every page is faulted in and stays mapped.
    let mut dst = vec![0xa5u8; LEN];

    let mut g = c.benchmark_group("4MiB");
    g.throughput(Throughput::Bytes(LEN as u64));
    g.bench_function("crc32c", |b| b.iter(|| mooncake_segment::checksum::crc32c(black_box(&src))));
    g.bench_function("crc32c_instruction_only", |b| b.iter(|| crc32c::crc32c(black_box(&src))));
    g.bench_function("memcpy_prefaulted", |b| {
        b.iter(|| {
            dst.copy_from_slice(black_box(&src));
            black_box(&mut dst);
        })
    });
    let segment = mooncake_segment::SegmentMemory::anonymous(LEN as u64, true).expect("a 4 MiB mapping");
    segment.write_at(0, &src).expect("fill the mapping");
    g.bench_function("segment_copy_then_crc32c", |b| {
        b.iter(|| {
            segment.read_at(0, &mut dst).expect("in range");
            black_box(mooncake_segment::checksum::crc32c(&dst))
        })
    });
    g.bench_function("segment_copy_checksummed", |b| {
        b.iter(|| black_box(segment.read_at_checksummed(0, &mut dst).expect("in range")))
    });
    g.finish();
}

criterion_group!(benches, bench_crc32c);
criterion_main!(benches);
