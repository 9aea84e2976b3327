//! The operator API (`AdminService`): membership changes and snapshots.
//! Membership changes run on the leader; followers answer NOT_LEADER.
//! Everything that changes the cluster or exports its state needs the admin
//! identity (`roles.rs`); ClusterStatus and ListClients are open.

use std::collections::BTreeSet;
use std::sync::Arc;

use mooncake_proto::admin::admin_service_server::AdminService;
use mooncake_proto::admin::*;
use mooncake_proto::{ErrorCode, Status};
use openraft::{BasicNode, ChangeMembers};
use tonic::{Request, Response};

use crate::rpc::edge::Edge;
use crate::rpc::errors::{unavailable, write_error_status};
use crate::shared::Shared;

type RpcResult<T> = Result<Response<T>, tonic::Status>;

pub struct AdminServiceImpl {
    shared: Arc<Shared>,
    edge: Arc<Edge>,
}

impl AdminServiceImpl {
    pub fn new(shared: Arc<Shared>, edge: Arc<Edge>) -> Self {
        AdminServiceImpl { shared, edge }
    }
}

/// Bytes of state image per streamed chunk: well under the gRPC message cap.
const SNAPSHOT_CHUNK_BYTES: usize = 4 << 20;

impl AdminServiceImpl {
    /// A consistent image from the leader, after a linearizable barrier, cut into chunks.
    async fn export(&self) -> Result<Vec<SnapshotChunk>, Status> {
        self.shared.barrier().await?;
        let (data, applied_index, state_hash) =
            self.shared.sm.export().map_err(|e| crate::rpc::errors::internal(format!("exporting state: {e}")))?;
        let total_bytes = data.len() as u64;
        let mut chunks: Vec<SnapshotChunk> = data
            .chunks(SNAPSHOT_CHUNK_BYTES)
            .map(|c| SnapshotChunk { data: c.to_vec(), ..Default::default() })
            .collect();
        if chunks.is_empty() {
            chunks.push(SnapshotChunk::default());
        }
        let first = &mut chunks[0];
        first.status = Some(Status::ok());
        first.applied_index = applied_index;
        first.state_hash = state_hash;
        first.schema_version = mooncake_raft_store::SNAPSHOT_SCHEMA_VERSION;
        first.total_bytes = total_bytes;
        tracing::info!(applied_index, bytes = total_bytes, "snapshot exported");
        Ok(chunks)
    }
}

/// Answers PERMISSION_DENIED unless the request comes from an admin.
macro_rules! admin {
    ($self:ident, $req:ident, $what:literal) => {
        if let Err(s) = $self.edge.roles.require_admin(&$req, $what) {
            return answer(s, "");
        }
    };
}

fn answer(status: Status, detail: impl Into<String>) -> RpcResult<AdminResponse> {
    Ok(Response::new(AdminResponse { status: Some(status), detail: detail.into() }))
}

#[tonic::async_trait]
impl AdminService for AdminServiceImpl {
    async fn add_learner(&self, req: Request<AddLearnerRequest>) -> RpcResult<AdminResponse> {
        admin!(self, req, "AddLearner");
        if self.shared.restoring.load(std::sync::atomic::Ordering::Acquire) {
            let msg = "this master was restored from a snapshot file and is still snapshotting that state for new \
                       masters (its log lacks it); retry in a moment, or see its log if this persists";
            return answer(Status::with(ErrorCode::Unavailable, msg), "");
        }
        let r = req.into_inner();
        if r.node_id == 0 || !r.addr.contains(':') {
            return answer(Status::with(ErrorCode::InvalidParams, "need a node id > 0 and an address HOST:PORT"), "");
        }
        // Idempotent: adding a member again would commit another membership
        // entry, and each one restarts replication to the learner, so a
        // retried add never let a long snapshot transfer finish.
        let membership = self.shared.raft.metrics().borrow().membership_config.clone();
        if let Some(node) = membership.membership().get_node(&r.node_id) {
            if node.addr != r.addr {
                let msg = format!(
                    "master {} is already a member at {}; remove it first (`mooncake member remove {}`)",
                    r.node_id, node.addr, r.node_id
                );
                return answer(Status::with(ErrorCode::InvalidParams, msg), "");
            }
            return answer(Status::ok(), format!("master {} is already a member at {}", r.node_id, r.addr));
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
        admin!(self, req, "ChangeMembership");
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
            // A retry whose first attempt's answer was lost (a timeout) finds
            // its own change in progress: its answer is that change's.
            Err(e) if is_in_progress(&e) => match self.wait_for_voters(&voters).await {
                true => answer(Status::ok(), format!("voters are now {voters:?}")),
                false => answer(write_error_status(&e), ""),
            },
            Err(e) => answer(write_error_status(&e), ""),
        }
    }

