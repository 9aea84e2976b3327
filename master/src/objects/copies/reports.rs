//! What store nodes report back: a copy's outcome (recorded with
//! `AddReplica`, or its range released), corrupt disk ranges (their
//! replicas dropped with `DropCorrupt`), and reads of disk-only objects
//! counted for promotion.

use std::time::Instant;

use mooncake_proto::master::{ReportCopyRequest, ReportCorruptRequest};
use mooncake_proto::{ErrorCode, Status};
use mooncake_raft_store::{Command, CredentialHash, Response};
use mooncake_segment::{ClientId, Range, SegmentId};

use crate::leader::tiering::{Copy, Purpose};
use crate::objects::{ReadAnswered, user_tasks};
use crate::rpc::errors::{meta_status, response_status};
use crate::shared::Shared;

/// A store node's report of a copy: a written copy is recorded
/// (`AddReplica`); a failed one releases its range.
pub async fn report_copy(shared: &Shared, req: &ReportCopyRequest, credential: &CredentialHash) -> Status {
    let client = ClientId(req.client_id);
    if let Err(e) = shared.reader.read(|s| s.check_credential(client, credential)) {
        return meta_status(&e);
    }
    let now = Instant::now();
    let Some(found) = shared.leader.with(|t| t.copies.finish(req.task_id, client)) else {
        return shared.not_leader();
    };
    let Some(copy) = found else {
        return Status::with(
            ErrorCode::ObjectNotFound,
            format!(
                "copy {} is not one this leader handed to {client} (given up after {} s, or handed out by an \
                 earlier leader); nothing to do",
                req.task_id,
                shared.tiers.policy.copy_timeout.as_secs()
            ),
        );
    };
    let reservation = Copy::reservation_key(copy.id);
    if !req.error.is_empty() {
        shared.leader.with(|t| t.puts.revoke(&reservation, client, None));
        if copy.purpose == Purpose::User {
            user_tasks::copy_reported(shared, copy.id, Err(format!("TRANSFER_FAIL ({})", req.error)));
        }
        shared.metrics.copies_failed(copy.purpose).inc();
        tracing::warn!(key = %copy.key, executor = %client, purpose = copy.purpose.name(), error = %req.error, "copy failed");
        return Status::ok();
    }
    let cmd = Command::AddReplica { key: copy.key.clone(), version: copy.version, replica: copy.target.clone() };
    let answer = shared.write_path.proposer.propose(cmd).await;
    // Applied or refused, the range is not being written any more.
    shared.leader.with(|t| t.puts.finish(&reservation, client));
    match answer {
        Ok(r) => {
            let status = response_status(&r);
            if copy.purpose == Purpose::User {
                // A replica there already (another task's copy) is as good.
                let outcome = match status.error_code() {
                    ErrorCode::Ok | ErrorCode::ObjectAlreadyExists => Ok(()),
                    code => Err(format!("{} ({})", code.as_str_name(), status.message)),
                };
                user_tasks::copy_reported(shared, copy.id, outcome);
            }
            if status.error_code() == ErrorCode::Ok {
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
                tracing::debug!(key = %copy.key, message = %status.message, "copy not recorded");
            }
            status
        }
        Err(s) => {
            if copy.purpose == Purpose::User {
                user_tasks::copy_reported(shared, copy.id, Err(format!("RPC_FAIL ({})", s.message)));
            }
            s
        }
    }
}

/// A store node's report of corrupt ranges of its segment: the replicas on
/// them are dropped. Answers the status and how many replicas went.
pub async fn report_corrupt(shared: &Shared, req: &ReportCorruptRequest, credential: &CredentialHash) -> (Status, u64) {
    if let Err(s) = shared.require_leader() {
        return (s, 0);
    }
    let ranges: Vec<Range> = req.ranges.iter().map(|r| Range::new(r.offset, r.len)).collect();
    let cmd = Command::DropCorrupt {
        client: ClientId(req.client_id),
        credential: *credential,
        segment: SegmentId(req.segment_id),
        ranges,
    };
    match shared.write_path.proposer.propose(cmd).await {
        Ok(Response::Removed { count }) => {
            shared.metrics.corrupt_replicas_dropped.inc_by(count);
            tracing::warn!(
                client = req.client_id,
                segment = %SegmentId(req.segment_id),
                ranges = req.ranges.len(),
                dropped = count,
                "a store node found corrupt disk ranges; the replicas on them are dropped"
            );
            (Status::ok(), count)
        }
        Ok(r) => (response_status(&r), 0),
        Err(s) => (s, 0),
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
