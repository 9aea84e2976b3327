//! The client API (`MasterService`): object and segment metadata with
//! Mooncake's semantics. Writes become proposed commands; reads run on the
//! leader after a linearizable barrier, once per RPC (a batch RPC confirms
//! leadership once for all its keys). Object reads carry KV leases
//! ([`Shared::read_leased`]); removals go through [`crate::objects::removal`].
//!
//! This file holds the service's type and its one `MasterService` impl;
//! the larger handlers live by group in the sibling modules, the impl
//! delegating to them: `store_nodes` (Ping, TakeCopies, ReportCopy,
//! ReportCorrupt), `segments` (mounts), `listing` (ListObjects), `reads`,
//! `tasks`, `batches` and `identity` (who a call acts as).

use std::sync::Arc;

use mooncake_proto::master::master_service_server::MasterService;
use mooncake_proto::master::*;
use mooncake_proto::{ErrorCode, Status};
use mooncake_raft_store::MetaError;
use tonic::{Request, Response};

use crate::objects::chunks::ChunkAsk;
use crate::objects::put_end::EndAsk;
use crate::rpc::convert;
use crate::rpc::edge::Edge;
use crate::rpc::errors::{answer, invalid, meta_status};
use crate::rpc::grants;
use crate::rpc::tenancy::{KeySpace, with_refusals};
use crate::shared::Shared;

type RpcResult<T> = Result<Response<T>, tonic::Status>;

/// Most items in one batch RPC.
pub const BATCH_RPC_MAX: usize = 1_024;

pub struct MasterServiceImpl {
    shared: Arc<Shared>,
    /// Roles, watches, listings (`edge.rs`).
    edge: Arc<Edge>,
    /// Turns true when the master stops: open watches end then.
    stop: tokio::sync::watch::Receiver<bool>,
}

impl MasterServiceImpl {
    pub fn new(shared: Arc<Shared>, edge: Arc<Edge>, stop: tokio::sync::watch::Receiver<bool>) -> Self {
        MasterServiceImpl { shared, edge, stop }
    }
}

/// What a call must prove before its handler acts ([`MasterServiceImpl::admit`]).
#[derive(Clone, Copy)]
pub(super) struct Needs<'a> {
    /// Client ids the call writes as: each must be the caller, by its
    /// credential ([`writers_allowed`]).
    writers: &'a [u64],
    /// The admin operation it is, when it is one.
    admin: Option<&'static str>,
}

impl<'a> Needs<'a> {
    /// A call of a tenant's: its key space only.
    pub(super) const TENANT: Needs<'static> = Needs { writers: &[], admin: None };

    /// A write as `writers`.
    pub(super) fn writers(writers: &'a [u64]) -> Self {
        Needs { writers, admin: None }
    }

    /// The admin operation `what` when `admin` (a forced removal), else a
    /// tenant's call.
    pub(super) fn admin_if(admin: bool, what: &'static str) -> Self {
        Needs { writers: &[], admin: admin.then_some(what) }
    }
}

impl MasterServiceImpl {
    /// The one admission of every client-API call, before its handler
    /// acts: the admin role when `needs` names an admin operation, the key
    /// space it acts in (its tenant, [`KeySpace::of_request`]; the default
    /// one under the planted bug `--dev-unsafe-ignore-tenants`), and that
    /// each writer it names is the caller. Store-node calls (mounts, pings,
    /// reports) prove their client by the credential they carry
    /// (`identity.rs`).
    fn admit<T>(&self, req: &Request<T>, needs: Needs<'_>) -> Result<KeySpace, Status> {
        if let Some(what) = needs.admin {
            self.edge.roles.require_admin(req, what)?;
        }
        let space = match self.edge.ignore_tenants {
            true => KeySpace::default(),
            false => KeySpace::of_request(req)?,
        };
        if !needs.writers.is_empty() {
            writers_allowed(&self.shared, req.metadata(), needs.writers)?;
        }
        Ok(space)
    }
}

fn ok<T>(t: T) -> RpcResult<T> {
    Ok(Response::new(t))
}

impl MasterServiceImpl {
    /// A PutStart (its key stored already): the reserved ranges with WRITE
    /// grants, or why not.
    async fn start_put(&self, r: &PutStartRequest) -> PutStartResponse {
        let placed = match convert::put_ask(r) {
            Ok((ask, preferred)) => crate::objects::puts::put_start(&self.shared, &ask, &preferred).await,
            Err(e) => Err(e.into()),
        };
        match placed {
            Ok(p) => PutStartResponse { status: Some(Status::ok()), replicas: grants::writable(&self.shared, &p) },
            Err(r) => PutStartResponse { status: Some(r.into()), replicas: vec![] },
        }
    }