    async fn remove_learner(&self, req: Request<RemoveLearnerRequest>) -> RpcResult<AdminResponse> {
        admin!(self, req, "RemoveLearner");
        let id = req.into_inner().node_id;
        let membership = self.shared.raft.metrics().borrow().membership_config.clone();
        let membership = membership.membership();
        if membership.get_node(&id).is_none() {
            let members: Vec<u64> = membership.nodes().map(|(id, _)| *id).collect();
            let msg = format!("master {id} is not a member (members: {members:?}); nothing to remove");
            return answer(Status::with(ErrorCode::InvalidParams, msg), "");
        }
        if membership.voter_ids().any(|v| v == id) {
            let msg =
                format!("master {id} is a voter: change the voter set without it (`mooncake member remove {id}`)");
            return answer(Status::with(ErrorCode::InvalidParams, msg), "");
        }
        let change = ChangeMembers::RemoveNodes(BTreeSet::from([id]));
        match self.shared.raft.change_membership(change, false).await {
            Ok(resp) => {
                tracing::info!(node = id, log = %resp.log_id, "membership change: learner removed");
                answer(Status::ok(), format!("learner {id} removed (log {})", resp.log_id))
            }
            Err(e) => answer(write_error_status(&e), ""),
        }
    }

    async fn trigger_snapshot(&self, req: Request<TriggerSnapshotRequest>) -> RpcResult<AdminResponse> {
        admin!(self, req, "TriggerSnapshot");
        match self.shared.raft.trigger().snapshot().await {
            Ok(()) => answer(Status::ok(), "snapshot triggered"),
            Err(e) => answer(unavailable(e.to_string()), ""),
        }
    }

    type ExportSnapshotStream = futures::stream::Iter<std::vec::IntoIter<Result<SnapshotChunk, tonic::Status>>>;

    async fn export_snapshot(&self, req: Request<ExportSnapshotRequest>) -> RpcResult<Self::ExportSnapshotStream> {
        let allowed = self.edge.roles.require_admin(&req, "ExportSnapshot");
        let chunks = match async {
            allowed?;
            self.export().await
        }
        .await
        {
            Ok(chunks) => chunks,
            Err(status) => vec![SnapshotChunk { status: Some(status), ..Default::default() }],
        };
        Ok(Response::new(futures::stream::iter(chunks.into_iter().map(Ok).collect::<Vec<_>>())))
    }

    async fn list_clients(&self, _req: Request<ListClientsRequest>) -> RpcResult<ListClientsResponse> {
        if let Err(s) = self.shared.barrier().await {
            return Ok(Response::new(ListClientsResponse { status: Some(s.into()), clients: vec![] }));
        }
        let now = std::time::Instant::now();
        let mut clients: Vec<ClientInfo> = self.shared.reader.read(|st| {
            st.clients()
                .map(|c| {
                    let segs: Vec<_> = st.client_segments(c.id).collect();
                    ClientInfo {
                        id: c.id.0,
                        registered_ms: c.registered_ms,
                        last_heartbeat_ms_ago: 0,
                        segments: segs.iter().map(|s| s.spec.id.0).collect(),
                        segment_bytes: segs.iter().map(|s| s.capacity_bytes()).sum(),
                        used_bytes: segs.iter().map(|s| s.used_bytes()).sum(),
                    }
                })
                .collect()
        });
        // Heartbeats are soft state: read after the state read (lock order, leader.rs).
        self.shared.leader.with(|t| {
            for c in &mut clients {
                let heard = t.last_heartbeat(mooncake_segment::ClientId(c.id));
                c.last_heartbeat_ms_ago = now.saturating_duration_since(heard).as_millis() as u64;
            }
        });
        Ok(Response::new(ListClientsResponse { status: Some(Status::ok()), clients }))
    }

    async fn evict_client(&self, req: Request<EvictClientRequest>) -> RpcResult<AdminResponse> {
        admin!(self, req, "EvictClient");
        let client = mooncake_segment::ClientId(req.into_inner().client_id);
        let cmd = mooncake_raft_store::Command::ExpireClient { client };
        let repairs = crate::objects::copies::repairs_after_loss(&self.shared.reader, client);
        match self.shared.write_path.proposer.propose(cmd).await {
            Ok(r) => match r.err() {
                None => {
                    self.shared.metrics.expired_clients.inc();
                    crate::duties::queue_repairs(&self.shared, client, repairs);
                    tracing::info!(%client, "client evicted by the operator; its segments are unmounted");
                    answer(Status::ok(), format!("{client} evicted"))
                }
                Some(e) => answer(crate::rpc::errors::meta_status(e), ""),
            },
            Err(s) => answer(s.into(), ""),
        }
    }

