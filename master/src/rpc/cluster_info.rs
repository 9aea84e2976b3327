//! This master's view of the cluster: Raft role and progress, members, and a
//! summary of the applied state. The leader answers it (without a barrier:
//! a status view, not a linearizable read); a follower redirects with
//! NOT_LEADER unless asked for its `local_view`, which is labelled as such
//! (`leader_view` false).

use mooncake_proto::Status;
use mooncake_proto::master::{DutyStatus, GetClusterInfoResponse, Member, SegmentUsage};
use openraft::ServerState;

use crate::rpc::convert;
use crate::shared::Shared;

/// `with_hash`: also compute `state_hash` (O(objects), applies wait: only
/// when asked).
pub async fn cluster_info(shared: &Shared, local_view: bool, with_hash: bool) -> GetClusterInfoResponse {
    let leads = shared.require_leader().is_ok();
    if !leads && !local_view {
        return GetClusterInfoResponse { status: Some(shared.not_leader().into()), ..Default::default() };
    }
    let m = shared.raft.metrics().borrow().clone();
    let committed = shared.raft.with_raft_state(|st| st.committed.map(|l| l.index)).await.ok().flatten().unwrap_or(0);
    let membership = m.membership_config.membership();
    let voters: std::collections::BTreeSet<u64> = membership.voter_ids().collect();
    let leader_addr =
        m.current_leader.and_then(|id| membership.get_node(&id)).map(|n| n.addr.clone()).unwrap_or_default();
    let members = membership
        .nodes()
        .map(|(id, node)| {
            let role = if Some(*id) == m.current_leader {
                "leader"
            } else if !voters.contains(id) {
                "learner"
            } else if *id == m.id && m.state == ServerState::Candidate {
                "candidate"
            } else {
                "follower"
            };
            let matched = m.replication.as_ref().and_then(|r| r.get(id)).map(|l| l.map(|l| l.index).unwrap_or(0));
            Member {
                id: *id,
                addr: node.addr.clone(),
                role: role.into(),
                voter: voters.contains(id),
                matched_index: matched.unwrap_or(0),
                has_matched_index: matched.is_some(),
            }
        })
        .collect();
    let mut info = shared.reader.read(|s| GetClusterInfoResponse {
        segment_count: s.segments().count() as u64,
        object_count: s.object_count() as u64,
        client_count: s.clients().count() as u64,
        capacity_bytes: s.capacity_bytes(),
        used_bytes: s.used_bytes(),
        state_hash: if with_hash { s.state_hash() } else { 0 },
        applied_index: s.last_applied.map(|l| l.index).unwrap_or(0),
        segments: s
            .segments()
            .map(|seg| SegmentUsage {
                segment: Some(convert::segment_pb(&seg.spec)),
                used_bytes: seg.used_bytes(),
                owner_client_id: seg.owner.0,
                detached: !seg.is_attached(),
            })
            .collect(),
        ..Default::default()
    });
    info.status = Some(Status::ok());
    info.leader_view = leads;
    info.node_id = m.id;
    info.leader_id = m.current_leader.unwrap_or(0);
    info.leader_addr = leader_addr;
    info.term = m.current_term;
    info.commit_index = committed;
    info.last_log_index = m.last_log_index.unwrap_or(0);
    info.members = members;
    info.not_ready =
        crate::node::http::readiness(&m, Some(committed), shared.quorum_ack_max, shared.disk_alarm.reason())
            .err()
            .unwrap_or_default();
    info.repairs_pending = shared.leader.with(|t| t.copies.repair_backlog()).unwrap_or(0) as u64;
    info.hot_keys_fanned = shared.leader.with(|t| t.hot.fanned_count()).unwrap_or(0) as u64;
    info.planted_bugs = crate::node::planted::BUILT_IN;
    info.planted_bugs_on = shared.planted_bugs.iter().map(|b| b.to_string()).collect();
    let now = crate::raft::proposer::now_ms();
    info.duties = shared
        .duties
        .records()
        .into_iter()
        .map(|(name, r)| DutyStatus {
            name: name.into(),
            tick_ms: r.tick.as_millis() as u64,
            runs: r.runs,
            errors: r.errors,
            last_success_ms_ago: r.last_success_unix_ms.map(|ms| now.saturating_sub(ms)),
            last_error_ms_ago: r.last_error_unix_ms.map(|ms| now.saturating_sub(ms)),
            last_error: r.last_error,
        })
        .collect();
    info
}
