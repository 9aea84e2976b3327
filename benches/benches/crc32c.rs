//! crc32c (the object checksum of PutEnd) over 4 MiB: ours (`mooncake_segment::checksum`,
//! CLMUL folding) and the `crc32c` crate's (the `crc32` instruction alone), next to a memcpy
//! of 4 MiB into a pre-faulted, reused buffer: the same-run baseline of "touching 4 MiB once".

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
    g.finish();
}

criterion_group!(benches, bench_crc32c);
criterion_main!(benches);
