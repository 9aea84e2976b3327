//! The client API (`MasterService`): object and segment metadata with
//! Mooncake's semantics. Writes become proposed commands; reads run on the
//! leader after a linearizable barrier, once per RPC (a batch RPC confirms
//! leadership once for all its keys). Read leases are granted here.

use std::sync::Arc;

use mooncake_proto::master::master_service_server::MasterService;
use mooncake_proto::master::*;
use mooncake_proto::{ErrorCode, Status};
use mooncake_raft_store::state::{ObjectStatus, validate_key, validate_put_start, validate_segment};
use mooncake_raft_store::{Command, MetaError, MetaState, RemoveReason, Response as SmResponse, VersionedKey};
use mooncake_segment::{ClientId, SegmentId};
use tonic::{Request, Response};

use crate::convert;
use crate::errors::{internal, meta_status};
use crate::shared::Shared;

type RpcResult<T> = Result<Response<T>, tonic::Status>;

/// Most items in one batch RPC.
pub const BATCH_RPC_MAX: usize = 1_024;
/// Default and largest page of ListObjects.
const LIST_DEFAULT: usize = 1_000;
const LIST_MAX: usize = 100_000;

pub struct MasterServiceImpl {
    shared: Arc<Shared>,
}

impl MasterServiceImpl {
    pub fn new(shared: Arc<Shared>) -> Self {
        MasterServiceImpl { shared }
    }
}

fn ok<T>(t: T) -> RpcResult<T> {
    Ok(Response::new(t))
}

fn status_of(r: &SmResponse) -> Status {
    match r {
        SmResponse::Err(e) => meta_status(e),
        _ => Status::ok(),
    }
}

fn too_many(n: usize) -> Status {
    Status::with(ErrorCode::InvalidParams, format!("batch of {n} items; the limit is {BATCH_RPC_MAX}"))
}

fn invalid(e: MetaError) -> Status {
    meta_status(&e)
}

impl MasterServiceImpl {
    /// Proposes one command and returns its status.
    async fn write(&self, cmd: Command) -> Status {
        match self.shared.proposer.propose(cmd).await {
            Ok(r) => status_of(&r),
            Err(s) => s,
        }
    }

    /// Proposes the commands that passed edge checks, keeping the others' errors.
    async fn write_many(&self, items: Vec<Result<Command, Status>>) -> Result<Vec<Result<SmResponse, Status>>, Status> {
        let cmds: Vec<Command> = items.iter().filter_map(|i| i.as_ref().ok().cloned()).collect();
        let mut responses = self.shared.proposer.propose_many(cmds).await?.into_iter();
        Ok(items
            .into_iter()
            .map(|i| match i {
                Ok(_) => responses.next().ok_or_else(|| internal("missing response in batch")),
                Err(s) => Err(s),
            })
            .collect())
    }

    fn put_start_cmd(r: &PutStartRequest) -> Result<Command, Status> {
        let put = convert::put_start(r);
        validate_put_start(&put).map_err(invalid)?;
        Ok(Command::PutStart(put))
    }

    fn put_start_response(&self, r: Result<SmResponse, Status>) -> PutStartResponse {
        match r {
            Ok(SmResponse::Placed { replicas, .. }) => self.shared.reader.read(|s| PutStartResponse {
                status: Some(Status::ok()),
                replicas: replicas.iter().map(|p| convert::replica_pb(s, p, ObjectStatus::Processing)).collect(),
            }),
            Ok(other) => {
                if matches!(other, SmResponse::Err(MetaError::NoAvailableHandle(_))) {
                    self.shared.evict_now.notify_one();
                }
                PutStartResponse { status: Some(status_of(&other)), replicas: vec![] }
            }
            Err(s) => PutStartResponse { status: Some(s), replicas: vec![] },
        }
    }