    /// A PutRevoke of the stored `key` by `client`.
    fn revoke_put(&self, key: &str, client: u64) -> Status {
        answer(crate::objects::puts::put_revoke(&self.shared, key, mooncake_segment::ClientId(client)))
    }
}

mod batches;
mod identity;
mod listing;
mod reads;
mod segments;
mod store_nodes;
mod tasks;

use batches::*;
use identity::*;

#[tonic::async_trait]
impl MasterService for MasterServiceImpl {
    type WatchStream = crate::rpc::watch::WatchStream;

    async fn watch(&self, req: Request<WatchRequest>) -> RpcResult<Self::WatchStream> {
        let s = &self.shared;
        let space = self.admit(&req, Needs::TENANT);
        let peer = req.remote_addr().map(|a| a.ip());
        let asked = (req.into_inner(), peer);
        ok(crate::rpc::watch::open(s.events.clone(), &self.edge.watchers, s.id, space, asked, self.stop.clone()))
    }

    async fn ping(&self, req: Request<PingRequest>) -> RpcResult<PingResponse> {
        self.answer_ping(req).await
    }

    async fn take_copies(&self, req: Request<TakeCopiesRequest>) -> RpcResult<TakeCopiesResponse> {
        self.answer_take_copies(req).await
    }

    async fn report_copy(&self, req: Request<ReportCopyRequest>) -> RpcResult<ReportCopyResponse> {
        self.answer_report_copy(req).await
    }

    async fn create_copy_task(&self, req: Request<CreateCopyTaskRequest>) -> RpcResult<CreateTaskResponse> {
        ok(self.copy_task(req).await)
    }

    async fn create_move_task(&self, req: Request<CreateMoveTaskRequest>) -> RpcResult<CreateTaskResponse> {
        ok(self.move_task(req).await)
    }

    async fn query_task(&self, req: Request<QueryTaskRequest>) -> RpcResult<QueryTaskResponse> {
        ok(self.task_state(req))
    }

    async fn prefetch_to_memory(&self, req: Request<PrefetchToMemoryRequest>) -> RpcResult<PrefetchToMemoryResponse> {
        ok(self.prefetch(req).await)
    }

    async fn report_corrupt(&self, req: Request<ReportCorruptRequest>) -> RpcResult<ReportCorruptResponse> {
        self.answer_report_corrupt(req).await
    }

    async fn get_cluster_info(&self, req: Request<GetClusterInfoRequest>) -> RpcResult<GetClusterInfoResponse> {
        let r = req.into_inner();
        ok(crate::rpc::cluster_info::cluster_info(&self.shared, r.local_view, r.with_state_hash).await)
    }

    async fn mount_segment(&self, req: Request<MountSegmentRequest>) -> RpcResult<MountSegmentResponse> {
        self.answer_mount_segment(req).await
    }

    async fn unmount_segment(&self, req: Request<UnmountSegmentRequest>) -> RpcResult<UnmountSegmentResponse> {
        self.answer_unmount_segment(req).await
    }

    async fn remount_segment(&self, req: Request<RemountSegmentRequest>) -> RpcResult<RemountSegmentResponse> {
        self.answer_remount_segment(req).await
    }

    async fn put_start(&self, req: Request<PutStartRequest>) -> RpcResult<PutStartResponse> {
        let refused = |s: Status| ok(PutStartResponse { status: Some(s), replicas: vec![] });
        let space = match self.admit(&req, Needs::writers(&[req.get_ref().client_id])) {
            Ok(space) => space,
            Err(s) => return refused(s),
        };
        let mut r = req.into_inner();
        r.key = match space.stored(&r.key) {
            Ok(key) => key,
            Err(s) => return refused(s),
        };
        ok(self.start_put(&r).await)
    }

    async fn put_end(&self, req: Request<PutEndRequest>) -> RpcResult<PutEndResponse> {
        let space = match self.admit(&req, Needs::writers(&[req.get_ref().client_id])) {
            Ok(space) => space,
            Err(s) => return ok(PutEndResponse { status: Some(s) }),
        };
        let mut r = req.into_inner();
        r.key = match space.stored(&r.key) {
            Ok(key) => key,
            Err(s) => return ok(PutEndResponse { status: Some(s) }),
        };
        if r.chunk_id != 0
            && let Err(s) = crate::objects::quotas::chunk_put_allowed(&self.shared, &r.key, r.size)
        {
            return ok(PutEndResponse { status: Some(s.into()) });
        }
        let pin = match convert::check_put_end(&r) {
            Ok(pin) => pin,
            Err(e) => return ok(PutEndResponse { status: Some(invalid(e)) }),
        };
        let mut answers = crate::objects::put_end::put_end(&self.shared, &[convert::end_ask(&r, pin)]).await;
        ok(PutEndResponse { status: answers.pop().map(answer) })
    }

