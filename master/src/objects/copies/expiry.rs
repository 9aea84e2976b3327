//! What the copy duty gives up in time: copies their executor never
//! reported (planned again), and the disk segments of store nodes that did
//! not come back within their grace (`DropDetached`, with their objects).

use std::time::Instant;

use mooncake_raft_store::{Command, Response};
use mooncake_segment::SegmentId;

use crate::duties::book;
use crate::leader::tiering::Purpose;
use crate::objects::user_tasks;
use crate::raft::proposer::now_ms;
use crate::shared::Shared;

/// Gives up copies not reported in time (their executor died or its report
/// was lost): the object is planned again; the range stays reserved until
/// the put table expires it.
pub(super) fn give_up_late_copies(shared: &Shared) {
    let timeout = shared.tiers.policy.copy_timeout;
    let gone = shared.leader.with(|t| t.copies.expire(Instant::now(), timeout)).unwrap_or_default();
    for c in &gone {
        if c.purpose == Purpose::User {
            let why = format!("processing timeout (the copy was not reported within {} s)", timeout.as_secs());
            user_tasks::copy_reported(shared, c.id, Err(why));
        }
        shared.metrics.copies_failed(c.purpose).inc();
        tracing::warn!(key = %c.key, executor = %c.executor, purpose = c.purpose.name(), "copy not reported in time; given up");
    }
}

/// Ends detached disk segments past their grace.
pub(super) async fn end_detached(shared: &Shared) {
    let detached: Vec<SegmentId> =
        shared.reader.read(|s| s.segments().filter(|g| !g.is_attached()).map(|g| g.spec.id).collect());
    let grace = shared.tiers.policy.disk_replica_grace;
    let Some(ended) = shared.leader.with(|t| t.copies.detached_past_grace(&detached, Instant::now(), grace)) else {
        return;
    };
    if ended.is_empty() {
        return;
    }
    match shared.write_path.proposer.propose(Command::DropDetached { segments: ended.clone() }).await {
        Ok(Response::Removed { count }) => tracing::info!(
            count,
            grace_s = grace.as_secs(),
            segments = ?ended,
            "disk segments of store nodes that did not come back within the grace dropped with their objects"
        ),
        Ok(other) => {
            tracing::warn!(?other, "dropping detached disk segments refused");
            shared.duties.failed(book::COPIES, now_ms(), format!("dropping detached disk segments refused: {other:?}"));
        }
        Err(s) => {
            tracing::warn!(refusal = %s, "dropping detached disk segments failed");
            shared.duties.failed(book::COPIES, now_ms(), format!("dropping detached disk segments: {}", s));
        }
    }
}
