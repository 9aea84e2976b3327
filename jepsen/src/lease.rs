//! KV leases: the record of the lease workload and the checker of the
//! promise behind them. A read answered OK (GetReplicaList, or ExistKey
//! answering true) grants a lease of one TTL; until it runs out, no non-force
//! Remove, RemoveAll or eviction removes the object, so the reader can still
//! copy its bytes from the replica ranges it was given.
//!
//! The lease workload puts every key of its own once (one incarnation per
//! key), so a read that found the key saw *the* object, and any later absence
//! of it is its removal. Times are the harness's monotonic clock (ns since
//! the run's origin); leases run on the masters' monotonic clocks, which on
//! one machine are the same CLOCK_MONOTONIC (clock-skew faults fake only the
//! wall clock), and a lease starts no earlier than its read was invoked.
//!
//! Three violations, each judged with a margin in the system's favour:
//! - **removed inside a KV lease**: a read found the key, and a Remove
//!   answered removed before `read.invoke + ttl`;
//! - **freed inside a KV lease**: a read found the key, and a read invoked
//!   after it completed found it missing before `read.invoke + ttl` (how
//!   RemoveAll or eviction breaking a lease looks). Only for keys seen with a
//!   replica on the never-faulted store node: an object whose only replica
//!   was on a killed store node is lost without any removal;
//! - **bytes read were not the object's**: a copy made under a lease, done
//!   before the lease ran out, returned bytes other than the value put.
//!
//! Unknown outcomes (timeouts, transport errors) prove nothing.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

/// What one operation of the lease workload asked.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum LeaseOp {
    /// The key's one put, of `value` (carried in its bytes).
    Put { value: u64 },
    /// GetReplicaList: answered OK, it grants a lease.
    ReplicaList,
    /// ExistKey: answered true, it grants a lease.
    Exists,
    /// A non-force Remove.
    Remove,
    /// A non-force RemoveAll (recorded once, with an empty key).
    RemoveAll,
    /// A copy of the object's bytes from the replicas that the ReplicaList
    /// invoked at `lease_invoke_ns` returned, made under its lease.
    Copy { lease_invoke_ns: u64 },
}

/// What the workload saw.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum LeaseOutcome {
    /// The put stored its value (not `KeptExisting`).
    Stored,
    /// A read found the object: a lease. `on_steady_store`: for a
    /// GetReplicaList, whether a replica is on the never-faulted store node.
    Found { on_steady_store: Option<bool> },
    /// A read, or a Remove, answered `OBJECT_NOT_FOUND` (ExistKey: false).
    Missing,
    /// A Remove answered removed.
    Removed,
    /// A Remove was refused with `OBJECT_HAS_LEASE`.
    HasLease,
    /// A RemoveAll answered: how many objects it removed (every key space).
    RemovedCount { count: u64 },
    /// A copy read bytes: the value they decode to (`None`: no put's bytes).
    Copied { value: Option<u64> },
    /// Any other answer, or a copy that no replica served: proves nothing.
    Other,
    /// Timeout or transport error: proves nothing.
    Unknown,
}

/// One operation of the lease workload.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseRecord {
    pub key: String,
    pub op: LeaseOp,
    /// On the harness's monotonic clock, ns since the run's origin.
    pub invoke_ns: u64,
    /// When the answer came (or the client gave up, for `Unknown`).
    pub complete_ns: u64,
    pub outcome: LeaseOutcome,
}

/// The lease and the slack of the check.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeaseCheckConfig {
    /// The masters' `--default_kv_lease_ttl`, in ns.
    pub ttl_ns: u64,
    /// An event counts as inside a lease only when it came this much before
    /// the lease could end (in the system's favour: scheduling, rounding).
    pub margin_ns: u64,
}

