//! The stall writer: a client process that stops itself in the middle of
//! its puts, so a leader change can happen while it holds reservations.
//! Run as the hidden `mooncake-jepsen stall-writer` subcommand, started and
//! reaped by the harness inside the client namespace
//! ([`crate::stall_process`]).
//!
//! Every round it starts [`StallWriterOptions::puts_per_stall`] puts
//! (PutStart, two replicas, hard-pinned, a unique value in the bytes),
//! writes the FIRST half of each object to every replica, then SIGSTOPs
//! itself. Once continued it writes the second half and ends each put with
//! the PutEnd the client library would send (placement echoed, a request
//! id, the checksum of the whole value). A deposed leader's reservations
//! must outlive such a writer: if a new leader handed their space to other
//! objects, the second half lands on those objects' committed bytes, which
//! the committed-bytes checker ([`crate::committed_bytes`]) sees. (The real
//! build also keeps the old arenas out of the store nodes' fences, so a
//! second half written after the new leader took over is refused.)
//!
//! It speaks to the harness through stdout, one JSON [`StallLine`] a line;
//! its logs go to stderr. It never exits by itself: the harness kills it.

use std::io::Write;

use anyhow::Context;
use mooncake_client::{Client, MasterError, remote};
use mooncake_proto::master::{PutEndRequest, PutStartRequest, Replica};
use serde::{Deserialize, Serialize};

use crate::access::Access;
use crate::rng::Rng;
use crate::workload::{OP_TIMEOUT, connect_with_retry, value_bytes};

/// Bytes of every stall writer object: big enough that its second half
/// spans several of the workloads' objects (4 and 16 KiB) placed over it,
/// small enough that the hard-pinned objects of a run (one round per
/// leader change) stay a small share of the 4 MiB chaos segments.
pub const STALL_OBJECT_BYTES: usize = 64 << 10;
/// Puts started (and stalled) together per round: their ranges lie next to
/// each other in the leader's arena, one wide target for a new leader's
/// grants.
pub const STALL_PUTS_PER_ROUND: usize = 4;
/// Replicas of a stall writer put: one per store node, as the workloads'.
const STALL_REPLICAS: u32 = 2;
/// Hard pin (never evicted): an acknowledged stall put must be readable at
/// the end unless a RemoveAll may have removed it.
const STALL_PIN_HARD: i32 = 2;
/// Values of stall writer puts start here (writer `w` at
/// `STALL_VALUE_BASE + w << STALL_VALUE_WRITER_SHIFT`): apart from the
/// workloads' values, which count up from 1.
pub const STALL_VALUE_BASE: u64 = 1 << 60;
/// Room for 2^40 puts per writer.
pub const STALL_VALUE_WRITER_SHIFT: u32 = 40;

/// What the stall writer process needs (its command line).
#[derive(Clone, Debug)]
pub struct StallWriterOptions {
    /// How it connects (the harness passes the run's client certificate).
    pub access: Access,
    pub masters: Vec<String>,
    pub local_hostname: String,
    /// Keys are `<prefix>r<round>/k<i>`.
    pub key_prefix: String,
    /// First value; each put takes the next one.
    pub first_value: u64,
    /// Seeds the PutEnd request ids.
    pub seed: u64,
    pub object_bytes: usize,
    pub puts_per_stall: usize,
}

/// One line of the stall writer's stdout.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum StallLine {
    /// A put is about to send its PutStart.
    Start { key: String, value: u64 },
    /// The writer stops itself now (SIGSTOP), `in_flight` puts half written.
    Stall { round: u64, in_flight: usize },
    /// A put ended.
    End { key: String, value: u64, outcome: StallOutcome, detail: String },
}

/// How a stall writer put ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StallOutcome {
    /// PutEnd answered OK: the object is committed.
    Ok,
    /// PutEnd answered OBJECT_NOT_FOUND on its only attempt: the put
    /// expired (its reservation was reclaimed), nothing was recorded.
    Expired,
    /// Anything else (PutStart refused, a write failed, PutEnd unanswered):
    /// the put may or may not have been recorded.
    Error,
}

/// A put between its PutStart and its PutEnd.
struct InFlight {
    key: String,
    value: u64,
    replicas: Vec<Replica>,
}

/// Runs rounds until killed.
pub async fn run(opts: StallWriterOptions) -> anyhow::Result<()> {
    anyhow::ensure!(opts.object_bytes >= 2, "a stall writer object needs two halves");
    let mut cfg = opts.access.client(opts.masters.clone());
    cfg.local_hostname = opts.local_hostname.clone();
    cfg.tcp.request_timeout = OP_TIMEOUT;
    let client = connect_with_retry(cfg).await.context("stall writer client")?;
    let mut rng = Rng::new(opts.seed);
    let mut value = opts.first_value;
    for round in 0u64.. {
        let mut in_flight = Vec::new();
        for i in 0..opts.puts_per_stall {
            let key = format!("{}r{round}/k{i}", opts.key_prefix);
            emit(&StallLine::Start { key: key.clone(), value })?;
            match start_and_write_half(&client, &opts, &key, value).await {
                Ok(replicas) => in_flight.push(InFlight { key, value, replicas }),
                Err(detail) => emit(&StallLine::End { key, value, outcome: StallOutcome::Error, detail })?,
            }
            value += 1;
        }
        emit(&StallLine::Stall { round, in_flight: in_flight.len() })?;
        stop_self();
        for put in in_flight {
            let (outcome, detail) = finish(&client, &opts, &put, rng.next_u64() | 1).await;
            emit(&StallLine::End { key: put.key, value: put.value, outcome, detail })?;
        }
    }
    Ok(())
}