    /// GetReplicaList of one key on the applied state; grants a lease.
    fn replica_list(&self, s: &MetaState, key: &str) -> GetReplicaListResponse {
        let lease_ttl_ms = self.shared.leader.lease_ttl().as_millis() as u64;
        let status = match s.object(key) {
            None => Status::with(ErrorCode::ObjectNotFound, format!("object {key:?} not found")),
            Some(o) if o.status != ObjectStatus::Complete => {
                Status::with(ErrorCode::ReplicaIsNotReady, format!("object {key:?} is still being written"))
            }
            Some(o) => {
                self.shared.leader.grant_lease(key, self.shared.now());
                return GetReplicaListResponse {
                    status: Some(Status::ok()),
                    replicas: o.replicas.iter().map(|r| convert::replica_pb(s, r, o.status)).collect(),
                    size: o.size_bytes,
                    checksum: o.checksum.unwrap_or(0),
                    lease_ttl_ms,
                };
            }
        };
        GetReplicaListResponse { status: Some(status), replicas: vec![], size: 0, checksum: 0, lease_ttl_ms }
    }

    fn exist_key(&self, s: &MetaState, key: &str) -> ExistKeyResponse {
        let exists = s.object(key).is_some_and(|o| o.status == ObjectStatus::Complete);
        if exists {
            self.shared.leader.grant_lease(key, self.shared.now());
        }
        ExistKeyResponse { status: Some(Status::ok()), exists }
    }

    /// Edge check for Remove: the key is sane and, unless forced, not leased.
    fn remove_cmd(&self, key: &str, force: bool, request_id: u64) -> Result<Command, Status> {
        validate_key(key).map_err(invalid)?;
        self.shared.require_leader()?;
        // A key this leader does not know answers OBJECT_NOT_FOUND through the
        // state machine, not OBJECT_HAS_LEASE from the post-election grace.
        let known = self.shared.reader.read(|s| s.object(key).is_some());
        if known && !force && self.shared.leader.is_leased(key, self.shared.now()) {
            return Err(meta_status(&MetaError::ObjectHasLease(key.to_string())));
        }
        let remove = Command::Remove { key: key.to_string() };
        Ok(match request_id {
            0 => remove,
            id => Command::Once { request_id: id, cmd: Box::new(remove) },
        })
    }
}

#[tonic::async_trait]
impl MasterService for MasterServiceImpl {
    async fn ping(&self, req: Request<PingRequest>) -> RpcResult<PingResponse> {
        let client = ClientId(req.into_inner().client_id);
        if let Err(s) = self.shared.require_leader() {
            return ok(PingResponse { status: Some(s), view_version: 0 });
        }
        self.shared.leader.heartbeat(client, self.shared.now());
        let (known, applied) =
            self.shared.reader.read(|s| (s.client(client).is_some(), s.last_applied.map(|l| l.index).unwrap_or(0)));
        let status = if known {
            Status::ok()
        } else {
            Status::with(ErrorCode::NeedRemount, format!("{client} is not registered; remount its segments"))
        };
        ok(PingResponse { status: Some(status), view_version: applied })
    }

    async fn get_cluster_info(&self, _req: Request<GetClusterInfoRequest>) -> RpcResult<GetClusterInfoResponse> {
        ok(crate::cluster_info::cluster_info(&self.shared).await)
    }

    async fn mount_segment(&self, req: Request<MountSegmentRequest>) -> RpcResult<MountSegmentResponse> {
        let r = req.into_inner();
        let Some(seg) = r.segment.as_ref() else {
            return ok(MountSegmentResponse {
                status: Some(Status::with(ErrorCode::InvalidParams, "segment is missing")),
            });
        };
        let spec = convert::segment_spec(seg);
        if let Err(e) = validate_segment(&spec) {
            return ok(MountSegmentResponse { status: Some(invalid(e)) });
        }
        // Registering is hearing from the client: without this, a client that
        // registers more than client_ttl after the election counts as silent
        // since the election and is expired before its first Ping.
        self.shared.leader.heartbeat(ClientId(r.client_id), self.shared.now());
        let status = self.write(Command::MountSegment { client: ClientId(r.client_id), segment: spec }).await;
        ok(MountSegmentResponse { status: Some(status) })
    }

