//! What store nodes report back: a copy's outcome (recorded with
//! `AddReplica`, or its range released), corrupt disk ranges (their
//! replicas dropped with `DropCorrupt`), and reads of disk-only objects
//! counted for promotion.

use std::time::Instant;

use mooncake_raft_store::{Command, CredentialHash, MetaError, Response};
use mooncake_segment::{ClientId, Range, SegmentId};

use crate::leader::tiering::{Copy, Purpose};
use crate::objects::{ReadAnswered, user_tasks};
use crate::refusal::{Refusal, answered};
use crate::shared::Shared;

/// What a store node reports of one copy it was handed.
pub struct CopyReport {
    pub client: ClientId,
    pub task_id: u64,
    /// Empty when the copy was written; else why it failed.
    pub error: String,
}

/// A store node's report of a copy: a written copy is recorded
/// (`AddReplica`); a failed one releases its range.
pub async fn report_copy(shared: &Shared, report: &CopyReport, credential: &CredentialHash) -> Result<(), Refusal> {
    let (client, req) = (report.client, report);
    shared.reader.read(|s| s.check_credential(client, credential))?;
    let now = Instant::now();
    let Some(found) = shared.leader.with(|t| t.copies.finish(req.task_id, client)) else {
        return Err(shared.not_leader());
    };
    let Some(copy) = found else {
        return Err(Refusal::NotFound(format!(
            "copy {} is not one this leader handed to {client} (given up after {} s, or handed out by an earlier \
             leader); nothing to do",
            req.task_id,
            shared.tiers.policy.copy_timeout.as_secs()
        )));
    };
    let reservation = Copy::reservation_key(copy.id);
    if !req.error.is_empty() {
        shared.leader.with(|t| t.puts.revoke(&reservation, client, None));
        if copy.purpose == Purpose::User {
            user_tasks::copy_reported(shared, copy.id, Err(format!("TRANSFER_FAIL ({})", req.error)));
        }
        shared.metrics.copies_failed(copy.purpose).inc();
        tracing::warn!(key = %copy.key, executor = %client, purpose = copy.purpose.name(), error = %req.error, "copy failed");
        return Ok(());
    }
    let cmd = Command::AddReplica { key: copy.key.clone(), version: copy.version, replica: copy.target.clone() };
    let answer = shared.write_path.proposer.propose(cmd).await;
    // Applied or refused, the range is not being written any more.
    shared.leader.with(|t| t.puts.finish(&reservation, client));
    match answer {
        Ok(r) => {
            let answer = answered(&r);
            if copy.purpose == Purpose::User {
                // A replica there already (another task's copy) is as good.
                let outcome = match &answer {
                    Ok(()) | Err(Refusal::Meta(MetaError::ObjectAlreadyExists(_))) => Ok(()),
                    Err(refused) => Err(format!("not recorded ({refused})")),
                };
                user_tasks::copy_reported(shared, copy.id, outcome);
            }
            if answer.is_ok() {
                if copy.purpose == Purpose::Replicate {
                    shared.leader.with(|t| t.hot.note_added(&copy.key, copy.version, copy.target.segment));
                    tracing::info!(key = %copy.key, segment = %copy.target.segment, "a hot key got a memory replica");
                }
                shared.metrics.copies_done(copy.purpose).inc();
                shared
                    .metrics
                    .copy_latency(copy.purpose)
                    .observe(now.saturating_duration_since(copy.issued).as_secs_f64());
            } else {
                shared.metrics.copies_failed(copy.purpose).inc();
                tracing::debug!(key = %copy.key, answer = ?answer, "copy not recorded");
            }
            answer
        }
        Err(refused) => {
            if copy.purpose == Purpose::User {
                user_tasks::copy_reported(shared, copy.id, Err(format!("RPC_FAIL ({refused})")));
            }
            Err(refused)
        }
    }
}

/// A store node's report of corrupt `ranges` of its `segment`: the
/// replicas on them are dropped. Answers how many replicas went.
pub async fn report_corrupt(
    shared: &Shared,
    client: ClientId,
    segment: SegmentId,
    ranges: Vec<Range>,
    credential: &CredentialHash,
) -> Result<u64, Refusal> {
    shared.require_leader()?;
    let reported = ranges.len();
    let cmd = Command::DropCorrupt { client, credential: *credential, segment, ranges };
    match shared.write_path.proposer.propose(cmd).await {
        Ok(Response::Removed { count }) => {
            shared.metrics.corrupt_replicas_dropped.inc_by(count);
            tracing::warn!(
                %client,
                %segment,
                ranges = reported,
                dropped = count,
                "a store node found corrupt disk ranges; the replicas on them are dropped"
            );
            Ok(count)
        }
        Ok(r) => answered(&r).map(|()| 0),
        Err(refused) => Err(refused),
    }
}

/// Counts reads of disk-only objects for promotion (`--promotion_on_hit`).
pub fn count_hits<'a>(shared: &Shared, reads: impl Iterator<Item = (&'a String, ReadAnswered)>) {
    if !shared.tiers.policy.promotion_on_hit {
        return;
    }
    let hot: Vec<&String> = reads.filter(|(_, a)| a.disk_only).map(|(k, _)| k).collect();
    if hot.is_empty() {
        return;
    }
    shared.leader.with(|t| {
        for k in hot {
            t.copies.hit(k);
        }
    });
}
