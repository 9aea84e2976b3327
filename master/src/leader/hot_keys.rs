//! Hot keys (docs/OPERATIONS.md, "Hot keys"): which keys are read fast
//! enough to get more memory replicas, and which of those have cooled.
//!
//! The leader counts each key's reads over a heat window
//! (`--dynamic_replication_heat_window_seconds`). A key read
//! `--dynamic_replication_admission_qps_threshold` times a second over the
//! window is admitted: the copy duty gives it one more memory replica
//! (`objects/hot_keys.rs`), up to `--dynamic_replication_max_memory_replicas`,
//! and its window starts again, so a key that stays hot is admitted again
//! and fans out one replica per window's worth of reads. A key that got
//! replicas and then went a whole window without being admitted has cooled:
//! the replicas it got are dropped again.
//!
//! Leader-local soft state, bounded ([`WINDOWS_MAX`]). A new leader counts
//! afresh: the replicas an earlier leader added stay until eviction takes
//! them or their object is replaced.

use std::collections::{HashMap, HashSet, VecDeque};
use std::time::{Duration, Instant};

use mooncake_raft_store::ObjectVersion;
use mooncake_segment::SegmentId;

/// Most keys whose reads are counted at once; past it, windows that ended
/// are forgotten, and while every window is current new keys go uncounted.
pub const WINDOWS_MAX: usize = 100_000;

/// What the leader does with hot keys (`--dynamic_replication_mode`, upstream's
/// values).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum HotKeyMode {
    /// Reads are not counted.
    Off,
    /// Reads are counted and admissions reported (metrics, log), nothing copied.
    Observe,
    /// Admitted keys get memory replicas; cooled ones lose them.
    Enforce,
}

/// The flags of hot-key replication.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct HotKeyPolicy {
    pub mode: HotKeyMode,
    /// The heat window.
    pub window: Duration,
    /// Reads a second, over the window, that admit a key.
    pub admission_qps: f64,
    /// Most memory replicas a hot key gets (its put's included).
    pub max_memory_replicas: usize,
}

impl HotKeyPolicy {
    /// Upstream's defaults: off; 10 s, 0.8 reads/s, 2 memory replicas.
    pub fn off() -> Self {
        HotKeyPolicy {
            mode: HotKeyMode::Off,
            window: Duration::from_secs(10),
            admission_qps: 0.8,
            max_memory_replicas: 2,
        }
    }

    /// Reads within one window that admit a key (at least 1).
    pub fn admission_reads(&self) -> u32 {
        (self.admission_qps * self.window.as_secs_f64()).ceil().max(1.0) as u32
    }
}

#[derive(Clone, Copy, Debug)]
struct Window {
    start: Instant,
    reads: u32,
}

/// A key that got memory replicas: its version then, and where they went.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fanned {
    pub version: ObjectVersion,
    pub added: Vec<SegmentId>,
}

/// The leader's read counts and the keys it fanned out.
#[derive(Debug, Default)]
pub struct HotKeys {
    windows: HashMap<String, Window>,
    /// Keys admitted, waiting for the copy duty (oldest first).
    admitted: VecDeque<String>,
    queued: HashSet<String>,
    fanned: HashMap<String, Fanned>,
}

impl HotKeys {
    /// Counts one read of `key`; answers whether it admitted the key (its
    /// window reached the admission reads).
    pub fn note_read(&mut self, key: &str, now: Instant, policy: &HotKeyPolicy) -> bool {
        if !self.windows.contains_key(key) && self.windows.len() >= WINDOWS_MAX {
            self.windows.retain(|_, w| now.saturating_duration_since(w.start) < policy.window);
            if self.windows.len() >= WINDOWS_MAX {
                return false;
            }
        }
        // Looked up before inserting: a read of a counted key allocates nothing.
        let w = match self.windows.get_mut(key) {
            Some(w) => w,
            None => self.windows.entry(key.to_string()).or_insert(Window { start: now, reads: 0 }),
        };
        if now.saturating_duration_since(w.start) >= policy.window {
            *w = Window { start: now, reads: 0 };
        }
        w.reads = w.reads.saturating_add(1);
        if w.reads < policy.admission_reads() {
            return false;
        }
        *w = Window { start: now, reads: 0 };
        if self.queued.insert(key.to_string()) {
            self.admitted.push_back(key.to_string());
        }
        true
    }