    async fn unmount_segment(&self, req: Request<UnmountSegmentRequest>) -> RpcResult<UnmountSegmentResponse> {
        let r = req.into_inner();
        let cmd = Command::UnmountSegment { client: ClientId(r.client_id), segment: SegmentId(r.segment_id) };
        ok(UnmountSegmentResponse { status: Some(self.write(cmd).await) })
    }

    async fn remount_segment(&self, req: Request<RemountSegmentRequest>) -> RpcResult<RemountSegmentResponse> {
        let r = req.into_inner();
        let segments: Vec<_> = r.segments.iter().map(convert::segment_spec).collect();
        if let Some(e) = segments.iter().find_map(|s| validate_segment(s).err()) {
            return ok(RemountSegmentResponse { status: Some(invalid(e)) });
        }
        self.shared.leader.heartbeat(ClientId(r.client_id), self.shared.now());
        let cmd = Command::RemountSegments { client: ClientId(r.client_id), segments };
        ok(RemountSegmentResponse { status: Some(self.write(cmd).await) })
    }

    async fn put_start(&self, req: Request<PutStartRequest>) -> RpcResult<PutStartResponse> {
        let r = req.into_inner();
        let resp = match Self::put_start_cmd(&r) {
            Ok(cmd) => self.shared.proposer.propose(cmd).await,
            Err(s) => Err(s),
        };
        ok(self.put_start_response(resp))
    }

    async fn put_end(&self, req: Request<PutEndRequest>) -> RpcResult<PutEndResponse> {
        let r = req.into_inner();
        if let Err(e) = validate_key(&r.key) {
            return ok(PutEndResponse { status: Some(invalid(e)) });
        }
        let cmd = Command::PutEnd { client: ClientId(r.client_id), key: r.key, checksum: r.checksum };
        ok(PutEndResponse { status: Some(self.write(cmd).await) })
    }

    async fn put_revoke(&self, req: Request<PutRevokeRequest>) -> RpcResult<PutRevokeResponse> {
        let r = req.into_inner();
        if let Err(e) = validate_key(&r.key) {
            return ok(PutRevokeResponse { status: Some(invalid(e)) });
        }
        let cmd = Command::PutRevoke { client: ClientId(r.client_id), key: r.key };
        ok(PutRevokeResponse { status: Some(self.write(cmd).await) })
    }

    async fn get_replica_list(&self, req: Request<GetReplicaListRequest>) -> RpcResult<GetReplicaListResponse> {
        let r = req.into_inner();
        if let Err(e) = validate_key(&r.key) {
            return ok(GetReplicaListResponse { status: Some(invalid(e)), ..Default::default() });
        }
        match self.shared.read(|s| self.replica_list(s, &r.key)).await {
            Ok(v) => ok(v),
            Err(s) => ok(GetReplicaListResponse { status: Some(s), ..Default::default() }),
        }
    }

    async fn exist_key(&self, req: Request<ExistKeyRequest>) -> RpcResult<ExistKeyResponse> {
        let key = req.into_inner().key;
        if let Err(e) = validate_key(&key) {
            return ok(ExistKeyResponse { status: Some(invalid(e)), exists: false });
        }
        match self.shared.read(|s| self.exist_key(s, &key)).await {
            Ok(v) => ok(v),
            Err(s) => ok(ExistKeyResponse { status: Some(s), exists: false }),
        }
    }

    async fn get_size(&self, req: Request<GetSizeRequest>) -> RpcResult<GetSizeResponse> {
        let key = req.into_inner().key;
        if let Err(e) = validate_key(&key) {
            return ok(GetSizeResponse { status: Some(invalid(e)), size: 0 });
        }
        let read = self.shared.read(|s| match s.object(&key) {
            None => GetSizeResponse { status: Some(meta_status(&MetaError::ObjectNotFound(key.clone()))), size: 0 },
            Some(o) if o.status != ObjectStatus::Complete => {
                GetSizeResponse { status: Some(meta_status(&MetaError::ReplicaNotReady(key.clone()))), size: 0 }
            }
            Some(o) => GetSizeResponse { status: Some(Status::ok()), size: o.size_bytes },
        });
        match read.await {
            Ok(v) => ok(v),
            Err(s) => ok(GetSizeResponse { status: Some(s), size: 0 }),
        }
    }

