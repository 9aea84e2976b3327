//! The shared-memory baseline: `memcpy` of the object size from one
//! pre-faulted buffer into another, reused every time, one thread per
//! concurrent client. An shm transfer is at best one such copy (plus the
//! metadata round trips and the checksum, which this leaves out). Small
//! sizes stay in the CPU caches here, so their figure is a cache-speed
//! ceiling rather than a RAM one.

use std::hint::black_box;
use std::time::Instant;

use crate::baseline::raw_tcp::prefaulted;
use crate::stats::{Budget, Samples};

/// Copies `size` bytes per op on `threads` threads until `budget` ends.
/// Blocking: call from `spawn_blocking`.
pub fn measure(size: usize, threads: usize, budget: Budget) -> Samples {
    let start = Instant::now();
    let parts: Vec<Samples> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads).map(|_| s.spawn(|| one_thread(size, budget))).collect();
        handles.into_iter().filter_map(|h| h.join().ok()).collect()
    });
    let mut total = Samples::default();
    for p in parts {
        total.merge(p);
    }
    total.wall = start.elapsed();
    total
}

fn one_thread(size: usize, budget: Budget) -> Samples {
    let src = prefaulted(size);
    let mut dst = prefaulted(size);
    let mut samples = Samples::default();
    let bound = budget.start();
    let mut done = 0;
    while bound.go_on(done) {
        let t = Instant::now();
        dst.copy_from_slice(black_box(&src));
        black_box(&mut dst);
        samples.ok(t.elapsed(), size as u64, 1);
        done += 1;
    }
    samples
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn copies_are_counted_per_thread() {
        let s = measure(1 << 16, 2, Budget { ops_min: 3, ops_max: 3, time: Duration::from_secs(5) });
        assert_eq!((s.ops(), s.bytes), (6, 6 << 16));
        assert!(s.gb_per_s() > 0.0);
    }
}