    async fn reserve_chunk(&self, req: Request<ReserveChunkRequest>) -> RpcResult<ReserveChunkResponse> {
        let refused = |s: Status| ok(ReserveChunkResponse { status: Some(s), ..Default::default() });
        let space = match self.admit(&req, Needs::writers(&[req.get_ref().client_id])) {
            Ok(space) => space,
            Err(s) => return refused(s),
        };
        // A tenant's quota is checked at PutStart: its small puts go that way.
        if crate::objects::quotas::has_quota(&self.shared, space.tenant()) {
            return refused(Status::with(
                ErrorCode::NoAvailableHandle,
                format!(
                    "no writer chunk: tenant {:?} has a quota; put the usual way (PutStart)",
                    space.tenant().name()
                ),
            ));
        }
        let r = req.into_inner();
        let ask = ChunkAsk {
            client: mooncake_segment::ClientId(r.client_id),
            replicas: r.replica_num,
            len: r.len,
            min_len: r.min_len,
        };
        match crate::objects::chunks::reserve_chunk(&self.shared, &ask, space.tenant().name()).await {
            Ok(chunk) => ok(ReserveChunkResponse {
                status: Some(Status::ok()),
                chunk_id: chunk.id,
                replicas: grants::writable(&self.shared, &chunk.ranges),
                valid_ms: chunk.valid_ms,
            }),
            Err(r) => refused(r.into()),
        }
    }

    async fn return_chunk(&self, req: Request<ReturnChunkRequest>) -> RpcResult<ReturnChunkResponse> {
        if let Err(s) = self.admit(&req, Needs::writers(&[req.get_ref().client_id])) {
            return ok(ReturnChunkResponse { status: Some(s) });
        }
        let r = req.into_inner();
        let returned =
            crate::objects::chunks::return_chunk(&self.shared, mooncake_segment::ClientId(r.client_id), r.chunk_id);
        ok(ReturnChunkResponse { status: Some(answer(returned)) })
    }

    async fn put_revoke(&self, req: Request<PutRevokeRequest>) -> RpcResult<PutRevokeResponse> {
        let space = match self.admit(&req, Needs::writers(&[req.get_ref().client_id])) {
            Ok(space) => space,
            Err(s) => return ok(PutRevokeResponse { status: Some(s) }),
        };
        let mut r = req.into_inner();
        r.key = match space.stored(&r.key) {
            Ok(key) => key,
            Err(s) => return ok(PutRevokeResponse { status: Some(s) }),
        };
        ok(PutRevokeResponse { status: Some(self.revoke_put(&r.key, r.client_id)) })
    }

    async fn get_replica_list(&self, req: Request<GetReplicaListRequest>) -> RpcResult<GetReplicaListResponse> {
        let key = match self.admit(&req, Needs::TENANT).and_then(|space| space.stored(&req.get_ref().key)) {
            Ok(key) => key,
            Err(s) => return ok(refused(s)),
        };
        single(self.replica_lists(std::slice::from_ref(&key)).await)
    }

    async fn exist_key(&self, req: Request<ExistKeyRequest>) -> RpcResult<ExistKeyResponse> {
        let key = match self.admit(&req, Needs::TENANT).and_then(|space| space.stored(&req.get_ref().key)) {
            Ok(key) => key,
            Err(s) => return ok(refused(s)),
        };
        single(self.exist_keys(std::slice::from_ref(&key)).await)
    }

    async fn get_size(&self, req: Request<GetSizeRequest>) -> RpcResult<GetSizeResponse> {
        let key = match self.admit(&req, Needs::TENANT).and_then(|space| space.stored(&req.get_ref().key)) {
            Ok(key) => key,
            Err(s) => return ok(GetSizeResponse { status: Some(s), size: 0 }),
        };
        let asked = req.into_inner().key;
        let read = self.shared.read(|s| match s.object(&key) {
            None => GetSizeResponse { status: Some(meta_status(&MetaError::ObjectNotFound(asked.clone()))), size: 0 },
            Some(o) => GetSizeResponse { status: Some(Status::ok()), size: o.size_bytes },
        });
        match read.await {
            Ok(v) => ok(v),
            Err(s) => ok(GetSizeResponse { status: Some(s.into()), size: 0 }),
        }
    }