    async fn remove(&self, req: Request<RemoveRequest>) -> RpcResult<RemoveResponse> {
        let r = req.into_inner();
        let status = match self.remove_cmd(&r.key, r.force, r.request_id) {
            Ok(cmd) => self.write(cmd).await,
            Err(s) => s,
        };
        ok(RemoveResponse { status: Some(status) })
    }

    async fn remove_all(&self, req: Request<RemoveAllRequest>) -> RpcResult<RemoveAllResponse> {
        let force = req.into_inner().force;
        let now = self.shared.now();
        let victims = self.shared.read(|s| {
            s.objects()
                .filter(|o| o.status == ObjectStatus::Complete)
                .filter(|o| force || !self.shared.leader.is_leased(&o.key, now))
                .map(|o| VersionedKey { key: o.key.clone(), version: o.version })
                .collect::<Vec<VersionedKey>>()
        });
        let victims = match victims.await {
            Ok(v) => v,
            Err(s) => return ok(RemoveAllResponse { status: Some(s), removed: 0 }),
        };
        let mut removed = 0;
        for chunk in victims.chunks(mooncake_raft_store::state::BATCH_MAX) {
            let cmd = Command::RemoveObjects { victims: chunk.to_vec(), reason: RemoveReason::RemoveAll };
            match self.shared.proposer.propose(cmd).await {
                Ok(SmResponse::Removed { count }) => removed += count,
                Ok(other) => return ok(RemoveAllResponse { status: Some(status_of(&other)), removed }),
                Err(s) => return ok(RemoveAllResponse { status: Some(s), removed }),
            }
        }
        ok(RemoveAllResponse { status: Some(Status::ok()), removed })
    }

    async fn list_objects(&self, req: Request<ListObjectsRequest>) -> RpcResult<ListObjectsResponse> {
        let r = req.into_inner();
        let limit = match r.limit as usize {
            0 => LIST_DEFAULT,
            n => n.min(LIST_MAX),
        };
        let objects = self
            .shared
            .read(|s| s.objects_with_prefix(&r.prefix).take(limit).map(|o| convert::object_pb(s, o)).collect())
            .await;
        match objects {
            Ok(objects) => ok(ListObjectsResponse { status: Some(Status::ok()), objects }),
            Err(s) => ok(ListObjectsResponse { status: Some(s), objects: vec![] }),
        }
    }

    async fn batch_put_start(&self, req: Request<BatchPutStartRequest>) -> RpcResult<BatchPutStartResponse> {
        let reqs = req.into_inner().requests;
        if reqs.len() > BATCH_RPC_MAX {
            return ok(BatchPutStartResponse { status: Some(too_many(reqs.len())), responses: vec![] });
        }
        match self.write_many(reqs.iter().map(Self::put_start_cmd).collect()).await {
            Ok(results) => ok(BatchPutStartResponse {
                status: Some(Status::ok()),
                responses: results.into_iter().map(|r| self.put_start_response(r)).collect(),
            }),
            Err(s) => ok(BatchPutStartResponse { status: Some(s), responses: vec![] }),
        }
    }

    async fn batch_put_end(&self, req: Request<BatchPutEndRequest>) -> RpcResult<BatchPutEndResponse> {
        let reqs = req.into_inner().requests;
        if reqs.len() > BATCH_RPC_MAX {
            return ok(BatchPutEndResponse { status: Some(too_many(reqs.len())), responses: vec![] });
        }
        let items = reqs
            .into_iter()
            .map(|r| {
                validate_key(&r.key).map_err(invalid)?;
                Ok(Command::PutEnd { client: ClientId(r.client_id), key: r.key, checksum: r.checksum })
            })
            .collect();
        match self.write_many(items).await {
            Ok(results) => ok(BatchPutEndResponse {
                status: Some(Status::ok()),
                responses: results.into_iter().map(|r| PutEndResponse { status: Some(result_status(r)) }).collect(),
            }),
            Err(s) => ok(BatchPutEndResponse { status: Some(s), responses: vec![] }),
        }
    }

