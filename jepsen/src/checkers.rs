//! End-of-run checkers on final state: no acknowledged put is lost, and the
//! master quorum has converged (one agreed leader, equal indexes and state).
//!
//! Both assume the run ended quiet: faults healed, no key of the history
//! evictable (an evicted object looks lost: the workload hard-pins them), and
//! every key read once after the last op.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::history::{History, KeyOps, OpKind, Outcome};

/// A master's Raft node id.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct NodeId(pub u64);

/// What one master reports about itself after the run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeReport {
    pub id: NodeId,
    /// The leader this node follows (itself when it leads); `None` if it knows none.
    pub leader_id: Option<NodeId>,
    pub commit_index: u64,
    pub applied_index: u64,
    /// An opaque digest of the applied state machine, compared for equality.
    pub state_hash: String,
}

/// The answer of one checker.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckResult {
    pub checker: &'static str,
    /// How many things were checked (acked puts, nodes).
    pub checked: usize,
    pub violations: Vec<Violation>,
}

/// One thing that is wrong, with what was expected and what was found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Violation {
    /// An acknowledged put, never possibly removed, is not in the final read.
    LostPut {
        key: String,
        record_index: usize,
        expected: u64,
        found: Option<u64>,
    },
    /// A key with acknowledged puts to verify was not read at the end.
    MissingFinalRead {
        key: String,
        expected: Vec<u64>,
    },
    /// The final read returned a value no put on the key could have written.
    FinalValueNeverWritten {
        key: String,
        found: u64,
    },
    NoReports,
    DuplicateNode {
        node: NodeId,
    },
    NoLeader {
        node: NodeId,
    },
    /// Nodes follow different leaders: (node, leader it follows).
    LeaderDisagreement {
        views: Vec<(NodeId, Option<NodeId>)>,
    },
    /// All nodes follow a leader that is not among the reports.
    LeaderNotReporting {
        leader: NodeId,
    },
    CommitIndexMismatch {
        indexes: Vec<(NodeId, u64)>,
    },
    AppliedIndexMismatch {
        indexes: Vec<(NodeId, u64)>,
    },
    AppliedNotAtCommit {
        node: NodeId,
        applied_index: u64,
        commit_index: u64,
    },
    StateHashMismatch {
        hashes: Vec<(NodeId, String)>,
    },
}

impl CheckResult {
    fn new(checker: &'static str) -> Self {
        Self { checker, checked: 0, violations: Vec::new() }
    }

    pub fn is_valid(&self) -> bool {
        self.violations.is_empty()
    }
}

/// Every acknowledged put that no remove may have followed must be in the
/// final read with its value. Puts never overwrite (a put on a present key
/// fails), so such a put's value is exactly what the key must hold.
///
/// A remove may follow a put unless it completed before the put was invoked;
/// removes that answered not-found count too (a retried remove answers
/// not-found after its first attempt removed the key), as do unknown ones
/// and RemoveAlls (they may have removed the key).
pub fn no_lost_acked_puts(history: &History, final_reads: &BTreeMap<String, Option<u64>>) -> CheckResult {
    let mut result = CheckResult::new("no_lost_acked_puts");
    let keys = history.by_key();
    for (key, ops) in &keys {
        check_key_survivors(key, ops, final_reads.get(*key), &mut result);
    }
    for (key, found) in final_reads {
        if let (false, Some(found)) = (keys.contains_key(key.as_str()), found) {
            result.violations.push(Violation::FinalValueNeverWritten { key: key.clone(), found: *found });
        }
    }
    result
}

fn check_key_survivors(key: &str, ops: &KeyOps<'_>, final_read: Option<&Option<u64>>, result: &mut CheckResult) {
    let survivors = surviving_acked_puts(ops);
    result.checked += survivors.len();
    let key = key.to_string();
    let Some(&found) = final_read else {
        if !survivors.is_empty() {
            let expected = survivors.iter().map(|&(_, value)| value).collect();
            result.violations.push(Violation::MissingFinalRead { key, expected });
        }
        return;
    };
    for &(record_index, expected) in &survivors {
        if found != Some(expected) {
            result.violations.push(Violation::LostPut { key: key.clone(), record_index, expected, found });
        }
    }
    if let Some(found) = found
        && !possibly_written(ops).contains(&found)
    {
        result.violations.push(Violation::FinalValueNeverWritten { key, found });
    }
}

/// Acked puts (record index, value) that no remove may have followed.
fn surviving_acked_puts(ops: &KeyOps<'_>) -> Vec<(usize, u64)> {
    let removes: Vec<Option<u64>> = ops
        .iter()
        .filter(|(_, record)| {
            matches!(record.op, OpKind::Remove | OpKind::RemoveAll) && record.outcome != Outcome::Fail
        })
        .map(|(_, record)| record.effect_deadline_ns())
        .collect();
    let may_follow = |invoke_ns: u64| removes.iter().any(|deadline| deadline.is_none_or(|ns| ns >= invoke_ns));
    ops.iter()
        .filter_map(|&(index, record)| match (record.op, record.outcome) {
            (OpKind::Put { value }, Outcome::Ok) if !may_follow(record.invoke_ns) => Some((index, value)),
            _ => None,
        })
        .collect()
}

