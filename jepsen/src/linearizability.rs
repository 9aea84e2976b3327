//! The linearizability checker: splits a [`History`] per key (a KV map is
//! linearizable exactly when every key is) and runs a bounded Wing–Gong/Lowe
//! search on each key against the register model of [`crate::history`].
//!
//! A key whose search runs out of budget is reported as unknown, never as
//! valid. Keep per-key concurrency around 10 and keys around 200 ops: the
//! search is exponential in the number of mutually concurrent ops.

use std::fmt;
use std::time::{Duration, Instant};

use crate::explain;
use crate::history::{History, KeyOps, OpRecord};
use crate::model::ModelOp;
use crate::wgl::{self, Budget, SearchOp, SearchResult};

/// Default for [`LinearizabilityConfig::max_states_per_key`]. Each state costs
/// roughly 100 bytes of memo table, so this bounds one key at ~100 MB; a key
/// of 200 ops with 10-way concurrency usually needs a few thousand.
pub const MAX_STATES_PER_KEY_DEFAULT: usize = 1_000_000;

/// How hard to look and how to read ambiguous answers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LinearizabilityConfig {
    /// Most (linearized set, register state) pairs explored on one key before
    /// it is reported as unknown (search budget exhausted). Higher finds
    /// answers for more concurrent keys at the cost of memory and time.
    /// Default [`MAX_STATES_PER_KEY_DEFAULT`].
    pub max_states_per_key: usize,
    /// Wall-clock limit per key, on top of the state limit. Default `None`:
    /// a time limit makes the verdict depend on machine load, so a seed would
    /// no longer replay the same answer.
    pub max_duration_per_key: Option<Duration>,
    /// Read a remove that answered `OBJECT_NOT_FOUND` as "the key is absent
    /// afterwards" rather than "the key was absent": a client that retries a
    /// remove whose first attempt succeeded gets not-found (docs/GUARANTEES.md).
    /// Default `true` (no false alarms); set `false` when removes are never
    /// retried, to also catch a not-found remove of a present key.
    pub remove_not_found_may_have_removed: bool,
}

impl Default for LinearizabilityConfig {
    fn default() -> Self {
        Self {
            max_states_per_key: MAX_STATES_PER_KEY_DEFAULT,
            max_duration_per_key: None,
            remove_not_found_may_have_removed: true,
        }
    }
}

/// The answer for a whole history.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verdict {
    /// True only when every key was checked and found linearizable.
    pub valid: bool,
    pub keys_checked: usize,
    /// Ops that took part in a search.
    pub ops_checked: usize,
    /// Ops that constrain nothing: `Fail` ops and reads with an `Unknown` outcome.
    pub ops_ignored: usize,
    pub states_explored: usize,
    /// Keys proven not linearizable.
    pub failures: Vec<KeyFailure>,
    /// Keys whose search ran out of budget: neither proven nor refuted.
    pub timed_out_keys: Vec<TimedOutKey>,
}

/// A key proven not linearizable.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyFailure {
    pub key: String,
    /// The smallest problem found: the op that could not take effect and why.
    pub reason: String,
    /// Ops on the key, ignored ones included.
    pub ops: usize,
}

/// A key reported as unknown (search budget exhausted).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TimedOutKey {
    pub key: String,
    pub ops: usize,
    pub states_explored: usize,
}

/// The answer for one key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KeyVerdict {
    Linearizable { states_explored: usize },
    NotLinearizable { reason: String, states_explored: usize },
    BudgetExhausted { states_explored: usize },
}

/// Checks every key of `history`.
pub fn check_linearizable(history: &History, config: &LinearizabilityConfig) -> Verdict {
    let mut verdict = Verdict {
        valid: true,
        keys_checked: 0,
        ops_checked: 0,
        ops_ignored: 0,
        states_explored: 0,
        failures: Vec::new(),
        timed_out_keys: Vec::new(),
    };
    for (key, ops) in history.by_key() {
        let prepared = prepare(&ops, config);
        verdict.keys_checked += 1;
        verdict.ops_checked += prepared.ops.len();
        verdict.ops_ignored += ops.len() - prepared.ops.len();
        let key_verdict = check_prepared(key, &ops, &prepared, config);
        verdict.record(key, ops.len(), key_verdict);
    }
    verdict.valid = verdict.failures.is_empty() && verdict.timed_out_keys.is_empty();
    verdict
}

