//! The shared-memory baseline: `memcpy` of the object size into one
//! pre-faulted buffer, reused every time, from a ring of pre-faulted source
//! objects as large as the set the Mooncake get phase cycles over (so both
//! read their source from RAM, not from a cache-hot copy), one thread per
//! concurrent client. An shm transfer is at best one such copy (plus the
//! metadata round trip and the checksum, which this leaves out). Small
//! sizes whose whole ring fits the CPU caches give a cache-speed ceiling.

use std::hint::black_box;
use std::time::Instant;

use crate::baseline::raw_tcp::prefaulted;
use crate::stats::{Budget, Samples};

/// Copies `size` bytes per op on `threads` threads until `budget` ends,
/// each thread from a ring of `sources` objects (at least 1).
/// Blocking: call from `spawn_blocking`.
pub fn measure(size: usize, threads: usize, budget: Budget, sources: usize) -> Samples {
    let parts: Vec<Samples> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads).map(|_| s.spawn(|| one_thread(size, budget, sources.max(1)))).collect();
        handles.into_iter().filter_map(|h| h.join().ok()).collect()
    });
    // Wall time of the copying only (each thread times itself after
    // building its ring), the slowest thread's.
    let wall = parts.iter().map(|p| p.wall).max().unwrap_or_default();
    let mut total = Samples::default();
    for p in parts {
        total.merge(p);
    }
    total.wall = wall;
    total
}

fn one_thread(size: usize, budget: Budget, sources: usize) -> Samples {
    let ring: Vec<Vec<u8>> = (0..sources).map(|_| prefaulted(size)).collect();
    let mut dst = prefaulted(size);
    let mut samples = Samples::default();
    let start = Instant::now();
    let bound = budget.start();
    let mut done = 0;
    while bound.go_on(done) {
        let t = Instant::now();
        dst.copy_from_slice(black_box(&ring[done as usize % ring.len()]));
        black_box(&mut dst);
        samples.ok(t.elapsed(), size as u64, 1);
        done += 1;
    }
    samples.wall = start.elapsed();
    samples
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn copies_are_counted_per_thread() {
        let s = measure(1 << 16, 2, Budget { ops_min: 3, ops_max: 3, time: Duration::from_secs(5) }, 2);
        assert_eq!((s.ops(), s.bytes), (6, 6 << 16));
        assert!(s.gb_per_s() > 0.0);
    }
}