    async fn remove(&self, req: Request<RemoveRequest>) -> RpcResult<RemoveResponse> {
        // Forced, it ignores the KV lease and the pin: an admin operation.
        let needs = Needs::admin_if(req.get_ref().force, "Remove with force");
        let key = match self.admit(&req, needs).and_then(|space| space.stored(&req.get_ref().key)) {
            Ok(key) => key,
            Err(s) => return ok(RemoveResponse { status: Some(s) }),
        };
        let r = req.into_inner();
        let mut statuses = crate::objects::removal::remove_keys(&self.shared, &[key], &[r.request_id], r.force).await;
        ok(RemoveResponse { status: statuses.pop().map(answer) })
    }

    async fn remove_all(&self, req: Request<RemoveAllRequest>) -> RpcResult<RemoveAllResponse> {
        // Forced, it ignores every KV lease and pin: an admin operation.
        let space = match self.admit(&req, Needs::admin_if(req.get_ref().force, "RemoveAll with force")) {
            Ok(space) => space,
            Err(s) => return ok(RemoveAllResponse { status: Some(s), removed: 0 }),
        };
        let force = req.into_inner().force;
        match crate::objects::removal::remove_all(&self.shared, space.tenant(), force).await {
            Ok(removed) => ok(RemoveAllResponse { status: Some(Status::ok()), removed }),
            Err(s) => ok(RemoveAllResponse { status: Some(s.into()), removed: 0 }),
        }
    }

    async fn list_objects(&self, req: Request<ListObjectsRequest>) -> RpcResult<ListObjectsResponse> {
        self.answer_list_objects(req).await
    }

    async fn batch_put_start(&self, req: Request<BatchPutStartRequest>) -> RpcResult<BatchPutStartResponse> {
        let writers: Vec<u64> = req.get_ref().requests.iter().map(|r| r.client_id).collect();
        let space = match self.admit(&req, Needs::writers(&writers)) {
            Ok(space) => space,
            Err(s) => return ok(refused(s)),
        };
        let reqs = req.into_inner();
        let answers = async {
            let mut responses = Vec::with_capacity(reqs.requests.len());
            for r in &reqs.requests {
                let response = match space.stored(&r.key) {
                    Ok(key) => self.start_put(&PutStartRequest { key, ..r.clone() }).await,
                    Err(s) => PutStartResponse { status: Some(s), replicas: vec![] },
                };
                // Not the leader (any more): the whole batch goes to the leader,
                // which MasterClient finds from this answer.
                if let Some(s) = response.status.as_ref().filter(|s| is_leadership(s)) {
                    return Err(s.clone());
                }
                responses.push(response);
            }
            Ok(responses)
        };
        answer_batch(&writers, answers).await
    }

    async fn batch_put_end(&self, req: Request<BatchPutEndRequest>) -> RpcResult<BatchPutEndResponse> {
        let writers: Vec<u64> = req.get_ref().requests.iter().map(|r| r.client_id).collect();
        let space = match self.admit(&req, Needs::writers(&writers)) {
            Ok(space) => space,
            Err(s) => return ok(refused(s)),
        };
        let mut reqs = req.into_inner();
        let (keys, refusals) = space.stored_all(&reqs.requests.iter().map(|r| r.key.clone()).collect::<Vec<_>>());
        for (r, key) in reqs.requests.iter_mut().zip(keys) {
            r.key = key;
        }
        let answers = async {
            let pins: Vec<_> = reqs.requests.iter().map(convert::check_put_end).collect();
            let refusal = |i: &usize| {
                let r = &reqs.requests[*i];
                let malformed = || pins[*i].as_ref().err().map(meta_status);
                match &refusals[*i] {
                    Some(s) => Some(s.clone()),
                    None if r.chunk_id != 0 => crate::objects::quotas::chunk_put_allowed(&self.shared, &r.key, r.size)
                        .err()
                        .map(Status::from)
                        .or_else(malformed),
                    None => malformed(),
                }
            };
            let indices: Vec<usize> = (0..reqs.requests.len()).collect();
            let statuses = answer_valid(&indices, refusal, async |valid| {
                let asks: Vec<EndAsk> = valid
                    .iter()
                    .filter_map(|i| pins[*i].as_ref().ok().map(|pin| convert::end_ask(&reqs.requests[*i], *pin)))
                    .collect();
                crate::objects::put_end::put_end(&self.shared, &asks).await.into_iter().map(answer).collect()
            })
            .await;
            if let Some(s) = statuses.iter().find(|s| is_leadership(s)) {
                return Err(s.clone());
            }
            Ok(statuses.into_iter().map(|s| PutEndResponse { status: Some(s) }).collect())
        };
        answer_batch(&writers, answers).await
    }

