//! `history.jsonl`: one JSON [`OpRecord`] per line, e.g.
//!
//! ```text
//! {"process":3,"key":"k7","op":{"type":"put","value":42},"invoke_ns":100,"complete_ns":250,"outcome":{"type":"ok"}}
//! {"process":4,"key":"k7","op":{"type":"get"},"invoke_ns":300,"complete_ns":null,"outcome":{"type":"unknown"}}
//! ```
//!
//! Records may appear in any order (a recorder usually writes them as they
//! complete); blank lines are skipped.

use std::io::{BufRead, Write};

use crate::error::HistoryError;
use crate::history::{History, OpRecord};

/// Appends one record as one line; for recorders that stream records as they finish.
pub fn write_record<W: Write>(writer: &mut W, record: &OpRecord) -> Result<(), HistoryError> {
    write_line(writer, 0, record)
}

/// Writes every record, one per line, and flushes.
pub fn write_jsonl<W: Write>(writer: &mut W, records: &[OpRecord]) -> Result<(), HistoryError> {
    for (index, record) in records.iter().enumerate() {
        write_line(writer, index, record)?;
    }
    writer.flush()?;
    Ok(())
}

fn write_line<W: Write>(writer: &mut W, index: usize, record: &OpRecord) -> Result<(), HistoryError> {
    serde_json::to_writer(&mut *writer, record).map_err(|source| HistoryError::Encode { index, source })?;
    writer.write_all(b"\n")?;
    Ok(())
}

/// Reads and validates a whole history.
pub fn read_jsonl<R: BufRead>(reader: R) -> Result<History, HistoryError> {
    let mut records = Vec::new();
    for (line_index, line) in reader.lines().enumerate() {
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        let record =
            serde_json::from_str(&line).map_err(|source| HistoryError::Parse { line: line_index + 1, source })?;
        records.push(record);
    }
    History::new(records)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::{OpKind, Outcome, ProcessId};

    fn sample() -> Vec<OpRecord> {
        let put = OpRecord {
            process: ProcessId(3),
            key: "k7".into(),
            op: OpKind::Put { value: 42 },
            invoke_ns: 100,
            complete_ns: Some(250),
            outcome: Outcome::Ok,
        };
        let get = OpRecord {
            op: OpKind::Get,
            invoke_ns: 300,
            complete_ns: None,
            outcome: Outcome::Unknown,
            process: ProcessId(4),
            ..put.clone()
        };
        vec![put, get]
    }

    #[test]
    fn the_documented_format_is_what_we_write() {
        let mut out = Vec::new();
        write_jsonl(&mut out, &sample()).unwrap();
        let text = String::from_utf8(out).unwrap();
        let first = text.lines().next().unwrap();
        assert_eq!(
            first,
            r#"{"process":3,"key":"k7","op":{"type":"put","value":42},"invoke_ns":100,"complete_ns":250,"outcome":{"type":"ok"}}"#
        );
    }

    #[test]
    fn round_trip_skips_blank_lines() {
        let mut out = Vec::new();
        write_jsonl(&mut out, &sample()).unwrap();
        out.extend_from_slice(b"\n  \n");
        let history = read_jsonl(out.as_slice()).unwrap();
        assert_eq!(history.records(), sample().as_slice());
    }

    #[test]
    fn parse_errors_name_the_line() {
        let text = "\n{\"process\":1}\n";
        let err = read_jsonl(text.as_bytes()).unwrap_err();
        assert!(matches!(err, HistoryError::Parse { line: 2, .. }), "{err}");
    }

    #[test]
    fn malformed_records_are_rejected_on_read() {
        let mut records = sample();
        records[1].outcome = Outcome::ExistsOk { exists: true };
        let mut out = Vec::new();
        write_jsonl(&mut out, &records).unwrap();
        let err = read_jsonl(out.as_slice()).unwrap_err();
        assert!(matches!(err, HistoryError::Malformed { index: 1, .. }), "{err}");
        assert!(err.to_string().contains("line 2"), "{err}");
    }
}