    async fn batch_put_revoke(&self, req: Request<BatchPutRevokeRequest>) -> RpcResult<BatchPutRevokeResponse> {
        let reqs = req.into_inner().requests;
        if reqs.len() > BATCH_RPC_MAX {
            return ok(BatchPutRevokeResponse { status: Some(too_many(reqs.len())), responses: vec![] });
        }
        let items = reqs
            .into_iter()
            .map(|r| {
                validate_key(&r.key).map_err(invalid)?;
                Ok(Command::PutRevoke { client: ClientId(r.client_id), key: r.key })
            })
            .collect();
        match self.write_many(items).await {
            Ok(results) => ok(BatchPutRevokeResponse {
                status: Some(Status::ok()),
                responses: results.into_iter().map(|r| PutRevokeResponse { status: Some(result_status(r)) }).collect(),
            }),
            Err(s) => ok(BatchPutRevokeResponse { status: Some(s), responses: vec![] }),
        }
    }

    async fn batch_get_replica_list(
        &self,
        req: Request<BatchGetReplicaListRequest>,
    ) -> RpcResult<BatchGetReplicaListResponse> {
        let keys = req.into_inner().keys;
        if keys.len() > BATCH_RPC_MAX {
            return ok(BatchGetReplicaListResponse { status: Some(too_many(keys.len())), responses: vec![] });
        }
        let responses = self.shared.read(|s| {
            keys.iter()
                .map(|k| match validate_key(k) {
                    Ok(()) => self.replica_list(s, k),
                    Err(e) => GetReplicaListResponse { status: Some(invalid(e)), ..Default::default() },
                })
                .collect()
        });
        match responses.await {
            Ok(responses) => ok(BatchGetReplicaListResponse { status: Some(Status::ok()), responses }),
            Err(s) => ok(BatchGetReplicaListResponse { status: Some(s), responses: vec![] }),
        }
    }

    async fn batch_exist_key(&self, req: Request<BatchExistKeyRequest>) -> RpcResult<BatchExistKeyResponse> {
        let keys = req.into_inner().keys;
        if keys.len() > BATCH_RPC_MAX {
            return ok(BatchExistKeyResponse { status: Some(too_many(keys.len())), responses: vec![] });
        }
        let responses = self.shared.read(|s| {
            keys.iter()
                .map(|k| match validate_key(k) {
                    Ok(()) => self.exist_key(s, k),
                    Err(e) => ExistKeyResponse { status: Some(invalid(e)), exists: false },
                })
                .collect()
        });
        match responses.await {
            Ok(responses) => ok(BatchExistKeyResponse { status: Some(Status::ok()), responses }),
            Err(s) => ok(BatchExistKeyResponse { status: Some(s), responses: vec![] }),
        }
    }

    async fn batch_remove(&self, req: Request<BatchRemoveRequest>) -> RpcResult<BatchRemoveResponse> {
        let r = req.into_inner();
        if r.keys.len() > BATCH_RPC_MAX {
            return ok(BatchRemoveResponse { status: Some(too_many(r.keys.len())), responses: vec![] });
        }
        let items = r
            .keys
            .iter()
            .enumerate()
            .map(|(i, k)| self.remove_cmd(k, r.force, r.request_ids.get(i).copied().unwrap_or(0)))
            .collect();
        match self.write_many(items).await {
            Ok(results) => ok(BatchRemoveResponse {
                status: Some(Status::ok()),
                responses: results.into_iter().map(|r| RemoveResponse { status: Some(result_status(r)) }).collect(),
            }),
            Err(s) => ok(BatchRemoveResponse { status: Some(s), responses: vec![] }),
        }
    }
}

fn result_status(r: Result<SmResponse, Status>) -> Status {
    match r {
        Ok(resp) => status_of(&resp),
        Err(s) => s,
    }
}
