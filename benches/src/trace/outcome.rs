//! What one client's replay of its requests measured, the same for ours
//! (`replay.rs`) and upstream's (`upstream_driver.py` answers it as JSON),
//! and the merge of all clients' outcomes.

use std::time::Duration;

use serde::Deserialize;

use super::bounds::Hits;
use crate::stats::Samples;

/// Failure texts kept per replay.
const ERROR_TEXTS_MAX: usize = 3;

/// One client's replay, or all clients' merged.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct Outcome {
    pub requests: u64,
    /// Block references of its requests.
    pub refs: u64,
    /// Blocks loaded from the cache, with the right bytes, as the longest
    /// stored prefix of each request.
    pub hits: u64,
    /// Blocks the lookup found but the load then did not (evicted in
    /// between): a miss, counted apart.
    pub lost_after_lookup: u64,
    /// Blocks stored (puts that wrote bytes).
    pub stored: u64,
    /// Puts that found the block stored or being stored by another client.
    pub kept_existing: u64,
    /// Operations (per block, or per lookup call) that failed.
    pub failed: u64,
    /// Blocks read whose bytes were not the block's.
    pub corrupt: u64,
    pub error_texts: Vec<String>,
    /// Per request: lookup and load, in ns.
    pub load_ns: Vec<u64>,
    /// Per request that stored something: the stores, in ns.
    pub store_ns: Vec<u64>,
    /// The replay's wall time, in ns.
    pub wall_ns: u64,
    /// The mean share of the segment in use once it was full, in %
    /// (measured apart from the replay; `None` where not measured).
    #[serde(default)]
    pub full_pct: Option<f64>,
    /// Ours: the leader's calls (name, mean ms handled, count), measured
    /// apart from the replay.
    #[serde(default)]
    pub leader_ms: Vec<(String, f64, f64)>,
}

impl Outcome {
    /// Notes a failure (the count goes on; the text stops after a few).
    pub fn failed(&mut self, why: impl std::fmt::Display) {
        self.failed += 1;
        self.note(why);
    }

    /// Notes a corrupt read.
    pub fn corrupt(&mut self, why: impl std::fmt::Display) {
        self.corrupt += 1;
        self.note(why);
    }

    fn note(&mut self, why: impl std::fmt::Display) {
        if self.error_texts.len() < ERROR_TEXTS_MAX {
            self.error_texts.push(why.to_string());
        }
    }

    /// Adds another client's replay of the same run (wall time: the longest).
    pub fn merge(&mut self, o: Outcome) {
        self.requests += o.requests;
        self.refs += o.refs;
        self.hits += o.hits;
        self.lost_after_lookup += o.lost_after_lookup;
        self.stored += o.stored;
        self.kept_existing += o.kept_existing;
        self.failed += o.failed;
        self.corrupt += o.corrupt;
        for t in o.error_texts {
            self.note(t);
        }
        self.load_ns.extend(o.load_ns);
        self.store_ns.extend(o.store_ns);
        self.wall_ns = self.wall_ns.max(o.wall_ns);
    }

    pub fn hits(&self) -> Hits {
        Hits { refs: self.refs, hits: self.hits }
    }

    /// Requests per second of wall time.
    pub fn requests_per_s(&self) -> f64 {
        if self.wall_ns == 0 { 0.0 } else { self.requests as f64 / (self.wall_ns as f64 / 1e9) }
    }

    /// The latencies of lookup+load and of stores, as samples.
    pub fn samples(&self) -> (Samples, Samples) {
        let of = |ns: &[u64]| {
            let mut s = Samples::default();
            for n in ns {
                s.ok(Duration::from_nanos(*n), 0, 1);
            }
            s
        };
        (of(&self.load_ns), of(&self.store_ns))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merged_outcomes_add_up_and_keep_the_longest_wall() {
        let mut a = Outcome { requests: 2, refs: 10, hits: 4, wall_ns: 2_000_000_000, ..Outcome::default() };
        a.failed("first");
        let b = Outcome { requests: 3, refs: 5, hits: 1, wall_ns: 1_000_000_000, failed: 1, ..Outcome::default() };
        a.merge(b);
        assert_eq!((a.requests, a.refs, a.hits, a.failed), (5, 15, 5, 2));
        assert!((a.requests_per_s() - 2.5).abs() < 1e-9);
        assert!((a.hits().rate() - 1.0 / 3.0).abs() < 1e-9);
    }

    #[test]
    fn an_upstream_answer_parses() {
        let line = r#"{"requests": 1, "refs": 3, "hits": 1, "lost_after_lookup": 0, "stored": 2,
            "kept_existing": 0, "failed": 0, "corrupt": 0, "error_texts": [], "load_ns": [5],
            "store_ns": [7], "wall_ns": 9}"#;
        let o: Outcome = serde_json::from_str(line).unwrap();
        assert_eq!((o.hits, o.stored, o.store_ns.clone()), (1, 2, vec![7]));
    }
}