/// Checks the ops of one key (as [`History::by_key`] returns them).
pub fn check_key(key: &str, ops: &KeyOps<'_>, config: &LinearizabilityConfig) -> KeyVerdict {
    check_prepared(key, ops, &prepare(ops, config), config)
}

/// The ops of one key that constrain the register, with their records.
struct Prepared<'a> {
    ops: Vec<SearchOp>,
    records: Vec<(usize, &'a OpRecord)>,
}

fn prepare<'a>(ops: &KeyOps<'a>, config: &LinearizabilityConfig) -> Prepared<'a> {
    let mut prepared = Prepared { ops: Vec::with_capacity(ops.len()), records: Vec::with_capacity(ops.len()) };
    for &(index, record) in ops {
        let Some(model) = ModelOp::from_record(record, config.remove_not_found_may_have_removed) else {
            continue;
        };
        let deadline_ns = record.effect_deadline_ns();
        prepared.ops.push(SearchOp { model, invoke_ns: record.invoke_ns, deadline_ns });
        prepared.records.push((index, record));
    }
    prepared
}

fn check_prepared(key: &str, ops: &KeyOps<'_>, prepared: &Prepared<'_>, config: &LinearizabilityConfig) -> KeyVerdict {
    if let Some(reason) = explain::impossible_read(key, ops) {
        return KeyVerdict::NotLinearizable { reason, states_explored: 0 };
    }
    let deadline = config.max_duration_per_key.map(|limit| Instant::now() + limit);
    let budget = Budget { max_states: config.max_states_per_key, deadline };
    match wgl::search(&prepared.ops, &budget) {
        SearchResult::Linearizable { states } => KeyVerdict::Linearizable { states_explored: states },
        SearchResult::Exhausted { states } => KeyVerdict::BudgetExhausted { states_explored: states },
        SearchResult::NotLinearizable(stuck) => KeyVerdict::NotLinearizable {
            reason: explain::stuck(&prepared.ops, &prepared.records, &stuck),
            states_explored: stuck.states,
        },
    }
}

impl Verdict {
    fn record(&mut self, key: &str, ops: usize, key_verdict: KeyVerdict) {
        match key_verdict {
            KeyVerdict::Linearizable { states_explored } => self.states_explored += states_explored,
            KeyVerdict::NotLinearizable { reason, states_explored } => {
                self.states_explored += states_explored;
                self.failures.push(KeyFailure { key: key.to_string(), reason, ops });
            }
            KeyVerdict::BudgetExhausted { states_explored } => {
                self.states_explored += states_explored;
                self.timed_out_keys.push(TimedOutKey { key: key.to_string(), ops, states_explored });
            }
        }
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let headline = match (self.failures.is_empty(), self.timed_out_keys.is_empty()) {
            (true, true) => "linearizable",
            (false, _) => "NOT linearizable",
            (true, false) => "unknown (search budget exhausted)",
        };
        writeln!(
            f,
            "{headline}: {} key(s), {} ops checked, {} ignored, {} states explored",
            self.keys_checked, self.ops_checked, self.ops_ignored, self.states_explored
        )?;
        for failure in &self.failures {
            writeln!(f, "  key {:?} ({} ops): {}", failure.key, failure.ops, failure.reason)?;
        }
        for timed_out in &self.timed_out_keys {
            writeln!(
                f,
                "  key {:?} ({} ops): unknown (search budget exhausted after {} states)",
                timed_out.key, timed_out.ops, timed_out.states_explored
            )?;
        }
        Ok(())
    }
}
