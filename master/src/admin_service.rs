//! The operator API (`AdminService`): membership changes and snapshots.
//! Membership changes run on the leader; followers answer NOT_LEADER.

use std::collections::BTreeSet;
use std::sync::Arc;

use mooncake_proto::admin::admin_service_server::AdminService;
use mooncake_proto::admin::*;
use mooncake_proto::{ErrorCode, Status};
use openraft::BasicNode;
use tonic::{Request, Response};

use crate::errors::{unavailable, write_error_status};
use crate::shared::Shared;

type RpcResult<T> = Result<Response<T>, tonic::Status>;

pub struct AdminServiceImpl {
    shared: Arc<Shared>,
}

impl AdminServiceImpl {
    pub fn new(shared: Arc<Shared>) -> Self {
        AdminServiceImpl { shared }
    }
}

fn answer(status: Status, detail: impl Into<String>) -> RpcResult<AdminResponse> {
    Ok(Response::new(AdminResponse { status: Some(status), detail: detail.into() }))
}

#[tonic::async_trait]
impl AdminService for AdminServiceImpl {
    async fn add_learner(&self, req: Request<AddLearnerRequest>) -> RpcResult<AdminResponse> {
        let r = req.into_inner();
        if r.node_id == 0 || !r.addr.contains(':') {
            return answer(Status::with(ErrorCode::InvalidParams, "need a node id > 0 and an address HOST:PORT"), "");
        }
        match self.shared.raft.add_learner(r.node_id, BasicNode::new(&r.addr), r.blocking).await {
            Ok(resp) => {
                tracing::info!(node = r.node_id, addr = %r.addr, log = %resp.log_id, "membership change: learner added");
                answer(Status::ok(), format!("learner {} added at log {}", r.node_id, resp.log_id))
            }
            Err(e) => answer(write_error_status(&e), ""),
        }
    }

    async fn change_membership(&self, req: Request<ChangeMembershipRequest>) -> RpcResult<AdminResponse> {
        let r = req.into_inner();
        let voters: BTreeSet<u64> = r.voters.iter().copied().collect();
        if voters.is_empty() || voters.contains(&0) {
            return answer(Status::with(ErrorCode::InvalidParams, "need a non-empty voter set of ids > 0"), "");
        }
        match self.shared.raft.change_membership(voters.clone(), r.retain).await {
            Ok(resp) => {
                tracing::info!(?voters, log = %resp.log_id, "membership change: voters set");
                answer(Status::ok(), format!("voters are now {voters:?} (log {})", resp.log_id))
            }
            Err(e) => answer(write_error_status(&e), ""),
        }
    }

    async fn trigger_snapshot(&self, _req: Request<TriggerSnapshotRequest>) -> RpcResult<AdminResponse> {
        match self.shared.raft.trigger().snapshot().await {
            Ok(()) => answer(Status::ok(), "snapshot triggered"),
            Err(e) => answer(unavailable(e.to_string()), ""),
        }
    }

    async fn cluster_status(&self, _req: Request<ClusterStatusRequest>) -> RpcResult<ClusterStatusResponse> {
        let m = self.shared.raft.metrics().borrow().clone();
        let json = serde_json::to_string_pretty(&m).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"));
        Ok(Response::new(ClusterStatusResponse { status: Some(Status::ok()), metrics_json: json }))
    }
}