    async fn set_tenant_quota(&self, req: Request<SetTenantQuotaRequest>) -> RpcResult<AdminResponse> {
        admin!(self, req, "SetTenantQuota");
        let r = req.into_inner();
        // Refused before anything is proposed (apply would refuse it too,
        // after a commit).
        if let Err(e) = mooncake_segment::tenant::Tenant::parse(&r.tenant) {
            return answer(Status::with(ErrorCode::InvalidParams, format!("tenant {:?}: {e}", r.tenant)), "");
        }
        let cmd = mooncake_raft_store::Command::SetTenantQuota { tenant: r.tenant.clone(), bytes: r.quota_bytes };
        match self.shared.write_path.proposer.propose(cmd).await {
            Ok(answer_of) => match answer_of.err() {
                None => {
                    tracing::info!(tenant = %r.tenant, quota_bytes = r.quota_bytes, "tenant quota set by the operator");
                    let detail = match r.quota_bytes {
                        0 => format!("tenant {:?} has no quota", r.tenant),
                        n => format!("tenant {:?} may keep {n} bytes of objects", r.tenant),
                    };
                    answer(Status::ok(), detail)
                }
                Some(e) => answer(crate::rpc::errors::meta_status(e), ""),
            },
            Err(s) => answer(s.into(), ""),
        }
    }

    /// Every tenant for an admin; for anyone else only the caller's own
    /// (its name, usage and quota), never other tenants'.
    async fn list_tenants(&self, req: Request<ListTenantsRequest>) -> RpcResult<ListTenantsResponse> {
        let refused = |s: Status| Ok(Response::new(ListTenantsResponse { status: Some(s), tenants: vec![] }));
        let only = match self.edge.roles.require_admin(&req, "ListTenants") {
            Ok(()) => None,
            Err(_) => match crate::rpc::tenancy::KeySpace::of_request(&req) {
                Ok(space) => Some(space.tenant().name().to_string()),
                Err(s) => return refused(s),
            },
        };
        if let Err(s) = self.shared.barrier().await {
            return refused(s.into());
        }
        let tenants: Vec<TenantInfo> = self.shared.reader.read(|st| {
            let mut by_name: std::collections::BTreeMap<String, TenantInfo> = std::collections::BTreeMap::new();
            for (name, quota) in st.tenant_quotas() {
                by_name
                    .entry(name.to_string())
                    .or_insert_with(|| TenantInfo { name: name.to_string(), ..Default::default() })
                    .quota_bytes = quota;
            }
            for (name, usage) in st.tenant_usages() {
                let info = by_name
                    .entry(name.to_string())
                    .or_insert_with(|| TenantInfo { name: name.to_string(), ..Default::default() });
                (info.used_bytes, info.objects) = (usage.bytes, usage.objects);
            }
            by_name.into_values().collect()
        });
        let tenants = match only {
            None => tenants,
            Some(own) => tenants.into_iter().filter(|t| t.name == own).collect(),
        };
        Ok(Response::new(ListTenantsResponse { status: Some(Status::ok()), tenants }))
    }

    async fn cluster_status(&self, _req: Request<ClusterStatusRequest>) -> RpcResult<ClusterStatusResponse> {
        let m = self.shared.raft.metrics().borrow().clone();
        let json = serde_json::to_string_pretty(&m).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"));
        Ok(Response::new(ClusterStatusResponse { status: Some(Status::ok()), metrics_json: json }))
    }
}

/// How long a retried membership change waits for the change in progress
/// to become the committed configuration.
const MEMBERSHIP_RETRY_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// The refusal of a membership change while another is in progress.
fn is_in_progress(e: &openraft::error::RaftError<u64, openraft::error::ClientWriteError<u64, BasicNode>>) -> bool {
    use openraft::error::{ChangeMembershipError, ClientWriteError, RaftError};
    matches!(e, RaftError::APIError(ClientWriteError::ChangeMembershipError(ChangeMembershipError::InProgress(_))))
}

impl AdminServiceImpl {
    /// Whether the configuration applied here becomes exactly `voters` (not a
    /// joint one) within [`MEMBERSHIP_RETRY_WAIT`].
    async fn wait_for_voters(&self, voters: &BTreeSet<u64>) -> bool {
        let wanted = voters.clone();
        self.shared
            .raft
            .wait(Some(MEMBERSHIP_RETRY_WAIT))
            .metrics(
                move |m| {
                    let membership = m.membership_config.membership();
                    // Applied here, so committed: not just appended.
                    let applied = match (m.membership_config.log_id(), m.last_applied) {
                        (Some(log), Some(applied)) => log.index <= applied.index,
                        _ => false,
                    };
                    applied
                        && membership.get_joint_config().len() == 1
                        && membership.voter_ids().collect::<BTreeSet<_>>() == wanted
                },
                "the membership change in progress",
            )
            .await
            .is_ok()
    }
}
