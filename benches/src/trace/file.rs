//! Reading a request trace in the format of `../shared/traces/`: one JSON
//! object a line, with `timestamp` (ms since the trace's start) and
//! `hash_ids` (the prompt as a chain of blocks; equal ids are equal blocks).
//! Other fields (`input_length`, `output_length`) are ignored.

use std::io::BufRead;
use std::path::Path;

use anyhow::Context;
use serde::Deserialize;

/// Blocks of one request, at most: longer chains are refused (a malformed
/// or foreign file), which bounds a request's batch and buffer.
pub const REQUEST_BLOCKS_MAX: usize = 4_096;

/// One request of a trace.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub struct Request {
    /// Milliseconds since the trace's start.
    #[serde(rename = "timestamp")]
    pub timestamp_ms: u64,
    /// The prompt's blocks, in order.
    #[serde(rename = "hash_ids")]
    pub blocks: Vec<u64>,
}

/// The first `limit` requests of the trace at `path`.
pub fn load(path: &Path, limit: usize) -> anyhow::Result<Vec<Request>> {
    let f = std::fs::File::open(path)
        .with_context(|| format!("opening the trace {} (pass another with --trace FILE)", path.display()))?;
    parse(std::io::BufReader::new(f), limit).with_context(|| format!("reading the trace {}", path.display()))
}

/// The first `limit` requests of a trace read from `input`; blank lines are skipped.
pub fn parse(input: impl BufRead, limit: usize) -> anyhow::Result<Vec<Request>> {
    let mut out = Vec::new();
    for (i, line) in input.lines().enumerate() {
        if out.len() >= limit {
            break;
        }
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        let r: Request = serde_json::from_str(&line)
            .with_context(|| format!("line {}: not a request (`timestamp` and `hash_ids` expected)", i + 1))?;
        anyhow::ensure!(
            r.blocks.len() <= REQUEST_BLOCKS_MAX,
            "line {}: {} blocks, more than {REQUEST_BLOCKS_MAX}",
            i + 1,
            r.blocks.len()
        );
        out.push(r);
    }
    anyhow::ensure!(!out.is_empty(), "no request in the trace");
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_read_up_to_the_limit() {
        let text = "{\"timestamp\": 0, \"input_length\": 9, \"hash_ids\": [0, 1]}\n\n{\"timestamp\": 5, \"hash_ids\": [0, 2]}\n{\"timestamp\": 9, \"hash_ids\": [3]}\n";
        let r = parse(text.as_bytes(), 2).unwrap();
        assert_eq!(
            r,
            vec![Request { timestamp_ms: 0, blocks: vec![0, 1] }, Request { timestamp_ms: 5, blocks: vec![0, 2] }]
        );
    }

    #[test]
    fn a_malformed_line_is_named() {
        let e = parse("{\"timestamp\": 0, \"hash_ids\": [0]}\nnot json\n".as_bytes(), 10).unwrap_err();
        assert!(format!("{e:#}").contains("line 2"), "{e:#}");
        assert!(parse("".as_bytes(), 10).is_err(), "an empty trace is refused");
    }
}
