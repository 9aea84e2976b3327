//! The record of a concurrent workload against the KV store: one [`OpRecord`]
//! per client operation, collected into a validated [`History`].
//!
//! Each key is a register holding `Option<u64>` (absent, or the unique value of
//! the put that created it). What each outcome means for that register:
//!
//! | op | outcome | meaning |
//! |----|---------|---------|
//! | `put(v)` | `Ok` | took effect once, as the transition absent → `Some(v)` |
//! | `put(v)` | `Fail` | definitely did not take effect (record `OBJECT_ALREADY_EXISTS` here too) |
//! | `get` | `GetOk { value }` | read `value` (`None` = `OBJECT_NOT_FOUND`) |
//! | `exists` | `ExistsOk { exists }` | read whether the key is present |
//! | `remove` | `RemoveOk { existed: true }` | took effect: present → absent |
//! | `remove` | `RemoveOk { existed: false }` | answered `OBJECT_NOT_FOUND` |
//! | `remove_all` | `Ok` | a non-force RemoveAll answered: at one instant inside its interval it removed the key (present → absent) or left it (leased) |
//! | any | `Fail` | definitely did not take effect; the checkers ignore it |
//! | any | `Unknown` | timeout or crash: may take effect at any time after invoke, or never |
//!
//! Record `Fail` only for errors that guarantee no effect (`OBJECT_ALREADY_EXISTS`,
//! `OBJECT_HAS_LEASE`, `REPLICA_IS_NOT_READY`, `INVALID_PARAMS`, a request that
//! never left the client); transport errors and timeouts are `Unknown`.
//!
//! A RemoveAll is recorded once on every key of the workload (it answers a
//! count, not which keys it removed); an unknown one may remove any of them
//! at any time after invoke, like an unknown remove.
//!
//! A failed put is not read as "the key was present": a put in flight holds its
//! key PROCESSING, so another put gets `OBJECT_ALREADY_EXISTS` while gets still
//! answer not-found, and the in-flight put may yet be revoked.

use std::collections::{BTreeMap, HashMap};
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::error::{HistoryError, RecordError};

/// The client (worker) that ran an operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ProcessId(pub u64);

/// What an operation asked of the store.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum OpKind {
    /// Create the key with `value`; every put in a history writes a value unique for its key.
    Put { value: u64 },
    /// Read the key's value.
    Get,
    /// Ask whether the key is present.
    Exists,
    /// Delete the key.
    Remove,
    /// A non-force RemoveAll, as seen by this key: removes it unless it is leased.
    RemoveAll,
}

/// What the client saw when the operation ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Outcome {
    /// A put was acknowledged, or a RemoveAll answered.
    Ok,
    /// The operation definitely did not take effect.
    Fail,
    /// Timeout or crash: the operation may take effect at any time after invoke, or never.
    Unknown,
    /// A get answered; `None` means not found.
    GetOk { value: Option<u64> },
    /// An exists answered.
    ExistsOk { exists: bool },
    /// A remove answered; `existed: false` means `OBJECT_NOT_FOUND`.
    RemoveOk { existed: bool },
}

/// One client operation: what was asked, when, and what came back.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OpRecord {
    pub process: ProcessId,
    pub key: String,
    pub op: OpKind,
    /// When the client sent the request, on the harness's monotonic clock.
    pub invoke_ns: u64,
    /// When the client saw the answer; `None` when it never did (`Outcome::Unknown`).
    /// For an `Unknown` op a `Some` is only the moment the client gave up: the
    /// checkers still let the op take effect later.
    pub complete_ns: Option<u64>,
    pub outcome: Outcome,
}

impl OpRecord {
    /// True when the client does not know whether the operation took effect.
    pub fn is_unknown(&self) -> bool {
        self.outcome == Outcome::Unknown
    }

    /// The end of the window in which the op may take effect; `None` is +infinity.
    pub fn effect_deadline_ns(&self) -> Option<u64> {
        if self.is_unknown() { None } else { self.complete_ns }
    }

    /// Checks that the outcome fits the op and the times are ordered.
    pub fn validate(&self) -> Result<(), RecordError> {
        if !outcome_fits(self.op, self.outcome) {
            return Err(RecordError::OutcomeMismatch { op: self.op, outcome: self.outcome });
        }
        match self.complete_ns {
            None if !self.is_unknown() => Err(RecordError::MissingCompletion { outcome: self.outcome }),
            Some(complete_ns) if complete_ns < self.invoke_ns => {
                Err(RecordError::CompletesBeforeInvoke { invoke_ns: self.invoke_ns, complete_ns })
            }
            _ => Ok(()),
        }
    }
}

/// Whether `outcome` is an answer `op` can get.
fn outcome_fits(op: OpKind, outcome: Outcome) -> bool {
    matches!(
        (op, outcome),
        (_, Outcome::Fail | Outcome::Unknown)
            | (OpKind::Put { .. }, Outcome::Ok)
            | (OpKind::Get, Outcome::GetOk { .. })
            | (OpKind::Exists, Outcome::ExistsOk { .. })
            | (OpKind::Remove, Outcome::RemoveOk { .. })
            | (OpKind::RemoveAll, Outcome::Ok)
    )
}

