//! Measurements of one phase: per-operation latencies, bytes or items moved,
//! failures, and the wall time of the whole phase. Throughput is always
//! aggregate work divided by wall time (so N concurrent clients add up), and
//! percentiles come from every single operation, never from averages.

use std::time::{Duration, Instant};

/// Failure messages kept per phase (the count goes on; the text stops).
const ERROR_TEXTS_MAX: usize = 3;

/// What one phase measured.
#[derive(Clone, Debug, Default)]
pub struct Samples {
    latencies: Vec<Duration>,
    /// Payload bytes of the successful operations.
    pub bytes: u64,
    /// Items (keys) of the successful operations; one per op unless batched.
    pub items: u64,
    /// Operations that failed.
    pub errors: u64,
    /// The first few failure messages.
    pub error_texts: Vec<String>,
    /// Wall time from the start of the first to the end of the last operation.
    pub wall: Duration,
}

impl Samples {
    /// One successful operation of `bytes` payload and `items` keys.
    pub fn ok(&mut self, latency: Duration, bytes: u64, items: u64) {
        self.latencies.push(latency);
        self.bytes += bytes;
        self.items += items;
    }

    /// One failed operation.
    pub fn failed(&mut self, why: impl std::fmt::Display) {
        self.errors += 1;
        if self.error_texts.len() < ERROR_TEXTS_MAX {
            self.error_texts.push(why.to_string());
        }
    }

    /// Adds another worker's samples of the same phase (wall time: the longest).
    pub fn merge(&mut self, other: Samples) {
        self.latencies.extend(other.latencies);
        self.bytes += other.bytes;
        self.items += other.items;
        self.errors += other.errors;
        for t in other.error_texts {
            if self.error_texts.len() < ERROR_TEXTS_MAX {
                self.error_texts.push(t);
            }
        }
        self.wall = self.wall.max(other.wall);
    }

    /// Successful operations.
    pub fn ops(&self) -> u64 {
        self.latencies.len() as u64
    }

    /// The `p`-quantile (0.0..=1.0) of the latencies, nearest rank.
    pub fn quantile(&self, p: f64) -> Duration {
        let mut v = self.latencies.clone();
        v.sort_unstable();
        let idx = ((v.len() as f64 - 1.0) * p.clamp(0.0, 1.0)).round() as usize;
        v.get(idx).copied().unwrap_or_default()
    }

    pub fn p50_ms(&self) -> f64 {
        self.quantile(0.5).as_secs_f64() * 1e3
    }

    pub fn p99_ms(&self) -> f64 {
        self.quantile(0.99).as_secs_f64() * 1e3
    }

    /// Aggregate payload throughput in GB/s (10^9 bytes per second).
    pub fn gb_per_s(&self) -> f64 {
        per_second(self.bytes, self.wall) / 1e9
    }

    /// Aggregate operations per second.
    pub fn ops_per_s(&self) -> f64 {
        per_second(self.ops(), self.wall)
    }

    /// Aggregate items (keys) per second.
    pub fn items_per_s(&self) -> f64 {
        per_second(self.items, self.wall)
    }
}

fn per_second(n: u64, wall: Duration) -> f64 {
    if wall.is_zero() { 0.0 } else { n as f64 / wall.as_secs_f64() }
}

/// When a worker loop stops: after `ops_max` operations or at `deadline`,
/// whichever comes first (and never before `ops_min`, unless the deadline
/// passed by more than the time budget again: a stuck system still ends).
#[derive(Clone, Copy, Debug)]
pub struct Budget {
    pub ops_min: u64,
    pub ops_max: u64,
    pub time: Duration,
}

impl Budget {
    /// A loop bound that starts now.
    pub fn start(&self) -> Bound {
        let now = Instant::now();
        Bound { budget: *self, deadline: now + self.time, hard: now + self.time * 2 }
    }
}

/// A running [`Budget`].
#[derive(Clone, Copy, Debug)]
pub struct Bound {
    budget: Budget,
    deadline: Instant,
    hard: Instant,
}

impl Bound {
    /// Whether operation number `done` (0-based) may still start.
    pub fn go_on(&self, done: u64) -> bool {
        if done >= self.budget.ops_max {
            return false;
        }
        let now = Instant::now();
        if done < self.budget.ops_min { now < self.hard } else { now < self.deadline }
    }
}

/// Ratio `a / b`, or `None` when there is no baseline to divide by.
pub fn ratio(a: f64, b: Option<f64>) -> Option<f64> {
    b.filter(|b| *b > 0.0).map(|b| a / b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_and_rates_come_from_every_sample() {
        let mut s = Samples::default();
        for ms in 1..=100 {
            s.ok(Duration::from_millis(ms), 1_000_000, 2);
        }
        s.wall = Duration::from_secs(1);
        assert_eq!(s.quantile(0.5), Duration::from_millis(51));
        assert_eq!(s.quantile(0.99), Duration::from_millis(99));
        assert!((s.gb_per_s() - 0.1).abs() < 1e-9);
        assert!((s.items_per_s() - 200.0).abs() < 1e-9);
        let mut t = Samples::default();
        t.failed("boom");
        t.wall = Duration::from_secs(2);
        s.merge(t);
        assert_eq!((s.ops(), s.errors, s.wall), (100, 1, Duration::from_secs(2)));
        assert_eq!(Samples::default().quantile(0.99), Duration::ZERO);
    }

    #[test]
    fn budgets_stop_on_count_or_time() {
        let b = Budget { ops_min: 2, ops_max: 5, time: Duration::ZERO }.start();
        assert!(!b.go_on(0), "zero time: even the minimum gives way to the hard limit");
        assert!(!b.go_on(5));
        let b = Budget { ops_min: 0, ops_max: 5, time: Duration::from_secs(60) }.start();
        assert!(b.go_on(4) && !b.go_on(5));
        assert_eq!(ratio(2.0, Some(4.0)), Some(0.5));
        assert_eq!(ratio(2.0, None), None);
        assert_eq!(ratio(2.0, Some(0.0)), None);
    }
}
