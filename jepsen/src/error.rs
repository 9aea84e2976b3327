//! Errors of this crate: reading, writing and validating histories. Checkers
//! never fail; they return verdicts.

use crate::history::{OpKind, Outcome};

/// Why a history could not be read, written or accepted.
#[derive(Debug, thiserror::Error)]
pub enum HistoryError {
    #[error("history I/O failed: {0}")]
    Io(#[from] std::io::Error),
    #[error("history line {line}: not a valid operation record: {source}")]
    Parse { line: usize, source: serde_json::Error },
    #[error("history record {index}: could not encode: {source}")]
    Encode { index: usize, source: serde_json::Error },
    /// `index` is the record's position in the history (line number − 1 in a `history.jsonl`).
    #[error("history record {index} (line {}): {source}", index + 1)]
    Malformed { index: usize, source: RecordError },
}

/// Why one record is not a possible observation.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    #[error("{op} cannot have outcome {outcome:?}")]
    OutcomeMismatch { op: OpKind, outcome: Outcome },
    #[error("outcome {outcome:?} needs complete_ns (only Unknown ops may lack it)")]
    MissingCompletion { outcome: Outcome },
    #[error("complete_ns {complete_ns} is before invoke_ns {invoke_ns}")]
    CompletesBeforeInvoke { invoke_ns: u64, complete_ns: u64 },
    #[error("put of value {value} on key {key:?} repeats record {first_index}: put values must be unique per key")]
    DuplicatePutValue { key: String, value: u64, first_index: usize },
}