/// How much the workload did: shows a passing verdict is not vacuous.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct LeaseCounts {
    pub keys_put: usize,
    /// Reads answered OK: leases granted.
    pub reads_found: usize,
    pub reads_missing: usize,
    pub removes_ok: usize,
    /// Removes refused with `OBJECT_HAS_LEASE`.
    pub removes_refused: usize,
    pub remove_alls: usize,
    /// Objects the answered RemoveAlls removed (of every key space).
    pub removed_by_remove_all: u64,
    /// Copies done inside their lease whose bytes were the object's.
    pub copies_verified: usize,
    /// Copies that ended after their lease could have run out: unchecked.
    pub copies_late: usize,
    /// Copies no replica served (a killed store node): unchecked.
    pub copies_failed: usize,
    /// Keys found, but never seen with a replica on the never-faulted store
    /// node: their absence is not checked (a killed store node may have held
    /// the only one).
    pub keys_unsteady: usize,
    pub unknown: usize,
}

/// One broken lease.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum LeaseViolation {
    RemovedInsideLease { key: String, read: usize, remove: usize, into_lease_us: u64 },
    FreedInsideLease { key: String, read: usize, missing: usize, into_lease_us: u64 },
    BytesNotTheObjects { key: String, copy: usize, expected: Option<u64>, found: Option<u64> },
}

/// The checker's answer.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct LeaseVerdict {
    pub counts: LeaseCounts,
    /// At most one of each kind per key (the first found).
    pub violations: Vec<LeaseViolation>,
}

impl LeaseVerdict {
    pub fn is_valid(&self) -> bool {
        self.violations.is_empty()
    }
}

/// Checks every key of the lease workload's `records` (indices in
/// violations refer to `records`).
pub fn check_kv_leases(records: &[LeaseRecord], config: &LeaseCheckConfig) -> LeaseVerdict {
    let mut verdict = LeaseVerdict::default();
    let mut keys: BTreeMap<&str, Vec<(usize, &LeaseRecord)>> = BTreeMap::new();
    for (index, record) in records.iter().enumerate() {
        count(&mut verdict.counts, record);
        if record.op != LeaseOp::RemoveAll {
            keys.entry(record.key.as_str()).or_default().push((index, record));
        }
    }
    for (key, ops) in &keys {
        check_key(key, ops, config, &mut verdict);
    }
    verdict
}

fn count(counts: &mut LeaseCounts, record: &LeaseRecord) {
    match (record.op, record.outcome) {
        (_, LeaseOutcome::Unknown) => counts.unknown += 1,
        (LeaseOp::Put { .. }, LeaseOutcome::Stored) => counts.keys_put += 1,
        (_, LeaseOutcome::Found { .. }) => counts.reads_found += 1,
        (LeaseOp::ReplicaList | LeaseOp::Exists, LeaseOutcome::Missing) => counts.reads_missing += 1,
        (_, LeaseOutcome::Removed) => counts.removes_ok += 1,
        (_, LeaseOutcome::HasLease) => counts.removes_refused += 1,
        (_, LeaseOutcome::RemovedCount { count }) => {
            counts.remove_alls += 1;
            counts.removed_by_remove_all += count;
        }
        (LeaseOp::Copy { .. }, LeaseOutcome::Other) => counts.copies_failed += 1,
        _ => {}
    }
}

type KeyRecords<'a> = [(usize, &'a LeaseRecord)];

fn check_key(key: &str, ops: &KeyRecords<'_>, config: &LeaseCheckConfig, verdict: &mut LeaseVerdict) {
    let reads: Vec<(usize, &LeaseRecord)> =
        ops.iter().copied().filter(|(_, r)| matches!(r.outcome, LeaseOutcome::Found { .. })).collect();
    let removes = |_: &LeaseRecord, rm: &LeaseRecord| rm.op == LeaseOp::Remove && rm.outcome == LeaseOutcome::Removed;
    if let Some((read, remove, into_lease_us)) = first_inside_a_lease(&reads, ops, config, removes) {
        verdict.violations.push(LeaseViolation::RemovedInsideLease { key: key.into(), read, remove, into_lease_us });
    }
    let steady = ops.iter().any(|(_, r)| r.outcome == LeaseOutcome::Found { on_steady_store: Some(true) });
    verdict.counts.keys_unsteady += usize::from(!steady && !reads.is_empty());
    let finds_it_gone = |r: &LeaseRecord, m: &LeaseRecord| {
        matches!(m.op, LeaseOp::ReplicaList | LeaseOp::Exists)
            && m.outcome == LeaseOutcome::Missing
            && m.invoke_ns > r.complete_ns
    };
    if let Some((read, missing, into_lease_us)) =
        first_inside_a_lease(&reads, ops, config, finds_it_gone).filter(|_| steady)
    {
        verdict.violations.push(LeaseViolation::FreedInsideLease { key: key.into(), read, missing, into_lease_us });
    }
    check_copies(key, ops, config, verdict);
}