/// Values of puts on the key that may have taken effect.
fn possibly_written(ops: &KeyOps<'_>) -> BTreeSet<u64> {
    ops.iter()
        .filter_map(|(_, record)| match (record.op, record.outcome) {
            (_, Outcome::Fail) => None,
            (OpKind::Put { value }, _) => Some(value),
            _ => None,
        })
        .collect()
}

/// The masters have converged: every node follows the same leader, which is
/// among them, and all have equal commit and applied indexes (applied caught
/// up with commit) and identical state hashes.
pub fn cluster_health(states: &[NodeReport]) -> CheckResult {
    let mut result = CheckResult::new("cluster_health");
    result.checked = states.len();
    if states.is_empty() {
        result.violations.push(Violation::NoReports);
        return result;
    }
    let mut nodes: Vec<&NodeReport> = states.iter().collect();
    nodes.sort_by_key(|node| node.id);
    for pair in nodes.windows(2) {
        if pair[0].id == pair[1].id {
            result.violations.push(Violation::DuplicateNode { node: pair[0].id });
        }
    }
    check_leader(&nodes, &mut result.violations);
    check_indexes(&nodes, &mut result.violations);
    let hashes: Vec<(NodeId, String)> = nodes.iter().map(|node| (node.id, node.state_hash.clone())).collect();
    if !all_equal(hashes.iter().map(|(_, hash)| hash)) {
        result.violations.push(Violation::StateHashMismatch { hashes });
    }
    result
}

fn check_leader(nodes: &[&NodeReport], violations: &mut Vec<Violation>) {
    for node in nodes.iter().filter(|node| node.leader_id.is_none()) {
        violations.push(Violation::NoLeader { node: node.id });
    }
    let views: Vec<(NodeId, Option<NodeId>)> = nodes.iter().map(|node| (node.id, node.leader_id)).collect();
    let leaders: BTreeSet<NodeId> = nodes.iter().filter_map(|node| node.leader_id).collect();
    if leaders.len() > 1 {
        violations.push(Violation::LeaderDisagreement { views });
        return;
    }
    if let Some(&leader) = leaders.first()
        && !nodes.iter().any(|node| node.id == leader)
    {
        violations.push(Violation::LeaderNotReporting { leader });
    }
}

fn check_indexes(nodes: &[&NodeReport], violations: &mut Vec<Violation>) {
    let commits: Vec<(NodeId, u64)> = nodes.iter().map(|node| (node.id, node.commit_index)).collect();
    if !all_equal(commits.iter().map(|(_, index)| index)) {
        violations.push(Violation::CommitIndexMismatch { indexes: commits });
    }
    let applied: Vec<(NodeId, u64)> = nodes.iter().map(|node| (node.id, node.applied_index)).collect();
    if !all_equal(applied.iter().map(|(_, index)| index)) {
        violations.push(Violation::AppliedIndexMismatch { indexes: applied });
    }
    for node in nodes.iter().filter(|node| node.applied_index != node.commit_index) {
        let (applied_index, commit_index) = (node.applied_index, node.commit_index);
        violations.push(Violation::AppliedNotAtCommit { node: node.id, applied_index, commit_index });
    }
}

fn all_equal<T: PartialEq>(mut items: impl Iterator<Item = T>) -> bool {
    match items.next() {
        Some(first) => items.all(|item| item == first),
        None => true,
    }
}

impl fmt::Display for CheckResult {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let status = if self.is_valid() { "ok" } else { "FAILED" };
        writeln!(f, "{}: {status} ({} checked, {} violations)", self.checker, self.checked, self.violations.len())?;
        for violation in &self.violations {
            writeln!(f, "  {violation}")?;
        }
        Ok(())
    }
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Violation::LostPut { key, record_index, expected, found } => write!(
                f,
                "key {key:?}: acknowledged put({expected}) (record {record_index}) was never removed, \
                 but the final read found {}",
                found.map_or("nothing".to_string(), |value| format!("value {value}"))
            ),
            Violation::MissingFinalRead { key, expected } => {
                write!(f, "key {key:?}: no final read, but acknowledged puts {expected:?} must be there")
            }
            Violation::FinalValueNeverWritten { key, found } => {
                write!(f, "key {key:?}: final read found value {found}, which no put on the key wrote")
            }
            Violation::NoReports => f.write_str("no node reported"),
            Violation::DuplicateNode { node } => write!(f, "node {} reported twice", node.0),
            Violation::NoLeader { node } => write!(f, "node {} knows no leader", node.0),
            Violation::LeaderDisagreement { views } => write!(f, "nodes follow different leaders: {views:?}"),
            Violation::LeaderNotReporting { leader } => {
                write!(f, "all nodes follow leader {}, which is not among the reports", leader.0)
            }
            Violation::CommitIndexMismatch { indexes } => write!(f, "commit indexes differ: {indexes:?}"),
            Violation::AppliedIndexMismatch { indexes } => write!(f, "applied indexes differ: {indexes:?}"),
            Violation::AppliedNotAtCommit { node, applied_index, commit_index } => {
                write!(f, "node {} applied_index {applied_index} != commit_index {commit_index}: not caught up", node.0)
            }
            Violation::StateHashMismatch { hashes } => write!(f, "state hashes differ: {hashes:?}"),
        }
    }
}