    /// Up to `max` admitted keys, oldest first, no longer queued.
    pub fn take_admitted(&mut self, max: usize) -> Vec<String> {
        let n = max.min(self.admitted.len());
        let out: Vec<String> = self.admitted.drain(..n).collect();
        out.iter().for_each(|k| {
            self.queued.remove(k);
        });
        out
    }

    /// Queues `key` again (its copy waits for an arena).
    pub fn requeue(&mut self, key: String) {
        if self.queued.insert(key.clone()) {
            self.admitted.push_front(key);
        }
    }

    /// Notes a replica the fan-out added to `key` at `version` on `segment`.
    pub fn note_added(&mut self, key: &str, version: ObjectVersion, segment: SegmentId) {
        let f = self.fanned.entry(key.to_string()).or_insert(Fanned { version, added: Vec::new() });
        if f.version != version {
            *f = Fanned { version, added: Vec::new() };
        }
        if !f.added.contains(&segment) {
            f.added.push(segment);
        }
    }

    /// The fanned keys that went a whole window without being admitted,
    /// with the replicas they got (still tracked until [`HotKeys::forget`]).
    pub fn cooled(&self, now: Instant, policy: &HotKeyPolicy) -> Vec<(String, Fanned)> {
        self.fanned
            .iter()
            .filter(|(k, _)| {
                self.windows.get(*k).is_none_or(|w| now.saturating_duration_since(w.start) >= policy.window)
                    && !self.queued.contains(*k)
            })
            .map(|(k, f)| (k.clone(), f.clone()))
            .collect()
    }

    /// Stops tracking `key`'s added replicas (dropped, or its object gone).
    pub fn forget(&mut self, key: &str) {
        self.fanned.remove(key);
    }

    /// Keys holding replicas the fan-out added.
    pub fn fanned_count(&self) -> usize {
        self.fanned.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> HotKeyPolicy {
        HotKeyPolicy {
            mode: HotKeyMode::Enforce,
            window: Duration::from_secs(10),
            admission_qps: 0.5,
            max_memory_replicas: 3,
        }
    }

    /// Why: a key read often enough is admitted once per window's worth of
    /// reads (so a very hot key fans out quickly), and a key read slowly
    /// never is.
    #[test]
    fn a_key_is_admitted_each_time_its_window_reaches_the_admission_reads() {
        let p = policy();
        assert_eq!(p.admission_reads(), 5);
        let t0 = Instant::now();
        let mut h = HotKeys::default();
        let admitted: Vec<bool> = (0..10).map(|i| h.note_read("hot", t0 + Duration::from_millis(i), &p)).collect();
        assert_eq!(admitted.iter().filter(|a| **a).count(), 2, "{admitted:?}");
        assert_eq!(h.take_admitted(8), vec!["hot".to_string()], "queued once while waiting");
        assert!(h.take_admitted(8).is_empty());
        // Four reads a window, for three windows: never admitted.
        for w in 0..3u64 {
            for i in 0..4u64 {
                let at = t0 + Duration::from_secs(10 * w + i);
                assert!(!h.note_read("lukewarm", at, &p));
            }
        }
    }

    /// Why: the replicas a hot key got are dropped only once it went a
    /// whole window without admission, and only those it got.
    #[test]
    fn a_fanned_key_cools_after_a_window_without_admission() {
        let p = policy();
        let t0 = Instant::now();
        let mut h = HotKeys::default();
        for i in 0..5 {
            h.note_read("k", t0 + Duration::from_millis(i), &p);
        }
        h.take_admitted(8);
        h.note_added("k", ObjectVersion(7), SegmentId(2));
        h.note_added("k", ObjectVersion(7), SegmentId(2));
        assert!(h.cooled(t0 + Duration::from_secs(5), &p).is_empty(), "its window is current");
        let cooled = h.cooled(t0 + Duration::from_secs(11), &p);
        assert_eq!(cooled, vec![("k".to_string(), Fanned { version: ObjectVersion(7), added: vec![SegmentId(2)] })]);
        // Read hot again in a new window: not cool.
        for i in 0..5 {
            h.note_read("k", t0 + Duration::from_secs(12) + Duration::from_millis(i), &p);
        }
        h.take_admitted(8);
        assert!(h.cooled(t0 + Duration::from_secs(13), &p).is_empty());
        h.note_added("k", ObjectVersion(8), SegmentId(3));
        h.forget("k");
        assert!(h.cooled(t0 + Duration::from_secs(60), &p).is_empty());
        assert_eq!(h.fanned_count(), 0);
    }
}