/// Writes one line to stdout and flushes it (the harness reads it before
/// it acts on the stop that may follow).
fn emit(line: &StallLine) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    serde_json::to_writer(&mut out, line)?;
    out.write_all(b"\n")?;
    out.flush()?;
    Ok(())
}

/// SIGSTOP to this process: every thread stops until the harness sends SIGCONT.
fn stop_self() {
    // SAFETY: raise has no memory-safety preconditions; SIGSTOP cannot be
    // caught, so no handler runs.
    let rc = unsafe { libc::raise(libc::SIGSTOP) };
    if rc != 0 {
        tracing::warn!(error = %std::io::Error::last_os_error(), "stall writer could not stop itself");
    }
}

/// PutStart, then the first half of the bytes to every replica.
async fn start_and_write_half(
    client: &Client,
    opts: &StallWriterOptions,
    key: &str,
    value: u64,
) -> Result<Vec<Replica>, String> {
    let req = PutStartRequest {
        client_id: client.client_id(),
        key: key.to_string(),
        size: opts.object_bytes as u64,
        replica_num: STALL_REPLICAS,
        preferred_segments: Vec::new(),
        pin: STALL_PIN_HARD,
        ..Default::default()
    };
    let replicas = client.master().put_start(req).await.map_err(|e| format!("PutStart: {e}"))?;
    for r in &replicas {
        tracing::info!(key, segment = r.segment_id, offset = r.offset, len = r.len, arena = r.arena_id, "reserved");
    }
    let bytes = value_bytes(value, opts.object_bytes);
    let half = opts.object_bytes / 2;
    for r in &replicas {
        if let Err(e) = client.engine().write(&remote(r), r.offset, &bytes[..half]).await {
            revoke(client, key).await;
            return Err(format!("first half to segment {} at {}: {e}", r.segment_id, r.endpoint));
        }
    }
    Ok(replicas)
}

/// The second half of the bytes to every replica, then PutEnd.
async fn finish(client: &Client, opts: &StallWriterOptions, put: &InFlight, request_id: u64) -> (StallOutcome, String) {
    let bytes = value_bytes(put.value, opts.object_bytes);
    let half = opts.object_bytes / 2;
    for r in &put.replicas {
        if let Err(e) = client.engine().write(&remote(r), r.offset + half as u64, &bytes[half..]).await {
            revoke(client, &put.key).await;
            return (StallOutcome::Error, format!("second half to segment {} at {}: {e}", r.segment_id, r.endpoint));
        }
    }
    let req = PutEndRequest {
        client_id: client.client_id(),
        key: put.key.clone(),
        checksum: mooncake_client::checksum::crc32c(&bytes),
        size: opts.object_bytes as u64,
        replicas: put.replicas.clone(),
        pin: STALL_PIN_HARD,
        upsert: false,
        request_id,
        ..Default::default()
    };
    match client.master().put_end_with(req).await {
        Ok(()) => (StallOutcome::Ok, String::new()),
        Err(e) => (end_outcome(&e), e.to_string()),
    }
}

/// An expiry is certain only when answered on the PutEnd's only attempt.
fn end_outcome(e: &MasterError) -> StallOutcome {
    if matches!(e, MasterError::PutExpired { .. }) && e.is_definite() {
        StallOutcome::Expired
    } else {
        StallOutcome::Error
    }
}

/// Gives a failed put's key back (best effort: it expires anyway).
async fn revoke(client: &Client, key: &str) {
    if let Err(e) = client.master().put_revoke(client.client_id(), key).await {
        tracing::warn!(key, error = %e, "stall writer: revoke after a failed write");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_round_trip_as_tagged_json() {
        let lines = [
            StallLine::Start { key: "stall/w0/r0/k0".into(), value: STALL_VALUE_BASE },
            StallLine::Stall { round: 3, in_flight: 4 },
            StallLine::End {
                key: "stall/w0/r0/k0".into(),
                value: STALL_VALUE_BASE,
                outcome: StallOutcome::Expired,
                detail: "gone".into(),
            },
        ];
        for line in lines {
            let text = serde_json::to_string(&line).expect("encodes");
            assert!(text.starts_with("{\"event\":"), "{text}");
            assert_eq!(serde_json::from_str::<StallLine>(&text).expect("decodes"), line);
        }
        let end: StallLine =
            serde_json::from_str(r#"{"event":"end","key":"k","value":7,"outcome":"ok","detail":""}"#).expect("decodes");
        assert!(matches!(end, StallLine::End { outcome: StallOutcome::Ok, .. }));
    }

    #[test]
    fn only_a_first_attempt_put_expired_is_an_expiry() {
        use mooncake_proto::ErrorCode;
        let rejected = |code, attempts| MasterError::Rejected { code, message: String::new(), attempts };
        let expired = |attempts| MasterError::PutExpired { message: String::new(), attempts };
        assert_eq!(end_outcome(&expired(1)), StallOutcome::Expired);
        assert_eq!(end_outcome(&expired(2)), StallOutcome::Error);
        assert_eq!(end_outcome(&rejected(ErrorCode::ObjectNotFound, 1)), StallOutcome::Error, "not found, not expired");
        assert_eq!(end_outcome(&rejected(ErrorCode::InvalidParams, 1)), StallOutcome::Error);
    }
}