/// The first (read, op, µs into the read's lease) where `breaks(read, op)`
/// and `op` completed inside the lease of `read`, margin included.
fn first_inside_a_lease(
    reads: &KeyRecords<'_>,
    ops: &KeyRecords<'_>,
    config: &LeaseCheckConfig,
    breaks: impl Fn(&LeaseRecord, &LeaseRecord) -> bool,
) -> Option<(usize, usize, u64)> {
    reads.iter().find_map(|&(read, r)| {
        let lease_end_ns = r.invoke_ns.saturating_add(config.ttl_ns);
        ops.iter()
            .find(|(_, op)| breaks(r, op) && op.complete_ns.saturating_add(config.margin_ns) < lease_end_ns)
            .map(|&(index, op)| (read, index, op.complete_ns.saturating_sub(r.invoke_ns) / 1_000))
    })
}

/// Copies made under a lease must return the value put, when they ended
/// before the lease could have run out.
fn check_copies(key: &str, ops: &KeyRecords<'_>, config: &LeaseCheckConfig, verdict: &mut LeaseVerdict) {
    let expected = ops.iter().find_map(|(_, r)| match (r.op, r.outcome) {
        (LeaseOp::Put { value }, LeaseOutcome::Stored) => Some(value),
        _ => None,
    });
    let mut reported = false;
    for &(copy, r) in ops {
        let (LeaseOp::Copy { lease_invoke_ns }, LeaseOutcome::Copied { value: found }) = (r.op, r.outcome) else {
            continue;
        };
        if r.complete_ns.saturating_add(config.margin_ns) >= lease_invoke_ns.saturating_add(config.ttl_ns) {
            verdict.counts.copies_late += 1;
        } else if expected.is_some() && found == expected {
            verdict.counts.copies_verified += 1;
        } else if !reported {
            reported = true;
            verdict.violations.push(LeaseViolation::BytesNotTheObjects { key: key.to_string(), copy, expected, found });
        }
    }
}

impl fmt::Display for LeaseViolation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LeaseViolation::RemovedInsideLease { key, read, remove, into_lease_us } => write!(
                f,
                "removed inside a KV lease: key {key:?} found by record {read}, removed by record {remove} \
                 {:.1} ms after that read was invoked",
                *into_lease_us as f64 / 1e3
            ),
            LeaseViolation::FreedInsideLease { key, read, missing, into_lease_us } => write!(
                f,
                "freed inside a KV lease: key {key:?} found by record {read}, missing for record {missing} \
                 {:.1} ms after that read was invoked",
                *into_lease_us as f64 / 1e3
            ),
            LeaseViolation::BytesNotTheObjects { key, copy, expected, found } => write!(
                f,
                "bytes read were not the object's: key {key:?} copy record {copy} read {} under its lease, \
                 the put wrote {}",
                found.map_or("bytes of no put".to_string(), |v| format!("value {v}")),
                expected.map_or("nothing recorded".to_string(), |v| format!("value {v}")),
            ),
        }
    }
}

impl fmt::Display for LeaseCounts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "keys {}  reads found {} (missing {})  removes ok {}  refused OBJECT_HAS_LEASE {}  \
             RemoveAll {} removed {}  late copies verified {} (late {}, failed {})  unsteady keys {}  unknown {}",
            self.keys_put,
            self.reads_found,
            self.reads_missing,
            self.removes_ok,
            self.removes_refused,
            self.remove_alls,
            self.removed_by_remove_all,
            self.copies_verified,
            self.copies_late,
            self.copies_failed,
            self.keys_unsteady,
            self.unknown
        )
    }
}