    async fn batch_put_revoke(&self, req: Request<BatchPutRevokeRequest>) -> RpcResult<BatchPutRevokeResponse> {
        let writers: Vec<u64> = req.get_ref().requests.iter().map(|r| r.client_id).collect();
        let space = match self.admit(&req, Needs::writers(&writers)) {
            Ok(space) => space,
            Err(s) => return ok(refused(s)),
        };
        let reqs = req.into_inner();
        // Unlike a PutStart's or PutEnd's, a revoke's NOT_LEADER answers its
        // item only: the batch itself is answered OK.
        let answers = async {
            let revoke = |r: &PutRevokeRequest| match space.stored(&r.key) {
                Ok(key) => self.revoke_put(&key, r.client_id),
                Err(s) => s,
            };
            Ok(reqs.requests.iter().map(|r| PutRevokeResponse { status: Some(revoke(r)) }).collect())
        };
        answer_batch(&writers, answers).await
    }

    async fn batch_get_replica_list(
        &self,
        req: Request<BatchGetReplicaListRequest>,
    ) -> RpcResult<BatchGetReplicaListResponse> {
        let space = match self.admit(&req, Needs::TENANT) {
            Ok(space) => space,
            Err(s) => return ok(refused(s)),
        };
        let (keys, refusals) = space.stored_all(&req.into_inner().keys);
        let answers = async {
            let mut answers = self.replica_lists(&keys).await?;
            with_refusals(&mut answers, refusals);
            Ok(answers)
        };
        answer_batch(&keys, answers).await
    }

    async fn batch_exist_key(&self, req: Request<BatchExistKeyRequest>) -> RpcResult<BatchExistKeyResponse> {
        let space = match self.admit(&req, Needs::TENANT) {
            Ok(space) => space,
            Err(s) => return ok(refused(s)),
        };
        let (keys, refusals) = space.stored_all(&req.into_inner().keys);
        let answers = async {
            let mut answers = self.exist_keys(&keys).await?;
            with_refusals(&mut answers, refusals);
            Ok(answers)
        };
        answer_batch(&keys, answers).await
    }

    async fn batch_probe_key(&self, req: Request<BatchExistKeyRequest>) -> RpcResult<BatchExistKeyResponse> {
        let space = match self.admit(&req, Needs::TENANT) {
            Ok(space) => space,
            Err(s) => return ok(refused(s)),
        };
        let (keys, refusals) = space.stored_all(&req.into_inner().keys);
        let answers = async {
            let mut answers = self.probe_keys(&keys).await?;
            with_refusals(&mut answers, refusals);
            Ok(answers)
        };
        answer_batch(&keys, answers).await
    }

    async fn batch_remove(&self, req: Request<BatchRemoveRequest>) -> RpcResult<BatchRemoveResponse> {
        // Forced, it ignores KV leases and pins: an admin operation (else
        // ListObjects and a forced BatchRemove would be a forced RemoveAll).
        let space = match self.admit(&req, Needs::admin_if(req.get_ref().force, "BatchRemove with force")) {
            Ok(space) => space,
            Err(s) => return ok(BatchRemoveResponse { status: Some(s), responses: vec![] }),
        };
        let r = req.into_inner();
        let (stored, refusals) = space.stored_all(&r.keys);
        let answers = async {
            let indices: Vec<usize> = (0..r.keys.len()).collect();
            let refusal = |i: &usize| refusals[*i].clone();
            let statuses = answer_valid(&indices, refusal, async |valid| {
                let keys: Vec<String> = valid.iter().map(|i| stored[*i].clone()).collect();
                let ids: Vec<u64> = valid.iter().map(|i| r.request_ids.get(*i).copied().unwrap_or(0)).collect();
                crate::objects::removal::remove_keys(&self.shared, &keys, &ids, r.force)
                    .await
                    .into_iter()
                    .map(answer)
                    .collect()
            })
            .await;
            Ok(statuses.into_iter().map(|s| RemoveResponse { status: Some(s) }).collect())
        };
        answer_batch(&r.keys, answers).await
    }
}