/// A validated sequence of operation records, in any order.
///
/// Invariants (checked by [`History::new`]): every record passes
/// [`OpRecord::validate`], and no two puts on one key write the same value.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct History {
    records: Vec<OpRecord>,
}

/// The operations on one key, each with its index in the [`History`].
pub type KeyOps<'a> = Vec<(usize, &'a OpRecord)>;

impl History {
    /// Validates `records` and wraps them.
    pub fn new(records: Vec<OpRecord>) -> Result<Self, HistoryError> {
        let mut put_values: HashMap<(&str, u64), usize> = HashMap::new();
        for (index, record) in records.iter().enumerate() {
            record.validate().map_err(|source| HistoryError::Malformed { index, source })?;
            if let OpKind::Put { value } = record.op
                && let Some(first_index) = put_values.insert((record.key.as_str(), value), index)
            {
                let source = RecordError::DuplicatePutValue { key: record.key.clone(), value, first_index };
                return Err(HistoryError::Malformed { index, source });
            }
        }
        Ok(Self { records })
    }

    pub fn records(&self) -> &[OpRecord] {
        &self.records
    }

    pub fn into_records(self) -> Vec<OpRecord> {
        self.records
    }

    pub fn len(&self) -> usize {
        self.records.len()
    }

    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// Splits the history per key (P-compositionality: a KV map is
    /// linearizable exactly when each key's sub-history is). Indices refer to
    /// [`History::records`], so the n-th line of a `history.jsonl` is index n-1.
    pub fn by_key(&self) -> BTreeMap<&str, KeyOps<'_>> {
        let mut keys: BTreeMap<&str, KeyOps<'_>> = BTreeMap::new();
        for (index, record) in self.records.iter().enumerate() {
            keys.entry(record.key.as_str()).or_default().push((index, record));
        }
        keys
    }
}

impl fmt::Display for OpKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OpKind::Put { value } => write!(f, "put({value})"),
            OpKind::Get => f.write_str("get"),
            OpKind::Exists => f.write_str("exists"),
            OpKind::Remove => f.write_str("remove"),
            OpKind::RemoveAll => f.write_str("remove_all"),
        }
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Outcome::Ok => f.write_str("ok"),
            Outcome::Fail => f.write_str("fail"),
            Outcome::Unknown => f.write_str("unknown"),
            Outcome::GetOk { value: Some(value) } => write!(f, "value {value}"),
            Outcome::GetOk { value: None } => f.write_str("not found"),
            Outcome::ExistsOk { exists } => write!(f, "{exists}"),
            Outcome::RemoveOk { existed: true } => f.write_str("removed"),
            Outcome::RemoveOk { existed: false } => f.write_str("not found"),
        }
    }
}

impl fmt::Display for OpRecord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} by process {} [invoke_ns {}, complete_ns ", self.op, self.process.0, self.invoke_ns)?;
        match self.complete_ns {
            Some(complete_ns) => write!(f, "{complete_ns}")?,
            None => f.write_str("never")?,
        }
        write!(f, "] -> {}", self.outcome)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(op: OpKind, invoke_ns: u64, complete_ns: Option<u64>, outcome: Outcome) -> OpRecord {
        OpRecord { process: ProcessId(1), key: "k".into(), op, invoke_ns, complete_ns, outcome }
    }

    #[test]
    fn outcome_must_fit_the_op() {
        let bad = record(OpKind::Get, 0, Some(1), Outcome::RemoveOk { existed: true });
        assert!(matches!(bad.validate(), Err(RecordError::OutcomeMismatch { .. })));
        let good = record(OpKind::Get, 0, Some(1), Outcome::Fail);
        assert_eq!(good.validate(), Ok(()));
    }

    #[test]
    fn times_must_be_ordered_and_known_outcomes_completed() {
        let backwards = record(OpKind::Get, 5, Some(4), Outcome::GetOk { value: None });
        assert!(matches!(backwards.validate(), Err(RecordError::CompletesBeforeInvoke { .. })));
        let open = record(OpKind::Put { value: 1 }, 5, None, Outcome::Ok);
        assert!(matches!(open.validate(), Err(RecordError::MissingCompletion { .. })));
        let unknown = record(OpKind::Put { value: 1 }, 5, None, Outcome::Unknown);
        assert_eq!(unknown.validate(), Ok(()));
        assert_eq!(unknown.effect_deadline_ns(), None);
    }

    #[test]
    fn duplicate_put_values_on_one_key_are_rejected() {
        let put = record(OpKind::Put { value: 7 }, 0, Some(1), Outcome::Ok);
        let mut other_key = put.clone();
        other_key.key = "other".into();
        assert!(History::new(vec![put.clone(), other_key]).is_ok());
        let err = History::new(vec![put.clone(), put]).unwrap_err();
        assert!(err.to_string().contains("value 7"), "{err}");
    }

    #[test]
    fn by_key_keeps_history_indices() {
        let mut a = record(OpKind::Get, 0, Some(1), Outcome::GetOk { value: None });
        let b = a.clone();
        a.key = "a".into();
        let history = History::new(vec![b, a]).unwrap();
        let keys = history.by_key();
        assert_eq!(keys["a"][0].0, 1);
        assert_eq!(keys["k"][0].0, 0);
    }
}
